#!/usr/bin/env python3
"""Workers under a real Slurm (issue 18): Debian's slurmctld and two slurmd
nodes with munge, started on this machine (tests/integration/slurm_cluster.py),
a real scheduler against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), and the README's command:

    SCALESWEEP_SCHEDULER=HOST:PORT SCALESWEEP_TOKEN_FILE=... \\
      sbatch --nodes=2 scripts/slurm-workers.sbatch

- Slurm's job 1 starts one worker on each node (named NODE-JOBID); both
  connect, and the sweep's two CPU runs start, one on each;
- `scancel` of job 1 mid-run: Slurm's SIGTERM reaches the workers through
  srun, each has its trainer checkpoint, and both runs go back to the
  queue: interrupted, not failed, no attempt spent;
- job 2's workers pick them up; each resumes from its checkpoint and
  succeeds; its stored metrics are steps 1..STEPS exactly once each, equal
  to those of the same config trained by hand without interruption (bit for
  bit): nothing lost, nothing trained twice;
- when the queue is empty, `scancel` of job 2 ends it cleanly.

Exits 77 (skipped) when Slurm cannot run here, saying which part (not
installed, munged or slurmd refused to start).

Usage: test_slurm.py SCALESWEEP_BINARY
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness import (api_request, make_token, psql, read_ready, step_losses, stored_losses,
                     tmp_kept_on_failure, until, wait_healthz)
from slurm_cluster import SlurmCluster

BIN = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SBATCH = os.path.join(ROOT, "scripts", "slurm-workers.sbatch")
DB = os.environ["SCALESWEEP_TEST_DB"]
STEPS = 8000
T0 = time.time()
tmp = tempfile.mkdtemp(prefix="ss-slurm-")
token = make_token(tmp)
slog = os.path.join(tmp, "scheduler.log")
api_port = wport = 0
procs = {}
cluster = SlurmCluster(tmp, nodes=2, kill_wait=30)


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    cluster.print_failure(tmp, slog, 2500, 2500,
                          "id, status, attempt, interruptions, checkpoint_step, worker, error")
    cleanup()
    sys.exit(1)


def cleanup():
    cluster.stop()
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def wait_for(pred, what, timeout=120):
    if not until(pred, timeout, 0.2):
        fail(f"timed out after {timeout} s waiting for {what}")


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def sbatch():
    """the README's command, against the scheduler under test; the job id"""
    env = cluster.env({"SCALESWEEP_SCHEDULER": f"127.0.0.1:{wport}",
                       "SCALESWEEP_TOKEN_FILE": token, "SCALESWEEP_BIN": BIN,
                       "SCALESWEEP_WORK_DIR": os.path.join(tmp, "work"),
                       "OMP_WAIT_POLICY": "PASSIVE"})
    p = cluster.run(["sbatch", "--parsable", "--nodes=2", SBATCH], env=env, cwd=tmp)
    return p.stdout.strip().split(";")[0]


def runs():
    """{run id: (status, attempt, interruptions, checkpoint_step, worker name)}"""
    out = psql("SELECT r.id, r.status, r.attempt, r.interruptions, "
               "coalesce(r.checkpoint_step, -1), coalesce(w.name, '') FROM runs r "
               "LEFT JOIN workers w ON w.id = r.worker ORDER BY r.id")
    return {int(f[0]): (f[1], int(f[2]), int(f[3]), int(f[4]), f[5])
            for f in (ln.split("|") for ln in out.splitlines())}


def workers_connected(job):
    """names of the workers of Slurm job JOB the scheduler has welcomed"""
    st, d = request("GET", "/api/workers")
    ws = d["workers"] if isinstance(d, dict) else d
    return sorted(w["name"] for w in ws if w["name"].endswith("-" + job) and w.get("connected", True))


def job_state(job):
    return cluster.jobs().get(job, "GONE")


with tmp_kept_on_failure(tmp, cleanup):
    cluster.start_or_skip(tmp)
    print(f"slurm: slurmctld and 2 slurmd nodes idle ({time.time() - T0:.1f} s)")

    ready = os.path.join(tmp, "ready.json")
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen", "127.0.0.1:0",
         "--workers", "127.0.0.1:0", "--ready-file", ready, "--checkpoints",
         os.path.join(tmp, "ckpt")], stdout=open(slog, "a"), stderr=subprocess.STDOUT)
    ports = read_ready(ready, procs["scheduler"], fail)
    api_port, wport = ports["http_port"], ports["workers_port"]
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up")

    job1 = sbatch()
    wait_for(lambda: len(workers_connected(job1)) == 2, f"job {job1}'s two workers", 60)
    print(f"job {job1}: workers {workers_connected(job1)} connected ({time.time() - T0:.1f} s)")

    base = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
            "train": {"batch_size": 8, "lr": 0.003, "tokens": STEPS * 256},
            "eval": {"every_tokens": STEPS * 256 // 3, "tokens": 256}, "threads": 1}
    spec = {"name": "slurm-test", "method": "runs", "base": base,
            "runs": [{"train": {"seed": 3}}, {"train": {"seed": 4}}],
            "resources": {"cpus": 1}, "max_attempts": 1}
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    sweep = body["id"]

    def both_checkpointed():
        r = runs()
        return len(r) == 2 and all(v[0] == "running" and v[3] > 0 for v in r.values())
    wait_for(both_checkpointed, "both runs to run and checkpoint on job 1's workers", 120)
    first = runs()
    nodes1 = sorted(v[4] for v in first.values())
    if nodes1 != workers_connected(job1):
        fail(f"the runs run on {nodes1}, not one on each of job {job1}'s workers")
    print(f"runs {sorted(first)} running on {nodes1}, checkpoints at steps "
          f"{[v[3] for v in first.values()]} ({time.time() - T0:.1f} s)")

    cluster.run(["scancel", job1])
    wait_for(lambda: job_state(job1) not in ("RUNNING", "PENDING", "COMPLETING"),
             f"job {job1} to end after scancel", 60)
    wait_for(lambda: all(v[0] == "queued" for v in runs().values()),
             "both runs back in the queue", 30)
    for rid, (st, att, intr, ck, _) in runs().items():
        if (att, intr) != (1, 1):
            fail(f"run {rid} after scancel: attempt {att}, interruptions {intr}; expected an "
                 "interruption that spent no attempt")
        if ck < first[rid][3]:
            fail(f"run {rid}: checkpoint step {ck} went back from {first[rid][3]}")
    print(f"scancel {job1} ({job_state(job1)}): both runs queued at checkpoints "
          f"{[v[3] for v in runs().values()]}, attempts spent 0 ({time.time() - T0:.1f} s)")
    stopped = runs()

    job2 = sbatch()
    wait_for(lambda: len(workers_connected(job2)) == 2, f"job {job2}'s two workers", 60)

    ran_on = {rid: set() for rid in first}  # the workers seen running attempt 2

    def done():
        r = runs()
        for rid, v in r.items():
            if v[0] == "running" and v[1] == 2:
                ran_on[rid].add(v[4])
        if any(v[0] == "failed" for v in r.values()):
            fail(f"a run failed: {r}")
        return all(v[0] == "succeeded" for v in r.values())
    # sanitized builds train several times slower (and CI runs them beside
    # other tests)
    wait_for(done, "both runs to succeed on job 2's workers",
             960 if os.environ.get("SCALESWEEP_TEST_SANITIZED") else 240)
    for rid, (st, att, intr, ck, _) in runs().items():
        if (att, intr) != (2, 1):
            fail(f"run {rid}: attempt {att}, interruptions {intr}; expected 2 and 1")
        if len(ran_on[rid]) != 1 or not next(iter(ran_on[rid])).endswith("-" + job2):
            fail(f"run {rid}'s attempt 2 ran on {sorted(ran_on[rid])}, not on one of job "
                 f"{job2}'s workers")
        w = next(iter(ran_on[rid]))
        n, lo, hi = psql(f"SELECT count(*), min(step), max(step) FROM metrics "
                         f"WHERE run_id = {rid}").split("|")
        if (int(n), int(lo), int(hi)) != (STEPS, 1, STEPS):
            fail(f"run {rid}'s metrics: {n} rows, steps {lo}..{hi}; expected 1..{STEPS} once each")
        # the config trained by hand, uninterrupted: the same losses, step for step
        cfg = json.loads(psql(f"SELECT config FROM runs WHERE id = {rid}"))
        path = os.path.join(tmp, f"one-{rid}.json")
        json.dump(cfg, open(path, "w"))
        p = subprocess.run([BIN, "train", "--config", path, "--checkpoint-dir",
                            os.path.join(tmp, f"ck-one-{rid}")], capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0:
            fail(f"run {rid} by hand: exit {p.returncode}: {p.stderr[-500:]}")
        mine, stored = step_losses(p.stdout), stored_losses(rid)
        if stored != mine:
            diff = [s for s in mine if stored.get(s) != mine[s]][:3]
            fail(f"run {rid}: stored losses differ from an uninterrupted run's at steps {diff}")
        print(f"ok: run {rid} resumed at step {stopped[rid][3]} on {w}, succeeded; its {STEPS} "
              f"steps stored once each, equal to an uninterrupted run's bit for bit")
    st, d = request("GET", f"/api/sweeps/{sweep}")
    if d["counts"]["succeeded"] != 2:
        fail(f"the sweep's counts: {d['counts']}")

    cluster.run(["scancel", job2])
    wait_for(lambda: job_state(job2) not in ("RUNNING", "PENDING", "COMPLETING"),
             f"job {job2} to end after scancel", 60)
    out = open(os.path.join(tmp, f"slurm-{job2}.out"), errors="replace").read()
    if "stopping" not in out and "stopped" not in out:
        fail(f"job {job2}'s output says nothing of its workers stopping")
    print(f"scancel {job2} ({job_state(job2)}) with the queue empty: its workers stopped "
          f"({time.time() - T0:.1f} s)")

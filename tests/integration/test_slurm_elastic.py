#!/usr/bin/env python3
"""Elastic workers through a real Slurm (issue 18): `scalesweep scheduler
--slurm test` asks Slurm for worker jobs itself. Debian's slurmctld and two
slurmd nodes with munge (tests/integration/slurm_cluster.py), with a second
partition "urgent" that preempts "test" (PreemptMode=CANCEL after a grace
time), a real scheduler against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), no worker started by hand.

- Nothing queued: no job is asked for.
- A sweep of 3 CPU runs: the scheduler submits one job, sized to them and
  capped by --slurm-max-nodes 2 (2 nodes, --cpus-per-task 1), with a time
  limit from the plan's estimate (the spec's throughput_flops): exactly the
  minutes the documented rule gives. Its workers connect and run the runs.
- A higher-priority job preempts it mid-run: Slurm's SIGTERM has the
  workers checkpoint; their runs go back to the queue without spending an
  attempt. The scheduler asks for one new job (not one per pass), which
  waits behind the urgent one and then resumes the runs from their
  checkpoints; every run succeeds with its steps 1..STEPS stored once each.
- With the queue empty, the scheduler cancels its job once its workers
  have been idle for --slurm-idle-seconds: no job of it is left.
- A run of 2 data-parallel ranks of one CPU slot each, more than a node
  offers: the scheduler asks for a job of 2 nodes, the run's ranks are
  placed together on both of its workers (gang), it succeeds, and the job
  is cancelled once idle.
- A scheduler started with --slurm where Slurm's commands are not on PATH
  refuses to start (exit 2), says which, and touches no database.

Exits 77 (skipped) when Slurm cannot run here, saying why.

Usage: test_slurm_elastic.py SCALESWEEP_BINARY
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from harness import (api_request, make_token, psql, stop_all, tmp_kept_on_failure, until,
                     until_progress, wait_healthz)
from slurm_cluster import SlurmCluster

BIN = os.path.abspath(sys.argv[1])
DB = os.environ["SCALESWEEP_TEST_DB"]
STEPS = 9000
THROUGHPUT = 1e8  # FLOP/s per run, as the spec claims: the time limit follows from it
IDLE = 4
T0 = time.time()
tmp = tempfile.mkdtemp(prefix="ss-slurm-elastic-")
token = make_token(tmp)
slog = os.path.join(tmp, "scheduler.log")
api_port = 0
procs = {}
cluster = SlurmCluster(tmp, nodes=2, kill_wait=30, preempt_grace=20)


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    cluster.print_failure(tmp, slog, 3000, 1500,
                          "id, status, attempt, interruptions, checkpoint_step, error", jobs=True)
    cleanup()
    sys.exit(1)


def cleanup():
    stop_all(procs)
    cluster.stop()


def wait_for(pred, what, timeout=120):
    if not until(pred, timeout, 0.25):
        fail(f"timed out after {timeout} s waiting for {what}")


def wait_moving(pred, what, stall=90):
    """Waits for pred() as long as training moves: fails once no metric row
    has been stored for stall seconds (a sanitized build trains several
    times slower; a fixed timeout would judge the machine, not the code)."""
    if not until_progress(pred, lambda: psql("SELECT count(*) FROM metrics"), stall):
        fail(f"waiting for {what}: no metric row stored for {stall} s")


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def runs():
    """{run id: (status, attempt, interruptions, checkpoint_step)}"""
    out = psql("SELECT id, status, attempt, interruptions, coalesce(checkpoint_step, -1) "
               "FROM runs ORDER BY id")
    return {int(f[0]): (f[1], int(f[2]), int(f[3]), int(f[4]))
            for f in (ln.split("|") for ln in out.splitlines())}


def ours():
    return [j for j in cluster.job_rows() if j["name"] == "scalesweep-workers"]


LIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def live():
    return [j for j in ours() if j["state"] in LIVE]


def minutes(limit):
    """squeue's time limit (D-HH:MM:SS, HH:MM:SS or MM:SS) in minutes"""
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60


with tmp_kept_on_failure(tmp, cleanup):
    # without Slurm's commands, --slurm is refused at start
    p = subprocess.run([BIN, "scheduler", "--database", DB, "--token-file", token, "--listen",
                        "127.0.0.1:0", "--workers", "127.0.0.1:0", "--slurm", "test"],
                       env=dict(os.environ, PATH="/nonexistent"), capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 2 or "sbatch is not on PATH" not in p.stderr or "migration" in p.stderr:
        fail(f"--slurm without sbatch: exit {p.returncode}, {p.stderr.strip()!r}; expected 2 "
             "and a message naming sbatch, before the database is touched")
    print(f"ok: --slurm without Slurm's commands: exit 2, {p.stderr.strip()[:80]!r}...")

    cluster.start_or_skip(tmp)
    print(f"slurm: slurmctld and 2 slurmd nodes idle, partition urgent preempts test "
          f"({time.time() - T0:.1f} s)")

    ready = os.path.join(tmp, "ready.json")
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen", "127.0.0.1:0",
         "--workers", "127.0.0.1:0", "--ready-file", ready,
         "--checkpoints", os.path.join(tmp, "ckpt"), "--slurm", "test",
         "--slurm-max-nodes", "2", "--slurm-interval-seconds", "1",
         "--slurm-idle-seconds", str(IDLE)],
        stdout=open(slog, "a"), stderr=subprocess.STDOUT, cwd=tmp,
        env=cluster.env({"OMP_WAIT_POLICY": "PASSIVE"}))
    wait_for(lambda: os.path.exists(ready) or procs["scheduler"].poll() is not None,
             "the scheduler's ready file", 30)
    if procs["scheduler"].poll() is not None:
        fail("the scheduler did not come up")
    api_port = json.load(open(ready))["http_port"]
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up")

    time.sleep(3)
    if ours():
        fail(f"jobs asked for with nothing queued: {ours()}")
    print("ok: nothing queued, no job asked for (3 s, 3 passes)")

    base = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
            "train": {"batch_size": 8, "lr": 0.003, "tokens": STEPS * 256},
            "eval": {"every_tokens": STEPS * 256 // 3, "tokens": 256}, "threads": 1}
    spec = {"name": "slurm-elastic", "method": "runs", "base": base,
            "runs": [{"train": {"seed": k}} for k in (3, 4, 5)],
            "resources": {"cpus": 1}, "max_attempts": 1, "throughput_flops": THROUGHPUT}
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    wait_for(lambda: len(live()) == 1, "the scheduler to ask Slurm for a job", 30)
    job1 = live()[0]
    # the documented rule: the work per node (the queued runs' estimated
    # seconds over the nodes, at least the longest run's), a quarter more and
    # 5 minutes, in whole minutes, at least 10
    est = [float(x) / THROUGHPUT for x in psql("SELECT flops FROM runs ORDER BY id").split()]
    want = min(1440, max(10, math.ceil((max(sum(est) / 2, max(est)) * 1.25 + 300) / 60)))
    if (job1["nodes"], job1["partition"]) != ("2", "test") or minutes(job1["time"]) != want:
        fail(f"job {job1['id']}: {job1['nodes']} node(s) on {job1['partition']}, time limit "
             f"{job1['time']}; expected 2 nodes (3 runs, --slurm-max-nodes 2) on test and "
             f"{want} minutes (estimates {[round(e) for e in est]} s)")
    print(f"ok: 3 runs queued: job {job1['id']} asked for, 2 nodes, time limit {job1['time']} "
          f"({want} min from the estimates {[round(e) for e in est]} s) "
          f"({time.time() - T0:.1f} s)")

    def two_checkpointed():
        r = runs()
        return sum(v[0] == "running" and v[3] > 0 for v in r.values()) == 2
    wait_for(two_checkpointed, "two runs to run and checkpoint on the job's workers", 90)
    if len(ours()) != 1:
        fail(f"more than one job asked for: {ours()}")
    before = runs()

    # a lab's urgent job takes both nodes: ours is preempted
    urgent = cluster.run(["sbatch", "--parsable", "--partition=urgent", "--nodes=2",
                          "--job-name=urgent", f"--output={tmp}/urgent-%j.out",
                          "--wrap=sleep 6"], cwd=tmp).stdout.strip()
    wait_for(lambda: {j["id"]: j["state"] for j in ours()}.get(job1["id"]) not in LIVE,
             f"job {job1['id']} to be preempted", 60)
    state1 = {j["id"]: j["state"] for j in ours()}[job1["id"]]
    wait_for(lambda: all(v[0] != "running" for v in runs().values()),
             "the preempted workers' runs to go back to the queue", 30)
    mid = runs()
    for rid, v in mid.items():
        if v[0] != "queued" or v[1] - v[2] != 0:
            fail(f"run {rid} after the preemption: {v}; expected queued with no attempt spent")
    hit = [rid for rid in mid if mid[rid][2] == 1]
    if len(hit) != 2:
        fail(f"runs interrupted by the preemption: {hit}; expected the 2 that ran")
    print(f"ok: urgent job {urgent} preempted job {job1['id']} ({state1}): runs {hit} back in "
          f"the queue at checkpoints {[mid[r][3] for r in hit]}, attempts spent 0 "
          f"({time.time() - T0:.1f} s)")

    most_live = [0]

    def done():
        most_live[0] = max(most_live[0], len(live()))
        r = runs()
        if any(v[0] == "failed" for v in r.values()):
            fail(f"a run failed: {r}")
        return all(v[0] == "succeeded" for v in r.values())
    wait_moving(done, "every run to succeed on the next job's workers")
    if most_live[0] != 1 or len(ours()) != 2:
        fail(f"jobs asked for after the preemption: {len(ours()) - 1} (at most {most_live[0]} "
             "live at once); expected one")
    job2 = [j for j in ours() if j["id"] != job1["id"]][0]
    for rid, (st, att, intr, ck) in runs().items():
        if att - intr != 1:
            fail(f"run {rid}: attempt {att}, interruptions {intr}: an attempt was spent")
        n, lo, hi = psql(f"SELECT count(*), min(step), max(step) FROM metrics "
                         f"WHERE run_id = {rid}").split("|")
        if (int(n), int(lo), int(hi)) != (STEPS, 1, STEPS):
            fail(f"run {rid}'s metrics: {n} rows, steps {lo}..{hi}; expected 1..{STEPS} once each")
    print(f"ok: one new job ({job2['id']}) after the preemption; every run succeeded, "
          f"interrupted ones resumed (attempts {[v[1] for v in runs().values()]}, "
          f"interruptions {[v[2] for v in runs().values()]}), steps 1..{STEPS} stored once each "
          f"({time.time() - T0:.1f} s)")

    t_done = time.time()
    wait_for(lambda: not live(), f"the scheduler to cancel job {job2['id']} once idle", IDLE + 40)
    log = open(slog, errors="replace").read()
    if f"cancelling job {job2['id']}" not in log:
        fail(f"job {job2['id']} ended, but not by the scheduler's scancel")
    print(f"ok: queue empty: the scheduler cancelled job {job2['id']} "
          f"{time.time() - t_done:.1f} s after the last run (idle {IDLE} s) "
          f"({time.time() - T0:.1f} s)")

    # a run of 2 ranks, one slot each: a job of 2 nodes, the ranks on both
    gang = {"name": "slurm-gang", "method": "runs",
            "base": dict(base, train=dict(base["train"], batch_size=8, micro_batch_size=4,
                                          tokens=2000 * 256)),
            "runs": [{"train": {"seed": 9}}], "resources": {"cpus": 1, "ranks": 2},
            "max_attempts": 1}
    st, body = request("POST", "/api/sweeps", gang)
    if st != 201:
        fail(f"submit the 2-rank run: {st} {body}")
    gid = int(psql(f"SELECT id FROM runs WHERE sweep_id = {body['id']}"))
    wait_for(lambda: len(live()) == 1, "a job for the 2-rank run", 30)
    job3 = live()[0]
    if job3["nodes"] != "2":
        fail(f"job {job3['id']} for a run of 2 ranks of 1 slot: {job3['nodes']} node(s)")
    holders = set()

    def gang_done():
        st, ws = request("GET", "/api/workers")
        holders.update(w["name"] for w in ws if gid in w["runs"])
        s = runs()[gid][0]
        if s == "failed":
            fail(f"the 2-rank run failed: {runs()[gid]}")
        return s == "succeeded"
    wait_moving(gang_done, "the 2-rank run to succeed")
    if len(holders) != 2 or not all(h.endswith("-" + job3["id"]) for h in holders):
        fail(f"the 2-rank run was held by {sorted(holders)}; expected both workers of job "
             f"{job3['id']}")
    wait_for(lambda: not live(), f"the scheduler to cancel job {job3['id']} once idle", IDLE + 40)
    print(f"ok: a run of 2 ranks of 1 slot: job {job3['id']} of 2 nodes, the ranks placed on "
          f"both its workers {sorted(holders)}, succeeded; the job cancelled once idle "
          f"({time.time() - T0:.1f} s)")

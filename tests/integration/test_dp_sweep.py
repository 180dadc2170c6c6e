#!/usr/bin/env python3
"""A sweep of data-parallel CPU runs through a real scheduler and workers
against a throwaway PostgreSQL (run through tests/integration/run_with_pg.sh).

The spec asks for 2 ranks a run ("resources": {"cpus": 1, "ranks": 2}):
- a worker with 1 CPU slot gets none of its runs, and the sweep says why
  (the API's "waiting", `scalesweep status`);
- a worker with 2 CPU slots runs them, one at a time (each holds both
  slots), each as 2 ranks (the worker's trainer launches them);
- then, on two workers of 1 CPU slot each, a run's two ranks are placed
  together, one on each (gang placement over loopback: rank 0's worker
  listens, the other's rank connects to it); the scheduler is killed (-9)
  and restarted while it trains, and the run goes on: both workers keep
  their parts, and it succeeds at its first attempt;
- each run's stored metrics equal, step for step, those of the same config
  trained by hand with world_size 1 (one micro-batch per rank: bit for
  bit).

Usage: test_dp_sweep.py SCALESWEEP_BINARY
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import (api_request, fail_exit, kill_groups, logs_in, make_token, psql, read_ready,
                     step_losses, stored_losses, until, wait_healthz)

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
tmp = tempfile.mkdtemp(prefix="ss-dp-sweep-")
token = make_token(tmp)
api_port = wport = 0
procs = {}
slog = os.path.join(tmp, "scheduler.log")


def fail(msg):
    fail_exit(msg, logs_in(tmp), tail=2000, cleanup=cleanup)


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def cleanup():
    kill_groups(procs)


def wait_for(pred, what, timeout=120):
    if not until(pred, timeout, 0.1):
        fail(f"timed out waiting for {what}")


def start_worker(name, slots):
    log = open(os.path.join(tmp, f"{name}.log"), "a")
    procs[name] = subprocess.Popen(
        [BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
         "--cpu-slots", str(slots), "--work-dir", os.path.join(tmp, name), "--name", name],
        stdout=log, stderr=log, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"),
        start_new_session=True)


BASE = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
        "data": {"synthetic": {"seed": 5}},
        "train": {"batch_size": 4, "micro_batch_size": 2, "tokens": 32768, "lr": 0.003},
        "eval": {"every_tokens": 8192, "tokens": 256}}


def check_runs(sweep_id, how):
    """every run of the sweep: its stored train losses are those of its
    config trained by hand on one rank, bit for bit"""
    st, d = request("GET", f"/api/sweeps/{sweep_id}")
    if "waiting" in d:
        fail(f"a finished sweep still says it waits: {d['waiting']!r}")
    for r in d["runs"]:
        cfg = json.loads(psql(f"SELECT config FROM runs WHERE id = {r['id']}"))
        if cfg["world_size"] != 2:
            fail(f"run {r['id']} was planned with world_size {cfg['world_size']}")
        cfg["world_size"] = 1
        path = os.path.join(tmp, f"one-{r['id']}.json")
        json.dump(cfg, open(path, "w"))
        p = subprocess.run([BIN, "train", "--config", path, "--checkpoint-dir",
                            os.path.join(tmp, f"ck-one-{r['id']}")], capture_output=True,
                           text=True, timeout=120)
        if p.returncode != 0:
            fail(f"run {r['id']} by hand on one rank: exit {p.returncode}: {p.stderr[-500:]}")
        mine, stored = step_losses(p.stdout), stored_losses(r["id"])
        if not mine or stored != mine:
            diff = [s for s in mine if stored.get(s) != mine[s]][:3]
            fail(f"run {r['id']}: stored train losses differ from world_size 1's at steps {diff}")
        print(f"ok: run {r['id']} ({how}): its {len(stored)} stored train losses are "
              f"world_size 1's bit for bit")


def wait_done(sweep_id, n, what):
    def done():
        st, d = request("GET", f"/api/sweeps/{sweep_id}")
        if d["counts"]["failed"]:
            fail(f"a run failed: {d['runs']}")
        return d["counts"]["succeeded"] == n
    wait_for(done, what, 180)


try:
    ready = os.path.join(tmp, "ready.json")
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen", "127.0.0.1:0",
         "--workers", "127.0.0.1:0", "--ready-file", ready, "--checkpoints",
         os.path.join(tmp, "ckpt")], stdout=open(slog, "a"), stderr=subprocess.STDOUT,
        start_new_session=True)
    ports = read_ready(ready, procs["scheduler"], fail)
    api_port, wport = ports["http_port"], ports["workers_port"]
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up")

    # ---- one worker of 1 slot: the runs wait, saying why ---------------------------
    start_worker("small", 1)
    wait_for(lambda: "connected: " in open(slog).read(), "the 1-slot worker")
    spec = {"name": "dp-sweep", "method": "runs", "base": BASE,
            "runs": [{"train": {"seed": 1}}, {"train": {"seed": 2}}],
            "resources": {"cpus": 1, "ranks": 2}}
    st, sw = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {sw}")
    time.sleep(2)
    st, doc = request("GET", f"/api/sweeps/{sw['id']}")
    if doc["counts"]["queued"] != 2:
        fail(f"a 2-rank run started on a 1-slot worker: {doc['counts']}")
    want = "the connected workers have 1 CPU slot in all, and a run has 2 ranks"
    if want not in (doc.get("waiting") or ""):
        fail(f"the sweep does not say why it waits: {doc.get('waiting')!r}")
    out = subprocess.run([BIN, "status", str(sw["id"]), "--url", f"http://127.0.0.1:{api_port}"],
                         capture_output=True, text=True)
    if want not in out.stdout:
        fail(f"status does not say why: {out.stdout!r}")
    print("ok: on a 1-slot worker the 2-rank runs wait: " + doc["waiting"])
    os.killpg(procs["small"].pid, signal.SIGTERM)
    procs["small"].wait(30)

    # ---- one worker of 2 slots: both ranks there -------------------------------------
    start_worker("big", 2)
    wait_done(sw["id"], 2, "both runs to succeed")
    check_runs(sw["id"], "2 ranks on one worker")
    os.killpg(procs["big"].pid, signal.SIGTERM)
    procs["big"].wait(30)

    # ---- two workers of 1 slot: a run's ranks over both (gang) -------------------------
    spec["name"] = "dp-gang"
    spec["runs"] = [{"train": {"seed": 7, "tokens": 32768 * 40}}]  # about 10 s
    st, sw2 = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {sw2}")
    start_worker("g1", 1)
    start_worker("g2", 1)
    gang = None

    def training():
        global gang
        st, d = request("GET", f"/api/sweeps/{sw2['id']}")
        gang = d["runs"][0]["id"]
        return int(psql(f"SELECT count(*) FROM metrics WHERE run_id = {gang}")) > 100
    wait_for(training, "the run spread over two workers to train", 60)
    # the scheduler dies and comes back on the same ports: both parts are kept
    procs["scheduler"].kill()
    procs["scheduler"].wait()
    time.sleep(0.5)
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen",
         f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}", "--checkpoints",
         os.path.join(tmp, "ckpt")], stdout=open(slog, "a"), stderr=subprocess.STDOUT,
        start_new_session=True)
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come back")
    wait_done(sw2["id"], 1, "the run spread over two workers to succeed")
    attempt = int(psql(f"SELECT attempt FROM runs WHERE id = {gang}"))
    if attempt != 1:
        fail(f"the gang run restarted after the scheduler's restart: attempt {attempt}")
    print("ok: the scheduler killed and restarted mid-run: the gang run went on and succeeded "
          "at attempt 1")
    if "2 ranks over 2 workers" not in open(slog).read():
        fail("the scheduler did not spread the run over the two workers")
    for name in ("g1", "g2"):
        heads = [open(os.path.join(d, f)).readline() for d, _, fs in
                 os.walk(os.path.join(tmp, name)) for f in fs if f.startswith("attempt-")]
        if not any("--ranks" in h for h in heads):
            fail(f"worker {name} ran no part of the run (no --ranks in {heads})")
    check_runs(sw2["id"], "its 2 ranks on two workers")
    print("dp_sweep: all checks passed")
finally:
    cleanup()
    shutil.rmtree(tmp, ignore_errors=True)

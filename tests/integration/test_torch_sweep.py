"""The reference PyTorch trainer (trainers/torch) through the whole loop
(docs/trainers.md), against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), the real scheduler and real workers:

- an IsoFLOP sweep with WSD branches (2 budgets x 4 sizes), every run "trainer": "torch", trains
  on a worker that declares the trainer (--trainer torch=...), its branches
  start from their trunks' checkpoints, and the sweep's laws are fitted; a
  second worker without the trainer gets none of its runs (it trains a
  built-in run meanwhile);
- a run stopped by its worker's SIGTERM goes back to the queue without
  spending an attempt and resumes from its checkpoint on the next worker;
  a trainer killed with SIGKILL fails its attempt, and the next attempt
  resumes from the last checkpoint; the run's final loss and every step's
  stored loss equal those of the same config trained uninterrupted by hand,
  bit for bit (PyTorch on the CPU with one thread is deterministic);
- `world_size: 2` on one worker (two ranks through `scalesweep launch`,
  gloo), and spread over two workers (gang placement: rank 0's worker's
  address and a port of the run's), give world_size 1's curve within 1e-5
  relative (the ranks sum the same gradients in another order);
- `scalesweep reproduce` of a PyTorch-trained run reproduces it exactly.

Usage: test_torch_sweep.py SCALESWEEP_BINARY SOURCE_DIR
Skips (77) when /usr/bin/python3 cannot import torch.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import (api_request, free_port, kill_groups, make_token, post_sweep, psql,
                     wait_healthz)

BIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
DB = os.environ["SCALESWEEP_TEST_DB"]
PY = "/usr/bin/python3"
TRAIN = os.path.join(SRC, "trainers", "torch", "train.py")
T0 = time.time()

if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
    print("skipped: no torch (/usr/bin/python3 cannot import torch; Debian's python3-torch)")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="ss-torch-sweep-")
token = make_token(tmp)
api_port, wport = free_port(), free_port()
procs = {}


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for name in sorted(os.listdir(tmp)):
        if name.endswith(".log"):
            print(f"--- {name} (end)", file=sys.stderr)
            print(open(os.path.join(tmp, name)).read()[-3000:], file=sys.stderr)
    cleanup()
    sys.exit(1)


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def start(name, args):
    f = open(os.path.join(tmp, name + ".log"), "a")
    procs[name] = subprocess.Popen([BIN] + args, stdout=f, stderr=f, start_new_session=True,
                                   env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))


def start_worker(name, slots, torch=True):
    args = ["worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
            "--cpu-slots", str(slots), "--work-dir", os.path.join(tmp, name), "--name", name]
    if torch:
        args += ["--trainer", f"torch={PY} {TRAIN}"]
    start(name, args)


def stop(name, sig=signal.SIGTERM):
    p = procs.pop(name)
    if p.poll() is None:
        os.killpg(p.pid, sig)
    p.wait(timeout=60)


def cleanup():
    kill_groups(procs)
    procs.clear()


def submit(spec):
    return post_sweep(request, spec, fail, spec["name"])


def runs(sweep):
    rows = psql("SELECT r.id, r.status, r.attempt, r.interruptions, coalesce(w.name, ''), "
                "coalesce(r.final_val_loss::text, ''), coalesce(r.branch_of, 0), "
                "coalesce(r.error, '') FROM runs r LEFT JOIN workers w ON w.id = r.worker "
                f"WHERE r.sweep_id = {sweep} ORDER BY r.id")
    out = []
    for line in rows.splitlines():
        i, st, a, intr, w, loss, bo, err = line.split("|", 7)
        out.append({"id": int(i), "status": st, "attempt": int(a), "interruptions": int(intr),
                    "worker": w, "loss": loss, "branch_of": int(bo), "error": err})
    return out


def wait_done(sweep, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rs = runs(sweep)
        if rs and all(r["status"] in ("succeeded", "failed", "cancelled") for r in rs):
            return rs
        time.sleep(0.3)
    fail(f"sweep {sweep} did not finish in {timeout} s: {runs(sweep)}")


def curve(run_id):
    """{step: train_loss} as stored"""
    rows = psql(f"SELECT step, train_loss FROM metrics WHERE run_id = {run_id} "
                "AND train_loss IS NOT NULL ORDER BY step")
    return {int(s): float(v) for s, v in (l.split("|") for l in rows.splitlines())}


def by_hand(run_id, name):
    """The run's stored config trained uninterrupted by hand: (step losses,
    final val loss), from the trainer's own lines"""
    cfg = json.loads(psql(f"SELECT config FROM runs WHERE id = {run_id}"))
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESWEEP_")}
    env.update(SCALESWEEP_CONFIG=path, SCALESWEEP_CHECKPOINT_DIR=os.path.join(tmp, name + "-ck"))
    out = subprocess.run([BIN, "launch", "--", PY, TRAIN], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        fail(f"train.py by hand on run {run_id}'s config: {out.returncode} {out.stderr[-2000:]}")
    steps, final = {}, None
    for line in out.stdout.splitlines():
        ev = json.loads(line)
        if ev["event"] == "step":
            steps[ev["step"]] = ev["train_loss"]
        elif ev["event"] == "done":
            final = ev["final_val_loss"]
    return steps, final


def trainer_pid(worker, run_id):
    """the PyTorch process of a run of worker (the launcher's child)"""
    launcher = None
    for line in open(os.path.join(tmp, worker + ".log")):
        if f"run {run_id} attempt" in line and "started pid" in line:
            launcher = int(line.split("started pid ")[1].split()[0])
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == launcher:
                return int(p)
    return None


def checkpoint_step(run_id):
    v = psql(f"SELECT coalesce(checkpoint_step, -1) FROM runs WHERE id = {run_id}")
    return int(v or -1)


try:
    start("scheduler", ["scheduler", "--database", DB, "--token-file", token,
                        "--listen", f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
                        "--checkpoints", os.path.join(tmp, "ckpt"), "--lease-seconds", "5",
                        "--retry-after-seconds", "1"])
    if not wait_healthz(request):
        fail("the scheduler did not come up")
    start_worker("wt", 2)
    start_worker("wb", 1, torch=False)

    # ---- 1. an IsoFLOP sweep with WSD branches, trained by PyTorch ----------------
    iso = submit({
        "name": "torch-isoflop", "method": "isoflop",
        "base": {"trainer": "torch", "model": {"seq_len": 64}, "threads": 1,
                 "data": {"synthetic": {"words": 256, "zipf": 1.4}},
                 "train": {"micro_batch_size": 16, "schedule": "wsd"}, "eval": {"tokens": 4096}},
        "isoflop": {"flops": [2e9, 4e9], "params": [3300, 7300, 12800, 20000],
                    "flops_count": "exact"},
        "batch_rule": {"min_steps": 100, "min_batch": 4},
        "resources": {"cpus": 1}, "max_attempts": 2})
    builtin = submit({"name": "builtin-beside", "method": "runs",
                      "base": {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 32},
                               "train": {"tokens": 8 * 32 * 40, "batch_size": 8}, "threads": 1},
                      "runs": [{}], "resources": {"cpus": 1}})
    done = wait_done(iso, 240)
    bad = [r for r in done if r["status"] != "succeeded"]
    if bad:
        fail(f"torch isoflop runs did not succeed: {bad}")
    # runs.worker is cleared when a run ends: the workers' logs say who ran what
    wt_log, wb_log = (open(os.path.join(tmp, n + ".log")).read() for n in ("wt", "wb"))
    for r in done:
        if f"run {r['id']} attempt 1: started" not in wt_log or f"run {r['id']} " in wb_log:
            fail(f"torch run {r['id']} did not train on wt alone (the worker with the trainer)")
    branches = [r for r in done if r["branch_of"]]
    if len(branches) != 4:
        fail(f"expected 4 wsd branches, found {branches}")
    for b in branches:  # each trained only its decay, from its trunk's branch point
        first = min(curve(b["id"]))
        bs = int(psql(f"SELECT branch_step FROM runs WHERE id = {b['id']}"))
        if first != bs + 1:
            fail(f"branch {b['id']}: first stored step {first}, expected {bs + 1} (started "
                 f"from its trunk's checkpoint at step {bs})")
    deadline = time.time() + 30
    laws = ""
    while time.time() < deadline and "chinchilla" not in laws:
        laws = psql(f"SELECT string_agg(law, ',') FROM fits WHERE sweep_id = {iso}")
        time.sleep(0.5)
    if "chinchilla" not in laws or "isoflop" not in laws:
        fail(f"the torch sweep's laws were not fitted: fits {laws!r}")
    b = wait_done(builtin, 60)
    if b[0]["status"] != "succeeded" or \
            f"run {b[0]['id']} attempt 1: started" not in open(os.path.join(tmp, "wb.log")).read():
        fail(f"the built-in run beside it did not train on wb: {b}")
    log(f"isoflop sweep of 8 PyTorch runs (4 wsd branches) trained on wt, fitted ({laws}); "
        "the worker without the trainer got none of them")

    # ---- 2. SIGTERM and SIGKILL mid-run: resumes, same losses bit for bit ----------
    long_cfg = {"trainer": "torch", "threads": 1,
                "model": {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 32},
                "data": {"synthetic": {"words": 256, "zipf": 1.4}},
                "train": {"batch_size": 8, "tokens": 8 * 32 * 600, "lr": 0.003},
                "eval": {"tokens": 2048}, "checkpoint": {"every_tokens": 8 * 32 * 50}}
    stop("wb")
    sv = submit({"name": "torch-resume", "method": "runs", "base": long_cfg, "runs": [{}],
                 "resources": {"cpus": 1}, "max_attempts": 3})
    rid = runs(sv)[0]["id"]
    deadline = time.time() + 120
    while checkpoint_step(rid) < 50 and time.time() < deadline:
        time.sleep(0.2)
    if checkpoint_step(rid) < 50:
        fail(f"run {rid} reported no checkpoint")
    stop("wt")  # the worker stops: SIGTERM, its trainer checkpoints, exit 143
    r = runs(sv)[0]
    if r["status"] != "queued" or r["interruptions"] < 1:
        fail(f"after the worker's SIGTERM the run should be queued and interrupted: {r}")
    at = checkpoint_step(rid)
    start_worker("wt", 2)
    deadline = time.time() + 120
    while checkpoint_step(rid) <= at and time.time() < deadline:
        time.sleep(0.2)
    pid = trainer_pid("wt", rid)
    if checkpoint_step(rid) <= at or not pid:
        fail(f"run {rid} did not resume and checkpoint again (pid {pid})")
    os.kill(pid, signal.SIGKILL)  # a crash of the trainer itself
    r = wait_done(sv, 180)[0]
    if r["status"] != "succeeded" or r["attempt"] - r["interruptions"] != 2:
        fail(f"the killed run should succeed on its second counted attempt: {r}")
    steps, final = by_hand(rid, "uninterrupted")
    stored = curve(rid)
    if stored != steps:
        diff = [s for s in steps if stored.get(s) != steps[s]][:5]
        fail(f"run {rid}: stored step losses differ from an uninterrupted run at steps {diff}")
    if float(r["loss"]) != final:
        fail(f"run {rid}: final loss {r['loss']} after SIGTERM and SIGKILL, {final} uninterrupted")
    log(f"run {rid}: stopped by SIGTERM (no attempt spent) and killed with SIGKILL, resumed "
        f"both times; all {len(steps)} step losses and the final loss {final} as uninterrupted")

    # ---- 3. world_size 2 on one worker and over two workers ---------------------
    dp = dict(long_cfg, train={"batch_size": 8, "micro_batch_size": 2, "tokens": 8 * 32 * 60,
                               "lr": 0.003}, checkpoint={"every_tokens": 0})
    one = submit({"name": "torch-dp", "method": "runs", "base": dp,
                  "runs": [{"world_size": 1}, {"world_size": 2}], "resources": {"cpus": 1}})
    r1, r2 = wait_done(one, 120)
    stop("wt")
    start_worker("wt1", 1)
    start_worker("wt2", 1)
    gang = submit({"name": "torch-gang", "method": "runs", "base": dp,
                   "runs": [{"world_size": 2, "train": {"seed": 1}}], "resources": {"cpus": 1}})
    (r3,) = wait_done(gang, 120)
    for r in (r1, r2, r3):
        if r["status"] != "succeeded":
            fail(f"data-parallel run: {r}")
    if not any(f"run {r3['id']}" in l and "ranks over 2 workers" in l
               for l in open(os.path.join(tmp, "scheduler.log"))):
        fail(f"run {r3['id']} was not spread over the two workers")
    c1, c2, c3 = curve(r1["id"]), curve(r2["id"]), curve(r3["id"])
    worst = 0.0
    for c in (c2, c3):
        if sorted(c) != sorted(c1):
            fail(f"data-parallel runs stored other steps: {sorted(c)[:5]} vs {sorted(c1)[:5]}")
        worst = max([worst] + [abs(c[s] - c1[s]) / abs(c1[s]) for s in c1])
    # the same gradients summed in another order: rounding only, far below the
    # 1e-2 a step's loss moves at this learning rate
    if worst > 1e-5:
        fail(f"world_size 2 differs from world_size 1 by {worst:.3g} relative (at most 1e-5)")
    log(f"world_size 2 on one worker and over two: {len(c1)} steps within {worst:.2g} relative "
        "of world_size 1")

    # ---- 4. reproduce a PyTorch-trained run ----------------------------------------
    env = dict(os.environ, SCALESWEEP_URL=f"http://127.0.0.1:{api_port}",
               SCALESWEEP_TOKEN=open(token).read().strip())
    out = subprocess.run([BIN, "reproduce", str(r1["id"]), "--wait"], capture_output=True,
                         text=True, env=env, timeout=120)
    if out.returncode != 0 or f"reproduces run {r1['id']} exactly" not in out.stdout:
        fail(f"scalesweep reproduce of a torch run: {out.returncode} {out.stdout} {out.stderr}")
    log(f"reproduce {r1['id']}: {out.stdout.strip().splitlines()[-1]}")
    print(f"PASS ({time.time() - T0:.0f} s)")
finally:
    cleanup()
    if os.environ.get("KEEP_TMP") is None:
        shutil.rmtree(tmp, ignore_errors=True)

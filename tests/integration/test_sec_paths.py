#!/usr/bin/env python3
"""Token shards outside --data-dir, and runs too large for their memory, on
the real scheduler, worker and trainer against a throwaway PostgreSQL (run
through tests/integration/run_with_pg.sh, which sets SCALESWEEP_TEST_DB and
PGTEST_SH):

- the scheduler (--data-dir DATA) answers 400 to specs whose shards escape
  DATA by glob (DATA/.[.]/..., /etc/shado[w], a wildcard directory), by a
  symlink inside DATA leading out, or by naming a file outside: each with
  the JSON path, and no message says anything about the file (not its
  size, not its first bytes, not whether it exists);
- a legitimate glob under DATA trains on a real worker, whose trainer got
  --data-dir DATA (the welcome's data_dirs);
- defence in depth: a queued run's config rewritten in the database to a
  symlink leading out fails in the trainer, with no leak in its error;
- a worker started with --data-dir DATA/sub narrows the scheduler's DATA:
  a run reading DATA/train_* fails there;
- a run config of 1024 layers x d_model 65536 x seq_len 65536 is refused at
  submission with its figures; one that fits the spec's max_memory_gib but
  not the worker's host fails at the worker with the figures, without a
  trainer ever starting.

Usage: test_sec_paths.py SCALESWEEP_BINARY
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness import api_request, free_port, kill_groups, make_token, psql, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
T0 = time.time()
# the secret's figures, which no answer may contain: its size, and its first
# 4 bytes as the old loader printed them (a little-endian uint32 "magic")
SECRET = b"SECR" + b"x" * 1230
LEAKS = [str(len(SECRET)), str(int.from_bytes(SECRET[:4], "little")), "SECR", "magic",
         "truncated", "bytes after"]


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


tmp = tempfile.mkdtemp(prefix="ss-secpaths-")
data, outside = os.path.join(tmp, "data"), os.path.join(tmp, "outside")
token = make_token(tmp)
api_port, wport = free_port(), free_port()
procs = {}


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def no_leak(what, text):
    for n in LEAKS:
        if n in text:
            fail(f"{what}: the answer leaks '{n}': {text[:600]}")


def start_worker(name, *extra):
    log = open(os.path.join(tmp, f"{name}.log"), "a")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    procs[name] = subprocess.Popen(
        [BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
         "--cpu-slots", "1", "--work-dir", os.path.join(tmp, name), "--name", name, *extra],
        stdout=log, stderr=log, env=env, start_new_session=True)


def stop(name):
    p = procs.pop(name)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)


def spec(name, train, val=None, **over):
    s = {"name": name, "method": "runs",
         "base": {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16,
                            "vocab_size": 27},
                  "train": {"batch_size": 4, "tokens": 512},
                  "eval": {"tokens": 64}, "threads": 1,
                  "data": {"train": train, "val": val or data + "/val_*.bin"}},
         "runs": [{"train": {"seed": 1}}], "resources": {"cpus": 1}, "max_attempts": 1}
    s.update(over)
    return s


def wait_runs(sweep, want, secs=90):
    """The sweep's runs once every one is in a final state (want: that status)."""
    while time.time() - T0 < 600:
        st, s = request("GET", f"/api/sweeps/{sweep}")
        runs = s["runs"] if st == 200 else []
        if runs and all(r["status"] in ("succeeded", "failed", "cancelled") for r in runs):
            for r in runs:
                if r["status"] != want:
                    fail(f"sweep {sweep}: run {r['id']} {r['status']}, expected {want}: "
                         f"{json.dumps(r)[:800]}")
            return runs
        secs -= 0.2
        if secs < 0:
            fail(f"sweep {sweep} did not finish: {json.dumps(runs)[:800]}")
        time.sleep(0.2)


def run_error(run_id):
    return psql(f"SELECT coalesce(error, '') FROM runs WHERE id = {run_id}")


try:
    r = subprocess.run([BIN, "data", "synth", "--out", data, "--tokens", "5000",
                        "--val-tokens", "1024"], capture_output=True, text=True)
    if r.returncode:
        fail("data synth: " + r.stderr)
    os.makedirs(os.path.join(data, "sub"))
    os.makedirs(outside)
    with open(os.path.join(outside, "secret.bin"), "wb") as f:
        f.write(SECRET)
    os.symlink(os.path.join(outside, "secret.bin"), os.path.join(data, "link.bin"))
    os.symlink(outside, os.path.join(data, "out"))
    os.mkfifo(os.path.join(outside, "pipe.bin"))  # opened, it blocks until a writer comes
    os.mkfifo(os.path.join(data, "pipe.bin"))

    log = open(os.path.join(tmp, "scheduler.log"), "a")
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token,
         "--listen", f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
         "--checkpoints", os.path.join(tmp, "ckpt"), "--data-dir", data],
        stdout=log, stderr=log)
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up; see " + tmp + "/scheduler.log")

    # ---- attacks at submission: 400, the JSON path, nothing about the file
    up = "/.[.]" * 12
    attacks = [
        ("glob dotdot", {"base.data.train": data + "/.[.]/outside/secret.bin"},
         "$.base.data.train", "directory component"),
        ("glob to /etc", {"base.data.train": data + up + "/etc/passwd"},
         "$.base.data.train", "directory component"),
        ("shado[w]", {"base.data.val": "/etc/shado[w]"},
         "$.base.data.val", "outside the allowed data directories"),
        ("glob outside", {"base.data.train": outside + "/secre[t].bin"},
         "$.base.data.train", "outside the allowed data directories"),
        ("plain outside", {"base.data.train": outside + "/secret.bin"},
         "$.base.data.train", "outside the allowed data directories"),
        ("symlink out", {"base.data.train": data + "/link.bin"},
         "$.base.data.train", "resolves outside"),
        ("symlink glob", {"base.data.train": data + "/lin?.bin"},
         "$.base.data.train", "resolves outside"),
        ("dir symlink", {"base.data.train": data + "/out/secret.bin"},
         "$.base.data.train", "outside the allowed data directories"),
        ("wildcard dir", {"base.data.train": tmp + "/*/secret.bin"},
         "$.base.data.train", "directory component"),
        ("in a run", {"runs[0].data": {"train": data + "/.[.]/outside/secre?.bin"}},
         "$.runs[0].data.train", "directory component"),
        ("no match", {"base.data.train": data + "/nothing_*.bin"},
         "$.base.data.train", "no files match"),
        # the planner opens shards to count tokens: a FIFO (or a device) must
        # be refused before it is opened, or the check's thread blocks for good
        ("fifo outside", {"base.data.train": outside + "/pipe.bin"},
         "$.base.data.train", "outside the allowed data directories"),
        ("fifo inside", {"base.data.val": data + "/pipe.bin"},
         "$.base.data.val", "regular file"),
        ("device", {"base.data.train": "/dev/zero"},
         "$.base.data.train", "outside the allowed data directories"),
    ]
    for label, change, path, needle in attacks:
        s = spec("attack " + label, data + "/train_*.bin")
        for k, v in change.items():
            if k.startswith("runs[0]."):
                s["runs"][0][k.split(".", 1)[1]] = v
            else:
                s["base"]["data"][k.split(".")[-1]] = v
        st, body = request("POST", "/api/sweeps", s)
        text = json.dumps(body)
        if st != 400:
            fail(f"{label}: {st}, expected 400: {text[:600]}")
        probs = body["error"].get("problems", [])
        if not any(p["path"] == path and needle in p["message"] for p in probs):
            fail(f"{label}: no problem at {path} saying '{needle}': {text[:800]}")
        no_leak(label, text)
    # existing and missing files outside get the same answer
    answers = []
    for f in ("secret.bin", "missing.bin"):
        st, body = request("POST", "/api/sweeps", spec("oracle " + f, outside + "/" + f))
        answers.append(body["error"]["problems"][0]["message"].replace(f, "F"))
    if answers[0] != answers[1]:
        fail(f"a file outside that exists is told apart from one that does not: {answers}")
    print(f"ok: {len(attacks)} attack specs refused with their paths, nothing leaked")

    # ---- a legitimate glob trains; the trainer got --data-dir DATA
    start_worker("w1")
    st, body = request("POST", "/api/sweeps", spec("legit", data + "/train_*.bin"))
    if st != 201:
        fail(f"legit spec: {st} {body}")
    wait_runs(body["id"], "succeeded")
    logs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp, "w1", "runs", "*", "*.log")))
    if f"--data-dir {data}" not in logs:
        fail(f"the trainer was not given --data-dir {data}: {logs[:800]}")
    print("ok: a glob under DATA trains; its trainer got --data-dir DATA")

    # ---- defence in depth: a config rewritten behind the scheduler's back
    stop("w1")
    st, body = request("POST", "/api/sweeps", spec("rewritten", data + "/train_*.bin"))
    if st != 201:
        fail(f"spec to rewrite: {st} {body}")
    sweep = body["id"]
    psql(f"UPDATE runs SET config = jsonb_set(config, '{{data,train}}', "
         f"'\"{data}/link.bin\"') WHERE sweep_id = {sweep}")
    start_worker("w1")
    runs = wait_runs(sweep, "failed")
    err = run_error(runs[0]["id"])
    if "$.data.train" not in err or "resolves outside the allowed data directories" not in err:
        fail(f"the trainer's refusal: {err[:600]}")
    no_leak("rewritten config", err + json.dumps(runs))
    print("ok: a rewritten config fails in the trainer: " + err[:160])

    # ---- a worker's own --data-dir narrows the scheduler's
    stop("w1")
    start_worker("w2", "--data-dir", os.path.join(data, "sub"))
    st, body = request("POST", "/api/sweeps", spec("narrowed", data + "/train_*.bin"))
    if st != 201:
        fail(f"spec for the narrowed worker: {st} {body}")
    runs = wait_runs(body["id"], "failed")
    err = run_error(runs[0]["id"])
    if "outside the allowed data directories" not in err:
        fail(f"the narrowed worker's trainer read DATA: {err[:600]}")
    print("ok: a worker's --data-dir DATA/sub narrows the scheduler's DATA")

    # ---- memory: refused at submission with the figures
    big = {"name": "huge", "method": "runs", "resources": {"gpus": 1},
           "base": {"train": {"tokens": 1e12, "batch_size": 1}},
           "runs": [{"model": {"n_layer": 1024, "d_model": 65536, "n_head": 512,
                               "seq_len": 65536}}]}
    st, body = request("POST", "/api/sweeps", big)
    text = json.dumps(body)
    probs = body.get("error", {}).get("problems", []) if isinstance(body, dict) else []
    if st != 400 or not any(p["path"] == "$.runs[0].model" and "more than the 80 GiB of one GPU"
                            in p["message"] and "parameters" in p["message"] for p in probs):
        fail(f"oversized run config: {st} {text[:800]}")
    print("ok: " + next(p["message"] for p in probs if p["path"] == "$.runs[0].model")[:200])

    # ---- memory: within the spec's max_memory_gib, beyond the worker's host
    host = {"name": "too big for the host", "method": "runs", "max_attempts": 1,
            "resources": {"cpus": 1, "max_memory_gib": 1048576},
            "base": {"model": {"n_layer": 64, "d_model": 8192, "n_head": 64, "seq_len": 2048},
                     "train": {"batch_size": 1, "tokens": 4096}, "threads": 1},
            "runs": [{"train": {"seed": 1}}]}
    st, body = request("POST", "/api/sweeps", host)
    if st != 201:
        fail(f"a spec within its max_memory_gib: {st} {body}")
    runs = wait_runs(body["id"], "failed")
    err = run_error(runs[0]["id"])
    if "not started" not in err or "more than the" not in err or "this host" not in err:
        fail(f"the worker's memory refusal: {err[:600]}")
    wlog = open(os.path.join(tmp, "w2.log")).read()
    if f"run {runs[0]['id']} attempt 1: started pid" in wlog:
        fail("a trainer was started for the run the worker refused")
    print("ok: the worker refused the run: " + err[:200])
    print(f"PASS ({time.time() - T0:.1f} s)")
finally:
    kill_groups(procs, alone=("scheduler",))

#!/usr/bin/env python3
"""Long work shows progress (issue 17): `scalesweep submit --wait` against a
real scheduler and worker and a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh).

- Not on a terminal: plain lines, one per change of the counts (and when a
  running run first reports its loss), with runs
  done of total (never going back), the running runs' latest training loss,
  compute spent of planned, and an estimate of the time left; then the
  outcome line, exit 0.
- On a terminal (a pty): one line rewritten in place (carriage return and
  erase-line), ended before the outcome.
- A spec submitted before is followed, not refused.

Usage: test_progress.py SCALESWEEP_BINARY
"""
import json
import os
import pty
import re
import subprocess
import sys
import tempfile
import time

from harness import make_token, wait_healthz, api_request, tmp_kept_on_failure

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
tmp = tempfile.mkdtemp(prefix="ss-progress-")
token = make_token(tmp)
procs = []


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for n in ("scheduler.log", "worker.log"):
        p = os.path.join(tmp, n)
        if os.path.exists(p):
            sys.stderr.write(f"---- {n}\n" + open(p, errors="replace").read()[-1500:])
    cleanup()
    sys.exit(1)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


# a sanitized build trains about 6 times slower: shorter runs there, and
# longer waits for them
SANITIZED = os.environ.get("SCALESWEEP_TEST_SANITIZED") == "1"
STEPS = 2000 if SANITIZED else 9000
SLOW = 4 if SANITIZED else 1


def spec(name, seeds):
    return {"name": name, "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": STEPS * 256},
                     "eval": {"every_tokens": STEPS // 3 * 256, "tokens": 256}, "threads": 1},
            "runs": [{"train": {"seed": s}} for s in seeds], "resources": {"cpus": 1}}


with tmp_kept_on_failure(tmp, cleanup):
    ready = os.path.join(tmp, "ready.json")
    procs.append(subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen", "127.0.0.1:0",
         "--workers", "127.0.0.1:0", "--ready-file", ready, "--checkpoints",
         os.path.join(tmp, "ck")], stdout=open(os.path.join(tmp, "scheduler.log"), "w"),
        stderr=subprocess.STDOUT))
    for _ in range(300):
        if os.path.exists(ready):
            break
        time.sleep(0.1)
    ports = json.load(open(ready))
    api, wport = ports["http_port"], ports["workers_port"]
    if not wait_healthz(lambda m, p: api_request(api, token, m, p)):
        fail("the scheduler did not come up")
    procs.append(subprocess.Popen(
        [BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
         "--work-dir", os.path.join(tmp, "w"), "--name", "w1"],
        stdout=open(os.path.join(tmp, "worker.log"), "w"), stderr=subprocess.STDOUT,
        env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE")))
    url = ["--url", f"http://127.0.0.1:{api}", "--token-file", token]

    # ---- not a terminal: plain lines ------------------------------------------------
    path = os.path.join(tmp, "a.json")
    json.dump(spec("progress-a", (1, 2)), open(path, "w"))
    t0 = time.time()
    p = subprocess.run([BIN, "submit", path, "--wait", *url], capture_output=True, text=True,
                       timeout=300 * SLOW)
    if p.returncode != 0:
        fail(f"submit --wait: exit {p.returncode}: {p.stderr[-500:]}")
    lines = p.stdout.splitlines()
    prog = [ln for ln in lines if re.match(r"sweep \d+: \d+/2 runs done", ln)]
    done = [int(re.match(r"sweep \d+: (\d+)/", ln).group(1)) for ln in prog]
    if not prog or done != sorted(done) or len(set(lines)) != len(lines):
        fail(f"progress lines not one per change, in order: {lines}")
    if not any(re.search(r"running \(run \d+ loss \d+\.\d+", ln) for ln in prog):
        fail(f"no progress line names a running run's loss: {prog}")
    if not any(re.search(r"of [\d.e+]+ FLOPs \(\d+%\)", ln) for ln in prog):
        fail(f"no compute spent of planned: {prog}")
    if not re.search(r"sweep \d+ finished: 2 of 2 runs succeeded, 0 failed", p.stdout):
        fail(f"no outcome line: {p.stdout!r}")
    if "\r" in p.stdout or "\033[K" in p.stdout:
        fail("terminal control characters written to a pipe")
    print(f"ok: submit --wait (a pipe): {len(prog)} progress lines in {time.time() - t0:.1f} s, "
          f"e.g. {prog[len(prog) // 2]!r}; exit 0")

    # ---- a terminal: one line, rewritten ---------------------------------------------
    path = os.path.join(tmp, "b.json")
    json.dump(spec("progress-b", (3,)), open(path, "w"))
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "submit", path, "--wait", *url])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        fail(f"submit --wait on a terminal: exit {status}: {text[-500:]}")
    rewrites = text.count("\r\033[K")
    if rewrites < 2 or not re.search(r"\n.*sweep \d+ finished: 1 of 1", text):
        fail(f"on a terminal: {rewrites} rewrites of the line; output {text[-600:]!r}")
    print(f"ok: submit --wait (a terminal): one line rewritten {rewrites} times, ended before "
          "the outcome")

    # ---- the same spec again: followed, not refused -------------------------------------
    p = subprocess.run([BIN, "submit", path, "--wait", *url], capture_output=True, text=True,
                       timeout=60 * SLOW)
    if p.returncode != 0 or "submitted before; following that sweep" not in p.stdout or \
            "finished: 1 of 1" not in p.stdout:
        fail(f"submit --wait of the same spec: exit {p.returncode}: {p.stdout!r} {p.stderr!r}")
    print("ok: submit --wait of a spec submitted before follows that sweep")

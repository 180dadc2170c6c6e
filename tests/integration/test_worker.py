#!/usr/bin/env python3
"""The worker against a fake scheduler (docs/runtime.md), with real trainers.

Usage: test_worker.py PATH/TO/scalesweep

A scheduler stand-in listens on 127.0.0.1 (port 0); the real `scalesweep
worker` connects to it and runs real (tiny) `scalesweep train` children. It
checks: hello (token, name, GPUs from a fake nvidia-smi restricted by --gpus,
CPU slots); started / metrics / checkpoint / finished for two concurrent CPU
runs; the children's environment (CUDA_VISIBLE_DEVICES, OMP_WAIT_POLICY);
that with acks withheld and the connection dropped mid-run, the reconnect's
hello lists the runs and every unacknowledged batch is resent, identical and
in order, and that the union of all batches holds every step exactly once;
cancel (SIGTERM: exit 143 with a checkpoint), resume, a newer attempt
superseding a running one, a GPU the worker does not offer, a config the
trainer refuses; bad scheduler messages ignored (an assignment whose attempt or
GPU index is beyond an int among them, never cast); an over-long line and an `error`
message answered by a reconnect, whose first heartbeat comes at once; a
renewed lease judged by its own length after a welcome with a shorter one
(no fence); SIGTERM stopping the worker cleanly (exit 0, every handle
closed): a `stopping` message first, its trainer checkpointed and reported
as interrupted with its checkpoint step, an assignment that crosses the
stop handed back as interrupted; the token never logged,
and no secret of the worker's (its token under any name, the API token, a
PostgreSQL password) in a trainer's environment.

Standard library only; about 15 s.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOKEN = "s3cret-token-4f9a1c"
TINY = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
        "train": {"batch_size": 4, "tokens": 2048},
        "eval": {"every_tokens": 512, "tokens": 64}, "threads": 1}
# ~6000 steps (a second or two): long enough to drop the connection mid-run
MEDIUM = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
          "train": {"batch_size": 4, "tokens": 384000},
          "eval": {"every_tokens": 16384, "tokens": 64},
          "checkpoint": {"every_tokens": 128000}, "threads": 1}
# runs until cancelled
LONG = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
        "train": {"batch_size": 4, "tokens": 100000000},
        "eval": {"every_tokens": 65536, "tokens": 64}, "threads": 1}

tmp = None
worker = None
started_at = time.time()


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    if worker is not None and worker.poll() is None:
        worker.kill()
        worker.wait()
    if tmp:
        log = os.path.join(tmp, "worker.log")
        if os.path.exists(log):
            sys.stderr.write("---- worker log (last 4000 bytes)\n")
            with open(log, errors="replace") as f:
                sys.stderr.write(f.read()[-4000:])
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Peer:
    """One accepted worker connection: JSON lines in and out."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.got = []  # every message received, in order
        self.closed = False

    def send(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self, timeout, what="a message"):
        """The next message, or None at EOF; fails after timeout seconds."""
        deadline = time.time() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                last = [(m["type"], m.get("run_id"), m.get("seq")) for m in self.got[-8:]]
                fail("timed out waiting for %s (last messages: %r)" % (what, last))
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        check(len(line) <= 1 << 20, "a line over the protocol's limit")
        try:
            msg = json.loads(line)
        except ValueError as e:
            fail("the worker sent invalid JSON (%s): %r" % (e, line[:200]))
        check(isinstance(msg, dict) and "type" in msg, "message without type: %r" % msg)
        self.got.append(msg)
        return msg

    def until(self, pred, timeout, what, on_msg=None, since=0):
        """The first message from index `since` of this connection's messages
        for which pred holds, receiving more (each passed to on_msg) until
        one does."""
        for m in self.got[since:]:
            if pred(m):
                return m
        deadline = time.time() + timeout
        while True:
            m = self.recv(max(deadline - time.time(), 0), what)
            if m is None:
                fail("the worker closed the connection while waiting for " + what)
            if on_msg:
                on_msg(m)
            if pred(m):
                return m

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def accept(listener, timeout):
    listener.settimeout(timeout)
    try:
        s, _ = listener.accept()
    except socket.timeout:
        fail("the worker did not connect within %.1f s" % timeout)
    return Peer(s)


def expect_hello(p, runs):
    h = p.recv(10)
    check(h is not None and h["type"] == "hello", "first message is not hello: %r" % h)
    check(h["version"] == 1, "hello version %r" % h.get("version"))
    check(h["token"] == TOKEN, "hello token mismatch")
    check(h["name"] == "test-worker", "hello name %r" % h["name"])
    check(isinstance(h["host"], str) and h["host"], "hello host %r" % h.get("host"))
    check(h["gpus"] == [{"index": 1, "name": "Fake GPU B", "memory_bytes": 2048 << 20}],
          "hello gpus %r (expected only GPU 1 of the fake nvidia-smi)" % h["gpus"])
    check(h["cpu_slots"] == 2, "hello cpu_slots %r" % h["cpu_slots"])
    got = sorted((r["run_id"], r["attempt"]) for r in h["runs"])
    check(got == sorted(runs), "hello runs %r, expected %r" % (got, sorted(runs)))
    # what it can run: its CPU slots, and CUDA on the GPUs as its trainer
    # (`scalesweep devices`) found them, or why not (here: no device, or no
    # CUDA module in a build without nvcc)
    b = h.get("backends")
    check(isinstance(b, dict) and b.get("cpu") == {"slots": 2}, "hello backends %r" % b)
    cuda = b.get("cuda")
    check(isinstance(cuda, dict) and (
        (isinstance(cuda.get("error"), str) and cuda["error"]) or
        [d["index"] for d in cuda.get("devices", [])] == [1]), "hello backends.cuda %r" % cuda)
    return h


def welcome(p, hb=0.3, lease=30):
    p.send({"type": "welcome", "worker_id": 7, "heartbeat_s": hb, "lease_s": lease})


def assign(p, run_id, attempt, config, gpus, ckdir, resume=False):
    p.send({"type": "assign", "run_id": run_id, "attempt": attempt, "config": config,
            "gpus": gpus, "checkpoint_dir": ckdir, "resume": resume})


def children(pid):
    """{child pid: (argv, env)} of the worker's trainers."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
            with open("/proc/%s/environ" % d, "rb") as f:
                env = dict(e.decode(errors="replace").split("=", 1)
                           for e in f.read().split(b"\0") if b"=" in e)
            out[int(d)] = (argv, env)
        except (OSError, IndexError, ValueError):
            continue
    return out


def child_of_run(run_id, timeout=5):
    deadline = time.time() + timeout
    needle = "/runs/%d/config.json" % run_id
    while time.time() < deadline:
        for pid, (argv, env) in children(worker.pid).items():
            if any(a.endswith(needle) for a in argv):
                return argv, env
        time.sleep(0.02)
    fail("no trainer process for run %d" % run_id)


def key(m):
    return (m["run_id"], m["attempt"])


def main():
    global tmp, worker
    if len(sys.argv) != 2:
        print("usage: test_worker.py PATH/TO/scalesweep", file=sys.stderr)
        sys.exit(2)
    binary = os.path.abspath(sys.argv[1])
    check(os.access(binary, os.X_OK), binary + " is not an executable")
    probe = subprocess.run([binary, "worker", "--help"], capture_output=True, text=True)
    if probe.returncode != 0 and "unknown command" in probe.stderr:
        print("skipped: this scalesweep has no worker command yet")
        sys.exit(77)

    tmp = tempfile.mkdtemp(prefix="ss-worker-test-")
    try:
        run_test(binary)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("worker protocol: all checks passed in %.1f s" % (time.time() - started_at))


def reconnected(listener, p, hb=0.3):
    """Reads p until the worker drops it; the worker's next connection, its
    hello (no runs) checked and welcomed (heartbeats every hb seconds)."""
    while p.recv(5) is not None:
        pass
    p.close()
    p = accept(listener, 5)
    expect_hello(p, [])
    welcome(p, hb)
    return p


def run_test(binary):
    global worker
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tok, 0o600)
    fakebin = os.path.join(tmp, "bin")
    os.mkdir(fakebin)
    smi = os.path.join(fakebin, "nvidia-smi")
    with open(smi, "w") as f:
        f.write("#!/bin/sh\necho '0, Fake GPU A, 1024'\necho '1, Fake GPU B, 2048'\n")
    os.chmod(smi, 0o755)
    wd = os.path.join(tmp, "work")
    ck = lambda n: os.path.join(tmp, "ck%d" % n)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    env = dict(os.environ)
    env["PATH"] = fakebin + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # secrets the worker holds: none may reach a trainer's environment
    env["SCALESWEEP_WORKER_TOKEN"] = TOKEN
    env["SCALESWEEP_TOKEN"] = "api-token-5d1e"
    env["PGPASSWORD"] = "pg-password-77"
    env["SOME_SECRET_COPY"] = TOKEN
    log = open(os.path.join(tmp, "worker.log"), "w")
    worker = subprocess.Popen(
        [binary, "worker", "--scheduler", "127.0.0.1:%d" % port, "--token-file", tok,
         "--gpus", "1", "--cpu-slots", "2", "--work-dir", wd, "--name", "test-worker",
         "--kill-grace", "5"],
        stdout=log, stderr=subprocess.STDOUT, env=env)

    # ---- 1. hello, two CPU runs, acks withheld -----------------------------
    p = accept(listener, 10)
    hello = expect_hello(p, [])
    welcome(p)
    assign(p, 1, 1, TINY, [], ck(1))
    assign(p, 2, 1, MEDIUM, [], ck(2))
    first = {}  # (run, attempt, seq) -> message, first connection

    def note(m):
        if m["type"] in ("metrics", "finished"):
            first[(m["run_id"], m["attempt"], m["seq"])] = m

    p.until(lambda m: m["type"] == "started" and m["run_id"] == 2, 10, "run 2 started", note)
    argv, cenv = child_of_run(2)
    check(cenv.get("CUDA_VISIBLE_DEVICES") == "",
          "CPU run's CUDA_VISIBLE_DEVICES %r" % cenv.get("CUDA_VISIBLE_DEVICES"))
    check(cenv.get("OMP_WAIT_POLICY") == "PASSIVE", "OMP_WAIT_POLICY %r with 2 CPU slots"
          % cenv.get("OMP_WAIT_POLICY"))
    check(argv[1:3] == ["train", "--config"] and "--resume" not in argv, "argv %r" % argv)
    leaked = sorted(k for k, v in cenv.items()
                    if k in ("SCALESWEEP_WORKER_TOKEN", "SCALESWEEP_TOKEN", "PGPASSWORD")
                    or TOKEN in v)
    check(not leaked, "the worker's secrets reach the trainer's environment: %r" % leaked)
    check(cenv.get("PATH") == env["PATH"], "the trainer's PATH %r" % cenv.get("PATH"))
    with open(argv[3]) as f:
        cfg = json.load(f)
    # the config is written exactly as assigned (its hash is the planner's);
    # the checkpoint directory reaches the trainer as a flag
    check("dir" not in cfg.get("checkpoint", {}) and argv[4:6] == ["--checkpoint-dir", ck(2)],
          "config.json checkpoint %r, argv %r" % (cfg.get("checkpoint"), argv))
    check(cfg["train"] == MEDIUM["train"], "config.json train section changed")

    p.until(lambda m: m["type"] == "finished" and m["run_id"] == 1, 10, "run 1 finished", note)
    p.until(lambda m: m["type"] == "metrics" and m["run_id"] == 2 and m["seq"] >= 2, 10,
            "two metrics batches of run 2", note)
    fin1 = first[max(k for k in first if k[0] == 1)]
    check(fin1["type"] == "finished" and fin1["exit_code"] == 0 and fin1["signal"] == 0,
          "run 1 finished %r" % {k: fin1[k] for k in ("exit_code", "signal", "error")})
    check(fin1["error"] is None and fin1["done"]["steps"] == 32, "run 1 done %r" % fin1["done"])
    check(isinstance(fin1["log_tail"], str), "log_tail")
    started1 = [m for m in p.got if m["type"] == "started" and m["run_id"] == 1]
    check(len(started1) == 1 and started1[0]["config"]["event"] == "config"
          and started1[0]["config"]["params"] == 4000, "run 1 started message")
    for m in p.got:
        if m["type"] == "metrics":
            check(m["rows"] and all(r["event"] in ("step", "eval") for r in m["rows"]),
                  "metrics rows are step/eval events")
            check(len(m["rows"]) <= 500, "a batch of %d rows" % len(m["rows"]))
    seqs = sorted(s for (r, a, s) in first if r == 1)
    check(seqs == list(range(1, len(seqs) + 1)), "run 1 seqs %r" % seqs)

    # ---- 2. drop the connection mid-run; everything unacked comes again ----
    check(not any(m["type"] == "finished" and m["run_id"] == 2 for m in p.got),
          "run 2 finished before the connection could be dropped mid-run")
    p.close()
    t_drop = time.time()
    p = accept(listener, 10)
    check(time.time() - t_drop < 3, "reconnect took %.1f s" % (time.time() - t_drop))
    expect_hello(p, [(1, 1), (2, 1)])
    time.sleep(0.4)  # batches made before the welcome wait for it, then go too
    welcome(p)
    second = {}
    order = {1: [], 2: []}

    def note2(m):
        if m["type"] in ("metrics", "finished"):
            k = (m["run_id"], m["attempt"], m["seq"])
            check(k not in second, "seq %r sent twice on one connection" % (k,))
            second[k] = m
            order[m["run_id"]].append(m["seq"])
            p.send({"type": "ack", "run_id": m["run_id"], "attempt": m["attempt"],
                    "seq": m["seq"]})

    # 6,000 steps: a second or two, half a minute sanitized on a busy machine
    p.until(lambda m: m["type"] == "finished" and m["run_id"] == 2, 120, "run 2 finished", note2)
    for r in (1, 2):
        check(order[r] == list(range(1, len(order[r]) + 1)),
              "run %d: seqs after the reconnect %r are not 1..n in order" % (r, order[r]))
    for k, m in first.items():
        check(k in second, "unacked message %r was not resent" % (k,))
        check(second[k] == m, "resent message %r differs from the original" % (k,))
    check(any(m["type"] == "started" and m["run_id"] == 2 for m in p.got),
          "started of run 2 not resent after the reconnect")

    for r, steps_expected in ((1, 32), (2, 6000)):
        batches = {}
        for d in (first, second):
            for k, m in d.items():
                if k[0] == r and m["type"] == "metrics":
                    batches[k] = m
        steps = sorted(row["step"] for m in batches.values() for row in m["rows"]
                       if row["event"] == "step")
        check(steps == list(range(1, steps_expected + 1)),
              "run %d: union of step rows has %d rows, expected steps 1..%d exactly once"
              % (r, len(steps), steps_expected))
        evals = [row["step"] for m in batches.values() for row in m["rows"]
                 if row["event"] == "eval"]
        check(len(evals) == len(set(evals)) and evals, "run %d: eval rows %r" % (r, evals[:10]))
        fin = [m for k, m in second.items() if k[0] == r and m["type"] == "finished"]
        check(len(fin) == 1 and fin[0]["exit_code"] == 0 and fin[0]["done"]["steps"]
              == steps_expected, "run %d finished message" % r)
        check(fin[0]["seq"] == max(k[2] for k in batches if k[0] == r) + 1,
              "run %d: finished does not continue the metrics seq" % r)
    cks = [m for m in p.got if m["type"] == "checkpoint" and m["run_id"] == 2]
    check(cks and all(os.path.exists(m["path"]) for m in cks), "run 2 checkpoint messages %r"
          % cks)

    # everything acked: heartbeats now list no run, and nothing is resent
    p.until(lambda m: m["type"] == "heartbeat" and m["runs"] == [], 5,
            "a heartbeat without runs after the acks", since=len(p.got))
    n_before = len(p.got)
    p.until(lambda m: m["type"] == "heartbeat", 2, "another heartbeat", since=n_before)
    check(all(m["type"] == "heartbeat" for m in p.got[n_before:]), "resends after the acks")

    # ---- 3. cancel a GPU run: SIGTERM, checkpoint, exit 143 ------------------
    def ack_all(m):
        if m["type"] in ("metrics", "finished"):
            p.send({"type": "ack", "run_id": m["run_id"], "attempt": m["attempt"],
                    "seq": m["seq"]})

    assign(p, 3, 1, LONG, [1], ck(3))
    p.until(lambda m: m["type"] == "metrics" and m["run_id"] == 3, 10, "run 3 metrics", ack_all)
    argv, cenv = child_of_run(3)
    check(cenv.get("CUDA_VISIBLE_DEVICES") == "1",
          "GPU run's CUDA_VISIBLE_DEVICES %r" % cenv.get("CUDA_VISIBLE_DEVICES"))
    check(cenv.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", "CUDA_DEVICE_ORDER")
    p.send({"type": "cancel", "run_id": 3})
    fin = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 3, 10,
                  "run 3 finished after cancel", ack_all)
    check(fin["exit_code"] == 143 and fin["signal"] == 0,
          "cancelled trainer exit %r signal %r (expected 143, 0)"
          % (fin["exit_code"], fin["signal"]))
    check(fin["done"] is None and "signal 15" in (fin["error"] or ""), "error %r" % fin["error"])
    check(fin.get("interrupted") is False, "a cancelled run reported as interrupted")
    check("stopped by signal 15" in fin["log_tail"], "log_tail %r" % fin["log_tail"][-300:])
    ck3 = [m for m in p.got if m["type"] == "checkpoint" and m["run_id"] == 3]
    check(ck3 and os.path.exists(os.path.join(ck(3), "checkpoint.bin")),
          "no checkpoint after cancel")
    last_step = ck3[-1]["step"]
    check(os.path.exists(os.path.join(wd, "runs", "3", "attempt-1.log")), "attempt log")

    # ---- 4. resume (attempt 2), then cancel again ----------------------------
    assign(p, 3, 2, LONG, [1], ck(3), resume=True)
    m = p.until(lambda m: m["type"] == "metrics" and key(m) == (3, 2), 10,
                "run 3 attempt 2 metrics", ack_all)
    argv, _ = child_of_run(3)
    check(argv[-2:] == ["--resume", ck(3)], "resume argv %r" % argv)
    check(m["seq"] == 1 and m["rows"][0]["step"] > last_step,
          "attempt 2 starts at step %r (checkpoint at %r)" % (m["rows"][0]["step"], last_step))
    # attempt 3 while attempt 2 runs: attempt 2 is stopped (checkpoint) first,
    # then attempt 3 resumes from it; two trainers never share the directory
    assign(p, 3, 3, LONG, [1], ck(3), resume=True)
    fin = p.until(lambda m: m["type"] == "finished" and key(m) == (3, 2), 10,
                  "run 3 attempt 2 finished", ack_all)
    check(fin["exit_code"] == 143, "superseded attempt 2 exit %r" % fin["exit_code"])
    i_fin = p.got.index(fin)
    st = p.until(lambda m: m["type"] == "started" and key(m) == (3, 3), 10,
                 "run 3 attempt 3 started", ack_all)
    check(p.got.index(st) > i_fin, "attempt 3 started before attempt 2 stopped")
    p.until(lambda m: m["type"] == "metrics" and key(m) == (3, 3), 10,
            "run 3 attempt 3 metrics", ack_all)
    p.send({"type": "cancel", "run_id": 3})
    fin = p.until(lambda m: m["type"] == "finished" and key(m) == (3, 3), 10,
                  "run 3 attempt 3 finished", ack_all)
    check(fin["exit_code"] == 143, "attempt 3 exit %r" % fin["exit_code"])

    # ---- 5. a GPU this worker does not offer ---------------------------------
    assign(p, 4, 1, TINY, [0], ck(4))
    fin = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 4, 5, "run 4 refused",
                  ack_all)
    check(fin["exit_code"] == 2 and "GPU 0" in fin["error"], "run 4 finished %r" % fin)
    # a CUDA run where the trainer cannot run CUDA: refused with the reason
    # the hello gave, before any trainer starts
    cuda_error = hello["backends"]["cuda"].get("error")
    if cuda_error:
        assign(p, 8, 1, dict(TINY, backend="cuda"), [1], ck(8))
        fin = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 8, 5, "run 8 refused",
                      ack_all)
        check(fin["exit_code"] == 1 and 'cannot run "backend": "cuda"' in (fin["error"] or "")
              and cuda_error.split("\n")[0] in fin["error"], "run 8 finished %r" % fin)
        check(not any(m["type"] == "started" and m["run_id"] == 8 for m in p.got),
              "run 8 started a trainer")
        with open(os.path.join(tmp, "worker.log")) as f:
            check("the CUDA backend cannot run here" in f.read(),
                  "the worker did not log why its GPUs take no CUDA run")
        print("a CUDA run on a worker that cannot run CUDA is refused: %s" % fin["error"])
    # a config the trainer refuses: exit 2, its stderr line as the error
    assign(p, 6, 1, {"model": {"n_layer": "x"}}, [], ck(6))
    fin = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 6, 10, "run 6 refused",
                  ack_all)
    check(fin["exit_code"] == 2 and "$.model.n_layer" in (fin["error"] or "")
          and "$.model.n_layer" in fin["log_tail"], "run 6 finished %r" % fin)

    # ---- 6. bad messages are logged and ignored -------------------------------
    p.send_raw(b"this is not json\n")
    p.send({"type": "assign", "run_id": "x"})
    p.send({"type": "launch"})
    p.send({"type": "ack", "run_id": 99, "attempt": 1, "seq": 5})
    p.send({"type": "cancel", "run_id": 99})
    p.send({"type": "hello", "version": 1})
    # integers the worker keeps in an int, beyond it: refused, never cast
    # (2^32 + 1 would become attempt 1, GPU 2^32 device 0)
    assign(p, 71, 2**32 + 1, TINY, [], ck(71))
    assign(p, 72, 1, TINY, [2**32], ck(72))
    p.send_raw(b"\r\n\n")
    n_before = len(p.got)
    p.until(lambda m: m["type"] == "heartbeat", 3, "a heartbeat after bad messages",
            since=n_before)
    p.until(lambda m: m["type"] == "heartbeat", 3, "a second heartbeat after bad messages",
            since=len(p.got))
    check(not p.closed, "the worker dropped the connection after bad messages")
    check(not [m for m in p.got if m.get("run_id") in (71, 72)],
          "an assignment with attempt 2^32 + 1 or GPU 2^32 was run: %r"
          % [m for m in p.got if m.get("run_id") in (71, 72)][:2])

    # ---- 7. a line over 1 MiB: the worker reconnects --------------------------
    try:
        p.send_raw(b"x" * ((1 << 20) + 10))
    except OSError:
        pass
    p = reconnected(listener, p)

    # ---- 8. an `error` message: the worker reconnects after backoff -----------
    # and sends its first heartbeat at once, not a period (60 s here) after
    # the welcome: its leases were last renewed before the connection was
    # lost, and its fence must not outrun their renewal
    p.send({"type": "error", "message": "go away"})
    p = reconnected(listener, p, hb=60)
    p.until(lambda m: m["type"] == "heartbeat", 2, "the first heartbeat at once after a welcome",
            since=len(p.got))

    # ---- 8b. a scheduler back with a shorter lease: no fence before it renews --
    # run 6's lease is renewed (30 s), the connection drops, and the next
    # welcome tells a lease of 2 s, 2 s later: the fence still judges the
    # renewal by its 30 s (the scheduler keeps the leases it finds)
    assign(p, 6, 1, LONG, [], ck(6))
    p.until(lambda m: m["type"] == "metrics" and m["run_id"] == 6, 10, "run 6 metrics", ack_all)
    p.close()
    p = accept(listener, 5)
    expect_hello(p, [(6, 1)])
    welcome(p, hb=60)
    hb = p.until(lambda m: m["type"] == "heartbeat" and 6 in m["runs"], 2,
                 "a heartbeat listing run 6")
    p.send({"type": "heartbeat", "hb": hb["hb"], "runs": [6]})
    time.sleep(0.3)
    p.close()
    p = accept(listener, 5)
    expect_hello(p, [(6, 1)])
    time.sleep(2)
    welcome(p, hb=60, lease=2)
    time.sleep(1)
    child_of_run(6, timeout=0.1)
    with open(os.path.join(tmp, "worker.log"), errors="replace") as f:
        check("lease not renewed" not in f.read(), "run 6 fenced by the new, shorter lease")
    p.send({"type": "cancel", "run_id": 6})
    p.until(lambda m: m["type"] == "finished" and m["run_id"] == 6, 10, "run 6 finished", ack_all)

    # ---- 9. SIGTERM: the trainer checkpoints, its last messages go, exit 0 ----
    assign(p, 5, 1, LONG, [], ck(5))
    p.until(lambda m: m["type"] == "metrics" and m["run_id"] == 5, 10, "run 5 metrics", ack_all)
    worker.send_signal(signal.SIGTERM)
    # the scheduler hears first that the worker is stopping, with its runs
    stp = p.until(lambda m: m["type"] == "stopping", 10, "a stopping message", ack_all)
    check(stp["runs"] == [{"run_id": 5, "attempt": 1}], "stopping runs %r" % stp["runs"])
    check(not any(m["type"] == "finished" and m["run_id"] == 5 for m in p.got),
          "run 5 finished before the stopping message")
    # an assignment that crosses it is handed back at once, as interrupted
    assign(p, 7, 1, LONG, [], ck(7))
    fin = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 5, 10,
                  "run 5 finished at shutdown", ack_all)
    check(fin["exit_code"] == 143, "run 5 exit %r at shutdown" % fin["exit_code"])
    ck5 = [m for m in p.got if m["type"] == "checkpoint" and m["run_id"] == 5]
    check(fin.get("interrupted") is True and ck5 and fin.get("checkpoint_step") == ck5[-1]["step"],
          "run 5 finished at shutdown: interrupted %r, checkpoint_step %r (last checkpoint %r)"
          % (fin.get("interrupted"), fin.get("checkpoint_step"), ck5 and ck5[-1]["step"]))
    fin7 = p.until(lambda m: m["type"] == "finished" and m["run_id"] == 7, 10,
                   "run 7 handed back while stopping", ack_all)
    check(fin7.get("interrupted") is True and fin7["done"] is None
          and not any(m["type"] == "started" and m["run_id"] == 7 for m in p.got),
          "run 7, assigned while stopping: %r" % fin7)
    check(not os.path.exists(os.path.join(ck(7), "checkpoint.bin")), "run 7 trained")
    check(os.path.exists(os.path.join(ck(5), "checkpoint.bin")), "run 5 checkpoint")
    try:
        rc = worker.wait(10)
    except subprocess.TimeoutExpired:
        fail("the worker did not stop within 10 s of SIGTERM")
    check(rc == 0, "worker exit code %r after SIGTERM (1: a handle left open)" % rc)
    p.close()
    listener.close()
    log.close()
    with open(os.path.join(tmp, "worker.log"), errors="replace") as f:
        text = f.read()
    check(TOKEN not in text, "the token appears in the worker's log")
    check("BUG" not in text, "the worker logged a bug")
    check(text.count("ignored a bad message from the scheduler") >= 3,
          "bad messages were not logged")
    check("the scheduler reported an error: go away" in text, "error message not logged")
    for why in ("$.attempt: expected an integer in [0, 2147483647], found 4294967297",
                "$.gpus[0]: expected an integer in [0, 2147483647], found 4294967296"):
        check(why in text, "the worker did not log the refused assignment's %r" % why)
    check(text.rstrip().endswith("worker: stopped"), "the worker did not log a clean stop")
    if os.environ.get("SS_TEST_VERBOSE"):
        sys.stderr.write(text)


if __name__ == "__main__":
    main()

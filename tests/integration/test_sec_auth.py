#!/usr/bin/env python3
"""The worker port's limit on wrong tokens (scheduler/wport.c), against a
real scheduler and a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh):

- after more wrong hellos from 127.0.0.1 than the limit (5 per window), a
  hello with the right token from 127.0.0.1 is still welcomed: the token is
  checked first, only failures are throttled;
- wrong hellos beyond the limit are refused with an error that says when
  to retry (retry_s), and another address is not affected;
- once the window (--auth-block-seconds) is over, wrong hellos are counted
  afresh, and the scheduler logs that it forgot the expired records;
- the records are bounded: after wrong hellos from 4096 other addresses
  (127.1.x.y: every 127/8 address is loopback on Linux) the oldest record,
  a blocked address, is forgotten, and the scheduler logs the eviction.

Usage: test_sec_auth.py SCALESWEEP_BINARY
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from harness import make_token, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
WINDOW = 3  # seconds; short so that the test sees a window end
tmp = tempfile.mkdtemp(prefix="ss-sec-auth-")
token_file = make_token(tmp)
TOKEN = open(token_file).read().strip()
sched = None
log_path = os.path.join(tmp, "scheduler.log")


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    if os.path.exists(log_path):
        sys.stderr.write("---- scheduler log (last 3000 bytes)\n")
        sys.stderr.write(open(log_path, errors="replace").read()[-3000:])
    if sched is not None and sched.poll() is None:
        sched.kill()
    sys.exit(1)


def start(window):
    """A scheduler on free ports (named in its ready file): its worker port."""
    global sched
    log = open(log_path, "a")
    ready = os.path.join(tmp, "ready.json")
    if os.path.exists(ready):
        os.unlink(ready)
    sched = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token_file,
         "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:0", "--ready-file", ready,
         "--checkpoints", os.path.join(tmp, "ckpt"), "--auth-block-seconds", str(window)],
        stdout=log, stderr=log)
    deadline = time.time() + 30
    while not os.path.exists(ready) and sched.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if not os.path.exists(ready):
        fail("the scheduler wrote no ready file")
    ports = json.load(open(ready))
    api_port = ports["http_port"]

    def request(method, path):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=5)
        c.request(method, path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status, None

    if not wait_healthz(request, proc=sched):
        fail("the scheduler did not come up")
    return ports["workers_port"]


def stop():
    sched.terminate()
    try:
        rc = sched.wait(10)
    except subprocess.TimeoutExpired:
        fail("the scheduler did not stop on SIGTERM")
    if rc != 0:  # under the sanitizers, a leak (of the records, say) too
        fail(f"the scheduler exited {rc} on SIGTERM")


def hello(wport, token, src="127.0.0.1", name="w"):
    """One connection from src: a hello with token, the scheduler's first
    reply (a dict)."""
    s = socket.socket()
    s.settimeout(10)
    s.bind((src, 0))
    s.connect(("127.0.0.1", wport))
    s.sendall(json.dumps({"type": "hello", "version": 1, "token": token, "name": name,
                          "host": "test", "gpus": [], "cpu_slots": 1,
                          "runs": []}).encode() + b"\n")
    buf = b""
    try:
        while b"\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    if b"\n" not in buf:
        fail(f"no reply to a hello from {src}: {buf!r}")
    return json.loads(buf.split(b"\n", 1)[0])


def refused_wrong(m):
    return m.get("type") == "error" and "wrong cluster token" in m.get("message", "")


def refused_blocked(m):
    return (m.get("type") == "error" and "too many failed" in m.get("message", "")
            and isinstance(m.get("retry_s"), int) and 0 < m["retry_s"] <= WINDOW)


try:
    wport = start(WINDOW)
    t_first = time.time()
    replies = [hello(wport, "wrong-token-%06d" % i) for i in range(7)]
    if not all(m.get("type") == "error" for m in replies):
        fail(f"wrong hellos from 127.0.0.1 got {replies}, expected errors")
    # the right token from the same address is welcome
    m = hello(wport, TOKEN, name="good-1")
    if m.get("type") != "welcome":
        fail(f"the right token from 127.0.0.1 after 7 wrong ones got {m}, expected a welcome")
    for i, m in enumerate(replies[:5]):
        if not refused_wrong(m):
            fail(f"wrong hello {i + 1} of 127.0.0.1: {m}, expected the wrong-token error")
    for i, m in enumerate(replies[5:]):
        if not refused_blocked(m):
            fail(f"wrong hello {i + 6} of 127.0.0.1 (over the limit): {m}, expected "
                 f"'too many failed authentications' with retry_s")
    # another address has its own count
    m = hello(wport, "wrong-token-x", src="127.0.0.2")
    if not refused_wrong(m):
        fail(f"a first wrong hello from 127.0.0.2: {m}")
    print(f"limit: 5 wrong hellos refused, then {len(replies) - 5} blocked "
          f"(retry_s {replies[5]['retry_s']}); the right token welcomed")

    # after the window: counted afresh, and the expired records are forgotten
    time.sleep(max(0, t_first + WINDOW + 1.5 - time.time()))
    m = hello(wport, "wrong-token-after")
    if not refused_wrong(m):
        fail(f"a wrong hello after the window: {m}, expected to be counted afresh")
    time.sleep(1.5)  # the reaper runs once a second
    text = open(log_path, errors="replace").read()
    if "forgot the failed authentications of" not in text:
        fail("no log line about forgotten failed-authentication records")
    if TOKEN in text:
        fail("the cluster token appears in the scheduler's log")
    print("window: wrong hellos counted afresh after it; expired records forgotten")
    stop()

    # the bound: a blocked address's record is the oldest; 4096 newer ones
    # push it out
    wport = start(600)
    for i in range(6):
        m = hello(wport, "wrong", src="127.0.0.3")
    if not refused_blocked(m) and "too many failed" not in m.get("message", ""):
        fail(f"127.0.0.3 not blocked after 6 wrong hellos: {m}")
    t0 = time.time()
    for i in range(4096):
        src = "127.1.%d.%d" % (i // 250, i % 250 + 1)
        m = hello(wport, "wrong", src=src)
        if not refused_wrong(m):
            fail(f"wrong hello from {src}: {m}")
    took = time.time() - t0
    m = hello(wport, "wrong", src="127.0.0.3")
    if not refused_wrong(m):
        fail(f"127.0.0.3 after 4096 newer addresses: {m}, expected its record evicted "
             f"(counted afresh)")
    time.sleep(1.5)
    text = open(log_path, errors="replace").read()
    if "forgot the oldest" not in text:
        fail("no log line about evicted failed-authentication records")
    m = hello(wport, TOKEN, src="127.0.0.3", name="good-2")
    if m.get("type") != "welcome":
        fail(f"the right token from 127.0.0.3: {m}")
    print(f"bound: 4096 addresses refused in {took:.1f} s; the oldest record evicted")
    stop()
    print("sec auth: all checks passed")
    shutil.rmtree(tmp, ignore_errors=True)
finally:
    if sched is not None and sched.poll() is None:
        sched.kill()

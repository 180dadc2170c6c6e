#!/usr/bin/env python3
"""Event streams and connection slots under a flood, against a real
`scalesweep scheduler` with its default limits and a throwaway PostgreSQL
(run through tests/integration/run_with_pg.sh):

- 1,100 streams (/api/events) from one address: 8 are served, every other
  one gets 429 with Retry-After and a JSON error, none a reset;
- streams from 127.0.0.2.. (all of 127/8 is loopback on Linux) up to the
  total, half the slots: past it 503 with Retry-After;
- with the streams held and idle connections filling the slots to the
  reserve, a request without the token gets 503 while one with the token
  and /healthz answer 200 quickly; at the ceiling idle connections are
  evicted for new ones;
- a stream whose reader stops reading is closed once its queue stayed over
  the bound (events from worker connections feed it), while a reading
  stream is not;
- the limits given as options (--max-streams-per-address, --max-streams,
  --header-timeout-seconds) are applied, and a bad value is a usage error;
- started with a soft open file limit of 256, the scheduler raises it (the
  flood above needs it); with a hard limit of 600 it lowers its slots;
- under --closed-reads /metrics needs the token (not with --open-metrics)
  and /healthz stays open, saying nothing but {"ok": true}.

Prints the slot counts and latencies it saw.
Usage: test_sec_streams.py SCALESWEEP_BINARY
"""
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from harness import free_port, make_token, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
SLOTS, PER_ADDR = 1024, 8  # the scheduler's defaults (cmd_scheduler.c)
STREAMS, RESERVE = SLOTS // 2, SLOTS // 16

tmp = tempfile.mkdtemp(prefix="ss-sec-streams-")
token_file = make_token(tmp)
TOKEN = open(token_file).read().strip()
procs = []


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    log = os.path.join(tmp, "scheduler.log")
    if os.path.exists(log):
        print(open(log).read()[-3000:], file=sys.stderr)
    for p in procs:
        p.kill()
    sys.exit(1)


# Every stream and idle connection is a descriptor here, and the scheduler
# inherits the limit (it raises its soft limit to the hard one itself).
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
if soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2600:
    print(f"skipped: the open file limit ({hard}) is too low for the flood")
    sys.exit(77)


def two_ports():
    """Two distinct TCP ports on 127.0.0.1 free at the time of the call
    (harness.free_port: below the ephemeral range, never one twice)."""
    return [free_port(), free_port()]


def start_scheduler(*flags, nofile=None):
    """A scheduler on free ports, started with the open file limits nofile
    (soft, hard) when given: (Popen, API port, worker port)."""
    api_port, wport = two_ports()
    log = open(os.path.join(tmp, "scheduler.log"), "a")
    pre = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)) if nofile else None
    p = subprocess.Popen([BIN, "scheduler", "--database", DB, "--token-file", token_file,
                          "--listen", f"127.0.0.1:{api_port}", "--workers",
                          f"127.0.0.1:{wport}", "--checkpoints", os.path.join(tmp, "ckpt"),
                          *flags], stdout=log, stderr=log, preexec_fn=pre)
    procs.append(p)
    if not wait_healthz(lambda m, path: get(api_port, path), proc=p):
        fail("the scheduler did not come up")
    return p, api_port, wport


def stop_scheduler(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the scheduler did not stop on SIGTERM")
    if p.returncode != 0:
        fail(f"the scheduler exited with {p.returncode}")


def connect(port, src="127.0.0.1", rcvbuf=0, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if src != "127.0.0.1":  # the same address and port 0 could connect the socket to itself
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_head(s):
    """The answer's status, headers (lower-case names) and what followed the
    head; status 'reset' or 'eof' when the connection ended first."""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            k = s.recv(65536)
            if not k:
                return "eof", {}, buf
            buf += k
    except ConnectionResetError:
        return "reset", {}, buf
    except socket.timeout:
        return "timeout", {}, buf
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    if not re.match(r"HTTP/1\.[01] \d{3}", lines[0]):
        return "bad", {}, buf
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), hdrs, rest


def get(port, path, auth=False, src="127.0.0.1", timeout=10):
    """GET path on a fresh connection: (status, headers, body, seconds)."""
    t0 = time.monotonic()
    s = connect(port, src, timeout=timeout)
    h = f"Authorization: Bearer {TOKEN}\r\n" if auth else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n\r\n".encode())
    status, hdrs, body = read_head(s)
    n = int(hdrs.get("content-length", "0"))
    try:
        while len(body) < n:
            k = s.recv(65536)
            if not k:
                break
            body += k
    except OSError:
        pass
    s.close()
    return status, hdrs, body, time.monotonic() - t0


def open_streams(port, src, n):
    """n streams from src: the sockets kept open and a count of statuses."""
    kept, counts, refusals = [], {}, []
    for _ in range(n):
        s = connect(port, src)
        s.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
        status, hdrs, body = read_head(s)
        counts[status] = counts.get(status, 0) + 1
        if status == 200:
            kept.append(s)
        else:
            if status in (429, 503):
                refusals.append((status, hdrs, body))
            s.close()
    return kept, counts, refusals


def metric(port, name):
    status, _, body, _ = get(port, "/metrics", auth=True)
    if status != 200:
        fail(f"/metrics answered {status}")
    m = re.search(rb"^" + re.escape(name.encode()) + rb" (\d+)$", body, re.M)
    return int(m.group(1)) if m else None


def check_refusal(status, hdrs, body, want, what):
    if status != want:
        fail(f"{what}: answered {status}, expected {want}")
    if int(hdrs.get("retry-after", "0")) <= 0:
        fail(f"{what}: no Retry-After in {hdrs}")
    err = json.loads(body)["error"]
    if "too many event streams" not in err["message"]:
        fail(f"{what}: unexpected error {err}")


# ---- the flood --------------------------------------------------------------------------

# started with a soft limit of 256 descriptors: it raises it to the hard one
limit = resource.getrlimit(resource.RLIMIT_NOFILE)
sched, port, wport = start_scheduler(nofile=(256, limit[1]))
t0 = time.monotonic()
one, counts, refusals = open_streams(port, "127.0.0.1", 1100)
print(f"1100 streams from 127.0.0.1 in {time.monotonic() - t0:.1f} s: {counts}")
if counts.get(200) != PER_ADDR or counts.get(429) != 1100 - PER_ADDR:
    fail(f"expected {PER_ADDR} streams and {1100 - PER_ADDR} answers 429, got {counts}")
check_refusal(*refusals[0], 429, "a stream over the per-address limit")

many, by_status = [], {}
addr = 2
while len(one) + len(many) < STREAMS + 40:  # 40 past the total
    kept, counts, refusals = open_streams(port, f"127.0.0.{addr}", PER_ADDR)
    many += kept
    for k, v in counts.items():
        by_status[k] = by_status.get(k, 0) + v
    if 503 in counts:
        check_refusal(*refusals[0], 503, "a stream over the total")
        if by_status[503] >= 40:
            break
    addr += 1
held = len(one) + len(many)
print(f"streams from 127.0.0.2-{addr}: {by_status}; {held} streams held")
if held != STREAMS or by_status.get(503, 0) < 40 or set(by_status) - {200, 503}:
    fail(f"expected {STREAMS} streams in all and 503 past them, got {by_status}")

for path, auth in (("/healthz", False), ("/api/sweeps", True), ("/api/sweeps", False)):
    status, _, _, dt = get(port, path, auth)
    print(f"with {held} streams held: GET {path}{' (token)' if auth else ''}: "
          f"{status} in {dt * 1e3:.1f} ms")
    if status != 200 or dt > 2:
        fail(f"GET {path} answered {status} in {dt:.2f} s with the streams held")

# idle connections fill the slots up to the reserve: then only the token and
# /healthz are served
idle = [connect(port, "127.0.0.250") for _ in range(SLOTS - RESERVE - held + 4)]
time.sleep(0.5)  # the scheduler has accepted them
conns = metric(port, "scalesweep_http_connections")
status, hdrs, body, dt = get(port, "/api/sweeps")
print(f"{conns} connections open ({SLOTS} slots, {RESERVE} reserved): anonymous GET "
      f"/api/sweeps: {status} in {dt * 1e3:.1f} ms")
if status != 503 or int(hdrs.get("retry-after", "0")) <= 0 or b"retry later" not in body:
    fail(f"an anonymous request in the reserve answered {status} {hdrs} {body[:200]}")


def reads_answer(where):
    """/healthz, and the API with the token, answer 200 within 2 s"""
    for path, auth in (("/healthz", False), ("/api/sweeps", True)):
        status, _, _, dt = get(port, path, auth)
        print(f"  {where}: GET {path}{' (token)' if auth else ''}: {status} in "
              f"{dt * 1e3:.1f} ms")
        if status != 200 or dt > 2:
            fail(f"GET {path} {where} answered {status} in {dt:.2f} s")


reads_answer("in the reserve")

# past the ceiling: the longest idle connections make room
idle += [connect(port, "127.0.0.251") for _ in range(RESERVE + 20)]
time.sleep(0.5)
reads_answer("at the ceiling")
evicted = metric(port, "scalesweep_http_evicted_total")
refused = metric(port, "scalesweep_http_refused_total{reason=\"reserve\"}")
print(f"  evicted {evicted} idle connections, refused {refused} requests in the reserve")
if not evicted:
    fail("no idle connection was evicted at the ceiling")
for s in one + many + idle:
    s.close()
if sched.poll() is not None:
    fail("the scheduler died under the flood")

# ---- a stalled reader -------------------------------------------------------------------

deadline = time.monotonic() + 20
while metric(port, "scalesweep_http_event_streams") != 0:
    if time.monotonic() > deadline:
        fail("the flood's streams were not closed after their clients went")
    time.sleep(0.2)
stalled = connect(port, "127.0.0.10", rcvbuf=4096)
stalled.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
reader = connect(port, "127.0.0.11")
reader.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
if read_head(reader)[0] != 200:
    fail("the reading stream was not served")
reader.setblocking(False)
got = 0


def read_reader():
    global got
    try:
        while True:
            k = reader.recv(65536)
            if not k:
                fail("the reading stream was closed")
            got += len(k)
    except BlockingIOError:
        pass


# Worker connections come and go: each emits two "worker" events of some
# 250 bytes (their names are long) to every stream.
def feed(done, what):
    """Worker connections, 20 at a time, until done() (at most 60 s): the
    number of connections."""
    name = "w" * 100
    cycles = 0
    t0 = time.monotonic()
    while not done():
        if time.monotonic() - t0 > 60:
            fail(f"{what}: not reached within 60 s ({cycles} worker connections)")
        ws = []
        for i in range(20):
            w = socket.create_connection(("127.0.0.1", wport), timeout=10)
            w.sendall(json.dumps({"type": "hello", "version": 1, "token": TOKEN,
                                  "name": f"{name}{i:02d}", "host": "h" * 100, "gpus": [],
                                  "cpu_slots": 0, "runs": []}).encode() + b"\n")
            ws.append(w)
        for w in ws:
            buf = b""
            while b"\n" not in buf:
                k = w.recv(4096)
                if not k:
                    break
                buf += k
            w.close()
        cycles += 20
        read_reader()
    return cycles


def stalled_total():
    return metric(port, "scalesweep_http_stalled_streams_total")


def stall_line(src):
    log = open(os.path.join(tmp, "scheduler.log")).read()
    m = re.search(r"closing the event stream of " + re.escape(src) + r":\d+: its reader is.*",
                  log)
    return m.group(0) if m else None


# Just over the bound: some 600 KB sent, of which the kernel holds at most
# some 140 KB (64 KiB send buffer, doubled; a 4 KiB receive window), so
# that 256 KiB to 1 MiB stay queued; then nothing more is sent, and the
# stall timer (5 s) closes it.
cycles = feed(lambda: got >= 600_000, "600 KB of events")
t0 = time.monotonic()
while not stalled_total():
    if time.monotonic() - t0 > 20:
        fail("a stream just over the bound and left alone was not closed within 20 s")
    time.sleep(0.2)
line = stall_line("127.0.0.10")
print(f"stalled reader, events stopped after {got} bytes ({cycles} worker connections): "
      f"closed {time.monotonic() - t0:.1f} s later\n  scheduler log: {line}")
if not line or "its reader is stalled" not in line:
    fail("no log line for the stalled stream")
stalled.settimeout(10)
seen = b""
try:
    while True:
        k = stalled.recv(65536)
        if not k:
            break
        seen += k
except ConnectionResetError:
    pass
stalled.close()
# it reconnects with the last id it got and resumes from the ring
seen = seen[:seen.rfind(b"\n\n") + 1]  # whole events only: the cut may end mid-event
ids = [int(x) for x in re.findall(rb"^id: (\d+)$", seen, re.M)]
if not ids:
    fail("the stalled stream got no event before it was closed")
again = connect(port, "127.0.0.13")
again.sendall(f"GET /api/events HTTP/1.1\r\nHost: x\r\nLast-Event-ID: {ids[-1]}\r\n\r\n"
              .encode())
status, _, rest = read_head(again)
while rest.count(b"\n\n") < 3:
    rest += again.recv(65536)
rest = rest[:rest.rindex(b"\n\n")]  # whole events only
replay = [int(x) for x in re.findall(rb"^id: (\d+)$", rest, re.M)]
print(f"  resumed after id {ids[-1]}: the replay starts at {replay[0]} (the ring keeps the "
      f"last 1024 events)")
if status != 200 or replay[0] <= ids[-1] or replay != list(range(replay[0],
                                                                  replay[0] + len(replay))):
    fail(f"the resumed stream: {status}, ids {replay[:5]} after {ids[-1]}")
again.close()

# Events keep coming: closed at once when 1 MiB is queued (or by the stall
# timer first, should the events come slower than 770 KB in 5 s).
stalled = connect(port, "127.0.0.12", rcvbuf=4096)
stalled.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
t0 = time.monotonic()
cycles = feed(lambda: stalled_total() >= 2, "the stream 1 MiB behind closed")
line = stall_line("127.0.0.12")
print(f"a reader far behind: closed {time.monotonic() - t0:.1f} s after the events began "
      f"({cycles} worker connections)\n  scheduler log: {line}")
if not line or ("too far behind" not in line and "stalled" not in line):
    fail("no log line for the stream far behind")
time.sleep(0.5)
read_reader()
print(f"the reading stream read {got} bytes and stayed open")
if metric(port, "scalesweep_http_event_streams") != 1:
    fail("the reading stream did not stay open")
reader.close()
stalled.close()
stop_scheduler(sched)

# ---- the limits as options ------------------------------------------------------------

bad = subprocess.run([BIN, "scheduler", "--database", DB, "--token-file", token_file,
                      "--max-streams-per-address", "0"], capture_output=True, text=True)
if bad.returncode != 2 or "--max-streams-per-address 0: expected 1 to" not in bad.stderr:
    fail(f"--max-streams-per-address 0: exit {bad.returncode}, {bad.stderr!r}")
sched, port, _ = start_scheduler("--max-streams-per-address", "2", "--max-streams", "3",
                                 "--header-timeout-seconds", "1")
a, counts_a, _ = open_streams(port, "127.0.0.20", 3)
b, counts_b, _ = open_streams(port, "127.0.0.21", 2)
print(f"--max-streams-per-address 2 --max-streams 3: {counts_a} from one address, "
      f"{counts_b} from another")
if counts_a != {200: 2, 429: 1} or counts_b != {200: 1, 503: 1}:
    fail("the stream limits given as options were not applied")
t0 = time.monotonic()
silent = connect(port, "127.0.0.22")
status = read_head(silent)[0]
dt = time.monotonic() - t0
print(f"--header-timeout-seconds 1: a silent connection ended ({status}) after {dt:.2f} s")
if status not in ("eof", "reset") or not 0.5 <= dt < 8:
    fail(f"a silent connection ended ({status}) after {dt:.2f} s, expected about 1 s")
for s_ in a + b + [silent]:
    s_.close()
stop_scheduler(sched)

# ---- a hard limit too low for the slots: they are lowered, with a log line ----------------

sched, port, _ = start_scheduler(nofile=(300, 600))
stop_scheduler(sched)
log = open(os.path.join(tmp, "scheduler.log")).read()
line = re.search(r"open file limit 600: the HTTP server gets (\d+) connection slots.*", log)
if not line or int(line.group(1)) >= SLOTS:
    fail("a hard open file limit of 600 did not lower the slots")
print("hard limit 600:", line.group(0))

# ---- /metrics and /healthz under --closed-reads -----------------------------------------

for flags, open_metrics in ((["--closed-reads"], False),
                            (["--closed-reads", "--open-metrics"], True)):
    sched, port, _ = start_scheduler(*flags)
    status, hdrs, body, _ = get(port, "/healthz")
    # it says whether the database connections are up, and nothing else
    if status != 200 or json.loads(body) != {"ok": True, "control": True, "reads": True}:
        fail(f"{flags}: /healthz answered {status} {body}")
    status, _, body, _ = get(port, "/metrics")
    want = 200 if open_metrics else 401
    print(f"{' '.join(flags)}: /healthz 200 {{\"ok\": true}}; /metrics without the token: "
          f"{status}")
    if status != want:
        fail(f"{flags}: /metrics without the token answered {status}, expected {want}")
    if not open_metrics and b"--open-metrics" not in body:
        fail(f"{flags}: the 401 does not say how to open /metrics: {body}")
    if get(port, "/metrics", auth=True)[0] != 200:
        fail(f"{flags}: /metrics with the token was refused")
    stop_scheduler(sched)
shutil.rmtree(tmp, ignore_errors=True)
print("ok")

#!/usr/bin/env python3
"""Hostile and large sweep specs do not stall the scheduler (issue 14, hole 2),
against the real scheduler and a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh).

A worker stand-in speaking the protocol (docs/runtime.md) runs one run of a
small sweep; while specs of up to 1 MiB are submitted, two probes measure,
every ~10 ms:
- GET /healthz on a keep-alive connection;
- the worker's heartbeat (answered once its lease is renewed, a database
  round trip on the main connection) and a metrics batch (answered by its
  ack once stored), one after the other.
Submitted: 1 MiB of unknown keys (80,000 problems), a list of 120,000
copies of one value, 1 MiB of values each given twice (60,000 problems),
a valid grid of 10,000 runs (10 MB of run configs), a burst of 6 hostile
specs at once (at most 2 are checked at a time: the rest get 503 with
Retry-After), and the hostile one through `scalesweep submit` (exit 2, the
first 50 problems and the count).

Asserted: each answer (400 with at most 50 problems and problems_total;
201 with 10,000 runs); the 99th percentile of every probe under 100 ms
(the issue's bound: a worker must hear back well within its lease; the
machine is shared and noisy, so not the maximum, which is printed with the
median). The old code checked and planned on the loop: the unknown keys
blocked it ~20 s, the repeated value for hours.

Usage: test_sec_submit.py SCALESWEEP_BINARY
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import WireWorker, free_port, http_request, json_or_bytes, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
TOKEN = os.urandom(16).hex()
# the bound; a sanitizer build sets a wider one (tests/CMakeLists.txt)
BOUND_MS = float(os.environ.get("SEC_SUBMIT_BOUND_MS", "100"))
MAX_BODY = 1 << 20

tmp = tempfile.mkdtemp(prefix="ss-sec-submit-")
token_file = os.path.join(tmp, "token")
with open(token_file, "w") as f:
    f.write(TOKEN)
os.chmod(token_file, 0o600)
api_port, wport = free_port(), free_port()
sched = None


probes = None


def fail(msg):
    if probes is not None and threading.current_thread() is threading.main_thread():
        probes.halt.set()
        summary(probes)
    print("FAIL:", msg, file=sys.stderr)
    log = os.path.join(tmp, "scheduler.log")
    if os.path.exists(log):
        print(open(log, errors="replace").read()[-3000:], file=sys.stderr)
    if sched and sched.poll() is None:
        sched.kill()
    os._exit(1)


def request(method, path, body=None, timeout=120):
    """(status, parsed body or raw bytes, headers)"""
    st, data, hdrs = http_request(api_port, method, path, body,
                                  {"Authorization": "Bearer " + TOKEN}, timeout)
    return st, json_or_bytes(data), hdrs


# ---- specs ------------------------------------------------------------------

HEAD = {"name": "hostile", "method": "grid", "base": {"model": {"seq_len": 32}},
        "grid": {"params": [1e5], "tokens": [1e6]}, "resources": {"cpus": 1}}


def fill(make, name):
    """The spec make(n) with the largest n that stays under the body limit."""
    lo, hi = 1, 1 << 20
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(json.dumps(make(mid, name))) <= MAX_BODY - 1024:
            lo = mid
        else:
            hi = mid - 1
    return make(lo, name), lo


def unknown_keys(n, name):
    s = dict(HEAD, name=name)
    s.update({"k%d" % i: 0 for i in range(n)})
    return s


def one_value(n, name):
    return dict(HEAD, name=name, grid={"params": [1e5], "tokens": [1000000] * n})


def pairs(n, name):
    return dict(HEAD, name=name, grid={"params": [1e5],
                                       "tokens": [1000000 + i // 2 for i in range(n)]})


def big_valid(name):
    return {"name": name, "method": "grid",
            "base": {"model": {"seq_len": 32}, "train": {"batch_size": 8, "lr": 0.001}},
            "grid": {"params": {"from": 1e5, "to": 1e7, "points": 10},
                     "tokens": [1000000 + i * 4096 for i in range(1000)]},
            "resources": {"cpus": 1}}


# ---- the worker stand-in -----------------------------------------------------

class Worker(WireWorker):
    def __init__(self):
        super().__init__(wport, {"type": "hello", "version": 1, "token": TOKEN, "name": "probe",
                                 "host": "h", "gpus": [], "cpu_slots": 1, "runs": []}, 30)

    def next(self, pred, timeout):
        return super().next(pred, timeout, fail)


class Probes:
    """The two probes, each in a thread, until stop(): lists of latencies (ms)."""

    def __init__(self, worker, run_id, attempt):
        self.w, self.run_id, self.attempt = worker, run_id, attempt
        self.halt = threading.Event()
        self.healthz, self.heartbeat, self.ack = [], [], []
        self.errors = []
        self.pending = {}  # probe name: when its unanswered probe was sent
        self.threads = [threading.Thread(target=self.http_loop, daemon=True),
                        threading.Thread(target=self.worker_loop, daemon=True)]
        for t in self.threads:
            t.start()

    def http_loop(self):
        c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=60)
        while not self.halt.is_set():
            t0 = time.monotonic()
            self.pending["healthz"] = t0
            try:
                c.request("GET", "/healthz")
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    self.errors.append("healthz %d" % r.status)
            except (OSError, http.client.HTTPException) as e:
                self.errors.append("healthz: %s" % e)
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=60)
            self.healthz.append(1e3 * (time.monotonic() - t0))
            del self.pending["healthz"]
            time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))

    def worker_loop(self):
        n = 0
        while not self.halt.is_set():
            n += 1
            t0 = time.monotonic()
            t1 = self.round_trip(t0, "heartbeat round trip",
                                 {"type": "heartbeat", "hb": n, "runs": [self.run_id]},
                                 lambda m: m.get("type") == "heartbeat" and m.get("hb") == n,
                                 self.heartbeat, "heartbeat %d unanswered" % n)
            row = {"event": "step", "step": n, "tokens": n * 256, "train_loss": 3.0,
                   "lr": 0.001, "grad_norm": 1.0, "tok_per_s": 1000.0}
            self.round_trip(t1, "metrics ack round trip",
                            {"type": "metrics", "run_id": self.run_id, "attempt": self.attempt,
                             "seq": n, "rows": [row]},
                            lambda m: m.get("type") == "ack" and m.get("seq") == n,
                            self.ack, "metrics %d not acknowledged" % n)
            time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))

    def round_trip(self, t0, what, msg, answer, times, unanswered):
        """Sends msg and waits for its answer (pending under what from t0,
        the time taken appended to times in ms): when it ends"""
        self.pending[what] = t0
        self.w.send(msg)
        m = self.w.next(answer, 60)
        t1 = time.monotonic()
        if m is None:
            self.errors.append(unanswered)
        times.append(1e3 * (t1 - t0))
        del self.pending[what]
        return t1

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(90)


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def summary(p):
    """Prints each probe's median, 99th percentile and maximum; the names of
    those whose 99th percentile is over the bound."""
    bad = []
    for name, xs in (("healthz", p.healthz), ("heartbeat round trip", p.heartbeat),
                     ("metrics ack round trip", p.ack)):
        xs = list(xs)
        since = p.pending.get(name)
        if since is not None:  # unanswered still: at least this long
            xs.append(1e3 * (time.monotonic() - since))
        if not xs:
            continue
        p50, p99, mx = pct(xs, 0.5), pct(xs, 0.99), max(xs)
        print("%-24s %5d probes: median %6.2f ms, p99 %7.2f ms, max %8.2f ms"
              % (name, len(xs), p50, p99, mx), flush=True)
        if p99 >= BOUND_MS:
            bad.append("%s p99 %.1f ms" % (name, p99))
    return bad


def expect_problems(st, body, what, total=None):
    if st != 400:
        fail("%s: %d %.300r, expected 400" % (what, st, body))
    e = body["error"]
    probs = e["problems"]
    if "problems_total" not in e:
        fail("%s: no problems_total (%d problems listed)" % (what, len(probs)))
    if len(probs) > 50 or e["problems_total"] < len(probs):
        fail("%s: %d problems listed, problems_total %r" % (what, len(probs), e["problems_total"]))
    if total is not None and e["problems_total"] != total:
        fail("%s: problems_total %r, expected %d" % (what, e["problems_total"], total))
    if e["problems_total"] > 50 and ("the first 50 listed" not in e["message"]
                                      or len(probs) != 50):
        fail("%s: message %r with %d problems listed" % (what, e["message"], len(probs)))
    return e


try:
    for attempt in range(3):  # a free port can be taken before the scheduler binds it
        log = open(os.path.join(tmp, "scheduler.log"), "a")
        sched = subprocess.Popen(
            [BIN, "scheduler", "--database", DB, "--token-file", token_file, "--listen",
             f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}", "--checkpoints",
             os.path.join(tmp, "ck")], stdout=log, stderr=log)
        if wait_healthz(lambda m, p: request(m, p), proc=sched):
            break
        if sched.poll() is None:
            sched.kill()
        sched.wait()
        api_port, wport = free_port(), free_port()
    else:
        fail("the scheduler did not come up")
    w = Worker()
    if not w.next(lambda m: m["type"] == "welcome", 10):
        fail("no welcome")
    small = {"name": "probe-run", "method": "runs",
             "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                      "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600000}},
             "runs": [{}], "resources": {"cpus": 1}}
    st, body, _ = request("POST", "/api/sweeps", small)
    if st != 201:
        fail("submitting the probe's sweep: %d %r" % (st, body))
    a = w.next(lambda m: m["type"] == "assign", 10)
    if not a:
        fail("the probe's run was not assigned")
    w.send({"type": "started", "run_id": a["run_id"], "attempt": a["attempt"],
            "config": {"event": "config"}})

    keys, n_keys = fill(unknown_keys, "keys")
    same, n_same = fill(one_value, "same")
    twice, n_twice = fill(pairs, "twice")
    keys_text = json.dumps(keys).encode()
    probes = Probes(w, a["run_id"], a["attempt"])
    time.sleep(0.5)  # a baseline
    took = {}

    def timed(what, *args):
        t0 = time.monotonic()
        r = request(*args)
        took[what] = time.monotonic() - t0
        return r

    st, body, _ = timed("unknown keys", "POST", "/api/sweeps", keys_text)
    e = expect_problems(st, body, "%d unknown keys" % n_keys, n_keys)
    if not e["problems"][0]["path"].startswith("$.k"):
        fail("unknown keys: first problem %r" % e["problems"][0])
    st, body, _ = timed("one value", "POST", "/api/sweeps", same)
    e = expect_problems(st, body, "%d copies of one value" % n_same, 1)
    if "%d copies in all" % n_same not in e["problems"][0]["message"]:
        fail("one value: %r" % e["problems"][0])
    st, body, _ = timed("pairs", "POST", "/api/sweeps", twice)
    expect_problems(st, body, "%d values, each twice" % n_twice, n_twice // 2)
    st, body, _ = timed("10000 runs", "POST", "/api/sweeps", big_valid("big"))
    if st != 201 or body.get("runs") != 10000:
        fail("the valid 10,000-run spec: %d %.300r" % (st, body))

    # a burst: at most 2 are checked at once, the others are told to retry
    answers = []

    def submit_one(i):
        answers.append(request("POST", "/api/sweeps", keys_text))

    t0 = time.monotonic()
    burst = [threading.Thread(target=submit_one, args=(i,)) for i in range(6)]
    for t in burst:
        t.start()
    for t in burst:
        t.join(180)
    took["burst of 6"] = time.monotonic() - t0
    for st, body, hdrs in answers:
        if st == 503:
            if "Retry-After" not in hdrs or "again" not in body["error"]["message"]:
                fail("a 503 without Retry-After: %r %r" % (hdrs, body))
        else:
            expect_problems(st, body, "burst", n_keys)
    n503 = sum(1 for a_ in answers if a_[0] == 503)
    if len(answers) != 6 or n503 > 4:
        fail("burst: %d answers, %d of them 503 (at least 2 are checked)" % (len(answers), n503))

    time.sleep(0.3)
    probes.stop()
    if probes.errors:
        fail("probe errors: %s" % probes.errors[:5])

    # the CLI: the same cap, exit 2
    path = os.path.join(tmp, "keys.json")
    with open(path, "wb") as f:
        f.write(keys_text)
    cli = subprocess.run([BIN, "submit", "--url", f"http://127.0.0.1:{api_port}", path],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SCALESWEEP_TOKEN=TOKEN))
    lines = cli.stderr.splitlines()
    if cli.returncode != 2 or "%d problem(s), the first 50 listed" % n_keys not in cli.stderr \
            or sum(1 for l in lines if "unknown key" in l) != 50 \
            or "and %d more problem(s) not listed" % (n_keys - 50) not in cli.stderr:
        fail("scalesweep submit of the hostile spec: exit %d, stderr %.600r ... %.300r"
             % (cli.returncode, cli.stderr, cli.stderr[-300:]))

    # the CLI retries a 503 (two hostile specs being checked) until its turn
    busy = [threading.Thread(target=request, args=("POST", "/api/sweeps", keys_text))
            for _ in range(2)]
    for t in busy:
        t.start()
    path = os.path.join(tmp, "small.json")
    with open(path, "w") as f:
        json.dump(dict(small, name="after-a-busy-spell"), f)
    cli = subprocess.run([BIN, "submit", "--url", f"http://127.0.0.1:{api_port}", path],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SCALESWEEP_TOKEN=TOKEN))
    for t in busy:
        t.join(120)
    if cli.returncode != 0 or "submitted: 1 runs planned" not in cli.stdout:
        fail("scalesweep submit while 2 specs were checked: exit %d, %r %r"
             % (cli.returncode, cli.stdout, cli.stderr))
    print("scalesweep submit while 2 specs were checked: %d retries, then submitted"
          % cli.stderr.count("retrying"))

    print("submitted (seconds to the answer): " +
          ", ".join("%s %.2f" % (k, v) for k, v in took.items()))
    print("burst of 6 hostile specs: %d answered 400, %d answered 503 with Retry-After"
          % (6 - n503, n503))
    bad = summary(probes)
    if bad:
        fail("the loop stalled: " + ", ".join(bad) + " (bound %.0f ms)" % BOUND_MS)

    # a client that goes away while its spec is being checked: nothing breaks
    def post_and_leave(body):
        c = socket.create_connection(("127.0.0.1", api_port), timeout=10)
        c.sendall(b"POST /api/sweeps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  TOKEN.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        c.close()

    post_and_leave(keys_text)
    post_and_leave(json.dumps(big_valid("left")).encode())
    time.sleep(0.2)
    st, _, _ = request("GET", "/healthz")
    if st != 200 or sched.poll() is not None:
        fail("after clients left mid-check: healthz %d, scheduler %r" % (st, sched.poll()))
    time.sleep(3)  # both checked (and the 10,000 runs stored) before the stop below
    st, _, _ = request("GET", "/healthz")
    if st != 200 or sched.poll() is not None:
        fail("after clients left mid-check: healthz %d, scheduler %r" % (st, sched.poll()))
    # stopping while a spec is being checked: the client gets 503 or a closed
    # connection, the scheduler exits 0 once the job is done (checked below)
    stopped = []

    def submit_during_stop():
        try:
            st, body, _ = request("POST", "/api/sweeps", big_valid("stopping"))
            stopped.append(st)
            stopped.append(body.get("error", {}).get("message") if isinstance(body, dict) else body)
        except (OSError, http.client.HTTPException) as e:
            stopped.append(str(e))

    t = threading.Thread(target=submit_during_stop)
    t.start()
    time.sleep(0.3)
    sched.terminate()
    t.join(60)
    rc = sched.wait(60)
    if rc != 0 or not stopped:
        fail("stopping during a check: exit %r, the client saw %r" % (rc, stopped))
    if stopped[0] not in (503, 201) and not isinstance(stopped[0], str):
        fail("stopping during a check: the client got %r" % stopped)
    print("stopped during a check: the client got %r, the scheduler exited 0" % stopped)
    print("sec_submit: hostile and 10,000-run specs checked off the loop; all checks passed")
    shutil.rmtree(tmp, ignore_errors=True)  # kept when a check failed
finally:
    if sched and sched.poll() is None:
        sched.terminate()
        try:
            rc = sched.wait(30)
        except subprocess.TimeoutExpired:
            sched.kill()
            rc = None
        if rc not in (0, None):
            print("FAIL: the scheduler exited %r on SIGTERM" % rc, file=sys.stderr)
            sys.exit(1)

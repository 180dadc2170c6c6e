#!/usr/bin/env python3
"""Heavy reads never stall the control plane; fenced writes are refused.

Against the real scheduler and a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), with two worker stand-ins that speak the
protocol (docs/runtime.md):

1. Fencing (issue 14, hole 7): a metrics batch and a checkpoint are stored
   only for the attempt running on the worker that sends them. A second
   worker's batch and checkpoint for the first worker's run, and the first
   worker's own for a run whose lease expired (max_attempts 1: it failed),
   are acknowledged and not stored; the first worker's for its running run
   are (so the check is not vacuous).
2. Reads (issue 14, hole 4): with 100 runs x 3,000 metric rows written
   straight into the database, 16 clients ask for the heaviest curves the
   API allows (points=2000, limit=1000) again and again for FLOOD_S seconds,
   while the worker renews its lease every 100 ms and a cheap reader lists
   a sweep's runs every 250 ms. Required: every lease renewal answered
   within 500 ms (the brief's bound: a lease is 30 s, so this is a bound on
   queueing, not on speed), every cheap read answered, every heavy read
   answered 200 or 503 with the read-limit message (none left hanging past
   the client's 40 s), and curve parameters over their caps refused with a
   400 naming the parameter, the value found and the maximum; ids out of
   a bigint's range (runs=99999999999999999999999, which PostgreSQL's cast
   refused with a 500 and its own error text) and runs=0 refused with a 400
   naming runs and the item; next's points beyond an int (a cast made them
   -1, reported as "found -1") refused with the value given.
3. Protocol integers kept in an int (issue 32): a hello with cpu_slots
   2^32 + 5 and, from the worker holding a run, a metrics batch whose
   attempt is 2^32 + its attempt (a cast made them 5 and the real attempt,
   so the batch was stored) get a protocol error naming the field's JSON
   path and the connection closed; no worker row, no metric row stored.

Figures printed: renewal and read latencies (median, p99, max), heavy reads
answered 200 / 503. On the code before the fix (one database connection
for everything; curve seeks that scanned) the flood left all 150 renewals of
its 15 s unanswered (the oldest 15.1 s), no cheap read answered, and one
heavy read answered, after 23 s; with it, renewals took 1 ms median, 70 ms
at most, cheap reads 1 ms median, heavy reads 200 or 503 within ~6 s.
Fencing on the old code: both foreign and late batches stored (10 of 10),
the checkpoints too (steps 77 and 88).

Usage: test_sec_reads.py SCALESWEEP_BINARY
"""
import http.client
import json
import math
import os
import socket
import statistics
import sys
import threading
import time

from harness import Rig, psql

BIN = sys.argv[1]
FLOOD_S = 15
HEAVY_CLIENTS = 16
HEAVY_PATH = "/api/sweeps/%d/curves?points=2000&limit=1000"
# the parts to run (all by default; "flood" alone measures an old build)
PARTS = os.environ.get("SEC_READS_PARTS", "fencing,caps,flood,ranges").split(",")
rig = Rig(BIN, "ss-sec-reads-", logs=("scheduler",), tail=3000)
tmp, token, api_port, wport = rig.tmp, rig.token, rig.api_port, rig.wport
TOKEN = open(token).read().strip()
fail, check, request = rig.fail, rig.check, rig.request


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def figures(name, ms):
    return "%s: n=%d median=%.1f ms p99=%.1f ms max=%.1f ms" % (
        name, len(ms), statistics.median(ms) if ms else float("nan"), pct(ms, 0.99),
        max(ms) if ms else float("nan"))


class Worker:
    """A worker stand-in: a reader thread files the scheduler's messages."""

    def __init__(self, name, ngpus):
        self.sock = socket.create_connection(("127.0.0.1", wport), timeout=10)
        self.sock.settimeout(None)
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.assigns, self.acks, self.hb_sent, self.hb_ms = [], set(), {}, []
        self.errors = []
        self.hb_next = 1
        self.welcome = None
        self.closed = False
        threading.Thread(target=self.reader, daemon=True).start()
        gpus = [{"index": i, "name": "Fake GPU", "memory_bytes": 1 << 34} for i in range(ngpus)]
        self.send({"type": "hello", "version": 1, "token": TOKEN, "name": name, "host": "h",
                   "gpus": gpus, "cpu_slots": 0, "runs": []})
        with self.cv:
            check(self.cv.wait_for(lambda: self.welcome or self.closed, 10) and self.welcome,
                  "worker %s: no welcome" % name)

    def send(self, m):
        with self.lock:
            self.sock.sendall(json.dumps(m).encode() + b"\n")

    def reader(self):
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.closed = True
                    self.cv.notify_all()
                return
            buf += chunk
            now = time.monotonic()
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                m = json.loads(line)
                with self.cv:
                    t = m.get("type")
                    if t == "welcome":
                        self.welcome = m
                    elif t == "assign":
                        self.assigns.append(m)
                    elif t == "ack":
                        self.acks.add((m["run_id"], m["attempt"], m["seq"]))
                    elif t == "heartbeat" and m.get("hb") in self.hb_sent:
                        self.hb_ms.append((now - self.hb_sent.pop(m["hb"])) * 1e3)
                    elif t == "error":
                        self.errors.append(m.get("message", ""))
                        print("scheduler error to the worker: %r" % m, file=sys.stderr)
                    self.cv.notify_all()

    def wait(self, pred, timeout, what):
        with self.cv:
            check(self.cv.wait_for(pred, timeout), "timed out waiting for " + what)

    def heartbeat(self, runs):
        """Sends a numbered heartbeat; its number."""
        with self.cv:
            n = self.hb_next
            self.hb_next += 1
            self.hb_sent[n] = time.monotonic()
        self.send({"type": "heartbeat", "runs": runs, "hb": n})
        return n

    def heartbeat_sync(self, runs):
        """A heartbeat, waiting for its answer: every message sent before it
        on this connection has then been stored (one control connection,
        statements in order)."""
        n = self.heartbeat(runs)
        self.wait(lambda: n not in self.hb_sent, 10, "heartbeat %d's answer" % n)

    def pending_hb_ms(self):
        now = time.monotonic()
        with self.cv:
            return [(now - t) * 1e3 for t in self.hb_sent.values()]

    def metrics(self, run_id, attempt, seq, steps):
        rows = [{"event": "step", "step": s, "tokens": s * 100, "train_loss": 9.0, "lr": 1e-3}
                for s in steps]
        self.send({"type": "metrics", "run_id": run_id, "attempt": attempt, "seq": seq,
                   "rows": rows})
        self.wait(lambda: (run_id, attempt, seq) in self.acks, 10,
                  "the ack of run %d's batch %d" % (run_id, seq))

    def checkpoint(self, run_id, attempt, step):
        self.send({"type": "checkpoint", "run_id": run_id, "attempt": attempt, "step": step,
                   "path": "/ck/%d" % step})


def spec(name, n, max_attempts=3):
    return {"name": name, "method": "runs", "max_attempts": max_attempts,
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": i + 1}} for i in range(n)],
            "resources": {"gpus": 1}}


def metric_count(run_id, lo, hi):
    return int(psql("SELECT count(*) FROM metrics WHERE run_id = %d AND step BETWEEN %d AND %d"
                    % (run_id, lo, hi)))


def fencing(w1, w2, held, fenced):
    """Part 1; held and fenced are w1's assignments."""
    h, ha = held["run_id"], held["attempt"]
    f, fa = fenced["run_id"], fenced["attempt"]
    w1.metrics(h, ha, 1, range(1, 11))
    w1.checkpoint(h, ha, 5)
    w1.heartbeat_sync([h, f])
    check(metric_count(h, 1, 10) == 10, "the holder's own batch was not stored")
    check(psql("SELECT checkpoint_step FROM runs WHERE id = %d" % h) == "5",
          "the holder's own checkpoint was not stored")
    # another worker writes into w1's run, naming its attempt
    w2.metrics(h, ha, 1, range(1000, 1010))
    w2.checkpoint(h, ha, 77)
    w2.heartbeat_sync([])
    n_other = metric_count(h, 1000, 1009)
    ck = psql("SELECT checkpoint_step FROM runs WHERE id = %d" % h)
    # w1's other run loses its lease (no renewal names it any more)
    psql("UPDATE runs SET lease_until = now() - interval '1 second' WHERE id = %d" % f)
    end = time.time() + 10
    while psql("SELECT status FROM runs WHERE id = %d" % f) == "running":
        check(time.time() < end, "run %d's expired lease was not noticed: %s" % (f, psql(
            "SELECT status, lease_until - now() FROM runs WHERE id = %d" % f)))
        w1.heartbeat_sync([h])
        time.sleep(0.2)
    status_f = psql("SELECT status FROM runs WHERE id = %d" % f)
    w1.metrics(f, fa, 2, range(2000, 2010))
    w1.checkpoint(f, fa, 88)
    w1.heartbeat_sync([h])
    n_late = metric_count(f, 2000, 2009)
    ck_f = psql("SELECT coalesce(checkpoint_step::text, 'none') FROM runs WHERE id = %d" % f)
    print("fencing: another worker's batch for run %d: %d of 10 rows stored, the run's "
          "checkpoint step after its checkpoint: %s (the holder's was 5); run %d after its "
          "lease expired (%s): %d of 10 rows stored, checkpoint step %s (expected none)"
          % (h, n_other, ck, f, status_f, n_late, ck_f))
    check(n_other == 0, "another worker's metrics for a run it does not hold were stored")
    check(ck == "5", "another worker's checkpoint replaced the holder's (step %s)" % ck)
    check(n_late == 0, "a fenced attempt's late metrics were stored")
    check(ck_f == "none", "a fenced attempt's late checkpoint was stored (step %s)" % ck_f)


def fill(sweep_id):
    """100 succeeded runs x 3,000 metric rows, straight into the database."""
    t0 = time.time()
    psql("UPDATE runs SET status = 'succeeded', attempt = 1, final_val_loss = 3.0, "
         "nonembedding_params = 1000 + id, started_at = now(), finished_at = now() "
         "WHERE sweep_id = %d" % sweep_id)
    psql("INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr) "
         "SELECT r.id, s, s * 256, 5.0 / ln(s + 2), "
         "CASE WHEN s %% 50 = 0 THEN 5.1 / ln(s + 2) END, 1e-3 "
         "FROM runs r, generate_series(1, 3000) s WHERE r.sweep_id = %d" % sweep_id)
    psql("ANALYZE metrics")
    n = int(psql("SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id "
                 "WHERE r.sweep_id = %d" % sweep_id))
    check(n == 300000, "expected 300000 metric rows, found %d" % n)
    print("filled 100 runs x 3000 metric rows in %.1f s" % (time.time() - t0))


def caps(big):
    run = int(psql("SELECT min(id) FROM runs WHERE sweep_id = %d" % big))
    for path, name, found, cap in (
            ("/api/sweeps/%d/curves?points=2001" % big, "points", "2001", "2000"),
            ("/api/sweeps/%d/curves?limit=1001" % big, "limit", "1001", "1000"),
            ("/api/runs/%d?metrics_limit=100001" % run, "metrics_limit", "100001", "100000"),
            ("/api/sweeps/%d/runs?limit=10001" % big, "limit", "10001", "10000")):
        st, body = request("GET", path)
        msg = (body or {}).get("error", {}).get("message", "")
        check(st == 400 and body["error"].get("path") == name and found in msg and cap in msg,
              "%s: expected 400 naming %s, %s and its maximum %s; got %d %r"
              % (path, name, found, cap, st, body))
    # a run's metric rows come a page at a time
    st, doc = request("GET", "/api/runs/%d?metrics_limit=5&metrics_offset=10" % run)
    check(st == 200 and [m["step"] for m in doc["metrics"]] == [11, 12, 13, 14, 15] and
          doc["metrics_total"] == 3000, "a page of a run's metrics: %d %r" % (
              st, {k: doc.get(k) for k in ("metrics_total", "metrics_limit")} if doc else None))
    st, doc = request("GET", "/api/runs/%d" % run)
    check(st == 200 and len(doc["metrics"]) == 3000, "a run's metrics by default: %d" % st)
    print("caps: curves points/limit, a run's metrics_limit and a page of runs refused over "
          "their maximum with the value found")
    # run ids beyond a bigint (PostgreSQL's cast failed the query: a 500
    # with its own text) or below 1: a 400 naming runs and the item
    for ids, item in (("99999999999999999999999", "item 1 = '99999999999999999999999'"),
                      ("%d,9223372036854775808" % run, "item 2 = '9223372036854775808'"),
                      ("0", "item 1 = '0'"), ("%d,0" % run, "item 2 = '0'"),
                      ("%d,,%d" % (run, run), "item 2 = ''"), ("-1", "item 1 = '-1'")):
        path = "/api/sweeps/%d/curves?runs=%s" % (big, ids)
        st, body = request("GET", path)
        err = (body or {}).get("error", {})
        check(st == 400 and err.get("path") == "runs" and item in err.get("message", "")
              and "9223372036854775807" in err.get("message", ""),
              "%s: expected 400 naming runs, %s and the range; got %d %r" % (path, item, st, body))
    st, body = request("GET", "/api/sweeps/%d/curves?runs=9223372036854775807,%d" % (big, run))
    check(st == 200 and [c["run_id"] for c in body] == [run],
          "the largest bigint as a run id: %d %r" % (st, body))
    st, body = request("GET", "/api/sweeps/%d/next?flops=1e13&points=99999999999999999999999"
                       % big)
    err = (body or {}).get("error", {})
    check(st == 400 and err.get("path") == "points"
          and "99999999999999999999999" in err.get("message", ""),
          "next with points beyond an int: %d %r" % (st, body))
    print("ids: run ids beyond a bigint or below 1 and points beyond an int refused with a "
          "400 naming the parameter and the value")
    # the curves' samples, both ways of finding them (one ordered pass when
    # the run has few more steps than samples, index seeks otherwise): for
    # g = 0..P the first step at or after ceil(smax^(g/P)), as pages.c says
    for points in (2000, 100, 7):
        st, got = request("GET", "/api/runs/%d/curves?points=%d" % (run, points))
        check(st == 200 and len(got) == 1, "curves of run %d: %d" % (run, st))
        for key, steps in (("tokens", range(1, 3001)), ("val_tokens", range(50, 3001, 50))):
            want = sorted({next(s for s in steps if s >= t) for t in (
                math.ceil(math.exp(math.log(3000) * g / points) - 1e-6)
                for g in range(points + 1)) if t <= steps[-1]})
            have = [t // 256 for t in got[0][key]]
            if have != want:
                diff = next((a, b) for a, b in zip(have + [None] * len(want), want + [None] *
                                                   len(have)) if a != b)
                fail("run %d's %s at points=%d: %d samples, expected %d (first difference, "
                     "found vs expected: %r)" % (run, key, points, len(have), len(want), diff))


def ranges(w1, held):
    """Part 3: protocol integers beyond an int are refused, never cast."""
    s = socket.create_connection(("127.0.0.1", wport), timeout=10)
    s.sendall(json.dumps({"type": "hello", "version": 1, "token": TOKEN, "name": "huge-slots",
                          "host": "h", "gpus": [], "cpu_slots": 2**32 + 5,
                          "runs": []}).encode() + b"\n")
    buf = b""
    try:
        while b"\n" not in buf:  # the first answer: an error, or (before the fix) a welcome
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    s.close()
    first = json.loads(buf.split(b"\n", 1)[0]) if b"\n" in buf else {}
    check(first.get("type") == "error" and "$.cpu_slots: expected an integer in [0, 2147483647]"
          in first.get("message", "") and "4294967301" in first["message"],
          "a hello with cpu_slots 2^32 + 5: %r, expected a protocol error naming $.cpu_slots"
          % buf[:300])
    check(psql("SELECT count(*) FROM workers WHERE name = 'huge-slots'") == "0",
          "a worker row stored from a hello with cpu_slots 2^32 + 5")
    st, workers = request("GET", "/api/workers")
    check(st == 200 and "huge-slots" not in [w["name"] for w in workers],
          "/api/workers lists the refused worker: %r" % workers)
    # the holder's own run, its attempt plus 2^32: a cast to int made it the
    # attempt, and the batch was stored
    h, ha = held["run_id"], held["attempt"]
    w1.send({"type": "metrics", "run_id": h, "attempt": 2**32 + ha, "seq": 90,
             "rows": [{"event": "step", "step": s, "tokens": s * 100, "train_loss": 9.0}
                      for s in range(5000, 5010)]})
    w1.wait(lambda: w1.closed, 10, "the scheduler to close the connection of a batch with "
            "attempt 2^32 + %d" % ha)
    check(metric_count(h, 5000, 5009) == 0, "a batch with attempt 2^32 + %d was stored" % ha)
    check(w1.errors and "$.attempt: expected an integer in [0, 2147483647]" in w1.errors[-1],
          "the error for attempt 2^32 + %d: %r" % (ha, w1.errors))
    st, health = request("GET", "/healthz")
    check(st == 200, "/healthz after the refused messages: %d" % st)
    print("ranges: a hello with cpu_slots 2^32 + 5 and a batch with attempt 2^32 + %d refused "
          "with the field's JSON path; nothing stored" % ha)


def flood(w1, held, big, small):
    h = held["run_id"]
    stop = threading.Event()
    heavy, cheap, lock = [], [], threading.Lock()

    def heavy_client():
        while not stop.is_set():
            t = time.monotonic()
            try:
                st, body = request("GET", HEAVY_PATH % big, timeout=40)
                msg = (body or {}).get("error", {}).get("message", "") if st != 200 else ""
            except (OSError, http.client.HTTPException, ValueError) as e:
                st, msg = -1, "%s: %s" % (type(e).__name__, e)
            with lock:
                heavy.append((st, (time.monotonic() - t) * 1e3, msg))

    def cheap_client():
        while not stop.is_set():
            t = time.monotonic()
            try:
                st, _ = request("GET", "/api/sweeps/%d/runs?limit=10" % small, timeout=40)
            except (OSError, http.client.HTTPException, ValueError) as e:
                st = "%s: %s" % (type(e).__name__, e)
            with lock:
                cheap.append((st, (time.monotonic() - t) * 1e3))
            stop.wait(0.25)

    threads = [threading.Thread(target=heavy_client) for _ in range(HEAVY_CLIENTS)]
    threads.append(threading.Thread(target=cheap_client))
    for t in threads:
        t.start()
    end = time.monotonic() + FLOOD_S
    while time.monotonic() < end:
        w1.heartbeat([h])
        time.sleep(0.1)
    pending = w1.pending_hb_ms()  # renewals still unanswered when the flood ends
    stop.set()
    for t in threads:
        t.join(60)
    hb = w1.hb_ms + pending
    ok = [ms for st, ms, _ in heavy if st == 200]
    limited = [ms for st, ms, m in heavy if st == 503 and "read limit" in m]
    other = [(st, round(ms), m) for st, ms, m in heavy
             if not (st == 200 or (st == 503 and "read limit" in m))]
    cheap_ms = [ms for st, ms in cheap if st == 200]
    print(figures("lease renewals during the flood", hb)
          + " (%d unanswered at its end)" % len(pending))
    print(figures("cheap reads (a page of runs)", cheap_ms))
    print(figures("heavy reads answered 200", ok))
    print(figures("heavy reads answered 503 (read limit)", limited))
    check(hb and max(hb) < 500, "a lease renewal took %.0f ms (bound 500 ms)" % max(hb))
    check(cheap and len(cheap_ms) == len(cheap),
          "cheap reads not answered: %r" % [c for c in cheap if c[0] != 200][:5])
    check(heavy and not other, "heavy reads neither answered nor refused with the read "
          "limit: %r" % other[:5])


try:
    sched = rig.start_scheduler("--checkpoints", os.path.join(tmp, "ck"),
                                "--predict-seconds", "0")
    st, health = request("GET", "/healthz")
    check(st == 200 and health == {"ok": True, "control": True, "reads": True},
          "/healthz: %d %r" % (st, health))
    st, big = request("POST", "/api/sweeps", spec("curves", 100))
    check(st == 201, "submit: %d %r" % (st, big))
    fill(big["id"])
    st, small = request("POST", "/api/sweeps", spec("held", 2, max_attempts=1))
    check(st == 201, "submit: %d %r" % (st, small))
    # the scheduler gives every running run a full lease on its first lease
    # tick after start (no heartbeat could renew one while it was away): the
    # fencing part sets a lease in the past, so it must come after that
    end = time.time() + 20
    slog = os.path.join(tmp, "scheduler.log")
    while "running run(s) given a full lease" not in open(slog).read():
        check(time.time() < end, "the scheduler's first lease tick did not come")
        time.sleep(0.1)
    w1 = Worker("holder", 2)
    w1.wait(lambda: len(w1.assigns) == 2, 10, "two assignments")
    for a in w1.assigns:
        w1.send({"type": "started", "run_id": a["run_id"], "attempt": a["attempt"],
                 "config": {"event": "config"}})
    w2 = Worker("intruder", 0)
    held, fenced = sorted(w1.assigns, key=lambda a: a["run_id"])
    if "fencing" in PARTS:
        fencing(w1, w2, held, fenced)
    if "caps" in PARTS:
        caps(big["id"])
    if "flood" in PARTS:
        flood(w1, held, big["id"], small["id"])
    if "ranges" in PARTS:  # last: it closes w1's connection
        ranges(w1, held)
    check(sched.poll() is None, "the scheduler exited")
    print("sec_reads: renewals kept their pace under a flood of heavy reads; fenced writes "
          "refused")
finally:
    rig.close()

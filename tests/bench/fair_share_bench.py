#!/usr/bin/env python3
"""Placement with fair share (issue 36, "Figures"), side by side with
another binary (today's, built from main): run it through
tests/integration/run_with_pg.sh, which starts a throwaway PostgreSQL:

  bash tests/integration/run_with_pg.sh /usr/bin/python3 \\
      tests/bench/fair_share_bench.py NEW_BINARY OLD_BINARY

Each binary gets a database of its own on that cluster with BENCH_PEOPLE
people (20) and BENCH_QUEUED queued runs (20,000: a sweep of
BENCH_QUEUED / BENCH_PEOPLE runs each, submitted with the person's token;
an old binary, which knows no people, gets the same sweeps as the API
token's), and for the new one a decayed usage per person (random, so that
the order across people is not the trivial one). Then, per repetition
(BENCH_REPS, 3), for each binary in turn: its scheduler on its database
and a worker stand-in of 2 CPU slots on the worker port (a Python thread
speaking the protocol) whose runs end at once:

  steady: BENCH_CYCLES (300) times, the oldest run's `finished` sent, then
          its ack (the result stored) and the next `assign` timed: the pass
          placement runs on capacity freed, as each binary makes it (the
          old one mostly takes the next run from the queue read kept by the
          pass before, place.c's cache; the new one reads the queue afresh
          whenever several people have runs queued: fair share orders by
          the attempts' own usage);
  fresh:  BENCH_FRESH (100) times, a one-run sweep submitted first (which
          drops the cache while no slot is free) and then the same: every
          decision reads the queue afresh (store_runs_queue), fair share's
          per-person read and ordering included.

  placement = assign received - ack received (one placement decision: the
              queue read or the cache, the order, the claim's round trip)
  idle gap  = assign received - finished sent (the slot's idle time: the
              result stored, then placement)

Prints p50 and p99 of each per binary and mode, each the median over the
repetitions, and the new binary's p99 over the old one's. The figures are
information; the exit status is 0 unless the benchmark could not run.
"""
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import WireWorker, api_request, free_port, wait_healthz  # noqa: E402

NEW, OLD = sys.argv[1], sys.argv[2]
PEOPLE = int(os.environ.get("BENCH_PEOPLE", "20"))
QUEUED = int(os.environ.get("BENCH_QUEUED", "20000"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
CYCLES = int(os.environ.get("BENCH_CYCLES", "300"))
FRESH = int(os.environ.get("BENCH_FRESH", "100"))
BASE = os.environ["SCALESWEEP_TEST_DB"]
TMP = tempfile.mkdtemp(prefix="ss-fair-share-bench-")


def psql(conninfo, sql):
    out = subprocess.run(["bash", "-c", '. "$PGTEST_SH" && "$PG_TEST_BINDIR/psql" -X -q -At '
                          '-v ON_ERROR_STOP=1 "$1" -c "$0"', sql, conninfo],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def spec(name, n):
    return {"name": name, "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": i + 1}} for i in range(n)], "resources": {"cpus": 1}}


class Side:
    """One binary, its database, its tokens."""

    def __init__(self, label, binary, people):
        self.label, self.bin = label, binary
        self.db = BASE.replace("dbname=scalesweep", "dbname=bench_" + label)
        psql(BASE, "CREATE DATABASE bench_%s" % label)
        subprocess.run([binary, "migrate", "--database", self.db], check=True,
                       capture_output=True)
        self.cluster = os.urandom(16).hex()
        self.tokens = {"admin": self.write("admin", self.cluster)}
        for i in range(PEOPLE if people else 0):
            name, tok = "p%02d" % i, os.urandom(32).hex()
            self.tokens[name] = self.write(name, tok)
            psql(self.db, "WITH u AS (INSERT INTO users (name, role) VALUES ('%s', 'member') "
                 "RETURNING id) INSERT INTO user_tokens (hash, user_id) SELECT "
                 "sha256(convert_to('%s', 'UTF8')), id FROM u; INSERT INTO share_usage "
                 "(owner_id, device_s, at) SELECT id, %f, now() FROM users WHERE name = '%s'"
                 % (name, tok, random.uniform(0, 1e5), name))
        self.filled = False

    def write(self, name, tok):
        path = os.path.join(TMP, "%s-%s.token" % (self.label, name))
        with open(path, "w") as f:
            f.write(tok)
        return path

    def who(self, i):
        return "p%02d" % i if len(self.tokens) > 1 else "admin"


class Worker(WireWorker):
    """The worker stand-in: 2 CPU slots; a message's time is when its read
    returned (the test reads as soon as it has sent)."""

    def __init__(self, port, token, name):
        super().__init__(port, {"type": "hello", "version": 1, "token": token, "name": name,
                                "host": "bench", "gpus": [], "cpu_slots": 2, "runs": []}, 30)
        self.seq = 0

    def timed(self, pred, what):
        m = self.next(pred, 30)
        if m is None:
            raise RuntimeError("timed out waiting for " + what)
        return time.perf_counter(), m

    def take_assign(self):
        t, a = self.timed(lambda m: m.get("type") == "assign", "an assign")
        self.send({"type": "started", "run_id": a["run_id"], "attempt": a["attempt"],
                   "config": {"event": "config"}})
        return t, a

    def finish(self, a):
        """Ends a; (finished sent, ack received) times."""
        self.seq += 1
        seq = self.seq
        t0 = time.perf_counter()
        self.send({"type": "finished", "run_id": a["run_id"], "attempt": a["attempt"],
                   "seq": seq, "exit_code": 0, "signal": 0, "error": None, "log_tail": "",
                   "done": {"event": "done", "final_val_loss": 3.0, "params": 1000,
                            "nonembedding_params": 800, "flops": 1e9, "flops_6nd": 1e9,
                            "tokens": 25600, "steps": 100, "wall_s": 1,
                            "peak_rss_bytes": 1}})
        t1, _ = self.timed(lambda m: m.get("type") == "ack" and m.get("seq") == seq, "an ack")
        return t0, t1


def cycles(side, port, w, n, fresh, run):
    place, gap = [], []
    for k in range(n):
        if fresh:
            st, doc = api_request(port, side.tokens[side.who(k % PEOPLE)], "POST", "/api/sweeps",
                                  spec("fresh-%s-%d-%d" % (side.label, run, k), 1))
            if st != 201:
                raise RuntimeError("a one-run sweep: %s %s" % (st, doc))
        t_sent, t_ack = w.finish(w.running.pop(0))
        t_assign, a = w.take_assign()
        w.running.append(a)
        place.append((t_assign - t_ack) * 1e3)
        gap.append((t_assign - t_sent) * 1e3)
    return place, gap


def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_rep(side, run, results):
    port, wport = free_port(), free_port()
    log = open(os.path.join(TMP, "%s-%d.log" % (side.label, run)), "w")
    sched = subprocess.Popen([side.bin, "scheduler", "--database", side.db, "--token-file",
                              side.tokens["admin"], "--listen", "127.0.0.1:%d" % port,
                              "--workers", "127.0.0.1:%d" % wport, "--checkpoints",
                              os.path.join(TMP, "ck"), "--predict-seconds", "0"],
                             stdout=log, stderr=log)
    try:
        if not wait_healthz(lambda m, pth: api_request(port, side.tokens["admin"], m, pth),
                            proc=sched):
            raise RuntimeError("%s's scheduler did not come up" % side.label)
        if not side.filled:
            t0 = time.time()
            for i in range(PEOPLE):
                st, doc = api_request(port, side.tokens[side.who(i)], "POST", "/api/sweeps",
                                      spec("bench-%02d" % i, QUEUED // PEOPLE), timeout=120)
                if st != 201:
                    raise RuntimeError("sweep %d: %s %s" % (i, st, doc))
            side.filled = True
            print("%s: %d runs of %d people queued in %.1f s" % (side.label, QUEUED, PEOPLE,
                                                                 time.time() - t0), flush=True)
        w = Worker(wport, side.cluster, "bench-%d" % run)  # the last one's runs hold its name
        w.running = [w.take_assign()[1], w.take_assign()[1]]
        for mode, n in (("steady", CYCLES), ("fresh", FRESH)):
            place, gap = cycles(side, port, w, n, mode == "fresh", run)
            results.setdefault((side.label, mode), []).append(
                (p(place, 0.5), p(place, 0.99), p(gap, 0.5), p(gap, 0.99)))
        w.sock.close()
    finally:
        sched.terminate()
        sched.wait(30)


def main():
    random.seed(36)
    sides = [Side("old", OLD, False), Side("new", NEW, True)]
    results = {}
    for run in range(REPS):
        for side in sides if run % 2 == 0 else sides[::-1]:
            one_rep(side, run, results)
    print("\ncommand: bash tests/integration/run_with_pg.sh /usr/bin/python3 "
          "tests/bench/fair_share_bench.py %s %s" % (NEW, OLD))
    print("%d people, %d queued runs, 2 CPU slots; medians over %d repetitions (ms)\n"
          % (PEOPLE, QUEUED, REPS))
    print("| binary | mode | placement p50 | placement p99 | idle gap p50 | idle gap p99 |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    med = {}
    for (label, mode), reps in sorted(results.items()):
        m = [statistics.median(r[i] for r in reps) for i in range(4)]
        med[(label, mode)] = m
        print("| %s | %s | %.2f | %.2f | %.2f | %.2f |" % (label, mode, *m))
    for mode in ("steady", "fresh"):
        o, n = med[("old", mode)], med[("new", mode)]
        print("%s: new/old placement p99 %.2f, idle gap p99 %.2f" % (mode, n[1] / o[1],
                                                                    n[3] / o[3]))


if __name__ == "__main__":
    main()

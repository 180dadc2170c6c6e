#!/usr/bin/env python3
"""The scheduler benchmark (issue 3, "Benchmark"), against a throwaway
PostgreSQL (run it through tests/bench/sched_bench.sh, which starts one with
tests/integration/run_with_pg.sh and sets SCALESWEEP_TEST_DB and PGTEST_SH)
and the real `scalesweep scheduler` and `scalesweep worker`.

Usage: sched_bench.py SCALESWEEP_BINARY

Seven parts, against one scheduler process (restarted once, in (e)):

(a) dispatch -- fake instant runs (tests/bench/sched_fake_trainer.sh, a /bin/sh
    stand-in for `scalesweep train` that prints a config, FAKE_STEPS step
    lines and a done line and exits) on real workers, for each layout of
    BENCH_DISPATCH_LAYOUTS ("1x2": one worker with 2 CPU slots; "8x1": eight
    workers with one slot each). The sweep (BENCH_DISPATCH_RUNS runs) is
    submitted through the API before any worker connects, so the queue is
    full from the first assignment. Timestamps per run come from the worker
    logs (ms resolution; worker/worker.c logs "assigned", "started pid",
    "exited with code" and "finished and acknowledged"); the database's
    runs.started_at / finished_at give a second, scheduler-side view.
      runs/s    = runs / (last trainer exit - first trainer start), from the logs
      idle gap  = per slot, the time from one trainer's exit ("exited with
                  code") to the spawn of the next trainer on that slot ("started
                  pid"). A worker's slots are interchangeable, so on a worker
                  with K slots each start after the first K is paired with the
                  earliest unpaired exit on that worker (FIFO); with one slot
                  per worker the pairing is exact. The gap is split into
                  exit -> finished acked (the scheduler stored the result),
                  acked -> next assigned (placement), assigned -> spawned
                  (the worker's run directory, config file, uv_spawn).
(b) metric rows/s -- BENCH_METRIC_WORKERS fake workers (Python threads speaking
    the worker protocol over TCP: hello with the cluster token, then the
    runs the scheduler assigns them -- metrics are stored only for a run's
    current attempt) each stream `metrics` batches of BENCH_METRIC_BATCH step
    rows with seq 1, 2, ... and at most BENCH_METRIC_WINDOW batches in flight,
    for BENCH_METRIC_SECONDS. Rows/s = rows acknowledged / (last ack - first
    send); the total is checked against count(*) in metrics. Meanwhile one
    more thread times GET /api/sweeps/{id} (that small sweep) every 100 ms,
    to show what metric ingestion does to the API.
(c) API latency -- a sweep of BENCH_API_RUNS runs is submitted through the API
    (its time is reported too); then, straight in SQL, its runs are marked
    succeeded and given BENCH_API_METRICS_PER_RUN metric rows each with
    generate_series (10,000 x 1,000 = 10 million rows by default), run after
    run (so a run's rows lie together in the table, as they do when a worker
    sends them in batches of hundreds), followed by VACUUM ANALYZE. Then, on
    one keep-alive connection, sequentially: 3 warm-up requests, then BENCH_API_REQUESTS timed GET /api/sweeps/{id},
    the same number of GET /api/runs/{id} (a run with its metric rows), and
    BENCH_API_REQUESTS/4 GET /api/sweeps, then the run table
    (GET /api/sweeps/{id}/runs), the sweep's HTML page (GET /sweeps/{id}),
    GET /api/runs/{id}/curves?points=500 and
    GET /api/sweeps/{id}/curves?points=500&runs= (BENCH_CURVE_RUNS ids). Then, with auto_explain logging
    the plan and actual times (EXPLAIN ANALYZE, BUFFERS) of every statement,
    one more of each GET, and one run of the sweep reproduced and run by a
    worker with 2 slots, so that the scheduler places it, updates the big
    sweep's status and refits the sweep: the plans of the statements the
    scheduler sent go to the output directory (explain-*.txt), their
    durations to explain_execution_ms (the median where it ran one several
    times; auto_explain's duration is the executor's run, a little less than
    EXPLAIN ANALYZE's "Execution Time", which adds executor start and end).
(d) dispatch inside a big sweep -- after (c): BENCH_BIG_RUNS runs of (c)'s
    sweep are reproduced (POST /api/runs/{id}/reproduce: new queued runs in
    that sweep of 10,000) and run as in (a) on one worker with 2 slots; the
    same figures, to show what the size of the sweep costs each run.

(e) capacity -- last: BENCH_CAPACITY_RUNS queued runs (sweeps of at most
    10,000) submitted with no worker connected; the scheduler's VmRSS/VmHWM
    holding them; then it is stopped and a fresh one started on that
    database (which by then also holds (c)'s runs and metric rows): process
    start -> ready file and -> first 200 from /healthz, and its memory.
(f) queue -- the store's own claim and finish statements (store/runs.c) for
    each of (e)'s queued runs from 8 pgbench clients, the queue read once per
    48 claims: the queue's SQL alone, to set beside River's (about 46,000
    jobs/s) and graphile-worker's (about 15,600) published figures; the loop
    through the real scheduler and workers is (a)'s 8x1 runs/s.
(g) anchor -- after (b): what PostgreSQL alone does with metric-shaped rows
    in a table LIKE metrics INCLUDING ALL from 8 clients: pgbench with
    multi-row INSERTs of BENCH_METRIC_BATCH rows for BENCH_ANCHOR_SECONDS, and
    8 psql COPYs of BENCH_ANCHOR_COPY_ROWS rows in all.

CPU use of the scheduler, the workers, their trainers, PostgreSQL (our
cluster's processes, with the backends already reaped) and everything else on
the machine (other users: noise) is sampled from /proc over each part, and
pg_stat_statements says which statements took the database's time.

Prints a table of every figure against its target, then the figures of
issue 18 side by side (value, target, ratio, verdict), and writes
build/bench/sched.json (BENCH_OUT) and the logs under build/bench/sched/
(BENCH_LOG_DIR). The figures are information: the exit status is 0 unless
the benchmark itself could not run (then 1).

Environment (defaults: about 9 minutes on a busy 2-core machine):
  BENCH_PARTS="dispatch metrics anchor api bigsweep capacity queue"
                             (bigsweep needs api, queue needs capacity)
  BENCH_DISPATCH_RUNS=2000   BENCH_DISPATCH_LAYOUTS="1x2 8x1"   FAKE_STEPS=0
  BENCH_METRIC_WORKERS=8     BENCH_METRIC_BATCH=500   BENCH_METRIC_WINDOW=4
  BENCH_METRIC_SECONDS=20
  BENCH_API_RUNS=10000       BENCH_API_METRICS_PER_RUN=1000   BENCH_API_REQUESTS=200
  BENCH_BIG_RUNS=300         BENCH_CURVE_RUNS=50 (runs= of the sweep curves request)
  BENCH_CAPACITY_RUNS=20000  BENCH_ANCHOR_SECONDS=10   BENCH_ANCHOR_COPY_ROWS=2000000
  BENCH_PGSS=1               0: no pg_stat_statements (it restarts the throwaway cluster
                             once, before the scheduler starts, to load it)
  BENCH_OUT, BENCH_LOG_DIR   where the JSON and the logs go
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import sched_bench_env as env
import sched_bench_sql as sql
from sched_bench_env import (BIG_RUNS, BIN, DB, DISPATCH_LAYOUTS, LOG_DIR, OUT, PARTS, T_START,
                             TARGET_API_P99_MS, TARGET_GAP_P99_MS, TARGET_ROWS_PER_S, cleanup,
                             die, log, start_scheduler)
from sched_bench_dispatch import bigsweep_part, dispatch
from sched_bench_metrics import metrics_part
from sched_bench_api import api_part
from sched_bench_capacity import capacity_part, pg_anchor_part, queue_sql_part
from sched_bench_report import machine, print_summary, print_table, summary_keys


def main():
    if not DB:
        die("SCALESWEEP_TEST_DB is not set: run through tests/bench/sched_bench.sh")
    if not os.access(BIN, os.X_OK):
        die(f"{BIN} is not an executable; build first")
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    os.makedirs(LOG_DIR, exist_ok=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    sql.pgss_setup()
    sql.plans_setup()
    baseline = sql.spawn_baseline()
    log(f"the fake trainer alone: spawn to exit median {baseline['median']} ms, p99 "
        f"{baseline['p99']} ms")
    start_scheduler()
    log(f"scheduler pid {env.sched_proc.pid}: API port {env.api_port}, worker port {env.workers_port}")
    results = {"machine": machine(), "binary": BIN,
               "fake_trainer_alone_ms": baseline, "pg_stat_statements": sql.PGSS,
               "targets": {"gap_p99_ms": TARGET_GAP_P99_MS, "rows_per_s": TARGET_ROWS_PER_S,
                           "api_p99_ms": TARGET_API_P99_MS}}
    if "dispatch" in PARTS:
        results["dispatch"] = [dispatch(layout) for layout in DISPATCH_LAYOUTS]
    if "metrics" in PARTS:
        results["metrics"] = metrics_part()
    if "anchor" in PARTS:
        results["anchor"] = pg_anchor_part()
    if "api" in PARTS:
        results["api"] = api_part()
        if "bigsweep" in PARTS and BIG_RUNS > 0:
            results["dispatch"] = results.get("dispatch", []) + \
                [bigsweep_part(results["api"]["sweep_id"],
                               results["api"]["explain_reproduction_id"])]
    if "capacity" in PARTS:
        results["capacity"] = capacity_part()
        if "queue" in PARTS:
            results["queue_sql"] = queue_sql_part(results["capacity"])
    results["total_s"] = round(time.time() - T_START, 1)
    results = {**summary_keys(results), **results}
    env.sched_proc.send_signal(signal.SIGTERM)
    try:
        env.sched_proc.wait(15)
    except subprocess.TimeoutExpired:
        pass
    cleanup()
    with open(OUT, "w") as f:
        json.dump(results, f, indent=2)
    print_table(results)
    print("the figures of issue 18 side by side (sched.json's top-level keys):")
    print_summary(results)
    print(f"written: {OUT} (logs and the scheduler's plans: {LOG_DIR}); total "
          f"{results['total_s']} s")
    shutil.rmtree(env.tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()


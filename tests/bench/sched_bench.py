#!/usr/bin/env python3
"""The scheduler benchmark (issue 3, "Benchmark"), against a throwaway
PostgreSQL (run it through tests/bench/sched_bench.sh, which starts one with
tests/integration/run_with_pg.sh and sets SCALESWEEP_TEST_DB and PGTEST_SH)
and the real `scalesweep scheduler` and `scalesweep worker`.

Usage: sched_bench.py SCALESWEEP_BINARY

Four parts, all against one scheduler process:

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
    BENCH_API_REQUESTS/4 GET /api/sweeps. EXPLAIN ANALYZE of the scheduler's
    queries (copied from scheduler/api.c, sched.c, refit.c) goes to the
    output directory.
(d) dispatch inside a big sweep -- after (c): BENCH_BIG_RUNS runs of (c)'s
    sweep are reproduced (POST /api/runs/{id}/reproduce: new queued runs in
    that sweep of 10,000) and run as in (a) on one worker with 2 slots; the
    same figures, to show what the size of the sweep costs each run.

CPU use of the scheduler, the workers, their trainers, PostgreSQL (our
cluster's processes, with the backends already reaped) and everything else on
the machine (other users: noise) is sampled from /proc over each part, and
pg_stat_statements says which statements took the database's time.

Prints a table of every figure against its target and writes
build/bench/sched.json (BENCH_OUT) and the logs under build/bench/sched/
(BENCH_LOG_DIR). The figures are information: the exit status is 0 unless
the benchmark itself could not run (then 1).

Environment (defaults: about 3-4 minutes on a quiet 2-core machine):
  BENCH_PARTS="dispatch metrics api bigsweep"   (bigsweep needs api)
  BENCH_DISPATCH_RUNS=2000   BENCH_DISPATCH_LAYOUTS="1x2 8x1"   FAKE_STEPS=0
  BENCH_METRIC_WORKERS=8     BENCH_METRIC_BATCH=500   BENCH_METRIC_WINDOW=4
  BENCH_METRIC_SECONDS=20
  BENCH_API_RUNS=10000       BENCH_API_METRICS_PER_RUN=1000   BENCH_API_REQUESTS=200
  BENCH_BIG_RUNS=300
  BENCH_PGSS=1               0: no pg_stat_statements (it restarts the throwaway cluster
                             once, before the scheduler starts, to load it)
  BENCH_OUT, BENCH_LOG_DIR   where the JSON and the logs go
"""
import collections
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build",
                                                                          "scalesweep")
FAKE = os.path.join(HERE, "sched_fake_trainer.sh")
DB = os.environ.get("SCALESWEEP_TEST_DB")
PSQL = os.path.join(os.environ.get("PG_TEST_BINDIR", ""), "psql") \
    if os.environ.get("PG_TEST_BINDIR") else "psql"


def env_int(name, default):
    return int(os.environ.get(name, default))


PARTS = os.environ.get("BENCH_PARTS", "dispatch metrics api bigsweep").split()
DISPATCH_RUNS = env_int("BENCH_DISPATCH_RUNS", 2000)
DISPATCH_LAYOUTS = os.environ.get("BENCH_DISPATCH_LAYOUTS", "1x2 8x1").split()
FAKE_STEPS = env_int("FAKE_STEPS", 0)
DISPATCH_TIMEOUT = env_int("BENCH_DISPATCH_TIMEOUT", 240)
METRIC_WORKERS = env_int("BENCH_METRIC_WORKERS", 8)
METRIC_BATCH = env_int("BENCH_METRIC_BATCH", 500)
METRIC_WINDOW = env_int("BENCH_METRIC_WINDOW", 4)
METRIC_SECONDS = float(os.environ.get("BENCH_METRIC_SECONDS", 20))
API_RUNS = env_int("BENCH_API_RUNS", 10000)
API_METRICS = env_int("BENCH_API_METRICS_PER_RUN", 1000)
API_REQUESTS = env_int("BENCH_API_REQUESTS", 200)
BIG_RUNS = env_int("BENCH_BIG_RUNS", 300)
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "build", "bench", "sched.json"))
LOG_DIR = os.environ.get("BENCH_LOG_DIR", os.path.join(os.path.dirname(OUT), "sched"))

TARGET_GAP_P99_MS = 50.0
TARGET_ROWS_PER_S = 100000.0
TARGET_API_P99_MS = 50.0

T_START = time.time()
CLK_TCK = os.sysconf("SC_CLK_TCK")
BASE = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
        "train": {"batch_size": 4, "tokens": 64}, "eval": {"tokens": 64}, "threads": 1}


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


def die(msg):
    print("sched_bench: " + msg, file=sys.stderr, flush=True)
    cleanup()
    sys.exit(1)


# ---- statistics -------------------------------------------------------------

def pct(xs, p):
    """Nearest-rank percentile (p in 0..100) of xs; None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(1, -(-len(s) * p // 100))  # ceil(n p / 100)
    return s[int(k) - 1]


def summary(xs):
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "p90": pct(xs, 90),
            "p99": pct(xs, 99), "max": max(xs), "min": min(xs),
            "mean": statistics.fmean(xs)}


def r3(x):
    return None if x is None else round(x, 3)


def rsum(d):
    return {k: (r3(v) if isinstance(v, float) else v) for k, v in d.items()}


# ---- processes, PostgreSQL, CPU ------------------------------------------------

procs = []  # (name, Popen, new_session)
tmp = tempfile.mkdtemp(prefix="ss-schedbench-")


def cleanup():
    for name, p, group in reversed(procs):
        if p.poll() is None:
            try:
                if group:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            except ProcessLookupError:
                pass
            p.wait()
    procs.clear()


def psql(sql, timeout=900):
    r = subprocess.run([PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", DB, "-c", sql],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        die(f"psql failed: {r.stderr.strip()}\n  SQL: {sql[:300]}")
    return r.stdout.strip()


def proc_ticks(pid, children=False):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    # fields[0] is state (field 3); utime/stime are fields 14/15, cutime/cstime 16/17
    t = int(fields[11]) + int(fields[12])
    if children:
        t += int(fields[13]) + int(fields[14])
    return t


def _postmaster_pid():
    """Our throwaway cluster's postmaster (other PostgreSQL servers on the
    machine are not counted)."""
    d = os.environ.get("PG_TEST_DIR")
    try:
        with open(os.path.join(d, "data", "postmaster.pid")) as f:
            return int(f.readline())
    except (OSError, TypeError, ValueError):
        return None


def postgres_ticks():
    """CPU of our postmaster and its children alive, plus what it has reaped
    (backends of finished connections)."""
    pm = _postmaster_pid()
    if pm is None:
        return 0
    total = proc_ticks(pm, children=True)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == pm:
            total += proc_ticks(d)
    return total


def self_ticks():
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system) * CLK_TCK


def rss_mb(pid):
    """Resident memory of a process in MiB (VmRSS), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class CpuMeter:
    """CPU seconds used over an interval by the scheduler, a set of worker
    processes (their reaped trainers included) and PostgreSQL."""

    def __init__(self, sched_pid, worker_pids=()):
        self.sched_pid, self.worker_pids = sched_pid, list(worker_pids)
        self.t0 = time.time()
        self.s0 = proc_ticks(sched_pid)
        self.w0 = sum(proc_ticks(p) for p in self.worker_pids)
        self.c0 = sum(proc_ticks(p, True) for p in self.worker_pids) - self.w0
        self.p0 = postgres_ticks()
        self.b0 = self_ticks()
        self.total0 = self._total()

    @staticmethod
    def _total():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v) - v[3] - v[4]  # busy = all but idle and iowait

    def stop(self):
        wall = time.time() - self.t0
        s = (proc_ticks(self.sched_pid) - self.s0) / CLK_TCK
        wt = sum(proc_ticks(p) for p in self.worker_pids)
        w = (wt - self.w0) / CLK_TCK
        c = (sum(proc_ticks(p, True) for p in self.worker_pids) - wt - self.c0) / CLK_TCK
        p = (postgres_ticks() - self.p0) / CLK_TCK
        b = (self_ticks() - self.b0) / CLK_TCK
        busy = (self._total() - self.total0) / CLK_TCK
        others = busy - s - w - c - p - b
        return {"wall_s": round(wall, 2), "scheduler_cpu_s": round(s, 2),
                "scheduler_cpu_pct": round(100 * s / wall, 1) if wall else None,
                "workers_cpu_s": round(w, 2), "trainers_cpu_s": round(c, 2),
                "postgres_cpu_s": round(p, 2),
                "postgres_cpu_pct": round(100 * p / wall, 1) if wall else None,
                "bench_client_cpu_s": round(b, 2),
                "machine_busy_pct_of_all_cores": round(100 * busy / wall / os.cpu_count(), 1)
                if wall else None,
                # CPU of everything else on the machine (other users' jobs): noise
                "other_processes_cpu_pct": round(100 * max(others, 0) / wall, 1)
                if wall else None}


# ---- the scheduler and its API ------------------------------------------------------

token_file = os.path.join(tmp, "token")
with open(token_file, "w") as f:
    f.write(os.urandom(24).hex())
os.chmod(token_file, 0o600)
TOKEN = open(token_file).read().strip()
sched_proc = None
api_port = workers_port = None


def start_scheduler():
    global sched_proc, api_port, workers_port
    ready = os.path.join(tmp, "ready.json")
    logf = open(os.path.join(LOG_DIR, "scheduler.log"), "a")
    sched_proc = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token_file,
         "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:0",
         "--checkpoints", os.path.join(tmp, "ckpt"), "--ready-file", ready,
         "--lease-seconds", "30"], stdout=logf, stderr=logf)
    procs.append(("scheduler", sched_proc, False))
    for _ in range(600):
        if sched_proc.poll() is not None:
            die(f"the scheduler exited with {sched_proc.returncode}; see {LOG_DIR}/scheduler.log")
        if os.path.exists(ready):
            r = json.load(open(ready))
            api_port, workers_port = r["http_port"], r["workers_port"]
            break
        time.sleep(0.05)
    else:
        die("the scheduler wrote no ready file within 30 s")
    for _ in range(300):
        try:
            if Api().request("GET", "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    die("the scheduler's /healthz did not answer 200 within 30 s")


class Api:
    """One keep-alive HTTP/1.1 connection to the scheduler's API."""

    def __init__(self, timeout=120):
        self.c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=timeout)

    def request(self, method, path, body=None):
        h = {"Authorization": "Bearer " + TOKEN}
        if body is not None:
            body = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        t = time.perf_counter()
        try:
            self.c.request(method, path, body=body, headers=h)
            r = self.c.getresponse()
            data = r.read()
        except (http.client.HTTPException, OSError):
            self.c.close()  # reconnect once: the server may have closed an idle connection
            self.c.request(method, path, body=body, headers=h)
            r = self.c.getresponse()
            data = r.read()
        ms = (time.perf_counter() - t) * 1e3
        if r.getheader("Connection", "").lower() == "close":
            self.c.close()
        return r.status, data, ms

    def close(self):
        self.c.close()


def submit(name, nruns):
    spec = {"name": name, "method": "runs", "base": BASE,
            "runs": [{"train": {"seed": i + 1}} for i in range(nruns)],
            "resources": {"cpus": 1}}
    body = json.dumps(spec).encode()
    api = Api(timeout=300)
    st, data, ms = api.request("POST", "/api/sweeps", body)
    api.close()
    if st != 201:
        die(f"POST /api/sweeps ({nruns} runs): {st} {data[:500]!r}")
    d = json.loads(data)
    if d.get("runs") != nruns:
        die(f"POST /api/sweeps: expected {nruns} runs, got {d}")
    return d["id"], ms, len(body)


def start_worker(name, slots, steps):
    wd = os.path.join(tmp, "w-" + name)
    logp = os.path.join(LOG_DIR, f"worker-{name}.log")
    logf = open(logp, "w")
    env = dict(os.environ, FAKE_STEPS=str(steps))
    p = subprocess.Popen(
        [BIN, "worker", "--scheduler", f"127.0.0.1:{workers_port}", "--token-file", token_file,
         "--cpu-slots", str(slots), "--work-dir", wd, "--name", name, "--bin", FAKE],
        stdout=logf, stderr=logf, env=env, start_new_session=True)
    procs.append((name, p, True))
    return p, logp, wd


def stop_worker(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# ---- pg_stat_statements: where the database time goes ----------------------------------

PGSS = False


def pgss_setup():
    """Loads pg_stat_statements into the throwaway cluster (a restart, before
    the scheduler starts). Skipped when BENCH_PGSS=0 or when it is missing."""
    global PGSS
    if os.environ.get("BENCH_PGSS", "1") == "0" or not os.environ.get("PGTEST_SH"):
        return
    psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    r = subprocess.run(["bash", "-c", '. "$PGTEST_SH" && pg_server_stop && pg_server_start'],
                       capture_output=True, text=True)
    if r.returncode != 0:
        log("pg_stat_statements: could not restart PostgreSQL; going on without it: " +
            r.stderr.strip())
        return
    ok = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", DB, "-c",
                         "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"],
                        capture_output=True, text=True)
    PGSS = ok.returncode == 0
    if not PGSS:
        log("pg_stat_statements unavailable: " + ok.stderr.strip())


def pgss_reset():
    if PGSS:
        psql("SELECT pg_stat_statements_reset()")


def pgss_top(label, n=8):
    """The statements with the most execution time since the last reset."""
    if not PGSS:
        return []
    out = psql("SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), "
               "round(max_exec_time::numeric, 1), rows, regexp_replace(query, '\\s+', ' ', 'g') "
               "FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%' "
               "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
               "ORDER BY total_exec_time DESC LIMIT " + str(n))
    top = []
    for line in out.splitlines():
        c, tot, mean, mx, rows, q = line.split("|", 5)
        top.append({"calls": int(c), "total_ms": float(tot), "mean_ms": float(mean),
                    "max_ms": float(mx), "rows": int(rows), "query": q[:240]})
    with open(os.path.join(LOG_DIR, f"pg_stat_statements-{label}.txt"), "w") as f:
        for t in top:
            f.write(f"{t['calls']:>8} calls {t['total_ms']:>10.1f} ms total {t['mean_ms']:>9.3f} "
                    f"ms mean {t['max_ms']:>8.1f} ms max  {t['query']}\n")
    return top


def spawn_baseline(n=50):
    """Spawn-to-exit of the fake trainer alone, from here (no worker)."""
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([FAKE, "train", "--config", "/dev/null"], stdout=subprocess.DEVNULL,
                       env=dict(os.environ, FAKE_STEPS=str(FAKE_STEPS)))
        xs.append((time.perf_counter() - t) * 1e3)
    return rsum(summary(xs))


# ---- EXPLAIN ANALYZE of the scheduler's queries ---------------------------------------

RUN_COLUMNS = ("r.id, r.sweep_id, r.status, r.attempt, r.max_attempts, r.gpus, r.priority, "
               "r.worker, r.lease_until, r.params, r.nonembedding_params, r.tokens, "
               "r.batch_size, r.flops, r.final_val_loss, r.started_at, r.finished_at, "
               "r.reproduces, r.code_version, r.error, r.checkpoint_step, r.config_hash")
Q_SWEEP = ("SELECT json_build_object('id', sw.id, 'name', sw.name, 'status', sw.status, "
           "'priority', sw.priority, 'created_at', sw.created_at, 'spec', sw.spec, "
           "'spec_hash', sw.spec_hash, 'counts', (SELECT json_build_object("
           "'queued', count(*) FILTER (WHERE status = 'queued'), "
           "'running', count(*) FILTER (WHERE status = 'running'), "
           "'succeeded', count(*) FILTER (WHERE status = 'succeeded'), "
           "'failed', count(*) FILTER (WHERE status = 'failed'), "
           "'cancelled', count(*) FILTER (WHERE status = 'cancelled'), 'total', count(*), "
           "'flops_planned', coalesce(sum(flops), 0), 'flops_done', coalesce(sum(flops) "
           "FILTER (WHERE status = 'succeeded'), 0)) FROM runs WHERE sweep_id = sw.id), "
           "'runs_total', (SELECT count(*) FROM runs WHERE sweep_id = sw.id), "
           "'runs', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT " + RUN_COLUMNS +
           " FROM runs r WHERE r.sweep_id = sw.id ORDER BY r.id LIMIT {limit}) t)) "
           "FROM sweeps sw WHERE sw.id = {id}")
Q_RUN = ("SELECT json_build_object('run', (SELECT row_to_json(t) FROM (SELECT " + RUN_COLUMNS +
         ", r.config FROM runs r WHERE r.id = {id}) t), "
         "'metrics', (SELECT coalesce(json_agg(m ORDER BY m.step), '[]') FROM "
         "(SELECT step, tokens, train_loss, val_loss, lr, grad_norm, b_noise, loss_scale, "
         "tok_per_s FROM metrics WHERE run_id = {id}) m)) "
         "WHERE EXISTS (SELECT 1 FROM runs WHERE id = {id})")
Q_SWEEPS = ("SELECT coalesce(json_agg(t ORDER BY t.id DESC), '[]') FROM ("
            "SELECT sw.id, sw.name, sw.status, sw.priority, sw.created_at, sw.spec_hash, "
            "count(r.id) AS runs, "
            "count(r.id) FILTER (WHERE r.status = 'succeeded') AS succeeded, "
            "count(r.id) FILTER (WHERE r.status = 'failed') AS failed, "
            "count(r.id) FILTER (WHERE r.status = 'running') AS running, "
            "count(r.id) FILTER (WHERE r.status = 'queued') AS queued, "
            "coalesce(sum(r.flops), 0) AS flops_planned, "
            "coalesce(sum(r.flops) FILTER (WHERE r.status = 'succeeded'), 0) AS flops_done "
            "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
            "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 1000) t")
Q_QUEUE = ("SELECT r.id, r.gpus FROM runs r JOIN sweeps sw ON sw.id = r.sweep_id "
           "WHERE r.status = 'queued' "
           "ORDER BY greatest(r.priority, sw.priority) DESC, r.sweep_id, r.flops NULLS LAST, "
           "r.id LIMIT {limit}")
Q_SWEEP_STATUS = (
    "SELECT CASE WHEN count(*) FILTER (WHERE status IN ('queued', 'running')) > 0 THEN "
    "CASE WHEN count(*) FILTER (WHERE status <> 'queued') > 0 THEN 'running' ELSE 'queued' END "
    "WHEN count(*) FILTER (WHERE status = 'failed') > 0 THEN 'failed' "
    "WHEN count(*) FILTER (WHERE status = 'succeeded') > 0 THEN 'succeeded' "
    "ELSE 'cancelled' END::run_status AS st FROM runs WHERE sweep_id = {id}")
Q_REFIT_POINTS = (
    "SELECT nonembedding_params, tokens, flops, final_val_loss, "
    "batch_size * (config->'model'->>'seq_len')::int, "
    "tokens / nullif(batch_size * (config->'model'->>'seq_len')::int, 0), "
    "(config->'train'->>'lr')::float8, coalesce(part, '') "
    "FROM runs WHERE sweep_id = {id} AND status = 'succeeded' "
    "AND coalesce(part, '') <> 'batch' "
    "AND final_val_loss > 0 AND nonembedding_params > 0 AND tokens > 0 ORDER BY id")


def explain(label, sql):
    """EXPLAIN (ANALYZE, BUFFERS) to a file; returns the execution time in ms."""
    out = psql("EXPLAIN (ANALYZE, BUFFERS) " + sql)
    with open(os.path.join(LOG_DIR, f"explain-{label}.txt"), "w") as f:
        f.write(sql + "\n\n" + out + "\n")
    m = re.search(r"Execution Time: ([0-9.]+) ms", out)
    return float(m.group(1)) if m else None


# ---- (a) dispatch ------------------------------------------------------------------------

LINE_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z worker: run (\d+) attempt (\d+): "
                     r"(assigned|started pid|exited with code|killed by signal|"
                     r"finished and acknowledged)")
EV = {"assigned": "assigned", "started pid": "started", "exited with code": "exited",
      "killed by signal": "exited", "finished and acknowledged": "acked"}


def parse_ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def parse_worker_log(path):
    """{run_id: {event: time}} from one worker's log (first attempt only)."""
    runs = collections.defaultdict(dict)
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE_RE.match(line)
            if m:
                runs[int(m.group(2))].setdefault(EV[m.group(4)], parse_ts(m.group(1)))
    return runs


def slot_gaps(runs, slots):
    """Pairs each trainer start after the first `slots` with the earliest
    unpaired exit before it (FIFO) on this worker. Returns a list of
    (gap, exit->acked, acked->assigned, assigned->started) in ms."""
    ev = []
    for rid, e in runs.items():
        if "started" in e:
            ev.append((e["started"], 1, rid))
        if "exited" in e:
            ev.append((e["exited"], 0, rid))
    ev.sort()  # at the same ms, exits first
    free = collections.deque()
    out = []
    for t, kind, rid in ev:
        if kind == 0:
            free.append(rid)
        elif free:
            prev = runs[free.popleft()]
            nxt = runs[rid]
            parts = [None, None, None]
            if "acked" in prev:
                parts[0] = (prev["acked"] - prev["exited"]) * 1e3
                if "assigned" in nxt:
                    parts[1] = (nxt["assigned"] - prev["acked"]) * 1e3
            if "assigned" in nxt:
                parts[2] = (nxt["started"] - nxt["assigned"]) * 1e3
            out.append(((t - prev["exited"]) * 1e3, *parts))
    return out


def dispatch(layout, label=None, sweep_id=None, nruns=DISPATCH_RUNS, run_filter="true"):
    """Runs nruns queued runs of a sweep (a new one of nruns fake runs when
    sweep_id is None) on workers laid out as layout ("NxK": N workers with K
    CPU slots each); run_filter picks the sweep's runs that belong to this
    measurement (SQL on runs)."""
    nworkers, slots = (int(x) for x in layout.lower().split("x"))
    label = label or f"dispatch {layout}"
    tag = label.replace(" ", "-")
    name = f"bench-{tag}-{os.getpid()}-{int(time.time())}"
    submit_ms = None
    if sweep_id is None:
        # a sweep holds at most 10,000 runs: more are several sweeps, and
        # run_filter picks them all
        log(f"{label}: submitting {nruns} runs")
        ids, submit_ms, left, part = [], 0.0, nruns, 0
        while left > 0:
            k = min(left, 10000)
            sid, ms, _ = submit(f"{name}-{part}", k)
            ids.append(sid)
            submit_ms += ms
            left -= k
            part += 1
        sweep_id = ids[0]
        if len(ids) > 1:
            run_filter = f"sweep_id IN ({','.join(str(i) for i in ids)})"
        log(f"{label}: sweep(s) {', '.join(str(i) for i in ids)} submitted in {submit_ms:.0f} ms")
    limit = (nworkers * slots) * 4 + 16
    q_ms = explain(f"queue-{tag}", Q_QUEUE.format(limit=limit))
    st_ms = explain(f"sweep-status-{tag}", Q_SWEEP_STATUS.format(id=sweep_id))
    log(f"{label}: starting {nworkers} worker(s) x {slots} slot(s)")
    pgss_reset()
    workers = [start_worker(f"{name}-w{i}", slots, FAKE_STEPS) for i in range(nworkers)]
    cpu = CpuMeter(sched_proc.pid, [w[0].pid for w in workers])
    deadline = time.time() + DISPATCH_TIMEOUT
    offsets = [0] * nworkers
    acked = 0
    last_report = time.time()
    rss = [rss_mb(sched_proc.pid)]  # the scheduler's memory, sampled once a second
    last_rss = time.time()
    while acked < nruns:
        if time.time() - last_rss >= 1:
            rss.append(rss_mb(sched_proc.pid))
            last_rss = time.time()
        for i, (p, logp, _) in enumerate(workers):
            if p.poll() is not None:
                die(f"worker {i} exited with {p.returncode}; see {logp}")
            with open(logp, errors="replace") as f:
                f.seek(offsets[i])
                chunk = f.read()
            cut = chunk.rfind("\n") + 1
            offsets[i] += len(chunk[:cut].encode())
            acked += chunk[:cut].count("finished and acknowledged")
        if time.time() > deadline:
            die(f"{label}: only {acked} of {nruns} runs finished within "
                f"{DISPATCH_TIMEOUT} s; see {LOG_DIR}")
        if time.time() - last_report > 10:
            log(f"{label}: {acked} of {nruns} runs done")
            last_report = time.time()
        time.sleep(0.2)
    usage = cpu.stop()
    rss.append(rss_mb(sched_proc.pid))
    for p, _, _ in workers:
        stop_worker(p)
    top = pgss_top(tag)

    # the worker logs: per-run timestamps
    all_runs = {}
    gaps = []
    per_worker_runs = []
    for p, logp, _ in workers:
        runs = parse_worker_log(logp)
        all_runs.update(runs)
        per_worker_runs.append(len(runs))
        gaps.extend(slot_gaps(runs, slots))
    starts = [e["started"] for e in all_runs.values() if "started" in e]
    exits = [e["exited"] for e in all_runs.values() if "exited" in e]
    wall = max(exits) - min(starts)
    spawn_to_exit = [(e["exited"] - e["started"]) * 1e3 for e in all_runs.values()
                     if "started" in e and "exited" in e]

    # the database: outcome, and the scheduler-side view
    sweeps = f"sweep_id = {sweep_id}" if run_filter == "true" or "sweep_id IN" not in run_filter \
        else run_filter
    counts = psql(f"SELECT status, count(*) FROM runs WHERE {sweeps} "
                  f"AND ({run_filter}) GROUP BY status ORDER BY status")
    rows = psql(f"SELECT coalesce(worker, 0), extract(epoch FROM started_at), "
                f"extract(epoch FROM finished_at), attempt FROM runs "
                f"WHERE {sweeps} AND started_at IS NOT NULL AND ({run_filter})")
    by_worker = collections.defaultdict(dict)
    attempts_over_1 = 0
    for line in rows.splitlines():
        w, s, fin, att = line.split("|")
        if int(att) > 1:
            attempts_over_1 += 1
        by_worker[w][len(by_worker[w])] = {"started": float(s), "exited": float(fin)} \
            if fin else {"started": float(s)}
    dbgaps = []
    for w, runs in by_worker.items():
        dbgaps.extend(g[0] for g in slot_gaps(runs, slots))
    db_starts = [e["started"] for rs in by_worker.values() for e in rs.values()]
    db_ends = [e["exited"] for rs in by_worker.values() for e in rs.values() if "exited" in e]
    db_wall = max(db_ends) - min(db_starts)
    metric_rows = int(psql(f"SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id "
                           f"WHERE r.{sweeps} AND ({run_filter})"))

    g = [x[0] for x in gaps]
    res = {
        "label": label, "layout": layout, "workers": nworkers, "slots_per_worker": slots,
        "runs": nruns, "fake_steps": FAKE_STEPS, "sweep_id": sweep_id,
        "submit_ms": None if submit_ms is None else round(submit_ms, 1),
        "status_counts": dict(line.split("|") for line in counts.splitlines()),
        "runs_with_attempt_over_1": attempts_over_1,
        "runs_per_worker": per_worker_runs,
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(exits) / wall, 1),
        "runs_per_s_db": round(len(db_ends) / db_wall, 1),
        "gap_ms": rsum(summary(g)),
        "gap_exit_to_acked_ms": rsum(summary([x[1] for x in gaps if x[1] is not None])),
        "gap_acked_to_assigned_ms": rsum(summary([x[2] for x in gaps if x[2] is not None])),
        "gap_assigned_to_spawned_ms": rsum(summary([x[3] for x in gaps if x[3] is not None])),
        "trainer_spawn_to_exit_ms": rsum(summary(spawn_to_exit)),
        "gap_db_ms": rsum(summary(dbgaps)),
        "gaps_over_50ms": sum(1 for x in g if x > 50),
        "explain_queue_query_ms": q_ms, "explain_sweep_status_ms": st_ms,
        "cpu": usage, "top_queries": top,
        "scheduler_rss_mb": {"start": rss[0], "peak": max(rss), "end": rss[-1],
                             "samples": len(rss)},
        "metric_rows": metric_rows,
        "metric_rows_per_s": round(metric_rows / db_wall, 1) if db_wall else None,
    }
    log(f"{label}: {res['runs_per_s']} runs/s, gap median "
        f"{res['gap_ms'].get('median')} ms, p99 {res['gap_ms'].get('p99')} ms; "
        f"scheduler CPU {usage['scheduler_cpu_pct']}%, postgres {usage['postgres_cpu_pct']}%")
    return res


# ---- (b) metric rows/s ---------------------------------------------------------------------

class FakeWorker(threading.Thread):
    """Speaks the worker protocol: hello, waits for an assignment, streams
    metric batches with a window of acks, then reports the run finished."""

    def __init__(self, idx, name, start_evt, stop_evt, ready_barrier):
        super().__init__(daemon=True)
        self.idx, self.name = idx, name
        self.start_evt, self.stop_evt, self.ready = start_evt, stop_evt, ready_barrier
        self.run_id = self.attempt = None
        self.sent_batches = self.acked_seq = 0
        self.ack_times = []  # (time, rows acked so far)
        self.first_send = None
        self.error = None
        self.bytes_sent = 0
        self.finished_acked = False

    def send(self, obj_or_line):
        line = obj_or_line if isinstance(obj_or_line, str) else json.dumps(obj_or_line) + "\n"
        data = line.encode()
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    def read_msg(self, timeout):
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the scheduler closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        m = json.loads(line)
        if m.get("type") == "error":
            raise ConnectionError("scheduler error: " + m.get("message", "?"))
        return m

    def batch(self, seq):
        b = METRIC_BATCH
        first = (seq - 1) * b + 1
        rows = ",".join(
            '{"event":"step","step":%d,"tokens":%d,"train_loss":%d.%06d,"lr":0.0003,'
            '"grad_norm":1.25,"tok_per_s":123456.5}' % (s, s * 1024, 3 + s % 3, s % 999983)
            for s in range(first, first + b))
        return ('{"type":"metrics","run_id":%d,"attempt":%d,"seq":%d,"rows":[%s]}\n'
                % (self.run_id, self.attempt, seq, rows))

    def handle(self, m):
        if m.get("type") == "ack" and m.get("run_id") == self.run_id:
            seq = m["seq"]
            if seq > self.acked_seq:
                self.acked_seq = min(seq, self.sent_batches)
                self.ack_times.append((time.perf_counter(), self.acked_seq * METRIC_BATCH))
                if seq > self.sent_batches:
                    self.finished_acked = True

    def run(self):
        try:
            self._run()
        except Exception as e:  # reported by the main thread
            self.error = f"{type(e).__name__}: {e}"
            try:
                self.ready.abort()
            except threading.BrokenBarrierError:
                pass

    def _run(self):
        self.buf = b""
        self.sock = socket.create_connection(("127.0.0.1", workers_port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send({"type": "hello", "version": 1, "token": TOKEN, "name": self.name,
                   "host": "bench", "gpus": [], "cpu_slots": 1, "runs": []})
        while True:
            m = self.read_msg(30)
            if m.get("type") == "assign":
                self.run_id, self.attempt = m["run_id"], m["attempt"]
                break
        self.send({"type": "started", "run_id": self.run_id, "attempt": self.attempt,
                   "config": {"event": "config", "params": 4416, "nonembedding_params": 3200,
                              "flops_per_token": 26496}})
        self.ready.wait(60)
        self.start_evt.wait()
        next_hb = time.time() + 5
        self.first_send = time.perf_counter()
        while not self.stop_evt.is_set():
            while self.sent_batches - self.acked_seq < METRIC_WINDOW and \
                    not self.stop_evt.is_set():
                self.sent_batches += 1
                self.send(self.batch(self.sent_batches))
            self.handle(self.read_msg(30))
            if time.time() > next_hb:
                self.send({"type": "heartbeat", "runs": [self.run_id]})
                next_hb = time.time() + 5
        t_end = time.time() + 60
        while self.acked_seq < self.sent_batches and time.time() < t_end:
            self.handle(self.read_msg(60))
        self.all_acked_at = time.perf_counter()
        steps = self.sent_batches * METRIC_BATCH
        self.send({"type": "finished", "run_id": self.run_id, "attempt": self.attempt,
                   "seq": self.sent_batches + 1, "exit_code": 0, "signal": 0,
                   "done": {"event": "done", "final_val_loss": 3.5, "params": 4416,
                            "nonembedding_params": 3200, "flops": 1.0e9, "flops_6nd": 1.0e9,
                            "tokens": steps * 1024, "steps": steps, "wall_s": 1.0,
                            "peak_rss_bytes": 1 << 20},
                   "error": None, "log_tail": ""})
        while not self.finished_acked and time.time() < t_end:
            self.handle(self.read_msg(60))
        self.sock.close()


def api_sampler(path, stop_evt, out):
    api = Api()
    while not stop_evt.is_set():
        st, _, ms = api.request("GET", path)
        if st == 200:
            out.append(ms)
        time.sleep(0.1)
    api.close()


def metrics_part():
    n = METRIC_WORKERS
    name = f"bench-metrics-{os.getpid()}-{int(time.time())}"
    sweep_id, _, _ = submit(name, n)
    log(f"metrics: sweep {sweep_id}; {n} fake workers, batches of {METRIC_BATCH} rows, "
        f"window {METRIC_WINDOW}, {METRIC_SECONDS:.0f} s")
    start_evt, stop_evt, api_stop = threading.Event(), threading.Event(), threading.Event()
    barrier = threading.Barrier(n + 1)
    fws = [FakeWorker(i, f"{name}-fw{i}", start_evt, stop_evt, barrier) for i in range(n)]
    for fw in fws:
        fw.start()
    try:
        barrier.wait(60)
    except threading.BrokenBarrierError:
        die("metrics: the fake workers did not all get a run: " +
            "; ".join(f"fw{f.idx}: {f.error or ('run ' + str(f.run_id))}" for f in fws))
    run_ids = [fw.run_id for fw in fws]
    if len(set(run_ids)) != n:
        die(f"metrics: fake workers got runs {run_ids}")
    lat = []
    sampler = threading.Thread(target=api_sampler, args=(f"/api/sweeps/{sweep_id}", api_stop,
                                                         lat), daemon=True)
    pgss_reset()
    cpu = CpuMeter(sched_proc.pid)
    t0 = time.perf_counter()
    start_evt.set()
    sampler.start()
    time.sleep(METRIC_SECONDS)
    stop_evt.set()
    t_stop = time.perf_counter()
    api_stop.set()
    for fw in fws:
        fw.join(120)
    usage = cpu.stop()
    top = pgss_top("metrics")
    sampler.join(10)
    errs = [f"fw{fw.idx}: {fw.error}" for fw in fws if fw.error]
    if errs:
        die("metrics: " + "; ".join(errs))
    rows_acked = sum(fw.acked_seq * METRIC_BATCH for fw in fws)
    last_ack = max(fw.ack_times[-1][0] for fw in fws if fw.ack_times)
    rate = rows_acked / (last_ack - t0)
    # steady state: acks between 2 s after the start and the stop
    lo, hi = t0 + 2, t_stop
    steady_rows = 0
    for fw in fws:
        before = [r for t, r in fw.ack_times if t <= lo]
        upto = [r for t, r in fw.ack_times if t <= hi]
        steady_rows += (upto[-1] if upto else 0) - (before[-1] if before else 0)
    steady = steady_rows / (hi - lo) if hi > lo else None
    ids = ",".join(str(r) for r in run_ids)
    stored = int(psql(f"SELECT count(*) FROM metrics WHERE run_id IN ({ids})"))
    statuses = psql(f"SELECT status, count(*) FROM runs WHERE id IN ({ids}) GROUP BY status")
    batch_bytes = len(fws[0].batch(1).encode()) if fws[0].run_id else None
    res = {
        "fake_workers": n, "batch_rows": METRIC_BATCH, "window": METRIC_WINDOW,
        "seconds": METRIC_SECONDS, "batch_bytes": batch_bytes,
        "rows_acked": rows_acked, "rows_in_db": stored,
        "rows_per_s": round(rate, 0), "rows_per_s_steady": round(steady, 0) if steady else None,
        "rows_per_s_by_worker": [round(fw.acked_seq * METRIC_BATCH / (last_ack - t0))
                                 for fw in fws],
        "mbytes_per_s_sent": round(sum(fw.bytes_sent for fw in fws) / (last_ack - t0) / 1e6, 2),
        "run_status": dict(line.split("|") for line in statuses.splitlines()),
        "api_get_sweep_during_ingest_ms": rsum(summary(lat)),
        "cpu": usage, "top_queries": top,
    }
    log(f"metrics: {res['rows_per_s']:.0f} rows/s ({rows_acked} acked, {stored} in the "
        f"database); GET /api/sweeps/{sweep_id} meanwhile: median "
        f"{r3(res['api_get_sweep_during_ingest_ms'].get('median'))} ms, p99 "
        f"{r3(res['api_get_sweep_during_ingest_ms'].get('p99'))} ms; scheduler CPU "
        f"{usage['scheduler_cpu_pct']}%, postgres {usage['postgres_cpu_pct']}%")
    return res


# ---- (c) API latency ---------------------------------------------------------------------------

def time_requests(api, path, n, warmup=3):
    for _ in range(warmup):
        st, data, _ = api.request("GET", path)
        if st != 200:
            die(f"GET {path}: {st} {data[:300]!r}")
    lat, size = [], 0
    for _ in range(n):
        st, data, ms = api.request("GET", path)
        if st != 200:
            die(f"GET {path}: {st} {data[:300]!r}")
        lat.append(ms)
        size = len(data)
    return lat, size


def api_part():
    name = f"bench-api-{os.getpid()}-{int(time.time())}"
    log(f"api: submitting {API_RUNS} runs through POST /api/sweeps")
    sweep_id, submit_ms, body_bytes = submit(name, API_RUNS)
    log(f"api: sweep {sweep_id} submitted in {submit_ms:.0f} ms ({body_bytes} bytes); "
        f"loading {API_RUNS} x {API_METRICS} metric rows with generate_series")
    t = time.time()
    psql(f"UPDATE runs SET status = 'succeeded', attempt = 1, "
         f"started_at = now() - interval '1 hour' + id * interval '1 ms', "
         f"finished_at = now() - interval '30 minutes' + id * interval '1 ms', "
         f"final_val_loss = 3 + (id % 97) / 100.0, tokens = {API_METRICS * 64}, "
         f"nonembedding_params = coalesce(nonembedding_params, 3200), "
         f"params = coalesce(params, 4416) WHERE sweep_id = {sweep_id}")
    psql(f"UPDATE sweeps SET status = 'succeeded' WHERE id = {sweep_id}")
    psql(f"INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr, grad_norm, "
         f"tok_per_s) SELECT r.id, s, s * 64::bigint, 5.5 - ln(s) * 0.3, "
         f"CASE WHEN s % 100 = 0 THEN 5.4 - ln(s) * 0.3 END, 3e-4, 1.0 + 1.0 / s, 1e5 "
         f"FROM (SELECT id FROM runs WHERE sweep_id = {sweep_id} ORDER BY id) r, "
         f"LATERAL generate_series(1, {API_METRICS} + 0 * r.id) s", timeout=1800)
    load_s = time.time() - t
    t = time.time()
    psql("VACUUM ANALYZE runs")
    psql("VACUUM ANALYZE metrics", timeout=1800)
    vacuum_s = time.time() - t
    total_metrics = int(psql("SELECT count(*) FROM metrics"))
    total_runs = int(psql("SELECT count(*) FROM runs"))
    sizes = psql("SELECT pg_size_pretty(pg_total_relation_size('metrics')) || ' / ' || "
                 "pg_size_pretty(pg_total_relation_size('runs'))")
    log(f"api: loaded in {load_s:.0f} s, VACUUM ANALYZE {vacuum_s:.0f} s; {total_runs} runs, "
        f"{total_metrics} metric rows in the database (metrics / runs: {sizes})")
    run_id = int(psql(f"SELECT id FROM runs WHERE sweep_id = {sweep_id} ORDER BY id "
                      f"OFFSET {API_RUNS // 2} LIMIT 1"))

    pgss_reset()
    cpu = CpuMeter(sched_proc.pid)
    api = Api()
    sweep_lat, sweep_size = time_requests(api, f"/api/sweeps/{sweep_id}", API_REQUESTS)
    # every run in one answer (?limit=10000), the most a client can ask for
    whole_lat, whole_size = time_requests(api, f"/api/sweeps/{sweep_id}?limit=10000",
                                          max(1, API_REQUESTS // 4))
    run_lat, run_size = time_requests(api, f"/api/runs/{run_id}", API_REQUESTS)
    list_lat, list_size = time_requests(api, "/api/sweeps", max(1, API_REQUESTS // 4))
    api.close()
    usage = cpu.stop()
    top = pgss_top("api")
    ex = {"get_sweep": explain("get-sweep", Q_SWEEP.format(id=sweep_id, limit=500)),
          "get_run": explain("get-run", Q_RUN.format(id=run_id)),
          "get_sweeps": explain("get-sweeps", Q_SWEEPS),
          "sweep_status": explain("sweep-status-big", Q_SWEEP_STATUS.format(id=sweep_id)),
          "refit_points": explain("refit-points-big", Q_REFIT_POINTS.format(id=sweep_id)),
          "queue": explain("queue-big", Q_QUEUE.format(limit=24))}
    res = {
        "sweep_id": sweep_id, "runs_in_sweep": API_RUNS, "metrics_per_run": API_METRICS,
        "runs_in_db": total_runs, "metric_rows_in_db": total_metrics,
        "table_sizes_metrics_runs": sizes,
        "submit_ms": round(submit_ms, 1), "submit_body_bytes": body_bytes,
        "load_s": round(load_s, 1), "vacuum_analyze_s": round(vacuum_s, 1),
        "get_sweep_ms": rsum(summary(sweep_lat)), "get_sweep_bytes": sweep_size,
        "get_sweep_all_runs_ms": rsum(summary(whole_lat)), "get_sweep_all_runs_bytes": whole_size,
        "get_run_ms": rsum(summary(run_lat)), "get_run_bytes": run_size, "run_id": run_id,
        "get_sweeps_ms": rsum(summary(list_lat)), "get_sweeps_bytes": list_size,
        "explain_execution_ms": ex,
        "cpu": usage, "top_queries": top,
    }
    log(f"api: GET /api/sweeps/{sweep_id}: median {r3(res['get_sweep_ms']['median'])} ms, "
        f"p99 {r3(res['get_sweep_ms']['p99'])} ms ({sweep_size} bytes); GET /api/runs/{run_id}: "
        f"median {r3(res['get_run_ms']['median'])} ms, p99 {r3(res['get_run_ms']['p99'])} ms")
    return res


# ---- (d) dispatch inside a big sweep ---------------------------------------------------------

def bigsweep_part(api_sweep_id):
    """BENCH_BIG_RUNS reproductions (POST /api/runs/{id}/reproduce) of runs of
    the API part's sweep (10,000 succeeded runs): queued runs in a sweep that
    already holds 10,000, run by one worker with 2 slots -- the scheduler's
    per-run queries that read the whole sweep show here."""
    ids = psql(f"SELECT id FROM runs WHERE sweep_id = {api_sweep_id} ORDER BY id "
               f"LIMIT {BIG_RUNS}").split()
    fits0 = int(psql(f"SELECT count(*) FROM fits WHERE sweep_id = {api_sweep_id}"))
    api = Api()
    lat = []
    for rid in ids:
        st, data, ms = api.request("POST", f"/api/runs/{rid}/reproduce")
        if st != 201:
            die(f"POST /api/runs/{rid}/reproduce: {st} {data[:300]!r}")
        lat.append(ms)
    api.close()
    log(f"big sweep: {len(ids)} reproductions queued in sweep {api_sweep_id} (POST median "
        f"{r3(statistics.median(lat))} ms)")
    size = int(psql(f"SELECT count(*) FROM runs WHERE sweep_id = {api_sweep_id}"))
    res = dispatch("1x2", label=f"dispatch 1x2 in a {size}-run sweep", sweep_id=api_sweep_id,
                   nruns=len(ids), run_filter="reproduces IS NOT NULL")
    res["reproduce_post_ms"] = rsum(summary(lat))
    # the scheduler refits the sweep's laws (on its thread pool) after runs succeed
    res["fits_stored_meanwhile"] = int(psql(f"SELECT count(*) FROM fits WHERE sweep_id = "
                                            f"{api_sweep_id}")) - fits0
    res["runs_already_in_sweep"] = int(psql(f"SELECT count(*) FROM runs WHERE sweep_id = "
                                            f"{api_sweep_id} AND reproduces IS NULL"))
    return res


# ---- the table ------------------------------------------------------------------------------------

def verdict(value, target, higher_better):
    if value is None:
        return "n/a"
    ok = value >= target if higher_better else value < target
    return "met" if ok else "MISSED"


def print_table(results):
    rows = []
    for d in results.get("dispatch", []):
        lay = d.get("label", f"dispatch {d['layout']}")
        rows.append((f"{lay}: runs dispatched per second", f"{d['runs_per_s']:.1f}",
                     "-", ""))
        rows.append((f"{lay}: idle gap per slot, median (ms)", f"{d['gap_ms']['median']:.1f}",
                     "-", ""))
        rows.append((f"{lay}: idle gap per slot, p99 (ms)", f"{d['gap_ms']['p99']:.1f}",
                     f"< {TARGET_GAP_P99_MS:.0f}",
                     verdict(d["gap_ms"]["p99"], TARGET_GAP_P99_MS, False)))
        rows.append((f"{lay}:   exit->acked / acked->assigned / assigned->spawned, median ms",
                     "%s / %s / %s" % (d["gap_exit_to_acked_ms"].get("median"),
                                       d["gap_acked_to_assigned_ms"].get("median"),
                                       d["gap_assigned_to_spawned_ms"].get("median")), "-", ""))
        rows.append((f"{lay}:   same, p99 ms",
                     "%s / %s / %s" % (d["gap_exit_to_acked_ms"].get("p99"),
                                       d["gap_acked_to_assigned_ms"].get("p99"),
                                       d["gap_assigned_to_spawned_ms"].get("p99")), "-", ""))
        rows.append((f"{lay}: gap from the database (finished_at->next started_at), "
                     f"median / p99 ms",
                     f"{d['gap_db_ms'].get('median')} / {d['gap_db_ms'].get('p99')}", "-", ""))
        ok = int(d["status_counts"].get("succeeded", 0))
        rows.append((f"{lay}: runs succeeded / submitted", f"{ok} / {d['runs']}", "all",
                     "met" if ok == d["runs"] else "MISSED"))
        m = d.get("scheduler_rss_mb") or {}
        rows.append((f"{lay}: scheduler RSS start / peak / end (MiB)",
                     f"{m.get('start')} / {m.get('peak')} / {m.get('end')}", "-", ""))
        if d.get("metric_rows"):
            rows.append((f"{lay}: metric rows stored ({d['metric_rows']}) per second",
                         f"{d['metric_rows_per_s']:.0f}", "-", ""))
        c = d["cpu"]
        rows.append((f"{lay}: CPU % of one core: scheduler / postgres / workers / trainers / "
                     f"other users",
                     "%s / %s / %.0f / %.0f / %s" % (
                         c["scheduler_cpu_pct"], c["postgres_cpu_pct"],
                         100 * c["workers_cpu_s"] / c["wall_s"],
                         100 * c["trainers_cpu_s"] / c["wall_s"], c["other_processes_cpu_pct"]),
                     "-", ""))
    m = results.get("metrics")
    if m:
        rows.append((f"metric rows stored per second ({m['fake_workers']} workers)",
                     f"{m['rows_per_s']:.0f}", f">= {TARGET_ROWS_PER_S:.0f}",
                     verdict(m["rows_per_s"], TARGET_ROWS_PER_S, True)))
        rows.append(("metric rows acked / found in the database",
                     f"{m['rows_acked']} / {m['rows_in_db']}", "equal",
                     "met" if m["rows_acked"] == m["rows_in_db"] else "MISSED"))
        a = m["api_get_sweep_during_ingest_ms"]
        rows.append((f"GET /api/sweeps/{{id}} ({m['fake_workers']} runs) during ingestion, "
                     f"median / p99 ms",
                     f"{r3(a.get('median'))} / {r3(a.get('p99'))}", "-", ""))
        rows.append(("metrics: CPU % of one core: scheduler / postgres / bench client / other users",
                     "%s / %s / %.0f / %s" % (
                         m["cpu"]["scheduler_cpu_pct"], m["cpu"]["postgres_cpu_pct"],
                         100 * m["cpu"]["bench_client_cpu_s"] / m["cpu"]["wall_s"],
                         m["cpu"]["other_processes_cpu_pct"]), "-", ""))
    a = results.get("api")
    if a:
        tag = f"{a['runs_in_sweep']} runs, {a['metric_rows_in_db'] / 1e6:.1f}M metric rows"
        rows.append((f"GET /api/sweeps/{{id}} (first page of 500 runs) median (ms) [{tag}]",
                     f"{a['get_sweep_ms']['median']:.1f}", "-", ""))
        rows.append((f"GET /api/sweeps/{{id}} (first page of 500 runs) p99 (ms)",
                     f"{a['get_sweep_ms']['p99']:.1f}",
                     f"< {TARGET_API_P99_MS:.0f}",
                     verdict(a["get_sweep_ms"]["p99"], TARGET_API_P99_MS, False)))
        rows.append((f"GET /api/sweeps/{{id}}?limit=10000 (every run, "
                     f"{a['get_sweep_all_runs_bytes'] / 1e6:.1f} MB) median / p99 ms",
                     f"{a['get_sweep_all_runs_ms']['median']:.1f} / "
                     f"{a['get_sweep_all_runs_ms']['p99']:.1f}", "-", ""))
        rows.append((f"GET /api/runs/{{id}} ({a['metrics_per_run']} metric rows) median / p99 ms",
                     f"{a['get_run_ms']['median']:.1f} / {a['get_run_ms']['p99']:.1f}",
                     f"< {TARGET_API_P99_MS:.0f}",
                     verdict(a["get_run_ms"]["p99"], TARGET_API_P99_MS, False)))
        rows.append(("GET /api/sweeps median / p99 ms",
                     f"{a['get_sweeps_ms']['median']:.1f} / {a['get_sweeps_ms']['p99']:.1f}",
                     "-", ""))
        rows.append((f"POST /api/sweeps with {a['runs_in_sweep']} runs (ms)",
                     f"{a['submit_ms']:.0f}", "-", ""))
    w = max(len(r[0]) for r in rows) if rows else 10
    print()
    print(f"{'figure':<{w}}  {'value':>22}  {'target':>9}  verdict")
    print("-" * (w + 45))
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>22}  {r[2]:>9}  {r[3]}")
    print()
    parts = [(d.get("label", f"dispatch {d['layout']}"), d) for d in results.get("dispatch", [])]
    parts += [(k, results[k]) for k in ("metrics", "api") if results.get(k)]
    for label, d in parts:
        if d.get("top_queries"):
            print(f"database time by statement, {label} (pg_stat_statements; top 3):")
            for t in d["top_queries"][:3]:
                print(f"  {t['calls']:>6} calls {t['total_ms']:>9.1f} ms total "
                      f"{t['mean_ms']:>8.3f} ms mean  {t['query'][:90]}")
    print()


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model,
            "postgres": psql("SHOW server_version"),
            "kernel": os.uname().release}


def main():
    if not DB:
        die("SCALESWEEP_TEST_DB is not set: run through tests/bench/sched_bench.sh")
    if not os.access(BIN, os.X_OK):
        die(f"{BIN} is not an executable; build first")
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    os.makedirs(LOG_DIR, exist_ok=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    pgss_setup()
    baseline = spawn_baseline()
    log(f"the fake trainer alone: spawn to exit median {baseline['median']} ms, p99 "
        f"{baseline['p99']} ms")
    start_scheduler()
    log(f"scheduler pid {sched_proc.pid}: API port {api_port}, worker port {workers_port}")
    results = {"machine": machine(), "binary": BIN,
               "fake_trainer_alone_ms": baseline, "pg_stat_statements": PGSS,
               "targets": {"gap_p99_ms": TARGET_GAP_P99_MS, "rows_per_s": TARGET_ROWS_PER_S,
                           "api_p99_ms": TARGET_API_P99_MS}}
    if "dispatch" in PARTS:
        results["dispatch"] = [dispatch(layout) for layout in DISPATCH_LAYOUTS]
    if "metrics" in PARTS:
        results["metrics"] = metrics_part()
    if "api" in PARTS:
        results["api"] = api_part()
        if "bigsweep" in PARTS and BIG_RUNS > 0:
            results["dispatch"] = results.get("dispatch", []) + \
                [bigsweep_part(results["api"]["sweep_id"])]
    results["total_s"] = round(time.time() - T_START, 1)
    sched_proc.send_signal(signal.SIGTERM)
    try:
        sched_proc.wait(15)
    except subprocess.TimeoutExpired:
        pass
    cleanup()
    with open(OUT, "w") as f:
        json.dump(results, f, indent=2)
    print_table(results)
    print(f"written: {OUT} (logs and EXPLAIN ANALYZE output: {LOG_DIR}); total "
          f"{results['total_s']} s")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()

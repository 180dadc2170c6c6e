"""The scheduler benchmark's setting (sched_bench.py): the BENCH_* configuration,
statistics, child processes and their CPU time, psql, the scheduler with its API and
the workers. The scheduler's state (sched_proc, api_port, workers_port) lives here:
other modules read it as sched_bench_env.NAME."""
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


PARTS = os.environ.get("BENCH_PARTS",
                       "dispatch metrics anchor api bigsweep capacity queue").split()
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
CURVE_RUNS = env_int("BENCH_CURVE_RUNS", 50)
CAPACITY_RUNS = env_int("BENCH_CAPACITY_RUNS", 20000)
ANCHOR_SECONDS = env_int("BENCH_ANCHOR_SECONDS", 10)
ANCHOR_COPY_ROWS = env_int("BENCH_ANCHOR_COPY_ROWS", 2000000)
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
startup_s = {}  # the last start: process start -> ready file, -> first 200 from /healthz




def start_scheduler():
    global sched_proc, api_port, workers_port
    ready = os.path.join(tmp, "ready.json")
    logf = open(os.path.join(LOG_DIR, "scheduler.log"), "a")
    t0 = time.perf_counter()
    sched_proc = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token_file,
         "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:0",
         "--checkpoints", os.path.join(tmp, "ckpt"), "--ready-file", ready,
         "--lease-seconds", "30"], stdout=logf, stderr=logf)
    procs.append(("scheduler", sched_proc, False))
    for _ in range(3000):
        if sched_proc.poll() is not None:
            die(f"the scheduler exited with {sched_proc.returncode}; see {LOG_DIR}/scheduler.log")
        if os.path.exists(ready):
            startup_s["ready_file"] = round(time.perf_counter() - t0, 3)
            r = json.load(open(ready))
            api_port, workers_port = r["http_port"], r["workers_port"]
            break
        time.sleep(0.01)
    else:
        die("the scheduler wrote no ready file within 30 s")
    for _ in range(3000):
        try:
            if Api().request("GET", "/healthz")[0] == 200:
                startup_s["healthz"] = round(time.perf_counter() - t0, 3)
                return
        except OSError:
            pass
        time.sleep(0.01)
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


def submit_parts(name, nruns, most=10000):
    """nruns runs submitted as sweeps of at most `most` runs each (NAME-0,
    NAME-1, ...): (the sweeps' ids, the POSTs' milliseconds in all)."""
    ids, submit_ms, left, part = [], 0.0, nruns, 0
    while left > 0:
        k = min(left, most)
        sid, ms, _ = submit(f"{name}-{part}", k)
        ids.append(sid)
        submit_ms += ms
        left -= k
        part += 1
    return ids, submit_ms


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



"""(e) the scheduler with 20,000 queued runs: its memory and its start-up time;
(f) the queue's claim-and-finish SQL alone; (g) what PostgreSQL alone does
inserting metric-shaped rows, the anchor of the metric rows/s figure
(sched_bench.py)."""
import os
import re

from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)
import sched_bench_env as env


def pgbench_bin():
    """pgbench of the throwaway cluster's server, else one on PATH; None when none."""
    d = os.environ.get("PG_TEST_BINDIR")
    for p in ([os.path.join(d, "pgbench")] if d else []) + [shutil.which("pgbench") or ""]:
        if p and os.access(p, os.X_OK):
            return p
    return None


def pgbench(script, clients, seconds=None, transactions=None, label="pgbench"):
    """Runs pgbench with one custom script (no vacuum, no initialization) and
    returns (transactions processed, wall seconds, its output)."""
    path = os.path.join(env.tmp, f"{label}.sql")
    with open(path, "w") as f:
        f.write(script)
    cmd = [pgbench_bin(), "-n", "-f", path, "-c", str(clients), "-j", str(min(clients, 2)),
           "-M", "prepared", "-r"]
    cmd += ["-T", str(seconds)] if seconds else ["-t", str(transactions)]
    t = time.time()
    r = subprocess.run(cmd + [DB], capture_output=True, text=True, timeout=900)
    wall = time.time() - t
    with open(os.path.join(LOG_DIR, f"{label}.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        die(f"{label}: pgbench failed: {r.stderr.strip()[:500]}")
    m = re.search(r"number of transactions actually processed: (\d+)", r.stdout)
    return int(m.group(1)) if m else None, wall, r.stdout


def statement_latencies(out):
    """pgbench -r's mean latency per statement of the script: [(ms, its first words)]."""
    lat, on = [], False
    for line in out.splitlines():
        if "statement latencies in milliseconds" in line:
            on = True
            continue
        m = re.match(r"\s+([\d.]+)\s+(?:\d+\s+)?(\S.*)", line) if on else None
        if m:
            lat.append([float(m.group(1)), m.group(2)[:60]])
    return lat


# ---- (e) 20,000 queued runs: memory and start-up -----------------------------------------------

def vm(pid):
    """VmRSS and VmHWM (peak resident) of a process in MiB."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in ("VmRSS", "VmHWM"):
                    out[k] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def capacity_part():
    """Submits CAPACITY_RUNS queued runs (sweeps of at most 10,000) with no
    worker connected, reads the running scheduler's memory, then stops it and
    starts a fresh one on that database, timing process start -> ready file
    and -> first 200 from /healthz, and reading its memory once it is ready
    and after one placement-sized GET of the queue's sweep. The runs stay
    queued for (f)."""
    n = CAPACITY_RUNS
    name = f"bench-capacity-{os.getpid()}-{int(time.time())}"
    before = vm(env.sched_proc.pid)
    ids, submit_ms = submit_parts(name, n)
    queued = int(psql("SELECT count(*) FROM runs WHERE status = 'queued'"))
    time.sleep(1)
    held = vm(env.sched_proc.pid)
    log(f"capacity: {n} runs queued ({queued} queued in all) in {submit_ms:.0f} ms; scheduler "
        f"RSS {held.get('VmRSS')} MiB, peak {held.get('VmHWM')} MiB")
    db_size = psql("SELECT pg_size_pretty(pg_database_size(current_database()))")
    total_runs = int(psql("SELECT count(*) FROM runs"))
    total_metrics = int(psql("SELECT count(*) FROM metrics"))
    # a fresh scheduler on that database: start-up time and memory
    env.sched_proc.send_signal(signal.SIGTERM)
    try:
        env.sched_proc.wait(15)
    except subprocess.TimeoutExpired:
        env.sched_proc.kill()
        env.sched_proc.wait()
    ready = os.path.join(env.tmp, "ready.json")
    try:
        os.unlink(ready)
    except FileNotFoundError:
        pass
    start_scheduler()  # returns after the first 200 from /healthz
    ready_s, healthz_s = env.startup_s["ready_file"], env.startup_s["healthz"]
    fresh = vm(env.sched_proc.pid)
    api = Api()
    st, data, ms = api.request("GET", f"/api/sweeps/{ids[0]}")
    api.close()
    time.sleep(1)
    after_get = vm(env.sched_proc.pid)
    res = {"runs_queued": n, "queued_in_db": queued, "runs_in_db": total_runs,
           "metric_rows_in_db": total_metrics, "database_size": db_size,
           "sweep_ids": ids, "submit_ms": round(submit_ms, 1),
           "running_scheduler_before_mib": before, "running_scheduler_holding_mib": held,
           "restart_startup_to_healthz_s": round(healthz_s, 3),
           "restart_startup_to_ready_file_s": None if ready_s is None else round(ready_s, 3),
           "restarted_scheduler_ready_mib": fresh,
           "restarted_scheduler_after_get_mib": after_get,
           "get_queued_sweep_ms": round(ms, 1)}
    log(f"capacity: restarted scheduler ready in {res['restart_startup_to_healthz_s']} s "
        f"(healthz), RSS {fresh.get('VmRSS')} MiB; database {db_size}")
    return res


# ---- (f) the queue's claim-and-finish SQL alone ---------------------------------------------

# the store's statements, as store/runs.c sends them (store_runs_queue,
# store_runs_claim, store_runs_finish), with pgbench variables for $n. The
# queue read is taken from store/runs.c itself, so that it cannot go stale
# (a copy here once kept a read the store had replaced, 3.6 s against 2 ms).


C_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([A-Za-z_]\w*)')


def c_function_sql(path, function):
    """The SQL of the first call in `function` of the C file: its string
    literals, concatenated, as the compiler joins them, with the file's
    string macros (#define NAME "..." "...") expanded where they are used."""
    src = open(path).read()
    macros = {}
    for m in re.finditer(r'^#define (\w+)((?:[^\n]*\\\n)*[^\n]*)', src, re.M):
        body = m.group(2).replace("\\\n", " ")
        if body.strip().startswith('"'):
            macros[m.group(1)] = body

    def expand(text, depth=0):
        out = []
        for lit, ident in C_TOKEN.findall(text):
            if ident and ident in macros and depth < 8:
                out.append(expand(macros[ident], depth + 1))
            elif not ident:
                out.append(bytes(lit, "utf-8").decode("unicode_escape"))
        return "".join(out)

    body = src[src.index(function + "("):]
    body = body[:body.index("\n}\n")]
    return expand(body)


QUEUE_SQL = c_function_sql(os.path.join(ROOT, "store", "runs.c"),
                           "void store_runs_queue").replace("$1", "48") + ";\n"
CLAIM_SQL = ("UPDATE runs SET status = 'running', worker = :wid, attempt = attempt + 1, "
             "lease_until = now() + 30 * interval '1 second', "
             "started_at = coalesce(started_at, now()), error = NULL "
             "WHERE id = :rid AND status = 'queued' AND attempt - interruptions < max_attempts "
             "RETURNING attempt, config, sweep_id, CASE WHEN attempt > 1 THEN "
             "(SELECT CASE WHEN min(step) = 1 THEN min(step) FILTER "
             "(WHERE nxt IS DISTINCT FROM step + 1) ELSE 0 END FROM (SELECT step, "
             "lead(step) OVER (ORDER BY step) AS nxt FROM metrics WHERE run_id = :rid "
             "AND step >= 1) t) END;\n")
FINISH_SQL = ("UPDATE runs SET status = CASE WHEN 'succeeded' = 'failed' "
              "AND attempt - interruptions < max_attempts "
              "THEN 'queued'::run_status ELSE 'succeeded'::run_status END, "
              "worker = NULL, lease_until = NULL, "
              "final_val_loss = coalesce(5.25::float8, final_val_loss), "
              "tokens = coalesce(64::bigint, tokens), error = NULL, log_tail = NULL, "
              "finished_at = now() WHERE id = :rid AND attempt = 1 AND worker = :wid "
              "AND status = 'running' RETURNING status, sweep_id;\n")


def queue_sql_part(cap):
    """The claim and the finish of each of (e)'s queued runs, by the store's
    own statements, from 8 pgbench clients (8 workers x 1 slot): a run's id
    comes from a sequence over the queued ids (the scheduler picks it from
    its queue read, one read per placement pass; here one read per 48
    claims), so no two clients claim the same run. Jobs/s = runs finished /
    wall time."""
    if not pgbench_bin():
        log("queue SQL: no pgbench; skipped")
        return None
    ids = cap["sweep_ids"]
    lo, hi = psql(f"SELECT min(id), max(id) FROM runs WHERE sweep_id IN "
                  f"({','.join(map(str, ids))}) AND status = 'queued'").split("|")
    n = int(hi) - int(lo) + 1
    wid = psql("INSERT INTO workers (name, host, cpu_slots) VALUES "
               f"('bench-queue-sql-{os.getpid()}', 'bench', 8) RETURNING id")
    psql(f"DROP SEQUENCE IF EXISTS bench_claim; CREATE SEQUENCE bench_claim START {lo}")
    clients = 8
    per = n // clients
    script = (f"\\set wid {wid}\n"
              "SELECT nextval('bench_claim') AS rid \\gset\n"
              f"\\if :rid % 48 = 0\n{QUEUE_SQL}\\endif\n"
              + CLAIM_SQL + FINISH_SQL)
    tx, wall, out = pgbench(script, clients, transactions=per, label="queue-claim-finish")
    done = int(psql(f"SELECT count(*) FROM runs WHERE sweep_id IN ({','.join(map(str, ids))}) "
                    f"AND status = 'succeeded'"))
    m = re.search(r"tps = ([\d.]+)", out)
    res = {"statement_latency_ms": statement_latencies(out), "clients": clients, "runs_claimed_and_finished": done, "transactions": tx,
           "wall_s": round(wall, 2), "jobs_per_s": round(done / wall, 1),
           "pgbench_tps": float(m.group(1)) if m else None,
           "statements_per_job": "nextval + claim UPDATE + finish UPDATE (+ the queue read "
                                 "once per 48 jobs)"}
    log(f"queue SQL: {done} runs claimed and finished by 8 pgbench clients in {wall:.1f} s: "
        f"{res['jobs_per_s']} jobs/s; mean ms per statement: " +
        "; ".join(f"{ms} {what[:30]}" for ms, what in res["statement_latency_ms"]))
    return res


# ---- (g) PostgreSQL alone: metric-shaped inserts ------------------------------------------

COLS = "run_id, step, tokens, train_loss, val_loss, lr, grad_norm, b_noise, loss_scale, tok_per_s"


def pg_anchor_part():
    """What PostgreSQL alone does with metric rows: a table like metrics
    (CREATE TABLE ... (LIKE metrics INCLUDING ALL): its columns, checks,
    primary key and index), 8 clients, for ANCHOR_SECONDS each way:
    pgbench with multi-row INSERTs of METRIC_BATCH rows (the batch the
    metrics part sends), and 8 psql processes each COPYing rows from a file.
    The table is dropped afterwards, so the API part's figures see only
    metrics."""
    batch = METRIC_BATCH
    res = {"clients": 8, "rows_per_statement": batch, "table": "LIKE metrics INCLUDING ALL"}
    psql("DROP TABLE IF EXISTS bench_metrics; "
         "CREATE TABLE bench_metrics (LIKE metrics INCLUDING ALL); "
         "DROP SEQUENCE IF EXISTS bench_batch; CREATE SEQUENCE bench_batch")
    if pgbench_bin():
        vals = ",".join(f"({k},{5.5 - k * 1e-4},NULL::float8,3e-4,1.25,NULL::float8,"
                        f"NULL::float8,123456.5)" for k in range(batch))
        # one statement per transaction: a sequence gives each its steps, so
        # every row is new, as the steps of a run streaming are
        script = ("WITH b AS (SELECT nextval('bench_batch') AS n) "
                  f"INSERT INTO bench_metrics ({COLS}) "
                  f"SELECT 1 + b.n % 8, (b.n / 8 * {batch} + v.k)::int, (b.n / 8 * {batch} + v.k)"
                  " * 1024, v.tl, v.vl, v.lr, v.gn, v.bn, v.ls, v.tps FROM b, (VALUES " + vals +
                  ") AS v (k, tl, vl, lr, gn, bn, ls, tps);\n")
        cpu = CpuMeter(env.sched_proc.pid)
        tx, wall, out = pgbench(script, 8, seconds=ANCHOR_SECONDS, label="pg-anchor-insert")
        usage = cpu.stop()
        rows = int(psql("SELECT count(*) FROM bench_metrics"))
        m = re.search(r"tps = ([\d.]+)", out)
        tps = float(m.group(1)) if m else None
        res["insert_rows"] = rows
        res["insert_rows_per_s"] = round(tps * batch, 0) if tps else round(rows / wall, 0)
        res["insert_cpu"] = usage
        log(f"pg anchor: multi-row INSERT of {batch} from 8 pgbench clients: "
            f"{res['insert_rows_per_s']:.0f} rows/s")
    else:
        log("pg anchor: no pgbench; multi-row INSERT skipped")
    # COPY: 8 psql processes, each a file of rows of its own run ids
    psql("TRUNCATE bench_metrics")
    per = ANCHOR_COPY_ROWS // 8
    files = []
    for c in range(8):
        p = os.path.join(env.tmp, f"copy-{c}.tsv")
        with open(p, "w") as f:
            f.write("".join(f"{100 + c}\t{s}\t{s * 1024}\t{5.5 - s * 1e-7}\t\\N\t0.0003\t1.25\t"
                            f"\\N\t\\N\t123456.5\n" for s in range(1, per + 1)))
        files.append(p)
    cpu = CpuMeter(env.sched_proc.pid)
    t = time.time()
    ps = [subprocess.Popen([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", DB, "-c",
                            f"\\copy bench_metrics ({COLS}) FROM '{p}'"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for p in files]
    errs = [p.communicate()[1] for p in ps]
    wall = time.time() - t
    usage = cpu.stop()
    if any(p.returncode for p in ps):
        die("pg anchor: COPY failed: " + b" ".join(errs).decode()[:500])
    rows = int(psql("SELECT count(*) FROM bench_metrics"))
    res["copy_rows"] = rows
    res["copy_wall_s"] = round(wall, 2)
    res["copy_rows_per_s"] = round(rows / wall, 0)
    res["copy_cpu"] = usage
    log(f"pg anchor: COPY from 8 psql processes: {rows} rows in {wall:.1f} s, "
        f"{res['copy_rows_per_s']:.0f} rows/s")
    for p in files:
        os.unlink(p)
    psql("DROP TABLE bench_metrics; DROP SEQUENCE bench_batch")
    return res

"""Where the database time goes: pg_stat_statements, and the plans with their actual
times of the statements the scheduler sent, from auto_explain in the server log
(sched_bench.py). PGSS is whether pg_stat_statements is loaded, PLANS whether
auto_explain is."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)


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
               "AND query NOT ILIKE '%pg_reload_conf%' AND query NOT ILIKE 'ALTER SYSTEM%' "
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


# ---- the plans of the statements the scheduler sent (auto_explain) ---------------------

# The statements a figure is about, told apart by a few words of their text
# (the whole text is the server's: it is in the plan files).
STATEMENTS = {
    "get_sweep": "'runs_total', (SELECT count(*) FROM runs",
    "get_run": "json_build_object('run',",
    "get_sweeps": "FROM sweeps sw LEFT JOIN runs r",
    "queue": "SELECT r.id, r.gpus FROM runs r JOIN sweeps sw",
    "sweep_status": "UPDATE sweeps sw SET status = x.st",
    "refit_points": "SELECT nonembedding_params, tokens, flops, final_val_loss",
}
PLANS = False


def plans_setup():
    """Loads auto_explain into every new session (the scheduler connects
    after this), logging nothing until plans_on(). Its plans go to the
    server log, $PG_TEST_DIR/log (tests/pg/pgtest.sh)."""
    global PLANS
    if not os.environ.get("PG_TEST_DIR"):
        log("auto_explain: no PG_TEST_DIR, so no server log to read; no plans")
        return
    for sql in ("ALTER SYSTEM SET session_preload_libraries = 'auto_explain'",
                "SELECT pg_reload_conf()"):
        psql(sql)
    for k, v in (("log_min_duration", "-1"), ("log_analyze", "on"), ("log_buffers", "on"),
                 ("log_format", "json")):
        psql(f"ALTER SYSTEM SET auto_explain.{k} = '{v}'")
    psql("SELECT pg_reload_conf()")
    PLANS = True


def _log_path():
    return os.path.join(os.environ.get("PG_TEST_DIR", ""), "log")


def _set_min_duration(ms):
    psql(f"ALTER SYSTEM SET auto_explain.log_min_duration = {ms}")
    psql("SELECT pg_reload_conf()")
    # the backends reread the configuration before their next statement once
    # the postmaster has signalled them
    time.sleep(0.5)


def plans_on():
    """Starts logging the plan of every statement with its actual times
    (EXPLAIN ANALYZE, BUFFERS). Returns where the server log stands, for
    plans_read()."""
    if not PLANS:
        return None
    at = os.path.getsize(_log_path())
    _set_min_duration(0)
    return at


def plans_off():
    if PLANS:
        _set_min_duration(-1)


PLAN_RE = re.compile(r"^\S+ \S+ \S+ \[\d+\] LOG:  duration: ([0-9.]+) ms  plan:$")
PREFIX_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def plans_read(at):
    """The plans logged since plans_on() returned at: a list of
    (duration ms, query text, plan as JSON text)."""
    if at is None:
        return []
    with open(_log_path(), errors="replace") as f:
        f.seek(at)
        lines = f.read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = PLAN_RE.match(lines[i])
        i += 1
        if not m:
            continue
        body = []
        while i < len(lines) and not PREFIX_RE.match(lines[i]):
            body.append(lines[i])
            i += 1
        text = "\n".join(body)
        try:
            q = json.loads(text).get("Query Text", "")
        except ValueError:
            continue
        out.append((float(m.group(1)), re.sub(r"\s+", " ", q), text))
    return out


def plans_seen(plans, names):
    return all(any(STATEMENTS[n] in q for _, q, _ in plans) for n in names)


def plan_ms(plans, name, label):
    """The median duration of the logged runs of statement `name` (the
    executor's time of each, as auto_explain logs it), with their plans
    written to explain-LABEL.txt; None when the scheduler did not send it."""
    mine = [p for p in plans if STATEMENTS[name] in p[1]]
    if not mine:
        return None
    with open(os.path.join(LOG_DIR, f"explain-{label}.txt"), "w") as f:
        f.write(mine[0][1] + "\n")
        for ms, _, plan in mine:
            f.write(f"\nduration: {ms} ms\n{plan}\n")
    return round(statistics.median(ms for ms, _, _ in mine), 3)

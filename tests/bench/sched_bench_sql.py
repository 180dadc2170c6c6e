"""Where the database time goes: pg_stat_statements, and EXPLAIN ANALYZE of the
scheduler's queries (sched_bench.py). PGSS is whether pg_stat_statements is loaded."""
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



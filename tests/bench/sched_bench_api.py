"""(c) API latency with many runs and metric rows (sched_bench.py)."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)
import sched_bench_env as env
from sched_bench_sql import (Q_QUEUE, Q_REFIT_POINTS, Q_RUN, Q_SWEEP, Q_SWEEP_STATUS, Q_SWEEPS, explain,
                             pgss_reset, pgss_top)


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
    cpu = CpuMeter(env.sched_proc.pid)
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



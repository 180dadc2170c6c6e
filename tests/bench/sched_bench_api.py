"""(c) API latency with many runs and metric rows (sched_bench.py)."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)
import sched_bench_env as env
from sched_bench_sql import (pgss_reset, pgss_top, plan_ms, plans_off, plans_on, plans_read,
                             plans_seen)


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


def explain_part(sweep_id, run_id, timeout=60):
    """The plans, with their actual times, of what the scheduler ran for the
    timed requests (one more of each, with auto_explain logging) and, on the
    big sweep, for placement, a sweep's status and a refit: one run of the
    sweep is reproduced and run by a worker with 2 slots. Returns the
    durations by statement and the reproduction's run id."""
    at = plans_on()
    api = Api()
    for path in (f"/api/sweeps/{sweep_id}", f"/api/runs/{run_id}", "/api/sweeps"):
        st, data, _ = api.request("GET", path)
        if st != 200:
            die(f"GET {path}: {st} {data[:300]!r}")
    last = psql(f"SELECT max(id) FROM runs WHERE sweep_id = {sweep_id} AND reproduces IS NULL")
    st, data, _ = api.request("POST", f"/api/runs/{last}/reproduce")
    api.close()
    if st != 201:
        die(f"POST /api/runs/{last}/reproduce: {st} {data[:300]!r}")
    repro_id = json.loads(data)["id"]
    p, logp, _ = start_worker(f"explain-{os.getpid()}", 2, FAKE_STEPS)
    deadline = time.time() + timeout
    want = ("queue", "sweep_status", "refit_points")
    while time.time() < deadline and not plans_seen(plans_read(at), want):
        time.sleep(0.2)
    stop_worker(p)
    plans_off()
    plans = plans_read(at)
    if at is not None and not plans_seen(plans, want):
        log(f"api: within {timeout} s the scheduler ran not all of {', '.join(want)}; see {logp}")
    ex = {"get_sweep": plan_ms(plans, "get_sweep", "get-sweep"),
          "get_run": plan_ms(plans, "get_run", "get-run"),
          "get_sweeps": plan_ms(plans, "get_sweeps", "get-sweeps"),
          "sweep_status": plan_ms(plans, "sweep_status", "sweep-status-big"),
          "refit_points": plan_ms(plans, "refit_points", "refit-points-big"),
          "queue": plan_ms(plans, "queue", "queue-big")}
    return ex, repro_id


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
    # the run table (a page of the sweep's runs), the sweep's page (HTML), and
    # the curves endpoint sampled to 500 points: one run's, and the sweep's for
    # CURVE_RUNS runs spread over it (the page asks for the runs it shows)
    table_lat, table_size = time_requests(api, f"/api/sweeps/{sweep_id}/runs", API_REQUESTS)
    page_lat, page_size = time_requests(api, f"/sweeps/{sweep_id}", max(1, API_REQUESTS // 2))
    rcurve_lat, rcurve_size = time_requests(api, f"/api/runs/{run_id}/curves?points=500",
                                            API_REQUESTS)
    some = psql(f"SELECT string_agg(id::text, ',') FROM (SELECT id FROM runs WHERE sweep_id = "
                f"{sweep_id} AND id % {max(1, API_RUNS // CURVE_RUNS)} = 0 ORDER BY id "
                f"LIMIT {CURVE_RUNS}) t")
    scurve_lat, scurve_size = time_requests(
        api, f"/api/sweeps/{sweep_id}/curves?points=500&runs={some}", max(1, API_REQUESTS // 4))
    api.close()
    usage = cpu.stop()
    top = pgss_top("api")
    ex, repro_id = explain_part(sweep_id, run_id)
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
        "get_run_table_ms": rsum(summary(table_lat)), "get_run_table_bytes": table_size,
        "get_sweep_page_ms": rsum(summary(page_lat)), "get_sweep_page_bytes": page_size,
        "get_run_curves_500_ms": rsum(summary(rcurve_lat)),
        "get_run_curves_500_bytes": rcurve_size,
        "get_sweep_curves_500_ms": rsum(summary(scurve_lat)),
        "get_sweep_curves_500_bytes": scurve_size, "sweep_curves_runs": CURVE_RUNS,
        "explain_execution_ms": ex, "explain_reproduction_id": repro_id,
        "cpu": usage, "top_queries": top,
    }
    log(f"api: GET /api/sweeps/{sweep_id}: median {r3(res['get_sweep_ms']['median'])} ms, "
        f"p99 {r3(res['get_sweep_ms']['p99'])} ms ({sweep_size} bytes); GET /api/runs/{run_id}: "
        f"median {r3(res['get_run_ms']['median'])} ms, p99 {r3(res['get_run_ms']['p99'])} ms")
    return res



"""The table of every figure against its target, and the machine it ran on
(sched_bench.py)."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)


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




# ---- the summary: flat keys and the side-by-side table ------------------------------------------

RIVER_JOBS_PER_S = 46000.0     # River's published figure (a laptop), not measured here
GRAPHILE_JOBS_PER_S = 15600.0  # graphile-worker's published figure, not measured here

# the API's endpoints in the summary: (key, what, result field)
API_ENDPOINTS = [
    ("get_sweep", "GET /api/sweeps/{id} (header + first 500 runs)", "get_sweep_ms"),
    ("run_table", "GET /api/sweeps/{id}/runs (the run table, 500 runs)", "get_run_table_ms"),
    ("sweep_page", "GET /sweeps/{id} (the sweep's HTML page)", "get_sweep_page_ms"),
    ("run_curves_500", "GET /api/runs/{id}/curves?points=500", "get_run_curves_500_ms"),
    ("sweep_curves_500", "GET /api/sweeps/{id}/curves?points=500&runs=(N ids)",
     "get_sweep_curves_500_ms"),
    ("get_run", "GET /api/runs/{id} (a run + its metric rows)", "get_run_ms"),
    ("get_sweeps", "GET /api/sweeps", "get_sweeps_ms"),
]


def _ratio(a, b):
    return None if a is None or not b else float(f"{a / b:.3g}")


def summary_keys(results):
    """The figures of issue 18 under flat, readable keys (sched.json's top)."""
    s = {}
    d8 = next((d for d in results.get("dispatch", []) if d.get("layout") == "8x1"
               and "in a" not in d.get("label", "")), None)
    if d8:
        s["idle_gap_p50_ms"] = d8["gap_ms"].get("median")
        s["idle_gap_p99_ms"] = d8["gap_ms"].get("p99")
        s["idle_gap_exit_to_acked_p99_ms"] = d8["gap_exit_to_acked_ms"].get("p99")
        s["idle_gap_acked_to_assigned_p99_ms"] = d8["gap_acked_to_assigned_ms"].get("p99")
        s["idle_gap_assigned_to_spawned_p99_ms"] = d8["gap_assigned_to_spawned_ms"].get("p99")
        s["idle_gap_layout"] = "8 workers x 1 slot, instant fake trainers"
        # the claim-and-finish loop through the real scheduler and workers
        s["queue_claim_finish_jobs_per_s"] = d8["runs_per_s"]
    m = results.get("metrics")
    if m:
        s["metric_rows_per_s"] = round(m["rows_per_s"], 0)
    a = results.get("anchor")
    if a:
        s["pg_insert_rows_per_s"] = a.get("insert_rows_per_s")
        s["pg_copy_rows_per_s"] = a.get("copy_rows_per_s")
        if m:
            s["metric_rows_vs_pg_insert_ratio"] = _ratio(m["rows_per_s"], a.get("insert_rows_per_s"))
            s["metric_rows_vs_pg_copy_ratio"] = _ratio(m["rows_per_s"], a.get("copy_rows_per_s"))
    api = results.get("api")
    if api:
        worst = None
        for key, _, field in API_ENDPOINTS:
            v = (api.get(field) or {}).get("p99")
            if v is not None:
                s[f"api_p99_ms_{key}"] = v
                worst = v if worst is None else max(worst, v)
        s["api_p99_ms"] = worst
        s["api_runs_in_db"] = api["runs_in_db"]
        s["api_metric_rows_in_db"] = api["metric_rows_in_db"]
    c = results.get("capacity")
    if c:
        s["sched_mem_20k_queued_mib"] = c["restarted_scheduler_ready_mib"].get("VmRSS")
        s["sched_mem_20k_queued_peak_mib"] = c["restarted_scheduler_after_get_mib"].get("VmHWM")
        s["sched_mem_20k_queued_running_mib"] = c["running_scheduler_holding_mib"].get("VmRSS")
        s["sched_startup_20k_s"] = c["restart_startup_to_healthz_s"]
        s["sched_startup_20k_ready_file_s"] = c["restart_startup_to_ready_file_s"]
        s["sched_20k_queued_runs"] = c["queued_in_db"]
    q = results.get("queue_sql")
    if q:
        s["queue_sql_claim_finish_jobs_per_s"] = q["jobs_per_s"]
    for k in ("queue_claim_finish_jobs_per_s", "queue_sql_claim_finish_jobs_per_s"):
        if s.get(k) is not None:
            s[k.replace("_jobs_per_s", "_vs_river_ratio")] = _ratio(s[k], RIVER_JOBS_PER_S)
            s[k.replace("_jobs_per_s", "_vs_graphile_ratio")] = _ratio(s[k], GRAPHILE_JOBS_PER_S)
    others = [p["cpu"]["other_processes_cpu_pct"] for p in
              results.get("dispatch", []) + [results.get("metrics") or {}, api or {}]
              if p.get("cpu")]
    if others:
        s["other_users_cpu_pct_max"] = max(others)
    return s


def print_summary(s):
    """The issue's figures side by side: value, target, ratio (value / target,
    or value / the anchor's), verdict."""
    def f(v, fmt="{:.1f}"):
        return "n/a" if v is None else fmt.format(v)

    rows = []

    def row(name, v, target=None, higher=False, ratio=None, fmt="{:.1f}"):
        tgt = "-" if target is None else (">= " if higher else "< ") + f(target, "{:g}")
        if ratio is None and target is not None and v is not None:
            ratio = v / target
        rows.append((name, f(v, fmt), tgt, f(ratio, "{:.3g}"),
                     verdict(v, target, higher) if target is not None else ""))

    row("idle gap p50, 8 workers x 1 slot (ms)", s.get("idle_gap_p50_ms"))
    row("idle gap p99, 8 workers x 1 slot (ms)", s.get("idle_gap_p99_ms"), TARGET_GAP_P99_MS)
    row("  of it p99: exit->acked / acked->assigned / assigned->spawned (ms)", None)
    rows[-1] = (rows[-1][0], "%s / %s / %s" % (s.get("idle_gap_exit_to_acked_p99_ms"),
                                              s.get("idle_gap_acked_to_assigned_p99_ms"),
                                              s.get("idle_gap_assigned_to_spawned_p99_ms")),
                "-", "-", "")
    row("metric rows stored per second, 8 workers", s.get("metric_rows_per_s"),
        TARGET_ROWS_PER_S, True, fmt="{:.0f}")
    row("  PostgreSQL alone: multi-row INSERT, 8 clients (rows/s); ratio = ours / it",
        s.get("pg_insert_rows_per_s"), ratio=s.get("metric_rows_vs_pg_insert_ratio"),
        fmt="{:.0f}")
    row("  PostgreSQL alone: COPY, 8 clients (rows/s); ratio = ours / it",
        s.get("pg_copy_rows_per_s"), ratio=s.get("metric_rows_vs_pg_copy_ratio"), fmt="{:.0f}")
    for key, what, _ in API_ENDPOINTS:
        row(f"p99 {what} (ms)", s.get(f"api_p99_ms_{key}"), TARGET_API_P99_MS)
    row("scheduler RSS with 20,000 queued runs, fresh start (MiB)",
        s.get("sched_mem_20k_queued_mib"))
    row("  peak RSS (VmHWM) / RSS of the scheduler that queued them (MiB)", None)
    rows[-1] = (rows[-1][0], "%s / %s" % (s.get("sched_mem_20k_queued_peak_mib"),
                                         s.get("sched_mem_20k_queued_running_mib")), "-", "-", "")
    row("scheduler start-up on that database: start -> /healthz 200 (s)",
        s.get("sched_startup_20k_s"), fmt="{:.3f}")
    row("queue: claim+finish, real scheduler + 8x1 instant workers (jobs/s); ratio vs River "
        "46,000", s.get("queue_claim_finish_jobs_per_s"),
        ratio=s.get("queue_claim_finish_vs_river_ratio"))
    row("  same; ratio vs graphile-worker 15,600", s.get("queue_claim_finish_jobs_per_s"),
        ratio=s.get("queue_claim_finish_vs_graphile_ratio"))
    row("queue: the store's claim+finish SQL alone, 8 pgbench clients (jobs/s); vs River",
        s.get("queue_sql_claim_finish_jobs_per_s"),
        ratio=s.get("queue_sql_claim_finish_vs_river_ratio"))
    row("  same; ratio vs graphile-worker 15,600", s.get("queue_sql_claim_finish_jobs_per_s"),
        ratio=s.get("queue_sql_claim_finish_vs_graphile_ratio"))
    row("other users' CPU during the parts, max (% of one core)", s.get("other_users_cpu_pct_max"))
    w = max(len(r[0]) for r in rows)
    print(f"{'figure':<{w}}  {'value':>16}  {'target':>9}  {'ratio':>6}  verdict")
    print("-" * (w + 52))
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>16}  {r[2]:>9}  {r[3]:>6}  {r[4]}")
    print()

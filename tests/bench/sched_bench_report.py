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



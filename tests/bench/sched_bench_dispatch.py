"""(a) dispatch rate and idle gaps with fake instant runs, and (d) dispatch inside a
big sweep (sched_bench.py)."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)
import sched_bench_env as env


from sched_bench_sql import (pgss_reset, pgss_top, plan_ms, plans_off, plans_on, plans_read,
                             plans_seen)


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
        ids, submit_ms = submit_parts(name, nruns)
        sweep_id = ids[0]
        if len(ids) > 1:
            run_filter = f"sweep_id IN ({','.join(str(i) for i in ids)})"
        log(f"{label}: sweep(s) {', '.join(str(i) for i in ids)} submitted in {submit_ms:.0f} ms")
    # the plans of the scheduler's first placements (the queue full) and sweep
    # status updates: auto_explain logs until the first run has been
    # acknowledged and both have been seen, so the runs of about the first
    # second (explain_runs_acked) are measured with it logging
    explaining, plans, explained_runs = plans_on(), [], None
    log(f"{label}: starting {nworkers} worker(s) x {slots} slot(s)")
    pgss_reset()
    workers = [start_worker(f"{name}-w{i}", slots, FAKE_STEPS) for i in range(nworkers)]
    cpu = CpuMeter(env.sched_proc.pid, [w[0].pid for w in workers])
    deadline = time.time() + DISPATCH_TIMEOUT
    offsets = [0] * nworkers
    acked = 0
    last_report = time.time()
    rss = [rss_mb(env.sched_proc.pid)]  # the scheduler's memory, sampled once a second
    last_rss = time.time()
    while acked < nruns:
        if time.time() - last_rss >= 1:
            rss.append(rss_mb(env.sched_proc.pid))
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
        if explaining is not None and acked > 0 and \
                plans_seen(plans_read(explaining), ("queue", "sweep_status")):
            plans_off()
            plans, explaining, explained_runs = plans_read(explaining), None, acked
        if time.time() > deadline:
            die(f"{label}: only {acked} of {nruns} runs finished within "
                f"{DISPATCH_TIMEOUT} s; see {LOG_DIR}")
        if time.time() - last_report > 10:
            log(f"{label}: {acked} of {nruns} runs done")
            last_report = time.time()
        time.sleep(0.2)
    usage = cpu.stop()
    rss.append(rss_mb(env.sched_proc.pid))
    if explaining is not None:
        # done before the scheduler's once-a-second sweep status update: the
        # next one comes for the last runs
        wait = time.time() + 2.5
        while time.time() < wait and not plans_seen(plans_read(explaining), ("sweep_status",)):
            time.sleep(0.1)
        plans_off()
        plans, explained_runs = plans_read(explaining), acked
    q_ms = plan_ms(plans, "queue", f"queue-{tag}")
    st_ms = plan_ms(plans, "sweep_status", f"sweep-status-{tag}")
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
        "explain_runs_acked": explained_runs,
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


# ---- (d) dispatch inside a big sweep ---------------------------------------------------------

def bigsweep_part(api_sweep_id, explain_run_id=None):
    """BENCH_BIG_RUNS reproductions (POST /api/runs/{id}/reproduce) of runs of
    the API part's sweep (10,000 succeeded runs): queued runs in a sweep that
    already holds 10,000, run by one worker with 2 slots -- the scheduler's
    per-run queries that read the whole sweep show here."""
    ids = psql(f"SELECT id FROM runs WHERE sweep_id = {api_sweep_id} AND reproduces IS NULL "
               f"ORDER BY id LIMIT {BIG_RUNS}").split()
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
                   nruns=len(ids), run_filter="reproduces IS NOT NULL" + (
                       f" AND id <> {explain_run_id}" if explain_run_id else ""))
    res["reproduce_post_ms"] = rsum(summary(lat))
    # the scheduler refits the sweep's laws (on its thread pool) after runs succeed
    res["fits_stored_meanwhile"] = int(psql(f"SELECT count(*) FROM fits WHERE sweep_id = "
                                            f"{api_sweep_id}")) - fits0
    res["runs_already_in_sweep"] = int(psql(f"SELECT count(*) FROM runs WHERE sweep_id = "
                                            f"{api_sweep_id} AND reproduces IS NULL"))
    return res



"""(b) metric rows stored per second from fake workers (sched_bench.py)."""
from sched_bench_env import *  # noqa: F401,F403 (the configuration and helpers)
import sched_bench_env as env
from sched_bench_sql import pgss_reset, pgss_top


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
        self.sock = socket.create_connection(("127.0.0.1", env.workers_port), timeout=30)
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
    cpu = CpuMeter(env.sched_proc.pid)
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



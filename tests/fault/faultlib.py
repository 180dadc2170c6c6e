"""Helpers of the fault tests (tests/fault/test_durability.py) and the soak
(tests/soak/test_soak.py):

- AckProxy: a TCP proxy between a worker and the scheduler's worker port
  that forwards every byte unchanged and records, from the newline-delimited
  JSON it carries, each metrics and finished message the worker sent and
  each ack the scheduler answered, so a test knows what the scheduler
  acknowledged (it must be stored: the scheduler acks after COMMIT);
- TrainerMonitor: a thread that scans /proc every 50 ms for the live
  `scalesweep train` processes of a test, by run and attempt, and records
  every moment two of one run were alive at once;
- pg(): the throwaway cluster's shell functions (tests/pg/pgtest.sh);
- compare_series(): a run's stored series against its uninterrupted rerun,
  step by step, bit for bit.
"""
import json
import os
import random
import re
import socket
import subprocess
import threading
import time

# the stored series a rerun must reproduce exactly (tok_per_s is a timing)
SERIES = ["tokens", "train_loss", "val_loss", "lr", "grad_norm", "b_noise", "loss_scale"]


def pg(fn, check=True):
    """Runs fn (shell code using tests/pg/pgtest.sh's functions) in bash."""
    return subprocess.run(["bash", "-c", f'. "$PGTEST_SH" && {fn}'], check=check,
                          capture_output=True, text=True)


def psql(sql, tries=100):
    """sql on the test database, retried while PostgreSQL restarts: its
    unaligned, tuples-only output; raises RuntimeError when it never runs."""
    out = None
    for _ in range(tries):
        out = subprocess.run(["bash", "-c", '. "$PGTEST_SH" && pg_psql -At -c "$0"', sql],
                             capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
        time.sleep(0.2)
    raise RuntimeError(f"psql failed: {sql}: {out.stderr}")


def close_pair(lock, pairs, pair):
    """A proxied connection's end: pair (its two sockets) out of the list
    pairs (under lock), both shut down and closed."""
    with lock:
        if pair in pairs:
            pairs.remove(pair)
    for s in pair:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


TOKENS_PER_STEP = 8 * 32  # the tiny model of runs_spec: batch 8 of 32 tokens


def spawn_scheduler(binary, db, token, tmp, api_port, wport, lease_s, extra):
    """A scheduler (Popen) on those ports with a lease of lease_s seconds and
    the arguments extra, its checkpoints in tmp/ckpt, its output appended to
    tmp/scheduler.log: the fault tests restart it on the same files."""
    logf = open(os.path.join(tmp, "scheduler.log"), "a")
    return subprocess.Popen(
        [binary, "scheduler", "--database", db, "--token-file", token,
         "--listen", f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
         "--checkpoints", os.path.join(tmp, "ckpt"), "--lease-seconds", str(lease_s)] + extra,
        stdout=logf, stderr=logf)


def runs_spec(name, nruns, steps_range, seed):
    """A sweep of nruns tiny CPU runs (1 layer, d 32, T 32, batch 8: a
    millisecond or two a step) of steps drawn in steps_range (by tens) from
    random.Random(seed), four evaluations each, 100 attempts: (spec, the
    steps of each run)."""
    plan = random.Random(seed)
    steps = [plan.randrange(steps_range[0], steps_range[1] + 1, 10) for _ in range(nruns)]
    return {
        "name": name,
        "method": "runs",
        "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                 "train": {"batch_size": 8, "lr": 0.003},
                 "eval": {"tokens": 256}, "threads": 1},
        "runs": [{"train": {"tokens": s * TOKENS_PER_STEP, "seed": i + 1},
                  "eval": {"every_tokens": s * TOKENS_PER_STEP // 4}}
                 for i, s in enumerate(steps)],
        "resources": {"cpus": 1},
        "max_attempts": 100,
    }, steps


def step_seconds(binary, tmp, env=None):
    """Seconds a step of runs_spec's tiny model takes on this machine: the
    difference of a 1200-step and a 200-step run of `train` (so the
    trainer's start is left out), for sizing a sweep in time rather than
    in steps."""
    spec, _ = runs_spec("calibrate", 1, (10, 10), 0)
    took = []
    for steps in (200, 1200):
        cfg = dict(spec["base"], train=dict(spec["base"]["train"],
                                            tokens=steps * TOKENS_PER_STEP),
                   eval={"tokens": 256, "every_tokens": steps * TOKENS_PER_STEP})
        path = os.path.join(tmp, "calibrate-%d.json" % steps)
        with open(path, "w") as f:
            json.dump(cfg, f)
        t0 = time.time()
        subprocess.run([binary, "train", "--config", path], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took.append(time.time() - t0)
    return max(took[1] - took[0], 1e-4) / 1000


class Proxy:
    """Listens on a port of its own and forwards each connection to
    127.0.0.1:upstream_port, a thread a direction running the subclass's
    _pump(src, dst, pair, from_worker); cut() closes every connection it
    carries. A subclass sets its own fields before calling __init__: the
    first connection may come before __init__ returns."""

    def __init__(self, name, upstream_port):
        self.name = name
        self.upstream = upstream_port
        self.lock = threading.Lock()
        self.pairs = []
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.srv.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
                up.settimeout(None)
            except OSError:
                down.close()  # the scheduler is away: the worker retries
                continue
            pair = (down, up)
            with self.lock:
                self.pairs.append(pair)
            threading.Thread(target=self._pump, args=(down, up, pair, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, pair, False), daemon=True).start()

    def _close(self, pair):
        close_pair(self.lock, self.pairs, pair)

    def cut(self):
        """closes every connection; how many there were"""
        with self.lock:
            pairs = list(self.pairs)
        for p in pairs:
            self._close(p)
        return len(pairs)


class AckProxy(Proxy):
    """A Proxy that keeps, worker to scheduler, the metrics and finished
    messages by (run_id, attempt, seq); scheduler to worker, the acks by the
    same key."""

    def __init__(self, name, upstream_port):
        self.sent = {}     # (run, attempt, seq) -> the message (first copy)
        self.acked = {}    # (run, attempt, seq) -> time of the first ack
        self.refused = {}  # the same, of acks saying "stored": false
        super().__init__(name, upstream_port)

    def _line(self, line, from_worker):
        try:
            m = json.loads(line)
        except ValueError:
            return
        if not isinstance(m, dict):
            return
        key = (m.get("run_id"), m.get("attempt"), m.get("seq"))
        with self.lock:
            if from_worker and m.get("type") in ("metrics", "finished"):
                self.sent.setdefault(key, m)
            elif not from_worker and m.get("type") == "ack":
                # an ack with "stored": false says the message was refused
                # (its attempt fenced): acknowledged as done, not as stored
                if m.get("stored", True):
                    self.acked.setdefault(key, time.time())
                else:
                    self.refused.setdefault(key, time.time())

    def _pump(self, src, dst, pair, from_worker):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)  # forwarded first: recording adds no delay
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._line(line, from_worker)
        except OSError:
            pass
        self._close(pair)

    def acked_messages(self, kind):
        """[(key, message)] of the messages of that type the scheduler acked.
        An ack for seq N covers only message N here: the scheduler acks each
        message after its own COMMIT."""
        with self.lock:
            return [(k, m) for k, m in self.sent.items()
                    if m.get("type") == kind and k in self.acked]


def acked_rows(proxies):
    """{(run, step): (attempt, {series: value})} of every metric row the
    scheduler acknowledged through these proxies (one step's step and eval
    lines merged, as the scheduler merges them)."""
    out = {}
    for p in proxies:
        for (run, att, _), m in p.acked_messages("metrics"):
            for line in m.get("rows", []):
                if not isinstance(line.get("step"), int):
                    continue
                vals = {k: line[k] for k in SERIES if isinstance(line.get(k), (int, float))
                        and not isinstance(line.get(k), bool)}
                a, v = out.setdefault((run, line["step"]), (att, {}))
                v.update({k: x for k, x in vals.items() if k not in v})
                if att > a:
                    out[(run, line["step"])] = (att, v)
    return out


def stored_rows(run_ids):
    """{(run, step): {series: value}} stored in metrics for those runs."""
    if not run_ids:
        return {}
    text = psql("SELECT run_id, step, " + ", ".join(f"coalesce({c}::text, '')" for c in SERIES) +
                " FROM metrics WHERE run_id IN (" + ",".join(map(str, sorted(run_ids))) + ")")
    out = {}
    for line in text.splitlines():
        f = line.split("|")
        out[(int(f[0]), int(f[1]))] = {k: float(x) for k, x in zip(SERIES, f[2:]) if x != ""}
    return out


def check_acked_stored(proxies, current_attempts=None):
    """Problems: acknowledged rows missing from the database or stored with
    other values. current_attempts ({run: attempt}), when given, limits the
    check to rows of each run's current attempt (a re-queued attempt's acked
    rows past its checkpoint are refused and trained again later)."""
    acked = acked_rows(proxies)
    if current_attempts is not None:
        acked = {k: v for k, v in acked.items() if current_attempts.get(k[0]) == v[0]}
    stored = stored_rows({r for r, _ in acked})
    problems = []
    for (run, step), (att, vals) in sorted(acked.items()):
        got = stored.get((run, step))
        if got is None:
            problems.append(f"run {run} step {step} (attempt {att}): acknowledged, not stored")
            continue
        for k, v in vals.items():
            if got.get(k) != float(v):
                problems.append(f"run {run} step {step}: {k} acknowledged {v!r}, stored "
                                f"{got.get(k)!r}")
    return len(acked), problems


CONFIG_RE = re.compile(r"/runs/(\d+)/config\.json$")
ATTEMPT_RE = re.compile(r"attempt-(\d+)\.log$")


def live_trainer_configs(root):
    """{pid: (config path, run_id, attempt)} of the live (not zombie)
    trainers whose config lies under root (a worker's runs/ID/config.json)."""
    out, parents = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if len(argv) < 4 or argv[1] != b"train" or argv[2] != b"--config":
                continue
            cfg = argv[3].decode(errors="replace")
            m = CONFIG_RE.search(cfg)
            if not m or not cfg.startswith(root):
                continue
            with open(f"/proc/{d}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            if state in ("Z", "X"):
                continue
            parents[int(d)] = int(ppid)
            a = ATTEMPT_RE.search(os.readlink(f"/proc/{d}/fd/2"))
            out[int(d)] = (cfg, int(m.group(1)), int(a.group(1)) if a else 0)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    # a trainer's own child is no second trainer (LeakSanitizer's tracer,
    # cloned at exit in the sanitizer build, has the trainer's command line)
    return {pid: v for pid, v in out.items() if parents.get(pid) not in out}


def live_trainers(root):
    """{pid: (run_id, attempt)} of the live trainers under root
    (live_trainer_configs)."""
    return {pid: (run, att) for pid, (_, run, att) in live_trainer_configs(root).items()}


class TrainerMonitor:
    """Scans live_trainers(root) every 50 ms; overlaps: {(run, pids): [first
    seen, last seen, [(pid, attempt)]]} for every run seen with two."""

    def __init__(self, root, t0):
        self.root, self.t0 = root, t0
        self.lock = threading.Lock()
        self.live = {}
        self.overlaps = {}
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop:
            t = live_trainers(self.root)
            by_run = {}
            for pid, (run, att) in t.items():
                by_run.setdefault(run, []).append((pid, att))
            now = round(time.time() - self.t0, 2)
            with self.lock:
                self.live = t
                for run, ps in by_run.items():
                    if len(ps) > 1:
                        key = (run, tuple(sorted(p for p, _ in ps)))
                        self.overlaps.setdefault(key, [now, now, sorted(ps)])[1] = now
            time.sleep(0.05)

    def snapshot(self):
        with self.lock:
            return dict(self.live)

    def close(self):
        self.stop = True
        self.thread.join()


def trainer_events(stdout):
    """The JSON objects of a trainer's stdout."""
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


def series_of(events):
    """{step: {series: value}} of a trainer's step and eval events, merged
    by step as the scheduler stores them."""
    out = {}
    for e in events:
        if e.get("event") in ("step", "eval"):
            row = out.setdefault(e["step"], {})
            for k in SERIES:
                v = e.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in row:
                    row[k] = float(v)
    return out


def diff_series(got, want, what):
    """Problems where got ({step: {series: value}}) differs from want on
    any step or series (bit for bit: same config, backend and threads)."""
    problems = []
    if sorted(got) != sorted(want):
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        problems.append(f"{what}: steps differ: {len(missing)} missing (first {missing[:3]}), "
                        f"{len(extra)} extra (first {extra[:3]})")
    bad = {}
    for step in sorted(set(got) & set(want)):
        for k in SERIES:
            if got[step].get(k) != want[step].get(k):
                bad.setdefault(k, []).append((step, got[step].get(k), want[step].get(k)))
    for k, d in bad.items():
        step, a, b = d[0]
        problems.append(f"{what}: {k} differs on {len(d)} step(s), first step {step}: "
                        f"{a!r} against {b!r} uninterrupted")
    return problems


def rerun(binary, config_path, workdir, ckpt_dir, env=None, timeout=600):
    """Trains config_path's run again from its start, uninterrupted, with its
    checkpoints in ckpt_dir and its config written to workdir (which must
    exist): the trainer's CompletedProcess."""
    cfg = json.load(open(config_path))
    cfg["checkpoint"]["dir"] = ckpt_dir
    path = os.path.join(workdir, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return subprocess.run([binary, "train", "--config", path], capture_output=True, text=True,
                          env=env, timeout=timeout)


def flip_bits(path, size, rng, mask):
    """Flips the bits of mask in one byte of the checkpoint at path (size
    bytes), picked by rng past its header and before its checksum, so that
    only the checksum can tell: the byte's offset."""
    at = rng.randrange(4096, size - 16)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))
    return at


def compare_series(binary, run_id, config_path, workdir, env=None):
    """Trains run_id again, uninterrupted, from its config (its checkpoint
    directory moved to workdir) and compares every stored series of the run
    with the rerun's, step by step: (number of steps compared, problems)."""
    os.makedirs(workdir, exist_ok=True)
    out = rerun(binary, config_path, workdir, os.path.join(workdir, "ckpt"), env)
    if out.returncode != 0:
        return 0, [f"run {run_id}: the uninterrupted rerun failed: {out.stderr[-500:]}"]
    want = series_of(trainer_events(out.stdout))
    stored = {s: v for (r, s), v in stored_rows({run_id}).items() if r == run_id}
    return len(want), diff_series(stored, want, f"run {run_id}")

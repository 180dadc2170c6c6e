"""Helpers shared by the Python integration tests (run through
tests/integration/run_with_pg.sh, which sets PGTEST_SH)."""
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


# the trainer stand-in whose curves follow known laws (fake_law_trainer.py)
FAKE_LAW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_law_trainer.py")
# a build under the sanitizers, several times slower: longer waits
SANITIZED = os.environ.get("SCALESWEEP_TEST_SANITIZED") == "1"

_given_ports = set()


def _ephemeral_range():
    try:
        lo, hi = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


@contextlib.contextmanager
def tmp_kept_on_failure(tmp, cleanup):
    """The body of a test: cleanup() runs however it ends, and tmp goes only
    when the body got to its end, so that a failure leaves its logs to read."""
    finished = False
    try:
        yield
        finished = True
    finally:
        cleanup()
        if finished:
            shutil.rmtree(tmp, ignore_errors=True)


def free_port():
    """A TCP port on 127.0.0.1 free at the time of the call, for a program
    under test to listen on: drawn from below the kernel's ephemeral range
    (where bind(port 0) and every outgoing connection of the tests running
    beside this one take theirs, so none of them can take it before the
    program binds it), and never the same one twice in this process."""
    lo, _ = _ephemeral_range()
    first = max(1024, min(20000, lo - 4096))
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(1000):
        p = rng.randrange(first, lo)
        if p in _given_ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            s.close()
        _given_ports.add(p)
        return p
    raise RuntimeError("free_port: no free port below the ephemeral range")


def psql(sql):
    """Runs sql on the throwaway cluster; its unaligned, tuples-only output."""
    out = subprocess.run(["bash", "-c", '. "$PGTEST_SH" && pg_psql -At -c "$0"', sql],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def make_token(tmp):
    """A fresh bearer token in tmp/token (mode 0600); the file's path."""
    path = os.path.join(tmp, "token")
    with open(path, "w") as f:
        f.write(os.urandom(24).hex())
    os.chmod(path, 0o600)
    return path


def http_request(port, method, path, body=None, headers=None, timeout=10):
    """One request to 127.0.0.1:port with headers (a body not of bytes sent
    as JSON): (status, the answer's bytes, its headers as a dict)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data, dict(r.getheaders())


def json_or_bytes(data):
    """An answer's body decoded as JSON; None when empty, the bytes
    themselves when not JSON (a test of bad requests reads both)."""
    try:
        return json.loads(data) if data else None
    except ValueError:
        return data


def api_request(port, token_file, method, path, body=None, timeout=10):
    """One request to the scheduler's API on 127.0.0.1:port with the token
    of token_file (body sent as JSON when given): (status, decoded JSON body
    or None)."""
    h = {"Authorization": "Bearer " + open(token_file).read().strip()}
    st, data, _ = http_request(port, method, path, body, h, timeout)
    return st, json.loads(data) if data else None


def until(pred, timeout, period=0.2):
    """Polls pred() every period seconds: True as soon as it holds, False
    after timeout seconds without (the caller says what it waited for)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(period)
    return False


def until_progress(pred, progress, stall, period=0.25):
    """Polls pred() every period seconds while work moves: True as soon as it
    holds, False once progress() (a count that grows as the work moves, such
    as the metric rows stored) has not grown for stall seconds. A slow
    machine or a sanitized build gets the time it needs; a stuck run does
    not hold the test for long."""
    last, moved = None, time.time()
    while True:
        if pred():
            return True
        now_at = progress()
        if now_at != last:
            last, moved = now_at, time.time()
        elif time.time() - moved > stall:
            return False
        time.sleep(period)


def wait_healthz(request, tries=200, proc=None):
    """Polls GET /healthz through request(method, path) every 0.1 s, at most
    tries times: True once it answers 200; False when it never does, or as
    soon as proc (the scheduler's Popen, when given) has exited."""
    for _ in range(tries):
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if request("GET", "/healthz")[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def trainer_config(prog):
    """A trainer stand-in's command line, `PROG train --config FILE [--resume
    DIR]` (sys.argv): (config, its model, its train, n = 12 n_layer d_model^2),
    or None after printing the usage when the command line is not that."""
    if len(sys.argv) < 4 or sys.argv[1] != "train" or sys.argv[2] != "--config":
        print(f"usage: {prog} train --config FILE [--resume DIR]", file=sys.stderr)
        return None
    cfg = json.load(open(sys.argv[3]))
    m, t = cfg["model"], cfg["train"]
    return cfg, m, t, 12 * m["n_layer"] * m["d_model"] ** 2


def kill_groups(procs, alone=()):
    """SIGKILL to the process group of every process in procs (a dict of
    name -> Popen started with start_new_session=True) still alive, then
    reaps each: a test's cleanup, its trainers included. Those named in
    alone (one started in the test's own group) get it themselves."""
    import signal
    for name, p in procs.items():
        if p.poll() is None:
            try:
                if name in alone:
                    p.kill()
                else:
                    os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()


def print_tail(path, tail=3000, title=None):
    """The last tail characters of the file at path on stderr, after the
    line title when given; nothing when there is no such file."""
    if os.path.exists(path):
        if title:
            print(title, file=sys.stderr)
        print(open(path, errors="replace").read()[-tail:], file=sys.stderr)


def stop_all(procs, timeout=10):
    """SIGTERM to every process of procs (Popen objects, a dict of them, or
    None for one never started) still running, then SIGKILL to each not gone
    within timeout seconds; every one reaped."""
    procs = [p for p in (procs.values() if isinstance(procs, dict) else procs) if p is not None]
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def post_sweep(request, spec, fail, what):
    """POSTs spec through request(method, path, body); the new sweep's id,
    or fail(message) saying what was submitted."""
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit {what}: {st} {body}")
    return body["id"]


class Rig:
    """One test's scheduler and workers: a scratch directory with a fresh
    API token, the API's and the worker port's free ports, and the
    `scalesweep` processes the test starts, by name, each logging to
    TMP/NAME.log; its API requests wait timeout seconds for their answer.
    A test calls close() in its `finally`."""

    def __init__(self, binary, prefix, logs=("scheduler", "w"), tail=4000, timeout=10):
        self.bin = binary
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.token = make_token(self.tmp)
        self.api_port, self.wport = free_port(), free_port()
        self.procs = {}
        self.logs, self.tail, self.timeout = logs, tail, timeout

    def request(self, method, path, body=None, timeout=None):
        """api_request to this rig's scheduler: (status, decoded body)."""
        return api_request(self.api_port, self.token, method, path, body,
                           timeout or self.timeout)

    def get(self, path):
        """GET path's document, or the test fails."""
        st, doc = self.request("GET", path)
        if st != 200:
            self.fail(f"GET {path}: {st} {doc}")
        return doc

    def cli(self, *args, timeout=120):
        """`scalesweep ARGS` as a client of this rig's scheduler."""
        return subprocess.run([self.bin, *args, "--url", f"http://127.0.0.1:{self.api_port}",
                               "--token-file", self.token], capture_output=True, text=True,
                              timeout=timeout)

    def start(self, name, args, env=None):
        """`scalesweep ARGS` as process `name` (replacing one of that name
        that has ended), its output appended to TMP/NAME.log, os.environ
        with env added as its environment."""
        log = open(os.path.join(self.tmp, name + ".log"), "a")
        self.procs[name] = subprocess.Popen([self.bin] + args, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            env=dict(os.environ, **(env or {})))
        log.close()
        return self.procs[name]

    def start_scheduler(self, *extra, env=None):
        """The scheduler on the test's database and this rig's ports, with
        extra options; fails the test unless it answers /healthz."""
        p = self.start("scheduler", ["scheduler", "--database", os.environ["SCALESWEEP_TEST_DB"],
                                     "--token-file", self.token,
                                     "--listen", f"127.0.0.1:{self.api_port}",
                                     "--workers", f"127.0.0.1:{self.wport}", *extra], env=env)
        if not wait_healthz(self.request, proc=p):
            self.fail("the scheduler did not come up")
        return p

    def start_worker(self, name, *extra, env=None):
        """Worker `name` (its work directory TMP/NAME) with extra options."""
        return self.start(name, ["worker", "--scheduler", f"127.0.0.1:{self.wport}",
                                 "--token-file", self.token, "--work-dir",
                                 os.path.join(self.tmp, name), "--name", name, *extra], env=env)

    def stop(self, name, sig=None, timeout=30):
        """Signals process `name` (SIGTERM unless sig) and waits for it."""
        import signal
        p = self.procs.pop(name)
        p.send_signal(sig or signal.SIGTERM)
        p.wait(timeout)

    def submit(self, spec, what="the sweep"):
        """POSTs spec; the new sweep's id, or the test fails saying what."""
        return post_sweep(self.request, spec, self.fail, what)

    def wait_counts(self, sweep, timeout, period=0.3):
        """The sweep's counts once it has runs and none is queued or
        running; None after timeout seconds without."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, s = self.request("GET", f"/api/sweeps/{sweep}?limit=0")
            c = s.get("counts", {}) if st == 200 else {}
            if c.get("total") and c["queued"] + c["running"] == 0:
                return c
            time.sleep(period)
        return None

    def check(self, cond, msg):
        """Fails the test with msg unless cond."""
        if not cond:
            self.fail(msg)

    def fail(self, msg):
        """Prints msg and the end of each of the rig's logs, kills what is
        still running and exits 1."""
        print("FAIL:", msg, file=sys.stderr)
        for name in self.logs:
            print_tail(os.path.join(self.tmp, name + ".log"), self.tail, f"--- {name}.log (end)")
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        sys.exit(1)

    def close(self):
        """SIGTERM to every process still running, SIGKILL to those not
        gone within 10 s; the scratch directory removed."""
        stop_all(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)


class WireWorker:
    """A worker stand-in on the scheduler's worker port: hello sent, then
    JSON lines both ways. It reads through its own buffer, since a file
    object of the socket cannot be read again after a timeout."""

    def __init__(self, port, hello, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.send(hello)

    def send(self, m):
        self.sock.sendall(json.dumps(m).encode() + b"\n")

    def next(self, pred, timeout, fail=None):
        """The next message pred accepts within timeout seconds, those before
        it skipped; None after timeout or once the connection is gone. With
        fail given, an error message or a closed connection fails the test."""
        end = time.time() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                m = json.loads(line)
                if fail and m.get("type") == "error":
                    fail(f"scheduler error to the worker: {m}")
                if pred(m):
                    return m
            left = end - time.time()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                if fail:
                    fail("the scheduler closed the worker connection")
                return None
            self.buf += chunk


def fail_exit(msg, logs=(), procs=(), tail=3000, cleanup=None):
    """A test's end on failure: msg, the last tail characters of each file
    of logs, SIGKILL to the processes of procs still running (None for one
    never started), cleanup() when given, exit 1."""
    print("FAIL:", msg, file=sys.stderr)
    for path in logs:
        print_tail(path, tail, f"---- {os.path.basename(path)} (last {tail} bytes)")
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
    if cleanup:
        cleanup()
    sys.exit(1)


def logs_in(tmp):
    """The paths of the *.log files in tmp, by name."""
    return [os.path.join(tmp, n) for n in sorted(os.listdir(tmp)) if n.endswith(".log")]


def step_losses(stdout):
    """{step: train_loss} of a trainer's JSON lines."""
    return {e["step"]: e["train_loss"] for e in map(json.loads, stdout.splitlines())
            if e["event"] == "step"}


def stored_losses(run_id):
    """{step: train_loss} of the run's stored metric rows."""
    rows = psql(f"SELECT step, train_loss FROM metrics WHERE run_id = {run_id}"
                " AND train_loss IS NOT NULL ORDER BY step")
    return {int(a): float(b) for a, b in (x.split("|") for x in rows.splitlines())}


def read_ready(ready, proc, fail, timeout=30):
    """The ports a scheduler started with --ready-file writes there, once
    the file is written; fails the test when proc exits first or timeout
    seconds pass."""
    if not until(lambda: os.path.exists(ready) or proc.poll() is not None, timeout, 0.1):
        fail("timed out waiting for the scheduler's ready file")
    if proc.poll() is not None:
        fail("the scheduler did not come up")
    return json.load(open(ready))


def lock_sweep_row(sweep, mode, fail):
    """A psql session that holds sweep's row locked (`FOR MODE`) until its
    stdin is closed; fails the test unless the lock is taken. Its output is
    line-buffered (stdbuf), so that "locked" comes back at once."""
    lock = subprocess.Popen(["stdbuf", "-oL", "bash", "-c", '. "$PGTEST_SH" && pg_psql -qAt'],
                            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lock.stdin.write(f"BEGIN; SELECT 'locked' FROM sweeps WHERE id = {sweep} FOR {mode};\n")
    lock.stdin.flush()
    if lock.stdout.readline().strip() != "locked":
        fail("psql did not lock the sweep's row")
    return lock


def unlock_sweep_row(lock):
    """Ends a lock_sweep_row session: the statements still waiting for a
    lock (those of a scheduler killed meanwhile) terminated, then its
    transaction rolled back."""
    psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    lock.stdin.write("ROLLBACK;\n\\q\n")
    lock.stdin.close()
    lock.wait(30)


def statement_waits(like):
    """The number of statements LIKE like that wait for a lock."""
    return int(psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    f"AND query LIKE '{like}'"))


def killed_while_locked(stop, lock, sweep, column):
    """Kills the scheduler (stop: a Rig's) while its statement waits on lock
    (lock_sweep_row's), then releases the lock: sweep's `column IS NULL`,
    its status and its number of runs, as psql prints them."""
    stop("scheduler", signal.SIGKILL)
    unlock_sweep_row(lock)
    return psql(f"SELECT {column} IS NULL, status, (SELECT count(*) FROM runs WHERE "
                f"sweep_id = {sweep}) FROM sweeps WHERE id = {sweep}")


def branch_runs(sweep, *more):
    """sweep's runs in id order, each a dict of its id, tokens, branch_of and
    branch_step (0: none), status, branch_path ("": none) and "more": the
    values of the SQL expressions more (over `runs r`), as psql prints them."""
    rows = psql("SELECT id, (config->'train'->>'tokens')::bigint, coalesce(branch_of, 0), "
                "coalesce(branch_step, 0), status, coalesce(branch_path, ''), " + ", ".join(more) +
                f" FROM runs r WHERE sweep_id = {sweep} ORDER BY id")
    out = []
    for line in rows.splitlines():
        i, tok, bo, bs, st, bp, *rest = line.split("|")
        out.append({"id": int(i), "tokens": int(tok), "branch_of": int(bo), "branch_step": int(bs),
                    "status": st, "branch_path": bp, "more": rest})
    return out

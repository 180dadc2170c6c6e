#!/usr/bin/env python3
"""The worker port against strangers and impostors (issue 32), with a real
scheduler on a throwaway PostgreSQL (run_with_pg.sh) and real workers:

- a flood of idle connections, from one address (127.0.0.1) and from eight
  more (127.0.0.2 to 127.0.0.9), each reopened as soon as the scheduler
  closes it, does not keep a worker out: 10 hellos with the right token are
  each welcomed within a second (the median and the largest are printed),
  and a real `scalesweep worker` connects;
- a slow peer that sends a byte of its hello every half second is closed
  after the hello deadline (5 s), not after a lease;
- a worker's identity is not its name: while worker "shared" trains a run,
  a connection with the cluster token and the name "shared" is refused with
  why, its `finished` for the run is never read (the run keeps running, its
  trainer too), and a second real worker started with --name shared (its
  own work directory) is refused with why and keeps nothing;
- once "shared" is killed (kill -9) with its run leased, the name still
  cannot be taken without its secret ("leased until ..."); restarted from
  its work directory (identity.json, mode 0600), the worker presents the
  secret and is "shared" again (the same workers row) and the run finishes.

Usage: test_sec_workers.py SCALESWEEP_BINARY
With SEC_FLOOD_ONLY=1 it measures the flood part alone and asserts nothing
there (a hello that is reset counts as 10 s), to compare two binaries.
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from harness import api_request, free_port, kill_groups, make_token, psql, until, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
tmp = tempfile.mkdtemp(prefix="ss-sec-workers-")
token_file = make_token(tmp)
TOKEN = open(token_file).read().strip()
api_port, wport = free_port(), free_port()
procs = {}


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for name, p in procs.items():
        log = os.path.join(tmp, name + ".log")
        if os.path.exists(log):
            print(f"--- {name}.log (tail)", file=sys.stderr)
            print(open(log).read()[-3000:], file=sys.stderr)
    cleanup()
    sys.exit(1)


def cleanup():
    kill_groups(procs)


def request(method, path, body=None):
    return api_request(api_port, token_file, method, path, body)


def start(name, args):
    log = open(os.path.join(tmp, name + ".log"), "a")
    procs[name] = subprocess.Popen([BIN, *args], stdout=log, stderr=log, start_new_session=True,
                                   env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))


def start_worker(name, wname, workdir):
    start(name, ["worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token_file,
                 "--cpu-slots", "1", "--work-dir", os.path.join(tmp, workdir), "--name", wname])


def log_of(name):
    p = os.path.join(tmp, name + ".log")
    return open(p).read() if os.path.exists(p) else ""


def hello(name, secret=None, source="127.0.0.1"):
    """A raw hello; the connection and the first answer (a dict), timed."""
    s = socket.create_connection(("127.0.0.1", wport), timeout=10, source_address=(source, 0))
    m = {"type": "hello", "version": 1, "token": TOKEN, "name": name, "host": "impostor-host",
         "gpus": [], "cpu_slots": 1, "runs": []}
    if secret:
        m["secret"] = secret
    t0 = time.perf_counter()
    s.sendall((json.dumps(m) + "\n").encode())
    f = s.makefile("rb")
    line = f.readline()
    dt = time.perf_counter() - t0
    return s, f, (json.loads(line) if line else None), dt


# ---- the flood ----------------------------------------------------------------------

stop_flood = threading.Event()
flood_opened = [0]


def flood(source, keep):
    """Holds `keep` idle connections from source, reopening each the
    scheduler closes."""
    conns = []
    while not stop_flood.is_set():
        alive = []
        for s in conns:
            try:
                s.setblocking(False)
                if s.recv(1, socket.MSG_PEEK) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        conns = alive
        while len(conns) < keep and not stop_flood.is_set():
            try:
                conns.append(socket.create_connection(("127.0.0.1", wport), timeout=2,
                                                      source_address=(source, 0)))
                flood_opened[0] += 1
            except OSError:
                time.sleep(0.01)
                break
        time.sleep(0.02)
    for s in conns:
        s.close()


def main():
    start("scheduler", ["scheduler", "--database", DB, "--token-file", token_file,
                        "--listen", f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
                        "--checkpoints", os.path.join(tmp, "ckpt"), "--lease-seconds", "6"])
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up")

    # 1. the flood: 300 from 127.0.0.1 and 40 from each of 127.0.0.2..9
    threads = [threading.Thread(target=flood, args=("127.0.0.1", 300), daemon=True)]
    threads += [threading.Thread(target=flood, args=(f"127.0.0.{i}", 40), daemon=True)
                for i in range(2, 10)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the flood at full strength
    times = []
    only = os.environ.get("SEC_FLOOD_ONLY") == "1"
    for i in range(10):
        try:
            s, f, ans, dt = hello(f"flood-probe-{i}")
            s.close()
        except OSError as e:
            ans, dt = {"type": "reset", "message": str(e)}, 10.0
        if not only and (not ans or ans.get("type") != "welcome"):
            fail(f"a hello with the right token under the flood was answered {ans}")
        times.append(dt if ans and ans.get("type") == "welcome" else 10.0)
        time.sleep(0.1)
    if only:
        stop_flood.set()
        print(f"flood only: {flood_opened[0]} idle connections opened; welcomes "
              f"{sorted(round(t * 1000, 1) for t in times)} ms (10000: refused or reset)")
        cleanup()
        return
    start_worker("real", "real-worker", "w-real")
    if not until(lambda: "connected to the scheduler" in log_of("real"), 10):
        fail("a real worker did not connect under the flood")
    t_real = time.time()
    stop_flood.set()
    for t in threads:
        t.join()
    print(f"flood: {flood_opened[0]} idle connections opened; the right token's welcome in "
          f"{statistics.median(times) * 1000:.1f} ms median, {max(times) * 1000:.1f} ms "
          f"largest of {len(times)}; a real worker connected")
    # the goal is a second; a sanitized build (several times slower, beside
    # other tests) is held to three
    limit = 3.0 if os.environ.get("SCALESWEEP_TEST_SANITIZED") else 1.0
    if max(times) > limit:
        fail(f"welcomes under the flood took up to {max(times):.2f} s, more than {limit:g} s")
    if "made room for newer ones" not in log_of("scheduler"):
        fail("the scheduler's log does not say that idle connections made room")
    procs["real"].send_signal(signal.SIGTERM)
    procs["real"].wait(timeout=30)

    # 2. a slow peer: one byte of its hello every half second
    s = socket.create_connection(("127.0.0.1", wport), timeout=10)
    t0 = time.time()
    partial = b'{"type": "hello", "version": 1, "token": "' + TOKEN.encode() * 4
    closed = None
    for b in partial:
        try:
            s.sendall(bytes([b]))
            s.settimeout(0.5)
            if s.recv(4096, socket.MSG_PEEK) == b"":
                closed = time.time() - t0
                break
            # an error line first, then the close
            data = s.recv(4096)
            if data:
                closed = time.time() - t0
                if b"no hello within 5 s" not in data:
                    fail(f"the slow peer was told {data!r}")
                break
        except socket.timeout:
            continue
        except OSError:
            closed = time.time() - t0
            break
    s.close()
    if closed is None or not 4.0 <= closed <= 8.0:
        fail(f"a slow peer was closed after {closed} s, expected the hello deadline (5 s)")
    print(f"slow peer: closed after {closed:.1f} s (the hello deadline is 5 s; a lease is 6 s)")

    # 3. identity: "shared" trains a long run
    start_worker("shared", "shared", "w-shared")
    if not until(lambda: "connected to the scheduler" in log_of("shared"), 15):
        fail("worker shared did not connect")
    ident = os.path.join(tmp, "w-shared", "identity.json")
    if not os.path.exists(ident) or os.stat(ident).st_mode & 0o077:
        fail(f"{ident}: missing, or readable by others")
    if json.load(open(ident)).get("name") != "shared":
        fail(f"{ident} does not hold the name shared")
    spec = {"name": "sec-workers", "method": "runs", "base": {
        "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16},
        "data": {"synthetic": {"words": 64}},
        "train": {"batch_size": 4, "tokens": 4 * 16 * 400000, "lr": 0.003},
        "eval": {"every_tokens": 4 * 16 * 100000, "tokens": 64},
        "checkpoint": {"every_tokens": 4 * 16 * 200}},
        "runs": [{"model": {"n_layer": 1, "d_model": 32, "n_head": 2}}],
        "resources": {"cpus": 1}, "max_attempts": 3}
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    run_id = None

    def running():
        nonlocal run_id
        ids = psql("SELECT id FROM runs WHERE status = 'running' AND checkpoint_step IS NOT NULL")
        run_id = int(ids.split()[0]) if ids else None
        return run_id is not None
    if not until(running, 60):
        fail("the run did not start and checkpoint on worker shared")
    wid = psql(f"SELECT worker FROM runs WHERE id = {run_id}")
    rows_before = psql("SELECT count(*) FROM workers WHERE name = 'shared'")

    # an impostor with the token and the name: refused, its finished unread
    s, f, ans, _ = hello("shared")
    if not ans or ans.get("type") != "error" or "is held by a connected worker" not in \
            ans.get("message", ""):
        fail(f"an impostor's hello as 'shared' was answered {ans}")
    try:
        s.sendall((json.dumps({"type": "finished", "run_id": run_id, "attempt": 1, "seq": 1,
                               "exit_code": 0, "signal": 0, "error": None, "log_tail": "",
                               "done": {"event": "done", "final_val_loss": 0.001,
                                        "tokens": 1}}) + "\n").encode())
    except OSError:
        pass
    s.close()
    time.sleep(1.0)
    status = psql(f"SELECT status || ' ' || coalesce(final_val_loss::text, '-') FROM runs "
                  f"WHERE id = {run_id}")
    if status != "running -":
        fail(f"after the impostor's finished, run {run_id} is {status!r}, expected running")
    if "replaced by a new connection" in log_of("scheduler"):
        fail("the impostor replaced the real worker's connection")
    print(f"impostor: refused ({ans['message'][:80]}...); run {run_id} still running")

    # a second real worker with the same name: refused with why, keeps trying
    start_worker("twin", "shared", "w-twin")
    if not until(lambda: "is held by a connected worker" in log_of("twin"), 15):
        fail("a second worker named shared was not told why it is refused")
    if "connected to the scheduler" in log_of("twin"):
        fail("a second worker named shared was welcomed")
    if psql(f"SELECT status FROM runs WHERE id = {run_id}") != "running":
        fail("the twin's refusal disturbed the run")
    procs["twin"].send_signal(signal.SIGTERM)
    procs["twin"].wait(timeout=30)
    print("twin: a second worker named shared refused with why; the run untouched")

    # kill -9 shared: its run stays leased, and its name cannot be taken
    os.killpg(procs["shared"].pid, signal.SIGKILL)
    procs["shared"].wait()
    time.sleep(0.5)
    s, f, ans, _ = hello("shared")
    s.close()
    if not ans or ans.get("type") != "error" or "leased until" not in ans.get("message", ""):
        fail(f"taking the name of a dead worker whose run is leased: {ans}")
    # restarted from its work directory: the same worker
    start_worker("shared2", "shared", "w-shared")
    if not until(lambda: "connected to the scheduler" in log_of("shared2"), 15):
        fail("worker shared, restarted from its work directory, did not connect")
    if psql("SELECT count(*) FROM workers WHERE name = 'shared'") != rows_before or \
            psql("SELECT id FROM workers WHERE name = 'shared'") != wid:
        fail("the restarted worker is not the same workers row")
    print("restart: a dead worker's leased name refused to a stranger; its own restart "
          "(identity.json) is the same worker")
    request("POST", f"/api/runs/{run_id}/cancel", {})
    cleanup()
    print("all checks passed")


try:
    main()
except SystemExit:
    raise
except BaseException as e:  # noqa: BLE001
    fail(f"{type(e).__name__}: {e}")

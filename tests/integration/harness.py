"""Helpers shared by the Python integration tests (run through
tests/integration/run_with_pg.sh, which sets PGTEST_SH)."""
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import time


_given_ports = set()


def _ephemeral_range():
    try:
        lo, hi = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


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


def api_request(port, token_file, method, path, body=None, timeout=10):
    """One request to the scheduler's API on 127.0.0.1:port with the token
    of token_file (body sent as JSON when given): (status, decoded JSON body
    or None)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Authorization": "Bearer " + open(token_file).read().strip()}
    if body is not None:
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


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


def kill_groups(procs):
    """SIGKILL to the process group of every process in procs (a dict of
    name -> Popen started with start_new_session=True) still alive, then
    reaps each: a test's cleanup, its trainers included."""
    import signal
    for p in procs.values():
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()

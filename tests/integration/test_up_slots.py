"""`scalesweep up --sweep SPEC` trains as many CPU runs at once as the cores
allow: the machine's cores (its CPU affinity) over the threads a run of the
spec takes (resources.cpus), at least the spec's ranks; `--cpu-slots N`
overrides it, and without --sweep the worker keeps its one slot. Checked on
what `up` prints and on what its worker says it offers (worker.log), with
`taskset` narrowing the cores, against the test's PostgreSQL. Then the
queue's order: on one slot, a sweep's largest runs start first.

Usage: test_up_slots.py SCALESWEEP_BINARY  (through run_with_pg.sh)"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import psql

BIN = os.path.abspath(sys.argv[1])
DB = os.environ["SCALESWEEP_TEST_DB"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def spec(tmp, name, resources, runs=None):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump({"name": name, "method": "runs",
                   "base": {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
                            "data": {"synthetic": {"words": 64}},
                            "train": {"tokens": 6144, "batch_size": 6, "micro_batch_size": 2,
                                      "lr": 0.003}},
                   "runs": runs or [{}], "resources": resources}, f)
    return path


def up(tmp, cores, args):
    """Starts `up` on the given cores (taskset), waits for the worker to
    say what it offers, stops `up`; what up printed and the worker's slots."""
    state = tempfile.mkdtemp(dir=tmp)
    cmd = ["taskset", "-c", cores, BIN, "up", "--state", state, "--database", DB,
           "--listen", "127.0.0.1:0"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    log = os.path.join(state, "worker.log")
    slots = None
    deadline = time.time() + 60
    while time.time() < deadline and slots is None:
        if os.path.exists(log):
            m = re.search(r"(\d+) CPU slots?, work dir", open(log).read())
            if m:
                slots = int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.2)
    try:
        os.killpg(p.pid, signal.SIGINT)
    except ProcessLookupError:  # it stopped on its own: its output says why
        pass
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    if slots is None:
        fail(f"{' '.join(cmd)}: the worker never said its slots; up printed:\n{out}")
    return out, slots


def check(tmp, cores, args, want, what, says=True):
    """says: up chose or was given the count, and prints it; else the worker
    decides (1 on a CPU host, 0 beside GPUs) and up must not claim a figure"""
    out, slots = up(tmp, cores, args)
    if slots != want:
        fail(f"{what}: the worker offers {slots} CPU slots, expected {want}\n{out}")
    said = f"{want} CPU run{'s' if want != 1 else ''} at a time"
    if says and said not in out:
        fail(f"{what}: up did not print '{said}':\n{out}")
    if not says and "at a time" in out:
        fail(f"{what}: up claimed a slot count it did not choose:\n{out}")
    print(f"ok: {what}: {slots} slot(s)")


def main():
    if not shutil.which("taskset"):
        print("skipped: taskset (util-linux) not found")
        sys.exit(77)
    ncpu = len(os.sched_getaffinity(0))
    cpus = sorted(os.sched_getaffinity(0))
    all_cores = ",".join(str(c) for c in cpus)
    one = str(cpus[0])
    with tempfile.TemporaryDirectory() as tmp:
        one_thread = spec(tmp, "one-thread", {"cpus": 1})
        two_threads = spec(tmp, "two-threads", {"cpus": 2})
        ranks = spec(tmp, "ranks", {"cpus": 1, "ranks": 3})
        check(tmp, all_cores, ["--sweep", one_thread], ncpu,
              f"1-thread runs on {ncpu} cores")
        check(tmp, one, ["--sweep", one_thread], 1, "1-thread runs on 1 core")
        check(tmp, all_cores, ["--sweep", two_threads], max(1, ncpu // 2),
              f"2-thread runs on {ncpu} cores")
        check(tmp, one, ["--sweep", ranks], 3, "a 3-rank run on 1 core (its ranks, at least)")
        check(tmp, all_cores, ["--sweep", one_thread, "--cpu-slots", "5"], 5,
              "--cpu-slots 5 given")
        check(tmp, all_cores, [], 1, "no --sweep", says=False)
        # the queue: largest first (by FLOPs), whatever the order in the spec
        order = spec(tmp, "order", {"cpus": 1},
                     [{"train": {"tokens": t}} for t in (1536, 6144, 3072, 4608)])
        p = subprocess.run(["taskset", "-c", one, BIN, "up", "--state", tempfile.mkdtemp(dir=tmp),
                            "--database", DB, "--listen", "127.0.0.1:0", "--sweep", order,
                            "--wait"], capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            fail(f"up --wait on the order spec exited {p.returncode}:\n{p.stdout}{p.stderr}")
        started = psql("SELECT string_agg(tokens::text, ' ' ORDER BY started_at, id) FROM runs "
                       "WHERE sweep_id = (SELECT id FROM sweeps WHERE name = 'order')")
        if started != "6144 4608 3072 1536":
            fail(f"on one slot the runs started in the order of tokens {started}, "
                 "expected the largest first: 6144 4608 3072 1536")
        print("ok: on one slot the runs started largest first:", started)
    print("up's CPU slots: cores over a run's threads, at least its ranks; "
          "--cpu-slots wins; 1 without a sweep")


if __name__ == "__main__":
    main()

"""Placement on GPUs against the real scheduler and a throwaway PostgreSQL
(run through tests/integration/run_with_pg.sh), with a worker stand-in that
speaks the protocol (docs/runtime.md) and offers 2 GPUs:

- 1-GPU runs fill both GPUs; a 2-GPU run of higher priority then waits;
- backfill: while it waits, nothing smaller may take a GPU the scheduler
  keeps for it (--reserve-after-seconds 0: at once), so when one 1-GPU run
  ends its GPU stays free, and when the second ends the 2-GPU run gets both;
- then the remaining 1-GPU run.
After it, a 4-GPU run where no worker has 4 goes to two workers of 2 GPUs
(gang placement: each assignment carries its ranks, rank 0's address and
the run's secret); and a 2-rank CPU run waiting for two 1-slot workers keeps
the slot that frees first, so that 1-rank runs behind it cannot starve it. Before all that, a worker whose hello says its trainer cannot run CUDA
(backends.cuda.error) gets no GPU run, and the sweep says why (the API,
`scalesweep status`, the sweep page) until a worker that can run it comes.
Without the reservation the freed GPU would go to the next 1-GPU run and a
stream of small runs could starve the large one.

Usage: test_placement.py SCALESWEEP_BINARY
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import WireWorker, api_request, free_port, post_sweep, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
tmp = tempfile.mkdtemp(prefix="ss-placement-")
token = os.path.join(tmp, "token")
TOKEN = os.urandom(16).hex()
with open(token, "w") as f:
    f.write(TOKEN)


api_port, wport = free_port(), free_port()
sched = None


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    log = os.path.join(tmp, "scheduler.log")
    if os.path.exists(log):
        print(open(log).read()[-3000:], file=sys.stderr)
    sys.exit(1)


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


GPU_INDICES = (3, 5)


class Worker(WireWorker):
    def __init__(self, name="fake", backends=None, cpu_slots=0):
        # device indices as a worker started with --gpus 3,5 reports them
        gpus = [{"index": i, "name": "Fake GPU", "memory_bytes": 1 << 34} for i in GPU_INDICES]
        if cpu_slots:  # a CPU worker
            gpus = []
        hello = {"type": "hello", "version": 1, "token": TOKEN, "name": name, "host": name,
                 "gpus": gpus, "cpu_slots": cpu_slots, "runs": []}
        if backends is not None:  # absent: an older worker, its GPUs taken as CUDA's
            hello["backends"] = backends
        super().__init__(wport, hello)
        self.seq = {}

    def next_assign(self, timeout):
        """The next assign within timeout seconds (None if none); others skipped."""
        m = self.next(lambda m: m["type"] == "assign", timeout, fail)
        if m is not None:
            self.send({"type": "started", "run_id": m["run_id"],
                       "attempt": m["attempt"], "config": {"event": "config"}})
        return m

    def finish(self, a):
        self.send({"type": "finished", "run_id": a["run_id"], "attempt": a["attempt"], "seq": 1,
                   "exit_code": 0, "signal": 0,
                   "done": {"event": "done", "final_val_loss": 3.0, "params": 1000,
                            "nonembedding_params": 800, "flops": 1e9, "flops_6nd": 1e9,
                            "tokens": 1000, "steps": 10, "wall_s": 1, "peak_rss_bytes": 1},
                   "error": None, "log_tail": ""})


def spec(name, gpus, n, priority, resources=None):
    return {"name": name, "method": "runs", "priority": priority,
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": i + 1}} for i in range(n)],
            "resources": resources or {"gpus": gpus}}


try:
    log = open(os.path.join(tmp, "scheduler.log"), "w")
    sched = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen",
         f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}", "--checkpoints",
         os.path.join(tmp, "ck"), "--reserve-after-seconds", "0"], stdout=log, stderr=log)
    if not wait_healthz(request):
        fail("the scheduler did not come up")
    # a worker whose GPUs its trainer cannot run CUDA on: no GPU run goes
    # there, and the sweep says why (API, `status`, the page)
    why = "backend \"cuda\": cannot load the CUDA module (test)"
    nocuda = Worker("nocuda", {"cpu": {"slots": 0}, "cuda": {"error": why + "\nHINT: x"}})
    small = post_sweep(request, spec("small", 1, 3, 0), fail, "small")
    a = nocuda.next_assign(2)
    if a is not None:
        fail(f"a GPU run went to a worker that cannot run CUDA: {a}")
    st, doc = request("GET", f"/api/sweeps/{small}")
    waiting = doc.get("waiting") or ""
    if not ("no connected worker can run a run of 1 GPU(s) with the CUDA backend" in waiting
            and "worker nocuda has 2 GPU(s) but cannot run CUDA: " + why in waiting
            and "HINT" not in waiting):
        fail(f"the sweep does not say why it waits: {doc.get('waiting')!r}")
    st, lst = request("GET", "/api/sweeps")
    if [x.get("waiting") for x in lst if x["id"] == small] != [waiting]:
        fail(f"the sweep list does not say why it waits: {lst}")
    out = subprocess.run([BIN, "status", str(small), "--url",
                          f"http://127.0.0.1:{api_port}"], capture_output=True, text=True)
    if out.returncode != 0 or "waiting: " + waiting not in out.stdout:
        fail(f"status does not say why: {out.returncode} {out.stdout!r} {out.stderr!r}")
    page = urllib.request.urlopen(f"http://127.0.0.1:{api_port}/sweeps/{small}",
                                  timeout=10).read().decode()
    if "Waiting: no connected worker can run a run of 1 GPU(s)" not in page:
        fail("the sweep page does not say why it waits")
    print("placement: no GPU run goes to a worker whose GPUs cannot run CUDA; the sweep says "
          "why in the API, status and the page")

    w = Worker()
    a1, a2 = w.next_assign(10), w.next_assign(10)
    if not (a1 and a2 and sorted(a1["gpus"] + a2["gpus"]) == list(GPU_INDICES)):
        fail(f"two 1-GPU runs on the worker's GPUs {GPU_INDICES} expected: {a1} {a2}")
    big = post_sweep(request, spec("big", 2, 1, 5), fail, "big")
    w.finish(a1)
    a = w.next_assign(2.5)
    if a is not None:
        fail(f"a GPU kept for the waiting 2-GPU run went to run {a['run_id']} ({a['gpus']})")
    w.finish(a2)
    a = w.next_assign(10)
    if not (a and sorted(a["gpus"]) == list(GPU_INDICES)):
        fail(f"the 2-GPU run should have both GPUs once they are free: {a}")
    st, r = request("GET", f"/api/runs/{a['run_id']}")
    if r["run"]["sweep_id"] != big:
        fail(f"run {a['run_id']} on both GPUs is not the 2-GPU sweep's: {r['run']}")
    w.finish(a)
    a = w.next_assign(10)
    if not a or len(a["gpus"]) != 1:
        fail(f"the last 1-GPU run should start after the 2-GPU run: {a}")
    st, doc = request("GET", f"/api/sweeps/{small}")
    if "waiting" in doc:
        fail(f"a sweep a connected worker can run still says it waits: {doc['waiting']!r}")
    if nocuda.next_assign(0.2) is not None:
        fail("a GPU run went to the worker that cannot run CUDA")
    print("placement: 1-GPU runs fill the GPUs; the waiting 2-GPU run's worker drains and it "
          "gets both GPUs; the last small run after it")

    # a 4-GPU run where no worker has 4: its ranks spread over two workers of 2
    w.finish(a)
    w2 = Worker("fake2")
    big4 = post_sweep(request, spec("big4", 4, 1, 0), fail, "big4")
    a, b = w.next_assign(10), w2.next_assign(10)
    if not (a and b and a["run_id"] == b["run_id"] and "dist" in a and "dist" in b):
        fail(f"a 4-GPU run over two 2-GPU workers expected: {a} {b}")
    da, db = a["dist"], b["dist"]
    if sorted(da["ranks"] + db["ranks"]) != [0, 1, 2, 3] or da["addr"] != db["addr"] or \
            da["secret"] != db["secret"] or not da["addr"].startswith("127.0.0.1:"):
        fail(f"the two parts do not make one run: {da} {db}")
    if sorted(a["gpus"]) != list(GPU_INDICES) or sorted(b["gpus"]) != list(GPU_INDICES):
        fail(f"each worker's part should take its 2 GPUs: {a['gpus']} {b['gpus']}")
    first, other = (w, a), (w2, b)
    if db["ranks"][0] == 0:
        first, other = other, first
    other[0].finish(other[1])  # rank 0's worker reports the run; the other is released
    first[0].finish(first[1])

    def succeeded():
        st, r = request("GET", f"/api/runs/{a['run_id']}")
        return r["run"]["status"] == "succeeded"
    deadline = time.time() + 10
    while not succeeded():
        if time.time() > deadline:
            fail("the run spread over two workers did not succeed")
        time.sleep(0.1)
    print("placement: a 4-GPU run over two workers of 2 GPUs: ranks 0-1 and 2-3, one address "
          "and secret; rank 0's worker reports it")

    # a CPU gang keeps the slots that free up: two 1-slot workers busy with
    # 1-rank runs; a 2-rank run of higher priority waits; when one slot frees
    # it stays free (the next 1-rank run would take it and the gang could
    # wait for good), and when the second frees the gang gets both
    c1, c2 = Worker("cpu1", cpu_slots=1), Worker("cpu2", cpu_slots=1)
    ones = post_sweep(request, spec("ones", 0, 4, 0, {"cpus": 1}), fail, "ones")
    r1, r2 = c1.next_assign(10), c2.next_assign(10)
    if not (r1 and r2):
        fail(f"a 1-rank run on each CPU worker expected: {r1} {r2}")
    gang = post_sweep(request, spec("gang", 0, 1, 5, {"cpus": 1, "ranks": 2}), fail, "gang")
    c1.finish(r1)
    a = c1.next_assign(2.5)
    if a is not None:
        fail(f"the slot kept for the waiting 2-rank run went to run {a['run_id']}")
    c2.finish(r2)
    a, b = c1.next_assign(10), c2.next_assign(10)
    if not (a and b and a["run_id"] == b["run_id"] and "dist" in a and "dist" in b):
        fail(f"the 2-rank run over both CPU workers expected once both slots are free: {a} {b}")
    st, r = request("GET", f"/api/runs/{a['run_id']}")
    if r["run"]["sweep_id"] != gang:
        fail(f"run {a['run_id']} over both workers is not the gang's: {r['run']}")
    first, other = (c1, a), (c2, b)
    if b["dist"]["ranks"][0] == 0:
        first, other = other, first
    other[0].finish(other[1])
    first[0].finish(first[1])
    n1, n2 = c1.next_assign(10), c2.next_assign(10)
    if not (n1 and n2 and "dist" not in n1 and "dist" not in n2):
        fail(f"the 1-rank runs should go on after the gang: {n1} {n2}")
    print("placement: a waiting 2-rank CPU run keeps the slot that frees (no 1-rank run behind "
          "it takes it) and starts over two workers when both are free; the 1-rank runs after")
finally:
    if sched and sched.poll() is None:
        sched.terminate()
        sched.wait(10)
    shutil.rmtree(tmp, ignore_errors=True)

"""WSD branches end to end (docs/sweeps.md, "WSD branches"), against a
throwaway PostgreSQL (run through tests/integration/run_with_pg.sh), the real
scheduler and worker, and the real trainer:

- a "wsd" spec of two model sizes x three token counts is planned as two
  trunks (the longest run of each size) and four branches, each with the step
  its decay starts from (runs.branch_of, branch_step);
- the trunks keep a checkpoint at each branch point and report it; each
  branch then starts from it: its metrics begin at branch_step + 1, and it
  trains only its decay;
- a second sweep of the same configs whose trunks are cancelled before they
  start: its branches wait for nothing and train from scratch (metrics from
  step 1), and end with exactly the final losses of the branched ones, bit
  for bit, which is what makes a branch an observation as good as a run;
- a branch whose branch point its worker cannot read (checkpoints not shared)
  trains from scratch instead of failing, to the same result;
- a branch's later attempt resumes from its own checkpoints, not from its
  branch point (the claim's resume step counts from the branch point);
- the run's API document and page say which run and step it branches from;
- the sweep's counts (branched, flops_trained) and `scalesweep status`;
- the compute the branches saved, printed.

Usage: test_wsd.py SCALESWEEP_BINARY
"""
import http.client
import json
import os
import subprocess
import sys
import time

from harness import Rig, branch_runs, psql

BIN = sys.argv[1]
T0 = time.time()
TIMEOUT = 240


rig = Rig(BIN, "ss-wsd-")
tmp, token, api_port, wport = rig.tmp, rig.token, rig.api_port, rig.wport
request, fail = rig.request, rig.fail
ckpt = os.path.join(tmp, "ckpt")
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}


def spec(name):
    return {"name": name, "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "data": {"synthetic": {"words": 256, "zipf": 1.2}},
                     "train": {"batch_size": 8, "micro_batch_size": 4, "lr": 0.003,
                               "warmup_tokens": 2560, "schedule": "wsd"},
                     "eval": {"tokens": 2048}},
            "runs": [{"model": {"d_model": d, "n_head": 2}, "train": {"tokens": t}}
                     for d in (32, 48) for t in (25600, 51200, 102400)],
            "resources": {"cpus": 1}}


def runs_of(sweep):
    runs = branch_runs(sweep, "(config->'model'->>'d_model')::int",
                       "coalesce(final_val_loss::text, '')",
                       "(SELECT coalesce(min(step), 0) || ':' || count(*) FROM metrics m"
                       " WHERE m.run_id = r.id AND m.train_loss IS NOT NULL)")
    for r in runs:
        d, r["final"], m = r.pop("more")
        first, n = m.split(":")
        r["d"], r["first_step"], r["rows"] = int(d), int(first), int(n)
    return runs


def wait_sweep(sweep):
    c = rig.wait_counts(sweep, TIMEOUT - (time.time() - T0))
    if c is None:
        fail(f"sweep {sweep} did not finish in {TIMEOUT} s: {runs_of(sweep)}")
    return c


try:
    rig.start_scheduler("--checkpoints", ckpt, env=PASSIVE)

    # no worker yet: the sweep whose trunks are cancelled goes first
    lone = rig.submit(spec("wsd-unbranched"))
    for r in runs_of(lone):
        if r["branch_of"] == 0:
            st, b = request("POST", f"/api/runs/{r['id']}/cancel")
            if st not in (200, 202):
                fail(f"cancel the trunk {r['id']}: {st} {b}")
    # one of its branches is told of a branch point that is not there (a
    # worker on a host without the checkpoints): it trains from scratch
    lost = [r for r in runs_of(lone) if r["branch_of"] and r["d"] == 32 and r["tokens"] == 25600]
    gone = os.path.join(ckpt, f"run-{lost[0]['branch_of']}", "branch-80", "checkpoint.bin")
    psql(f"UPDATE runs SET branch_path = '{gone}' WHERE id = {lost[0]['id']}")
    sweep = rig.submit(spec("wsd-branched"))
    # per size, the 102400-token run is the trunk (400 steps); the others
    # branch at their stable steps, 100 - 20 = 80 and 200 - 40 = 160
    planned = runs_of(sweep)
    trunks = {r["d"]: r["id"] for r in planned if r["branch_of"] == 0}
    want = {(d, t): (0, 0) if t == 102400 else (trunks.get(d), t // 256 - t // 256 // 5)
            for d in (32, 48) for t in (25600, 51200, 102400)}
    got = {(r["d"], r["tokens"]): (r["branch_of"], r["branch_step"]) for r in planned}
    if len(trunks) != 2 or got != want:
        fail(f"planned branches {got}, expected {want}")
    print("planned: 2 trunks of 400 steps; branches at steps 80 and 160 of each")

    rig.start_worker("w", "--cpu-slots", "2", env=PASSIVE)
    c = wait_sweep(lone)
    if c["succeeded"] != 4 or c["cancelled"] != 2:
        fail(f"the sweep without trunks: {c}, expected 4 succeeded and 2 cancelled")
    c = wait_sweep(sweep)
    if c["succeeded"] != 6:
        fail(f"the branched sweep: {c}, expected 6 succeeded: {runs_of(sweep)}")

    alone = {(r["d"], r["tokens"]): r for r in runs_of(lone)}
    trained = whole = 0
    for r in runs_of(sweep):
        steps = r["tokens"] // 256
        whole += steps
        if r["branch_of"] == 0:
            if (r["first_step"], r["rows"]) != (1, steps):
                fail(f"trunk {r['id']}: metrics from step {r['first_step']}, {r['rows']} rows; "
                     f"expected 1 and {steps}")
            trained += steps
            continue
        at = r["branch_step"]
        path = os.path.join(ckpt, f"run-{r['branch_of']}", f"branch-{at}", "checkpoint.bin")
        if os.path.realpath(r["branch_path"]) != os.path.realpath(path) or not os.path.exists(path):
            fail(f"branch {r['id']}: branch_path {r['branch_path']!r}, expected {path} (there)")
        if (r["first_step"], r["rows"]) != (at + 1, steps - at):
            fail(f"branch {r['id']}: metrics from step {r['first_step']}, {r['rows']} rows; "
                 f"expected {at + 1} and {steps - at}: it did not start from its branch point")
        trained += steps - at
        a = alone[(r["d"], r["tokens"])]
        if a["status"] != "succeeded" or a["first_step"] != 1 or \
                a["branch_path"] not in ("", gone):
            fail(f"the unbranched twin of run {r['id']}: {a}, expected trained from step 1")
        if a["final"] != r["final"] or not r["final"]:
            fail(f"run {r['id']} (d {r['d']}, D {r['tokens']}): final_val_loss {r['final']} "
                 f"from its branch point, {a['final']} from scratch: expected the same")
        st, doc = request("GET", f"/api/runs/{r['id']}?limit=0")
        doc = (doc or {}).get("run") or {}
        if st != 200 or (doc.get("branch_of"), doc.get("branch_step")) != (r["branch_of"], at):
            fail(f"GET /api/runs/{r['id']}: {st}, branch_of {doc.get('branch_of')}, branch_step "
                 f"{doc.get('branch_step')}; expected {r['branch_of']} and {at}")
        c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=10)
        c.request("GET", f"/runs/{r['id']}")
        page = c.getresponse().read().decode()
        c.close()
        if f'Branch of</th><td><a href="/runs/{r["branch_of"]}">' not in page or \
                f"steps 1 to {at}" not in page:
            fail(f"the page of run {r['id']} does not say it branches from run {r['branch_of']} "
                 f"at step {at}")
        print(f"run {r['id']} d {r['d']} D {r['tokens']}: from step {at} of {steps}, "
              f"final_val_loss {r['final']} = from scratch")
    print(f"steps trained {trained} of {whole} ({100 * (whole - trained) / whole:.1f}% saved)")

    log = open(os.path.join(tmp, "w.log")).read()
    if f"branch point {gone}: No such file or directory; training from scratch" not in log:
        fail(f"the worker did not say that run {lost[0]['id']}'s branch point is missing")

    # a branch's later attempt resumes from its own checkpoints (the stored
    # metrics start after its branch point): run again, it trains no step
    b = [r for r in runs_of(sweep) if r["branch_of"] and r["tokens"] == 51200][0]
    psql(f"UPDATE runs SET status = 'queued', worker = NULL, lease_until = NULL, "
         f"finished_at = NULL WHERE id = {b['id']}")
    request("POST", "/api/sweeps", spec("wsd-nudge"))  # a placement pass
    wait_sweep(sweep)
    again = [r for r in runs_of(sweep) if r["id"] == b["id"]][0]
    logs = os.path.join(tmp, "w", "runs", str(b["id"]), "attempt-2.log")
    text = open(logs).read() if os.path.exists(logs) else ""
    if again["status"] != "succeeded" or again["final"] != b["final"] or \
            "--resume-max-step 200" not in text:
        fail(f"run {b['id']} again: {again}, its attempt 2 log {logs}: {text[:600]}")
    print(f"run {b['id']} attempt 2: resumed from its own checkpoint at step 200, "
          "final_val_loss unchanged")

    # the sweep's counts: the runs that branched, the FLOPs trained of those done
    flops = {int(i): float(f) for i, f in (l.split("|") for l in psql(
        f"SELECT id, flops FROM runs WHERE sweep_id = {sweep}").splitlines())}
    want = sum(flops[r["id"]] * (1 - r["branch_step"] / (r["tokens"] // 256))
               for r in runs_of(sweep))
    for sw, n, tr in ((sweep, 4, want), (lone, 0, None)):
        st, doc = request("GET", f"/api/sweeps/{sw}?limit=0")
        c = doc["counts"]
        if c["branched"] != n or abs(c["flops_trained"] - (tr or c["flops_done"])) > \
                1e-9 * c["flops_done"]:
            fail(f"sweep {sw} counts {c}: expected branched {n}, flops_trained {tr}")
    out = subprocess.run([BIN, "status", str(sweep), "--url", f"http://127.0.0.1:{api_port}",
                          "--token-file", token], capture_output=True, text=True, timeout=30)
    saved = 100 * (1 - want / sum(flops.values()))
    if f"wsd branches: 4 runs started from a longer run's checkpoint; " not in out.stdout or \
            f"({saved:.1f}% saved)" not in out.stdout:
        fail(f"scalesweep status {sweep}: {out.returncode} {out.stdout} {out.stderr}")
    print(out.stdout.strip().splitlines()[-1])
    print("PASS")
finally:
    rig.close()

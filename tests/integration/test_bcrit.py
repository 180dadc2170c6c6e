"""The critical batch size by branching end to end (docs/sweeps.md, "Critical
batch size by branching"), against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), the real scheduler and worker, and the
real trainer:

- a batch ladder with "branch" is planned as one trunk at the smallest batch
  size and, at each branch point, one rung per other batch size
  (runs.branch_of, branch_step in the trunk's steps);
- the trunk keeps a checkpoint at each branch point; each rung starts there
  (its metrics begin at its own step branch_tokens / its batch + 1, at its
  own batch size and rate) and trains branch.tokens more;
- the scheduler fits law "bcrit": B_crit at each branch point with its
  interval, the trunk's noise scale there, and B_crit against D and L;
- the fit is what fit_bcrit gives for the steps read off the stored
  evaluations (recomputed here from the database, independently);
- `scalesweep up`'s result printer, the sweep page and the run page show it;
- a rung whose trunk was cancelled trains from scratch and the fit leaves it
  out, saying so.

Usage: test_bcrit.py SCALESWEEP_BINARY
"""
import http.client
import json
import math
import os
import sys
import time

from harness import Rig, branch_runs, psql

BIN = sys.argv[1]
T0 = time.time()
TIMEOUT = 300
T = 32  # seq_len


rig = Rig(BIN, "ss-bcrit-")
tmp, token, api_port, wport = rig.tmp, rig.token, rig.api_port, rig.wport
request, fail = rig.request, rig.fail
ckpt = os.path.join(tmp, "ckpt")
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}


AT = [32768, 131072]
DELTA = 65536
BATCHES = [8, 32, 64, 128]


def spec(name):
    return {"name": name, "method": "batch",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": T},
                     "data": {"synthetic": {"words": 256, "zipf": 1.2}},
                     "train": {"micro_batch_size": 4, "lr": 0.004, "warmup_tokens": 4096},
                     "eval": {"tokens": 2048}, "threads": 1},
            "batch": {"tokens": 262144, "batch_size": BATCHES,
                      "branch": {"at": AT, "tokens": DELTA}},
            "resources": {"cpus": 1}}


def runs_of(sweep):
    runs = branch_runs(sweep, "batch_size", "part",
                       "(SELECT coalesce(min(step), 0) FROM metrics m WHERE m.run_id = r.id)")
    for r in runs:
        b, r["part"], first = r.pop("more")
        r["batch"], r["first_step"] = int(b), int(first)
    return runs


def evals(run_id):
    rows = psql(f"SELECT tokens, val_loss FROM metrics WHERE run_id = {run_id} "
                f"AND val_loss IS NOT NULL ORDER BY step")
    return [(float(a), float(b)) for a, b in (l.split("|") for l in rows.splitlines())]


def interp(xy, x):
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return math.nan


def tokens_to(curve, target):
    prev = None
    for x, y in curve:
        if y <= target:
            if prev is None or not prev[1] > y:
                return x
            return prev[0] + (x - prev[0]) * (prev[1] - target) / (prev[1] - y)
        prev = (x, y)
    return math.nan


def ladder(points):
    """weighted least squares of S on 1/B, weights 1/S^2: B_crit = E_min / S_min"""
    sw = sx = sy = sxx = sxy = 0.0
    for b, s in points:
        w, x = 1 / s ** 2, 1 / b
        sw, sx, sy, sxx, sxy = sw + w, sx + w * x, sy + w * s, sxx + w * x * x, sxy + w * x * s
    e_min = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    s_min = (sy - e_min * sx) / sw
    return e_min / s_min


def wait_sweep(sweep):
    c = rig.wait_counts(sweep, TIMEOUT - (time.time() - T0))
    if c is None:
        fail(f"sweep {sweep} did not finish in {TIMEOUT} s: {runs_of(sweep)}")
    return c


def wait_fit(sweep, law, ok):
    while time.time() - T0 < TIMEOUT:
        st, f = request("GET", f"/api/sweeps/{sweep}/fit")
        if st == 200 and law in f and ok(f[law]):
            return f[law]
        time.sleep(0.3)
    fail(f"no {law} fit for sweep {sweep} in {TIMEOUT} s")


try:
    rig.start_scheduler("--checkpoints", ckpt, env=PASSIVE)
    # no worker yet: a second sweep whose trunk is cancelled before it starts
    lone = rig.submit(spec("bcrit-no-trunk"))
    for r in runs_of(lone):
        if r["branch_of"] == 0:
            request("POST", f"/api/runs/{r['id']}/cancel")
    sweep = rig.submit(spec("bcrit"))
    planned = runs_of(sweep)
    trunks = [r for r in planned if r["branch_of"] == 0]
    if len(trunks) != 1 or trunks[0]["batch"] != 8 or trunks[0]["tokens"] != 262144:
        fail(f"planned trunk(s) {trunks}, expected one at batch 8 training 262144 tokens")
    trunk = trunks[0]
    want = sorted((a // (8 * T), b, a + DELTA) for a in AT for b in BATCHES[1:])
    got = sorted((r["branch_step"], r["batch"], r["tokens"]) for r in planned
                 if r["branch_of"] == trunk["id"])
    if got != want or any(r["part"] != "bcrit" for r in planned):
        fail(f"planned rungs (trunk step, batch, tokens) {got}, expected {want}, all part bcrit")
    print(f"planned: a trunk of {262144 // (8 * T)} steps at batch 8; "
          f"rungs at batch {BATCHES[1:]} from its steps {[a // (8 * T) for a in AT]}")

    rig.start_worker("w", "--cpu-slots", "2", env=PASSIVE)
    c = wait_sweep(sweep)
    if c["succeeded"] != len(planned):
        fail(f"the sweep: {c}, expected {len(planned)} succeeded: {runs_of(sweep)}")
    runs = runs_of(sweep)
    for r in runs:
        if r["branch_of"] == 0:
            continue
        at = r["branch_step"] * 8 * T
        path = os.path.join(ckpt, f"run-{trunk['id']}", f"branch-{r['branch_step']}",
                            "checkpoint.bin")
        if os.path.realpath(r["branch_path"]) != os.path.realpath(path):
            fail(f"rung {r['id']}: branch_path {r['branch_path']!r}, expected {path}")
        if r["first_step"] != at // (r["batch"] * T) + 1:
            fail(f"rung {r['id']} (batch {r['batch']}, from D = {at}): first stored step "
                 f"{r['first_step']}, expected {at // (r['batch'] * T) + 1}")
    print("every rung started from the trunk's checkpoint at its own step")

    # the fit, against the same steps read off the stored evaluations here
    te = evals(trunk["id"])
    mine, npts = {}, 0
    for a in AT:
        target = interp(te, a + DELTA / 4)
        pts = [(8 * T, DELTA / 4 / (8 * T))]
        for r in runs:
            if r["branch_of"] and r["branch_step"] * 8 * T == a:
                curve = [(a, interp(te, a))] + [e for e in evals(r["id"]) if e[0] > a]
                tok = tokens_to(curve, target)
                if tok > a:
                    pts.append((r["batch"] * T, (tok - a) / (r["batch"] * T)))
        mine[a] = (target, pts, ladder(pts) if len(pts) >= 4 else math.nan)
        npts += len(pts)
    f = wait_fit(sweep, "bcrit", lambda f: f.get("n_points") == npts)
    for a in AT:
        target, pts, bc = mine[a]
        key = "B_crit(D=%.4g)" % a
        theirs = f["derived"].get(key, "absent")
        lo, hi = (f.get("ci95") or {}).get(key, [math.nan, math.nan])
        noise = f["derived"].get("B_noise(D=%.4g)" % a)
        if bc > 0:
            if theirs is None or theirs == "absent" or not abs(theirs - bc) <= 1e-6 * bc:
                fail(f"{key}: the scheduler's fit {theirs}, recomputed {bc}")
        elif theirs is not None or not any(("D = %.4g" % a) in w for w in f["warnings"]):
            fail(f"{key}: recomputed S_min or E_min not positive ({bc}); the scheduler's fit "
                 f"{theirs}, warnings {f['warnings']}")
        if not (noise and noise > 0):
            fail(f"no B_noise at D = {a}: {sorted(f['derived'])}")
        print(f"D = {a}: target {target:.4f}, B_crit {theirs} [{lo:.4g}, {hi:.4g}] tokens "
              f"(recomputed {bc:.6g}), the trunk's B_noise {noise:.4g}; (B, steps) {pts}")
    for k in ("gamma_D", "alpha_B"):
        if k not in f["params"]:
            fail(f"no {k} in the fit: {f['params']}")
    print(f"gamma_D {f['params']['gamma_D']}, alpha_B {f['params']['alpha_B']}")

    # the sweep page and the run page
    conn = http.client.HTTPConnection("127.0.0.1", api_port, timeout=10)
    conn.request("GET", f"/sweeps/{sweep}")
    page = conn.getresponse().read().decode()
    if "Critical batch size by branching" not in page or "B_crit(D=3.277e+04)" not in page \
            or 'id="chart-bcrit"' not in page:
        fail("the sweep page does not show the critical batch size by branching")
    rung = next(r for r in runs if r["branch_of"])
    conn.request("GET", f"/runs/{rung['id']}")
    page = conn.getresponse().read().decode()
    conn.close()
    if "a rung of its critical batch size ladder" not in page:
        fail(f"the page of run {rung['id']} does not say it is a rung of run {trunk['id']}")

    # the sweep without its trunk: its rungs trained from scratch, and the
    # fit leaves them out, saying so
    c = wait_sweep(lone)
    if c["succeeded"] != len(planned) - 1 or c["cancelled"] != 1:
        fail(f"the sweep without a trunk: {c}")
    if any(r["branch_of"] and r["first_step"] != 1 for r in runs_of(lone)):
        fail("a rung without its trunk did not train from scratch")
    said = f"sweep {lone}: bcrit not fitted"
    while time.time() - T0 < TIMEOUT:
        log = open(os.path.join(tmp, "scheduler.log")).read()
        if said in log and "6 rungs of a branched batch ladder trained from scratch" in log:
            break
        time.sleep(0.3)
    else:
        fail(f"the scheduler did not say why sweep {lone}'s bcrit is not fitted")
    st, f = request("GET", f"/api/sweeps/{lone}/fit")
    if st != 200 or "bcrit" in f:
        fail(f"sweep {lone} has a bcrit fit from rungs trained from scratch: {st} {f}")
    print("rungs whose trunk was cancelled train from scratch; the fit leaves them out, saying so")
finally:
    rig.close()
print(f"PASS: critical batch size by branching ({time.time() - T0:.0f} s)")

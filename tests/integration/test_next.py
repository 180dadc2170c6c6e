#!/usr/bin/env python3
"""The next budget, designed from the last (issue 17 part 4), end to end:
the real scheduler and worker against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh), the worker training with
tests/integration/fake_law_trainer.py, whose runs with train.seed 8 end at
a known Chinchilla law, L = 1.5 + 400 / N^0.34 + 4000 / D^0.28, times each
run's own 1% noise (fixed by its shape and D).

- An IsoFLOP study of 4 budgets (1e13 to 3e14 FLOPs) runs and is fitted.
- GET /api/sweeps/{id}/next?flops=1e15 (and `scalesweep next`) proposes 5
  sizes around the law's N_opt(1e15), each with its predicted loss and
  interval: the law's N_opt inside N_opt's interval, every prediction within 3% of the
  loss the law gives that run, the sizes bracketing the law's N_opt.
- Bad requests say where: no flops, a negative one, a body that is not an
  object, an unknown key (400 with the path); no such sweep (404); a sweep
  too small to fit (400, why); adding to a cancelled sweep (409).
- Two POSTs of the budget at once add its runs once (runs.designed holds
  what was predicted); `scalesweep next ID --flops 1e15 --submit` then adds
  nothing.
  They run; each measured loss is within 4% of its prediction and 4 of the
  5 at least inside their 95% intervals; the fits take them in (25 points, 5
  IsoFLOP budgets); the sweep's page shows predicted against measured.

Usage: test_next.py SCALESWEEP_BINARY
"""
import json
import os
import re
import subprocess
import sys
import time

from harness import FAKE_LAW as FAKE, SANITIZED, Rig, until

BIN = sys.argv[1]
TIMEOUT = 600 if SANITIZED else 150

rig = Rig(BIN, "ss-next-", tail=3000, timeout=60)
tmp, token, api_port, fail, cli = rig.tmp, rig.token, rig.api_port, rig.fail, rig.cli
request = rig.request


def raw_request(method, path, data):
    """A request whose body is sent as is (not JSON-encoded)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=60)
    c.request(method, path, body=data,
              headers={"Authorization": "Bearer " + open(token).read().strip()})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, json.loads(out) if out else None


def law(n, d):
    return 1.5 + 400 * n ** -0.34 + 4000 * d ** -0.28


def n_opt(c):
    """The law's compute-optimal N at C = 6 N D (SCIENCE.md)."""
    al, be, a_, b_ = 0.34, 0.28, 400.0, 4000.0
    g = (al * a_ / (be * b_)) ** (1 / (al + be))
    return g * (c / 6) ** (be / (al + be))


def wait_sweep(sweep, total):
    def done():
        st, s = request("GET", f"/api/sweeps/{sweep}?limit=0")
        c = s["counts"]
        return st == 200 and c["total"] == total and c["queued"] + c["running"] == 0
    if not until(done, TIMEOUT):
        fail(f"sweep {sweep} did not finish {total} runs in {TIMEOUT} s")
    return request("GET", f"/api/sweeps/{sweep}?limit=0")[1]["counts"]


def wait_fit(sweep, law_name, points):
    got = {}

    def fitted():
        st, fits = request("GET", f"/api/sweeps/{sweep}/fit")
        got["fits"] = fits
        return st == 200 and fits.get(law_name, {}).get("n_points") == points
    if not until(fitted, TIMEOUT):
        fail(f"no {law_name} fit of {points} points: {got.get('fits')}")
    return got["fits"]


def start_worker():
    """The worker, started again when it was stopped."""
    rig.start_worker("w", "--cpu-slots", "2", "--bin", FAKE)


try:
    rig.start_scheduler("--checkpoints", os.path.join(tmp, "ckpt"))
    start_worker()

    # ---- the study: 4 budgets x 5 sizes centred on the law's optimum ------------------
    a = 0.28 / 0.62
    spec = {"name": "next-study", "method": "isoflop",
            "base": {"model": {"seq_len": 32}, "train": {"seed": 8, "batch_size": 8, "lr": 0.003}},
            "isoflop": {"flops": [1e13, 3e13, 1e14, 3e14],
                        "centre": {"coef": n_opt(1.0), "exponent": a, "span": 3, "points": 5},
                        "flops_count": "exact"},
            "resources": {"cpus": 1}, "throughput_flops": 1e15}
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201 or body["runs"] != 20:
        fail(f"submit the study: {st} {body}")
    sweep = body["id"]
    c = wait_sweep(sweep, 20)
    if c["succeeded"] != 20:
        fail(f"the study: {c}")
    wait_fit(sweep, "chinchilla", 20)
    print(f"study: sweep {sweep}, 20 runs at 4 budgets, fitted")

    # ---- the design ----------------------------------------------------------------------
    C = 1e15
    st, d = request("GET", f"/api/sweeps/{sweep}/next?flops=1e15")
    if st != 200:
        fail(f"GET next: {st} {d}")
    truth_n = n_opt(C)
    nlo, nhi = d["n_opt"]["ci95"]
    if not nlo <= truth_n <= nhi or abs(d["n_opt"]["value"] / truth_n - 1) > 0.3 \
            or len(d["runs"]) != 5 or d["rules"]["batch"]["from"] != "the spec":
        fail(f"N_opt {d['n_opt']} against the law's {truth_n:.4g}, {len(d['runs'])} runs: {d}")
    sizes = sorted(r["nonembedding_params"] for r in d["runs"])
    if not sizes[0] < truth_n < sizes[-1]:
        fail(f"the sizes {sizes} do not bracket the law's N_opt {truth_n:.4g}")
    for r in d["runs"]:
        t = law(r["nonembedding_params"], r["tokens"])
        lo, hi = r["ci95"]
        if abs(r["predicted_loss"] / t - 1) > 0.03 or not lo < r["predicted_loss"] < hi:
            fail(f"run {r}: predicted {r['predicted_loss']:.5f} [{lo:.5f}, {hi:.5f}], the law "
                 f"{t:.5f}")
        if abs(r["flops"] / C - 1) > 0.02 or r["batch_size"] != 8:
            fail(f"run {r}: not at the budget, or not the spec's batch size")
    if d["spec"]["isoflop"]["flops"] != [C] or d["spec"]["base"]["train"]["seed"] != 8:
        fail(f"the budget's spec is not the sweep's at C: {d['spec']}")
    print(f"design at {C:g}: N_opt {d['n_opt']['value']:.4g} {d['n_opt']['ci95']} (law "
          f"{truth_n:.4g}); losses "
          + ", ".join(f"{r['predicted_loss']:.4f}" for r in d["runs"]))

    p = cli("next", str(sweep), "--flops", "1e15")
    if p.returncode != 0 or "N_opt" not in p.stdout or p.stdout.count("[") < 7:
        fail(f"scalesweep next: exit {p.returncode}: {p.stdout} {p.stderr}")
    p = cli("next", str(sweep), "--flops", "1e15", "--json")
    if p.returncode != 0 or json.loads(p.stdout)["runs"] != d["runs"]:
        fail(f"scalesweep next --json: exit {p.returncode}, not the API's design: {p.stdout[:300]}")
    p = cli("next", str(sweep), "--flops", "1e17")  # no '+' of 1e+17 in its query
    if p.returncode != 0 or "warning:" not in p.stdout or "long extrapolation" not in p.stdout:
        fail(f"scalesweep next --flops 1e17: exit {p.returncode}: {p.stdout} {p.stderr}")
    print("scalesweep next: the table, and --json the API's design")

    # ---- bad requests ------------------------------------------------------------------
    checks = [("GET", f"/api/sweeps/{sweep}/next", None, 400, "flops"),
              ("GET", f"/api/sweeps/{sweep}/next?flops=-1", None, 400, "$.flops"),
              ("GET", f"/api/sweeps/{sweep}/next?flops=1e15&points=2", None, 400, "$.points"),
              ("POST", f"/api/sweeps/{sweep}/next", b"[1]", 400, "$"),
              ("POST", f"/api/sweeps/{sweep}/next", b'{"flops": "x"}', 400, "$.flops"),
              ("POST", f"/api/sweeps/{sweep}/next", b'{"flops": 1e15, "seed": 1}', 400, "$.seed"),
              ("GET", "/api/sweeps/9999/next?flops=1e15", None, 404, None)]
    for method, path, data, want, where in checks:
        st, body = raw_request(method, path, data)
        err = (body or {}).get("error", {})
        if st != want or (where and err.get("path") != where):
            fail(f"{method} {path} {data!r}: {st} {body}, expected {want} at {where}")
    small = {"name": "next-small", "method": "runs",
             "base": {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 32},
                      "train": {"seed": 7, "batch_size": 8, "lr": 0.003, "tokens": 25600}},
             "runs": [{}], "resources": {"cpus": 1}}
    st, body = request("POST", "/api/sweeps", small)
    wait_sweep(body["id"], 1)
    st, e = request("GET", f"/api/sweeps/{body['id']}/next?flops=1e15")
    if st != 400 or "cannot be fitted yet (1 points)" not in e["error"]["message"] + json.dumps(e):
        fail(f"next of a 1-run sweep: {st} {e}")
    request("POST", f"/api/sweeps/{body['id']}/cancel")
    st, e = request("POST", f"/api/sweeps/{body['id']}/next", {"flops": 1e15})
    if st != 409 or "cancelled" not in e["error"]["message"]:
        fail(f"next --submit on a cancelled sweep: {st} {e}")
    p = cli("next", str(sweep), "--flops", "-3")
    if p.returncode != 2 or "--flops" not in p.stderr:
        fail(f"scalesweep next --flops -3: exit {p.returncode}: {p.stderr}")
    print("bad requests: 400 with the path, 404, 409 for a cancelled sweep; the CLI exits 2")

    # ---- submitted: the runs join the sweep, run, and are compared -----------------------
    # the worker away meanwhile, so that the added runs wait and the fits
    # (and so the design) stay what they were
    rig.stop("w")
    # two at once (the scheduler designs one at a time: the other is told
    # 503, Retry-After, and asks again): the runs are added once
    import threading
    got, busy = [], []

    def post():
        for _ in range(60):
            st, b = request("POST", f"/api/sweeps/{sweep}/next", {"flops": C})
            if st != 503:
                break
            busy.append(b)
            time.sleep(1)
        got.append((st, b))
    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if sorted(st for st, _ in got) != [201, 201] or sum(b["added"] for _, b in got) != 5:
        fail(f"two POSTs of the same budget at once: {[(st, b.get('added')) for st, b in got]}")
    p = cli("next", str(sweep), "--flops", "1e15", "--submit")
    if p.returncode != 0 or "nothing added" not in p.stdout:
        fail(f"scalesweep next --submit again: exit {p.returncode}: {p.stdout} {p.stderr}")
    start_worker()
    c = wait_sweep(sweep, 25)
    if c["succeeded"] != 25:
        fail(f"the extended sweep: {c}")
    st, page = request("GET", f"/api/sweeps/{sweep}/runs?limit=100")
    designed = [r for r in page["runs"] if r.get("designed")]
    if len(designed) != 5:
        fail(f"{len(designed)} runs with a design, expected 5: {page['runs'][-1]}")
    worst, inside = 0, 0
    for r in designed:
        des, m = r["designed"], r["final_val_loss"]
        lo, hi = des["ci95"]
        worst = max(worst, abs(m / des["loss"] - 1))
        inside += lo <= m <= hi
        if abs(m / des["loss"] - 1) > 0.04 or des["flops"] != C:
            fail(f"run {r['id']}: measured {m:.5f}, designed {des}")
    if inside < 4:
        fail(f"{inside} of 5 measured losses inside their 95% intervals: {designed}")
    fits = wait_fit(sweep, "chinchilla", 25)
    fits = wait_fit(sweep, "isoflop", 25)
    usable = sum(1 for b in fits["isoflop"]["budgets"] if b.get("usable"))
    if len(fits["isoflop"]["budgets"]) != 5:
        fail(f"the isoflop fit's budgets after the next one: {fits['isoflop']['budgets']}")
    html = subprocess.run(["curl", "-sf", "-H", "Authorization: Bearer " + open(token).read().strip(),
                           f"http://127.0.0.1:{api_port}/sweeps/{sweep}"],
                          capture_output=True, text=True).stdout
    if "Designed budgets" not in html or "1e+15" not in html or \
            not re.search(r"\d\.\d{4} \[\d[^<]*\]</td>", html):
        fail(f"the sweep page does not show the designed budget: {html[:2000]}")
    print(f"submitted twice at once: 5 runs added once, run, each measured loss within {100 * worst:.2f}% of its "
          f"prediction, {inside} of 5 inside their intervals; the fits take 25 points, 5 budgets ({usable} "
          "usable); the page shows predicted against measured")
except Exception as e:  # a scheduler that dies answers nothing: show its log
    import traceback
    fail(f"{e!r}\n{traceback.format_exc()}")
finally:
    rig.close()

"""The scheduler's refits end to end, against a throwaway PostgreSQL (run
through tests/integration/run_with_pg.sh) and the real scheduler and worker,
the worker training with tests/integration/fake_law_trainer.py, whose curves
follow known laws:

- a batch ladder (B = 4 .. 128 sequences of 32 tokens, one target loss):
  the scheduler reads the steps each run took to reach the target from its
  evaluations, fits S = S_min + E_min / B, stores the fit, and serves it at
  GET /api/sweeps/{id}/fit: B_crit = 32 sequences = 1024 tokens, and the
  ladder's gradient noise scale B_noise = 20 sequences = 640 tokens;
- a failed run keeps the tail of its log (runs.log_tail) for the page, and
  waits before each next attempt (--retry-after-seconds 2: 2 s after its
  first failure, 4 s after its second), which the API shows as retry_after;
- paths in specs: token shards only under the scheduler's --data-dir, no
  checkpoint directory chosen by a spec (400 naming each JSON path);
- a running run's final loss is predicted from its curve so far (Kaplan's
  L(S), runs.prediction): on the stand-in's exact power law the prediction
  is the true final loss, inside its interval.

Usage: test_refit.py SCALESWEEP_BINARY
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import time

from harness import Rig, psql

BIN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_law_trainer.py")
T0 = time.time()
TIMEOUT = 120


# the scheduler and start_worker's workers
rig = Rig(BIN, "ss-refit-", logs=("scheduler", "w", "w2", "w3"), tail=3000)
tmp, token, api_port = rig.tmp, rig.token, rig.api_port
request, fail = rig.request, rig.fail


def start_worker(name, slots, run_seconds):
    """Stops the workers there are and starts worker `name` with the fake
    trainer, each run taking run_seconds."""
    for other in [n for n in rig.procs if n != "scheduler"]:
        rig.stop(other, timeout=10)
    rig.start_worker(name, "--cpu-slots", str(slots), "--bin", FAKE,
                     env={"FAKE_LAW_SECONDS": str(run_seconds)})


def wait_sweep(sweep):
    c = rig.wait_counts(sweep, TIMEOUT - (time.time() - T0), period=0.2)
    if c is None:
        fail(f"sweep {sweep} did not finish in {TIMEOUT} s")
    return c


def run_sweep(spec, what, succeeded):
    """Submits spec and waits for its sweep; fails unless `succeeded` runs
    succeeded. The sweep's id."""
    sweep = rig.submit(spec, f"the {what}")
    c = wait_sweep(sweep)
    if c["succeeded"] != succeeded:
        fail(f"{what}: {c}")
    return sweep


try:
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    for f in ("train_0.bin", "val.bin"):  # a spec's shards must match when it is submitted
        open(os.path.join(data, f), "wb").close()
    rig.start_scheduler("--checkpoints", os.path.join(tmp, "ckpt"), "--data-dir", data,
                        "--predict-seconds", "1", "--retry-after-seconds", "2")
    start_worker("w", 2, 0)

    # paths in specs
    def with_base(extra):
        return {"name": "paths", "method": "runs",
                "base": dict({"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                              "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}}, **extra),
                "runs": [{"train": {"seed": 1}}], "resources": {"cpus": 1}}
    bad = [({"data": {"train": "/etc/passwd", "val": f"{data}/val.bin"}}, ["$.base.data.train"]),
           ({"data": {"train": f"{data}/../../etc/x", "val": f"{data}x/v.bin"}},
            ["$.base.data.train", "$.base.data.val"]),
           ({"data": {"train": "rel/train.bin", "val": f"{data}/./v.bin"}},
            ["$.base.data.train", "$.base.data.val"]),
           ({"checkpoint": {"dir": "/tmp/elsewhere"}}, ["$.base.checkpoint.dir"])]
    for extra, paths in bad:
        st, body = request("POST", "/api/sweeps", with_base(extra))
        got = sorted(p["path"] for p in (body or {}).get("error", {}).get("problems", []))
        if st != 400 or got != sorted(paths):
            fail(f"spec with {extra}: {st}, problems at {got}, expected 400 at {paths}: {body}")
    st, body = request("POST", "/api/sweeps", with_base(
        {"data": {"train": f"{data}/train_*.bin", "val": f"{data}/val.bin"}}))
    if st != 201:
        fail(f"a spec with shards under --data-dir: {st} {body}")
    request("POST", f"/api/sweeps/{body['id']}/cancel")
    print("paths in specs: shards outside --data-dir and checkpoint dirs refused")

    ladder = [4, 8, 16, 32, 64, 128]
    spec = {"name": "refit-ladder", "method": "batch",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"lr": 0.003}},
            "batch": {"tokens": 4096000, "batch_size": ladder, "target_loss": [2.5]},
            "resources": {"cpus": 1}}
    sweep = run_sweep(spec, "ladder", len(ladder))
    # the refit runs once a second per sweep, on the thread pool
    fit = None
    while time.time() - T0 < TIMEOUT:
        st, fits = request("GET", f"/api/sweeps/{sweep}/fit")
        if st == 200 and "batch" in fits and fits["batch"]["n_points"] == len(ladder):
            fit = fits["batch"]
            break
        time.sleep(0.3)
    if fit is None:
        fail(f"no batch fit of {len(ladder)} points: {st} {fits}")
    # steps to the target: S = 4 (100 + 3200 / B), read between evaluations
    # 10 to 40 steps apart on a convex curve: within 1%
    bc, smin, emin = fit["params"]["B_crit"], fit["params"]["S_min"], fit["params"]["E_min"]
    if abs(bc / 1024 - 1) > 0.01 or abs(smin / 400 - 1) > 0.01 or abs(emin / (12800 * 32) - 1) > 0.01:
        fail(f"batch fit: B_crit {bc} (expected 1024 tokens), S_min {smin} (400), "
             f"E_min {emin} (409600): {fit}")
    if fit["derived"].get("B_noise") != 640:
        fail(f"batch fit: B_noise {fit['derived'].get('B_noise')}, expected 640 tokens: {fit}")
    print(f"batch ladder: B_crit {bc:.1f} tokens (exact 1024), S_min {smin:.1f} (400), "
          f"B_noise {fit['derived']['B_noise']:.0f} (640)")

    # a failed run waits before its next attempt (2 s, then 4 s: the stand-in
    # fails at once, so without the wait its 3 attempts take well under a
    # second) and keeps its log tail
    spec = {"name": "refit-failure", "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003}},
            "runs": [{"train": {"tokens": 256000, "seed": 99}}],
            "resources": {"cpus": 1}, "max_attempts": 3}
    t_submit = time.time()
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    waiting = []  # (attempt, retry_after) seen while the run waits
    while time.time() - T0 < TIMEOUT:
        st, page = request("GET", f"/api/sweeps/{body['id']}/runs")
        run = page["runs"][0]
        if run["status"] == "queued" and run.get("retry_after"):
            if (run["attempt"], run["retry_after"]) not in waiting:
                waiting.append((run["attempt"], run["retry_after"]))
                if run["attempt"] == 2:  # 4 s to wait: `scalesweep runs` says until when
                    out = subprocess.run([BIN, "runs", str(body["id"]), "--url",
                                          f"http://127.0.0.1:{api_port}"],
                                         capture_output=True, text=True).stdout
                    if f"(next try {run['retry_after'][11:]} UTC)" not in out:
                        fail(f"`scalesweep runs` while run {run['id']} waits until "
                             f"{run['retry_after']}: {out!r}")
        if run["status"] in ("failed", "succeeded"):
            break
        time.sleep(0.1)
    took = time.time() - t_submit
    if run["status"] != "failed" or run["attempt"] != 3:
        fail(f"the failing run: {run}, expected failed after 3 attempts")
    if [a for a, _ in waiting] != [1, 2]:
        fail(f"the failing run waited for its next attempt after attempts {waiting}, "
             "expected after 1 and 2")
    if took < 6:
        fail(f"3 failed attempts took {took:.1f} s, expected at least 2 + 4 s of waiting")
    log = open(os.path.join(tmp, "scheduler.log")).read()
    for attempt, wait in ((1, 2), (2, 4)):
        line = f"run {run['id']} attempt {attempt} failed: queued again, its next attempt in {wait} s"
        if line not in log:
            fail(f"the scheduler's log lacks {line!r}")
    tail = psql(f"SELECT log_tail FROM runs WHERE sweep_id = {body['id']}")
    if "loss diverged at step" not in tail:
        fail(f"runs.log_tail of the failed run: {tail!r}")
    print(f"failed run: 3 attempts in {took:.1f} s (2 s and 4 s between them), its log tail "
          "is stored")

    # a slow run (40 s: room for a loaded machine): its prediction while it
    # runs. B = 8: L(s) = 2 + (s / 500)^-0.5, 4000 steps, final loss 2 + 8^-0.5
    start_worker("w2", 1, 40)
    spec = {"name": "refit-predict", "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "warmup_tokens": 25600}},
            "runs": [{"train": {"tokens": 1024000, "seed": 5}}], "resources": {"cpus": 1}}
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    truth = 2 + 8 ** -0.5
    pred = None
    while time.time() - T0 < TIMEOUT:
        st, page = request("GET", f"/api/sweeps/{body['id']}/runs")
        run = page["runs"][0]
        if run["status"] != "running" and run["status"] != "queued":
            fail(f"the slow run ended before it was predicted: {run}")
        pred = run.get("prediction")
        if pred and pred["evals"] >= 20:
            break
        time.sleep(0.3)
    if not pred:
        fail("no prediction for the running run")
    # on an exact law the interval collapses to the prediction: compare with
    # a rounding allowance
    if not (abs(pred["predicted"] - truth) < 1e-3
            and pred["lo"] - 1e-9 <= truth <= pred["hi"] + 1e-9
            and pred["target_steps"] == 4000 and pred["surface"] is None
            and pred["flagged"] is False and pred["at_step"] < 4000):
        fail(f"prediction {pred}, expected {truth:.6f} inside [lo, hi] at 4000 steps, "
             "no surface (no chinchilla fit), not flagged")
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=10)
    c.request("GET", f"/runs/{run['id']}")
    page = c.getresponse().read().decode()
    c.close()
    if "Predicted final loss" not in page or "2.3536" not in page:
        fail(f"the run's page does not show the prediction: {page[:2000]}")
    print(f"prediction at step {pred['at_step']} of 4000 from {pred['evals']} evaluations: "
          f"{pred['predicted']:.5f} [{pred['lo']:.5f}, {pred['hi']:.5f}], true {truth:.5f}")
    # an IsoFLOP study on an exact Chinchilla law (fake_law_trainer.py, seed 7):
    # the fits, the stability check (the same fits without the smallest
    # budget), the corpus's true entropy rate, and the page's summary of them.
    # Last: its refits keep the thread pool busy for a while (under the
    # sanitizers, long enough to delay the prediction above)
    start_worker("w3", 2, 0)
    syn = {"letters": 26, "words": 256, "min_len": 2, "max_len": 6, "zipf": 1.1, "seed": 3}
    spec = {"name": "refit-isoflop", "method": "isoflop",
            "base": {"model": {"seq_len": 32}, "data": {"synthetic": syn},
                     "train": {"seed": 7}},
            "isoflop": {"flops": {"from": 1e13, "to": 1e15, "points": 4},
                        "centre": {"coef": 0.0155, "exponent": 0.45, "span": 3, "points": 5},
                        "flops_count": "exact"},
            "resources": {"cpus": 1}}
    sweep = run_sweep(spec, "isoflop study", 20)
    fits = {}
    while time.time() - T0 < TIMEOUT:
        st, fits = request("GET", f"/api/sweeps/{sweep}/fit")
        if st == 200 and all(fits.get(l, {}).get("n_points") == 20 for l in ("chinchilla", "isoflop")):
            break
        time.sleep(0.3)
    else:
        fail(f"no chinchilla and isoflop fits of 20 points: {st} {fits}")
    ch, iso = fits["chinchilla"], fits["isoflop"]
    truth = {"E": 1.5, "alpha": 0.34, "beta": 0.28}
    cmin = min(float(x) for x in psql(f"SELECT flops FROM runs WHERE sweep_id = {sweep}").split())
    wc, wi = ch.get("without_smallest_budget"), iso.get("without_smallest_budget")
    for name, want in truth.items():
        if abs(ch["params"][name] - want) > 2e-3:
            fail(f"chinchilla {name} = {ch['params'][name]}, exact law {want}: {ch}")
        if not wc or abs(wc["params"][name] - want) > 2e-3:
            fail(f"chinchilla without the smallest budget: {name} {wc}, exact law {want}")
    if abs(wc["dropped_flops"] / cmin - 1) > 1e-9 or wc["fitted_points"] != 15:
        fail(f"chinchilla without the smallest budget dropped {wc['dropped_flops']} "
             f"({wc['fitted_points']} points kept), expected C = {cmin}, 15 points")
    if not wi or wi["usable_budgets"] != 3 or abs(wi["params"]["a"] - iso["params"]["a"]) > 0.03 \
            or not (wi["ci95"]["a"][0] <= wi["params"]["a"] <= wi["ci95"]["a"][1]):
        fail(f"isoflop without the smallest budget: {wi}, every budget: a = {iso['params'].get('a')}")
    # the corpus's truth, as `scalesweep data synth` computes it
    out = subprocess.run([BIN, "data", "synth", "--out", os.path.join(tmp, "synth"),
                          "--tokens", "1000", "--val-tokens", "100", "--seq-len", "32",
                          "--letters", "26", "--words", "256", "--min-len", "2", "--max-len", "6",
                          "--zipf", "1.1", "--seed", "3"], capture_output=True, text=True)
    synth = json.loads(out.stdout.strip().splitlines()[-1])
    corpus = ch.get("corpus") or {}
    if corpus.get("entropy_rate") != synth["entropy_rate"] or \
            corpus.get("window_floor") != synth["window_floor"] or corpus.get("seq_len") != 32:
        fail(f"chinchilla fit's corpus {corpus}, `data synth` says {synth}")
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=10)
    c.request("GET", f"/sweeps/{sweep}")
    page = c.getresponse().read().decode()
    c.close()
    for want in (f"the corpus: entropy rate {synth['entropy_rate']:.4f}",
                 f"Stability: fitted without the smallest budget (C = {cmin:.3g})",
                 "(4 of 4 budgets with an interior minimum)", "Extrapolation: fitted without"):
        if want not in page:
            fail(f"the sweep's page lacks {want!r}")
    print(f"isoflop study on an exact law: alpha {ch['params']['alpha']:.4f} (0.34), without the "
          f"smallest budget {wc['params']['alpha']:.4f}; isoflop a {iso['params']['a']:.4f}, "
          f"without it {wi['params']['a']:.4f}; entropy rate {corpus['entropy_rate']:.4f}")

finally:
    rig.close()
print("refit e2e: ok")

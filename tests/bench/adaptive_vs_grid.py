#!/usr/bin/env python3
"""The adaptive design against the grid, side by side, on the same corpus and
compute (docs/study.md, "The adaptive design against the grid").

  python3 tests/bench/adaptive_vs_grid.py SCALESWEEP SPEC OUT_DIR [--heldout C]

SPEC is an isoflop spec with an "adaptive" section (sweeps/examples/
text-adaptive.json, quickstart-adaptive.json). Run from the directory its
data paths are relative to. Two studies, each `scalesweep up --sweep ...
--wait` in a fresh state under OUT_DIR:

- ref: the grid (SPEC without "adaptive" and any batch ladder) with one more
  budget, C_held (default: twice the largest), trained once, only for the
  check. Its WSD trunks are the runs at C_held; every run of the grid is the
  same config (the same hash) as in the grid alone, and branches at the same
  step of an identical stable phase, so the grid's runs are its runs below
  C_held.
- adaptive: SPEC as it is.

Then each design's points are fitted alike (`scalesweep fit --points ...
--law chinchilla --target-flops C* --bootstrap B --seed S`, B and S the
spec's adaptive ones): the 95% intervals of E, alpha, beta and N_opt(C*), and
the error of each fit's L(N, D) in predicting the held-out budget's runs
(mean relative error). The FLOPs each design trained: the grid's by the
planner's count (branches by their decay), the adaptive's as it recorded
them. Prints a markdown table and writes OUT_DIR/summary.json."""
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    bin_, spec_path, out = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    held = None
    if "--heldout" in sys.argv:
        held = float(sys.argv[sys.argv.index("--heldout") + 1])
    os.makedirs(out, exist_ok=True)
    spec = json.load(open(spec_path))
    ad = spec["adaptive"]
    iso = spec["isoflop"]
    fl = iso["flops"]
    if not isinstance(fl, dict):
        raise SystemExit("expected $.isoflop.flops as {from, to, points}")
    ratio = (fl["to"] / fl["from"]) ** (1 / (fl["points"] - 1))
    held = held or fl["to"] * ratio
    ref = json.loads(json.dumps(spec))
    del ref["adaptive"]
    ref.pop("batch", None)
    ref["name"] = spec["name"] + "-ref"
    ref["isoflop"]["flops"] = {"from": fl["from"], "to": held,
                               "points": fl["points"] + round(math.log(held / fl["to"]) /
                                                              math.log(ratio))}
    ref["max_hours"] = 4
    paths = {}
    for name, s in (("ref", ref), ("adaptive", spec)):
        p = os.path.join(out, name + ".json")
        json.dump(s, open(p, "w"), indent=1)
        paths[name] = p

    results = {}
    for name in ("ref", "adaptive"):
        state = os.path.join(out, name)
        done = os.path.join(out, name + ".wall")
        if os.path.exists(done):  # trained before (an interrupted comparison): its time
            wall = float(open(done).read())
            print(f"{name}: trained before, {wall:.0f} s", flush=True)
        else:
            t0 = time.time()
            log = open(os.path.join(out, name + ".out"), "w")
            rc = subprocess.run([bin_, "up", "--state", state, "--sweep", paths[name], "--wait",
                                 "--listen", "127.0.0.1:0"], stdout=log,
                                stderr=subprocess.STDOUT).returncode
            wall = time.time() - t0
            print(f"{name}: exit {rc}, {wall:.0f} s", flush=True)
            open(done, "w").write(str(wall))
        results[name] = {"wall_s": wall, "runs": read_runs(bin_, state)}

    bootstrap, seed = ad.get("bootstrap", 200), ad.get("seed", 0)
    ref_runs = results["ref"]["runs"]
    grid = [r for r in ref_runs if r["flops"] < held * 0.99]
    held_runs = [r for r in ref_runs if r["flops"] >= held * 0.99]
    adapt = results["adaptive"]["runs"]
    # the same configs, the same losses?
    by_hash = {r["config_hash"]: r["final_val_loss"] for r in grid}
    same = [abs(r["final_val_loss"] - by_hash[r["config_hash"]]) for r in adapt
            if r["config_hash"] in by_hash]
    summary = {"heldout_flops": held, "question_flops": ad.get("flops"),
               "identical_configs": len(same),
               "max_loss_difference": max(same) if same else None}
    for name, pts in (("grid", grid), ("adaptive", adapt)):
        f = fit(bin_, pts, ad.get("flops"), bootstrap, seed, out, name)
        summary[name] = dict(f, runs=len(pts),
                             held_error=held_error(f, held_runs),
                             wall_s=results["ref" if name == "grid" else "adaptive"]["wall_s"])
    summary["grid"]["flops_trained"] = grid_flops(grid)
    doc = json.load(open(os.path.join(out, "adaptive.design.json")))
    summary["adaptive"]["flops_trained"] = doc.get("spent")
    summary["adaptive"]["rounds"] = len(doc.get("rounds", []))
    summary["adaptive"]["status"] = doc.get("status")
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    report(summary)
    return 0


def api(state):
    """(url, token) of a running `up` in state."""
    sj = json.load(open(os.path.join(state, "scheduler.json")))
    token = open(os.path.join(state, "api.token")).read().strip()
    return f"http://127.0.0.1:{sj['http_port']}", token


def get(url, token, path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    return json.load(urllib.request.urlopen(req, timeout=60))


def read_runs(bin_, state):
    """The sweep's succeeded isoflop runs, from the state brought up again."""
    p = subprocess.Popen([bin_, "up", "--state", state, "--listen", "127.0.0.1:0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = token = None
    try:
        for _ in range(120):
            try:
                url, token = api(state)
                get(url, token, "/healthz")
                break
            except Exception:
                url = None
                time.sleep(1)
        if url is None:
            raise SystemExit(f"{state}: the state did not come up")
        runs, off = [], 0
        while True:
            page = get(url, token, f"/api/sweeps/1/runs?status=succeeded&limit=500&offset={off}")
            runs += page["runs"]
            off += len(page["runs"])
            if not page["runs"] or off >= page["runs_total"]:
                break
        sw = get(url, token, "/api/sweeps/1?limit=1")
        if sw.get("adaptive"):
            json.dump(sw["adaptive"], open(os.path.join(os.path.dirname(state) or ".",
                                                        os.path.basename(state) + ".design.json"),
                                           "w"), indent=1)
        return [r for r in runs if (r.get("part") or "") == "isoflop"]
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(120)


def fit(bin_, pts, target, bootstrap, seed, out, name):
    csv = os.path.join(out, name + ".csv")
    with open(csv, "w") as f:
        f.write("params,tokens,flops,loss\n")
        for r in pts:
            f.write(f"{r['nonembedding_params']},{r['tokens']},{r['flops']},"
                    f"{r['final_val_loss']}\n")
    p = subprocess.run([bin_, "fit", "--points", csv, "--law", "chinchilla", "--target-flops",
                        str(target), "--bootstrap", str(bootstrap), "--seed", str(seed),
                        "--json"], capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    out = {}
    for k in ("E", "A", "B", "alpha", "beta", "N_opt"):
        v = j["params"][k] if k in j["params"] else j["derived"][k]
        ci = j["ci95"].get(k) or [None, None]
        out[k] = [v, ci[0], ci[1]]
    return out


def held_error(f, held_runs):
    E, A, B, al, be = (f[k][0] for k in ("E", "A", "B", "alpha", "beta"))
    errs = []
    for r in held_runs:
        pred = E + A * r["nonembedding_params"] ** -al + B * r["tokens"] ** -be
        errs.append(abs(pred - r["final_val_loss"]) / r["final_val_loss"])
    return sum(errs) / len(errs) if errs else None


def grid_flops(runs):
    """The grid's trained FLOPs: each size's longest run whole, the others
    their decay (as the planner counts a WSD grid)."""
    tot = 0.0
    by_n = {}
    for r in runs:
        by_n.setdefault(r["nonembedding_params"], []).append(r)
    for rs in by_n.values():
        rs.sort(key=lambda r: r["tokens"])
        tot += rs[-1]["flops"] + sum(r["flops"] * 0.2 for r in rs[:-1])
    return tot


def report(s):
    def ci(v, fmt="%.3g"):
        return (fmt + " [" + fmt + ", " + fmt + "]") % tuple(v)

    def width(v):
        return "%.3g" % (v[2] - v[1])

    def factor(v):
        return "x%.2f" % max(v[2] / v[0], v[0] / v[1]) if v[1] > 0 else "inf"

    print(f"\n| design | runs | FLOPs trained | wall | E [95%] | alpha [95%] (width) | "
          f"beta [95%] (width) | N_opt(C* = {s['question_flops']:.3g}) [95%] (factor) | "
          f"held-out {s['heldout_flops']:.3g} error |")
    print("|---|---:|---:|---:|---|---|---|---|---:|")
    for name in ("grid", "adaptive"):
        d = s[name]
        print(f"| {name} | {d['runs']} | {d['flops_trained']:.3g} | {d['wall_s'] / 60:.1f} min | "
              f"{ci(d['E'])} | {ci(d['alpha'])} ({width(d['alpha'])}) | {ci(d['beta'])} "
              f"({width(d['beta'])}) | {ci(d['N_opt'])} ({factor(d['N_opt'])}) | "
              f"{100 * d['held_error']:.2f}% |")
    print(f"\nadaptive: {s['adaptive']['rounds']} rounds, stopped: {s['adaptive']['status']}; "
          f"{s['identical_configs']} of its runs are configs of the grid, largest loss "
          f"difference {s['max_loss_difference']}")


if __name__ == "__main__":
    sys.exit(main())

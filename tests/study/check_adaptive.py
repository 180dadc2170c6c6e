#!/usr/bin/env python3
"""The adaptive design against the grid on one corpus, as docs/study.md
reports it ("The adaptive design against the grid"): runs
tests/bench/adaptive_vs_grid.py in a fresh directory and checks what the
page states of every such study:

- the design stopped (reached, spent or exhausted) within the compute it was
  given, at most half the grid's, and its rounds' costs add up to it;
- every run it shares with the grid (the same config hash) ended at the
  grid's loss to the bit (the same config, and branches from the same
  stable phase, train alike);
- both fits answer: E, alpha, beta and N_opt(C*) with intervals, and the
  held-out budget's error;
- text only: the real-text spec's shards are prepared first (Python's
  standard library as bytes, as the README prepares them).

  check_adaptive.py SRC SCALESWEEP text|synthetic

Labelled slow (ctest study_adaptive_text, study_adaptive_synthetic): about
25 minutes each on 2 cores."""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    src, bin_, corpus = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    spec = os.path.join(src, "sweeps", "examples",
                        "text-adaptive.json" if corpus == "text" else "quickstart-adaptive.json")
    work = tempfile.mkdtemp(prefix=f"ss-adaptive-{corpus}-")
    try:
        if corpus == "text":
            files = sorted(os.path.join(d, f) for d, _, fs in os.walk("/usr/lib/python3.11")
                           for f in fs if f.endswith(".py"))
            subprocess.run([bin_, "data", "prepare", "--out", "data/text", "--shuffle", "1",
                            "--chunk-bytes", "4096", *files], cwd=work, check=True,
                           stdout=subprocess.DEVNULL)
        out = os.path.join(work, "out")
        p = subprocess.run([sys.executable, os.path.join(src, "tests", "bench",
                                                         "adaptive_vs_grid.py"), bin_, spec, out],
                           cwd=work, capture_output=True, text=True)
        print(p.stdout)
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        s = json.load(open(os.path.join(out, "summary.json")))
        doc = json.load(open(os.path.join(out, "adaptive.design.json")))
        a, g = s["adaptive"], s["grid"]
        problems = []
        if a["status"] not in ("reached", "spent", "exhausted"):
            problems.append(f"the design did not stop: {a['status']}")
        allowed = doc["compute"]
        if a["flops_trained"] > allowed * (1 + 1e-9) or allowed > 0.5 * g["flops_trained"] * 1.01:
            problems.append(f"compute: trained {a['flops_trained']:.4g}, allowed {allowed:.4g}, "
                            f"the grid's {g['flops_trained']:.4g}")
        costs = sum(r["cost"] for r in doc["rounds"])
        if abs(costs - doc["spent"]) > 1e-6 * costs:
            problems.append(f"the rounds' costs {costs:.6g} against spent {doc['spent']:.6g}")
        if s["identical_configs"] < a["runs"] or s["max_loss_difference"] != 0:
            problems.append(f"{s['identical_configs']} of {a['runs']} runs are grid configs, "
                            f"largest loss difference {s['max_loss_difference']}")
        for name, d in (("grid", g), ("adaptive", a)):
            for k in ("E", "alpha", "beta", "N_opt"):
                if d[k][1] is None or d[k][2] is None:
                    problems.append(f"{name}: no interval for {k}")
            if d["held_error"] is None:
                problems.append(f"{name}: no held-out error")
        for m in problems:
            print("FAIL:", m, file=sys.stderr)
        return 1 if problems else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The main job, end to end (ctest study_quickstart): runs the README's
first command, `bash scripts/quickstart.sh` (install check, a Release build
in build/, then `scalesweep up --sweep sweeps/examples/quickstart.json
--wait` in a fresh state directory), and checks the result it prints
against what the study must show (issue 17's goals; docs/study.md, "The
criteria"):

- every run succeeded, and at least 4 budgets spread over 1.5 decades;
- every budget has an interior IsoFLOP minimum;
- the fitted E lies within 0.03 nats of the corpus's window floor;
- alpha and beta are pinned: each 95% interval within 0.25 of its value on
  both sides, and each stays inside its interval when the smallest budget
  is dropped, as does the IsoFLOP exponent a;
- fitted without the largest budget, the law predicts that budget's mean
  loss within 2%;
- the critical batch size comes out of the ladder and the noise scale;
- the result block is the README's, figure for figure (the wall time
  aside): the study's config is "reproducible": "portable", so any x86-64
  CPU with AVX2 prints it to the last digit. Where it cannot hold (no AVX2
  and FMA, or an OPENBLAS_CORETYPE other than Haswell set by the machine's
  owner, which wins) the comparison is skipped and says why.

  check_study.py SOURCE_DIR

About 6 minutes on 2 idle cores (plus the build). The printout is kept in
.scalesweep/quickstart-latest/result.txt.

  check_study.py SOURCE_DIR SPEC SCALESWEEP

runs another study the same way (`SCALESWEEP up --sweep SPEC --wait` in a
fresh state directory; the llama studies, ctest study_llama and
study_llama_mup) and holds it to the same criteria; its result block is
compared with the one docs/study.md shows after the line
"<!-- printout: sweeps/examples/NAME.json -->"."""
import math
import os
import subprocess
import sys
import tempfile
import time

from printout import NUM, compare_with_readme, fail, value

SRC = os.path.abspath(sys.argv[1])
SPEC = os.path.abspath(sys.argv[2]) if len(sys.argv) > 3 else None
BIN = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
# "laws": the study must end with the laws (every run, 4 or more budgets each
# with an interior minimum, the extrapolation within 2%, the critical batch
# size, and for a spec with lr_tune the rate chosen inside its grid), not
# meet the quick start's precision goals (E, alpha and beta pinned, stable)
LAWS_ONLY = len(sys.argv) > 4 and sys.argv[4] == "laws"


t0 = time.time()
env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
if SPEC:
    state = tempfile.mkdtemp(prefix="ss-study-")
    p = subprocess.run([BIN, "up", "--state", state, "--sweep", SPEC, "--wait", "--listen",
                        "127.0.0.1:0"], cwd=SRC, capture_output=True, text=True, env=env)
    what = f"scalesweep up --sweep {os.path.relpath(SPEC, SRC)}"
else:
    p = subprocess.run(["bash", os.path.join(SRC, "scripts", "quickstart.sh"), "--listen",
                        "127.0.0.1:0"], cwd=SRC, capture_output=True, text=True, env=env)
    what = "scripts/quickstart.sh"
out = p.stdout
wall = time.time() - t0
try:
    with open(os.path.join(state, "result.txt") if SPEC else
              os.path.join(SRC, ".scalesweep", "quickstart-latest", "result.txt"), "w") as f:
        f.write(out)
except OSError:
    pass
if p.returncode != 0:
    fail(f"{what} exited {p.returncode}: {p.stderr[-3000:]}", out)
(planned,) = value(out, r"sweep 1 submitted: (\d+) runs planned", "the runs planned")
fin = value(out, r"sweep 1 finished: (\d+) of (\d+) runs succeeded, 0 failed", "the sweep's end")
if fin[0] != fin[1] or fin[1] < planned:
    fail("not every run succeeded", out)

usable, budgets = value(out, r"from IsoFLOP minima: a = .*\((\d+) of (\d+) budgets with an interior minimum\)",
                        "the IsoFLOP minima")
if budgets < 4 or usable != budgets:
    fail(f"{usable:.0f} of {budgets:.0f} budgets have an interior minimum; every one of 4 or more must", out)
(c_small,) = value(out, r"stability: fitted without the smallest budget \(C = " + NUM + r"\)", "the stability check")
(c_large,) = value(out, r"extrapolation: fitted without the largest budget \(C = " + NUM + r"\)",
                   "the extrapolation check")
if math.log10(c_large / c_small) < 1.5 - 1e-9:
    fail(f"budgets from {c_small:g} to {c_large:g}: less than 1.5 decades", out)

res = out[out.index("result of sweep"):]
stab = res[res.index("stability:"):]
e, e_lo, e_hi = value(res, r"E = " + NUM + r" \[" + NUM + r", " + NUM + r"\] nats/token", "E")
(floor_,) = value(res, r"window floor " + NUM + r" \(the best loss", "the window floor")
if abs(e - floor_) > 0.03 and not LAWS_ONLY:
    fail(f"E = {e} [{e_lo}, {e_hi}]: {e - floor_:+.4f} from the window floor {floor_}, "
         "not within 0.03", out)

pinned = {}
for name in ("alpha", "beta"):
    v, lo, hi = value(res, name + r" = " + NUM + r" \[" + NUM + r", " + NUM + r"\]", name)
    if not (v - lo <= 0.25 and hi - v <= 0.25) and not LAWS_ONLY:
        fail(f"{name} = {v} [{lo}, {hi}]: not pinned within 0.25", out)
    (wo,) = value(stab, r"from L\(N, D\):.*?" + name + r" = " + NUM, f"{name} without the smallest budget")
    if not lo <= wo <= hi and not LAWS_ONLY:
        fail(f"{name} = {v} [{lo}, {hi}], without the smallest budget {wo}: outside", out)
    pinned[name] = (v, lo, hi, wo)

a, a_lo, a_hi = value(res, r"from IsoFLOP minima: a = " + NUM + r" \[" + NUM + r", " + NUM + r"\]",
                      "the IsoFLOP exponent")
(a_wo,) = value(stab, r"from IsoFLOP minima: a = " + NUM, "the IsoFLOP a without the smallest budget")
if not a_lo <= a_wo <= a_hi and not LAWS_ONLY:
    fail(f"IsoFLOP a = {a} [{a_lo}, {a_hi}] with every budget, {a_wo} without the smallest", out)

(bcrit,) = value(res, r"from the ladder: B_crit\(L=[0-9.]+\) = " + NUM, "B_crit from the ladder")
(bnoise,) = value(res, r"B_noise = " + NUM, "B_noise")
if not (bcrit > 0 and bnoise > 0):
    fail(f"B_crit {bcrit}, B_noise {bnoise}", out)
(rel,) = value(res, r"mean relative error " + NUM + "%", "the extrapolation's error")
if rel > 2:
    fail(f"the extrapolation misses the largest budget by {rel}%, more than 2%", out)

tuned = ""
if SPEC and '"lr_tune"' in open(SPEC).read():
    (lr,) = value(res, r"learning rate: " + NUM + r" for every run, tuned on the muP proxy",
                  "the tuned learning rate")
    if "at the grid's edge" in res:
        fail(f"the tuned rate {lr} lies at its grid's edge", out)
    tuned = f"; lr {lr:g} tuned on the proxy, inside its grid"

flags = open("/proc/cpuinfo").read()
owner = os.environ.get("OPENBLAS_CORETYPE", "")
doc, where = open(os.path.join(SRC, "README.md")).read(), "the README"
if SPEC:
    marker = f"<!-- printout: sweeps/examples/{os.path.basename(SPEC)} -->"
    study_md = open(os.path.join(SRC, "docs", "study.md")).read()
    doc, where = (study_md[study_md.index(marker):] if marker in study_md else None), "docs/study.md"
if doc is None:
    same = f"not compared (docs/study.md has no {marker})"
elif " avx2" not in flags or " fma" not in flags:
    same = f"not compared with {where} (this CPU runs no AVX2 and FMA: OpenBLAS's Haswell kernels)"
elif owner and owner.lower() != "haswell":
    same = f"not compared with {where} (OPENBLAS_CORETYPE={owner}, the owner's, wins over Haswell)"
else:
    differs = compare_with_readme(doc, out)
    if differs:
        fail(f"the printout differs from {where}'s, with OpenBLAS's Haswell kernels pinned:\n"
             + differs, out)
    same = f"every figure as in {where}"

print(out[out.index("result of sweep"):])
print(f"study: {wall / 60:.1f} min; E {e:.4f} [{e_lo:.4f}, {e_hi:.4f}] vs floor {floor_:.4f}; "
      f"{usable:.0f}/{budgets:.0f} interior minima; "
      + "; ".join(f"{k} {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}] -> {v[3]:.3f} without the smallest budget"
                  for k, v in pinned.items())
      + f"; IsoFLOP a {a:.4f} -> {a_wo:.4f}; B_crit {bcrit:.0f}, B_noise {bnoise:.0f}; "
      f"extrapolation {rel:.2f}%{tuned}; {same}"
      + ("; held to the laws, not the quick start's precision goals" if LAWS_ONLY else ""))

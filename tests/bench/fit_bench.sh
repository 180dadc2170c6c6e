#!/usr/bin/env bash
# Fitting benchmark: Chinchilla Approach 3 on 250 points with 4,000 bootstrap
# refits, scalesweep against SciPy (tests/bench/fit_scipy.py: L-BFGS-B on the same
# Huber objective from the same 4,500-start grid, bootstrap refits from the
# full-data optimum), same data, same machine, 2 cores each.
#
# Run from the repository root:  bash tests/bench/fit_bench.sh
# Prints both times, both optima and their agreement; writes build/bench/fit/.
# The figures are information, never a test failure (the script fails only when a
# side errors out).
#
# Data: SCIENCE.md's Approach 3 design scaled to 250 points: 10 compute budgets
# log-spaced over 1e17..1e21, 25 sizes per budget log-spaced over [N_opt/10,
# 10 N_opt], D = C/(6N), the published parameters (E 1.69, A 406.4, B 410.7,
# alpha 0.34, beta 0.28), Gaussian noise of SD 0.01 on L, seed 1.
#
# Timed, each the best of BENCH_REPEATS runs:
#   ours fit        the fit alone (variable projection, --bootstrap 0)
#   ours fit+boot   the fit and 4,000 bootstrap refits
#   ours bfgs       the same with --method bfgs (screened grid, BFGS refits)
#   ours full grid  BFGS from all 4,500 starts (--full-grid), the like-for-like
#                   counterpart of SciPy's search
#   scipy           its grid search, and its 4,000 refits (timed inside Python)
#
# Environment:
#   BENCH_BIN=build/scalesweep   the binary (built with cmake when missing)
#   BENCH_BOOTSTRAP=4000  BENCH_THREADS=2  BENCH_REPEATS=3
#   BENCH_SKIP_SCIPY=1    ours only
#   PYTHON=/usr/bin/python3 (Debian's, with python3-scipy: scripts/install-deps.sh --bench)
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${BENCH_BIN:-$ROOT/build/scalesweep}
BOOT=${BENCH_BOOTSTRAP:-4000}
THREADS=${BENCH_THREADS:-2}
REPEATS=${BENCH_REPEATS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=$ROOT/build/bench/fit
mkdir -p "$OUT"

if [ ! -x "$BIN" ]; then
  cmake -S "$ROOT" -B "$ROOT/build" >/dev/null
  cmake --build "$ROOT/build" -j"$THREADS" --target scalesweep >/dev/null
fi
if [ "${BENCH_SKIP_SCIPY:-0}" != 1 ] && ! "$PYTHON" -c 'import scipy' 2>/dev/null; then
  echo "fit_bench: $PYTHON has no scipy; install it (scripts/install-deps.sh --bench)" \
    "or set BENCH_SKIP_SCIPY=1" >&2
  exit 1
fi

points=$OUT/points.csv
"$PYTHON" - "$points" <<'EOF'
import math, random, sys
E, A, B, al, be = 1.69, 406.4, 410.7, 0.34, 0.28
s = al + be
G = (al * A / (be * B)) ** (1 / s)
rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    f.write("params,tokens,flops,loss\n")
    for i in range(10):
        C = 1e17 * 10 ** (4 * i / 9)
        n_opt = G * (C / 6) ** (be / s)
        for j in range(25):
            N = n_opt / 10 * 100 ** (j / 24)
            D = C / (6 * N)
            L = E + A / N**al + B / D**be + rng.gauss(0, 0.01)
            f.write(f"{N:.17g},{D:.17g},{C:.17g},{L:.17g}\n")
EOF


# best_time NAME ARGS...: runs `scalesweep fit ARGS` REPEATS times; the best wall
# time in $best, the JSON of the last run in $OUT/NAME.json.
best_time() {
  local name=$1 t0 t1 dt
  shift
  best=
  for _ in $(seq "$REPEATS"); do
    t0=$EPOCHREALTIME
    "$BIN" fit --points "$points" --law chinchilla --json --threads "$THREADS" "$@" \
      >"$OUT/$name.json"
    t1=$EPOCHREALTIME
    best=$(awk -v a="$t0" -v b="$t1" -v best="$best" \
      'BEGIN { d = b - a; print (best == "" || d < best) ? d : best }')
  done
}

export OMP_WAIT_POLICY=PASSIVE
best_time ours_fit --bootstrap 0
t_fit=$best
best_time ours_boot --bootstrap "$BOOT" --seed 1
t_boot=$best
best_time ours_full --bootstrap 0 --full-grid
t_full=$best
best_time ours_bfgs --bootstrap "$BOOT" --seed 1 --method bfgs
t_bfgs=$best

if [ "${BENCH_SKIP_SCIPY:-0}" != 1 ]; then
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$PYTHON" "$ROOT/tests/bench/fit_scipy.py" \
    "$points" --bootstrap "$BOOT" --procs "$THREADS" >"$OUT/scipy.json"
else
  echo '{}' >"$OUT/scipy.json"
fi

"$PYTHON" - "$OUT" "$t_fit" "$t_boot" "$t_full" "$t_bfgs" "$BOOT" "$THREADS" <<'EOF'
import json, sys
out, t_fit, t_boot, t_full, t_bfgs, boot, threads = sys.argv[1], *map(float, sys.argv[2:6]), *sys.argv[6:8]
ours = json.load(open(f"{out}/ours_boot.json"))
fit = json.load(open(f"{out}/ours_fit.json"))
full = json.load(open(f"{out}/ours_full.json"))
sp = json.load(open(f"{out}/scipy.json"))
names = ["E", "A", "B", "alpha", "beta"]
print(f"Chinchilla Approach 3: {ours['n_points']} points, {boot} bootstrap refits, {threads} threads/processes\n")
print(f"  {'':28} {'scalesweep':>12} {'SciPy':>12} {'ratio':>8}")
t_sp_fit = sp.get("fit_s")
t_sp_all = t_sp_fit + sp["bootstrap_s"] if sp else None
def row(label, a, b):
    r = f"{b / a:8.1f}x" if b else ""
    bs = f"{b:11.3f}s" if b else f"{'-':>12}"
    print(f"  {label:28} {a:11.3f}s {bs} {r}")
row("variable projection (fit)", t_fit, t_sp_fit)
row("  BFGS, all 4,500 starts", t_full, t_sp_fit)
row(f"fit + {boot} bootstrap refits", t_boot, t_sp_all)
row("  same, --method bfgs", t_bfgs, t_sp_all)
print("  (ours: wall time of the whole command, process start and CSV included)\n")
print(f"  {'optimum':12} {'ours':>22} {'ours, full grid':>22} {'SciPy':>22} {'rel. diff':>10}")
worst = 0.0
for k in names + ["objective"]:
    a = fit["objective"] if k == "objective" else fit["params"][k]
    c = full["objective"] if k == "objective" else full["params"][k]
    b = (sp["objective"] if k == "objective" else sp["params"][k]) if sp else float("nan")
    d = abs(a - b) / abs(b) if sp else float("nan")
    worst = max(worst, d) if sp else worst
    print(f"  {k:12} {a:22.15g} {c:22.15g} {b:22.15g} {d:10.2g}")
print(f"\n  converged: ours {fit['converged']}, SciPy {sp.get('converged')}")
if sp:
    df = (fit["objective"] - sp["objective"]) / sp["objective"]
    better = "equal to 1e-12" if abs(df) < 1e-12 else "ours" if df < 0 else "SciPy"
    print(f"  same optimum: {'yes' if worst < 1e-6 else 'NO'} (largest relative difference "
          f"{worst:.2g}; lower objective: {better})")
    if "stderr" in sp:
        print("\n  bootstrap SD  " + "  ".join(
            f"{k} {ours['stderr'][k]:.4g} / {sp['stderr'][k]:.4g}" for k in names) +
            "   (ours / SciPy; different resamples)")
EOF

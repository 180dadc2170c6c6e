#!/usr/bin/env bash
# `scalesweep fit` through the real binary: a CSV of points from known Chinchilla
# parameters is fitted (--json checked with python3, the table checked by eye-level
# greps), and bad inputs exit 2 with a message naming the file and what is wrong.
# Usage: test_fit.sh PATH/TO/scalesweep
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# fit LABEL ARGS...: runs `scalesweep fit ARGS` (lib.sh's cli_run).
fit() { cli_run 120 fit "$@"; }

# SCIENCE.md known answer 2's design from the published parameters, noise-free:
# 5 budgets 1e17..1e21, 15 sizes per budget over [N_opt/10, 10 N_opt], D = C/(6N).
# Columns in an unusual order, an extra column, tokens derived from flops.
"$py" - <<'EOF'
E, A, B, al, be = 1.69, 406.4, 410.7, 0.34, 0.28
s = al + be
G = (al * A / (be * B)) ** (1 / s)
with open("points.csv", "w") as f:
    f.write("loss,note,flops,params,run\n")
    for i in range(5):
        C = 1e17 * 10 ** i
        n_opt = G * (C / 6) ** (be / s)
        for j in range(15):
            N = n_opt / 10 * 100 ** (j / 14)
            D = C / (6 * N)
            f.write(f"{E + A / N**al + B / D**be:.17g},x,{C:.17g},{N:.17g},run{i}-{j}\n")
EOF

fit json --points points.csv --law chinchilla --json --bootstrap 100 --target-flops 5.76e23
expect_rc 0
"$py" - out <<'EOF' || fail "json: $(head -c 800 out)"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["law"] == "chinchilla" and o["n_points"] == 75, o
truth = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
for k, v in truth.items():
    # noise-free points: recovered to rounding (the text has 17 digits)
    assert abs(o["params"][k] - v) <= 1e-7 * v, (k, o["params"][k], v)
d = o["derived"]
assert abs(d["G"] - 1.34471) < 1e-4 * 1.34471, d
assert abs(d["a"] - 0.451613) < 1e-4 * 0.451613, d
assert abs(d["N_opt"] - 3.219e10) < 1e-4 * 3.219e10, d
assert abs(d["D_opt"] / d["N_opt"] - 92.65) < 1e-4 * 92.65, d
for k in list(truth) + ["a", "b", "G", "N_opt", "D_opt", "loss_at_target"]:
    assert k in o["stderr"] and len(o["ci95"][k]) == 2, k
assert o["converged"] is True and o["warnings"] == [], o
assert len(o["residuals"]) == 75 and max(abs(r) for r in o["residuals"]) < 1e-9
EOF

fit table --points points.csv --law chinchilla --bootstrap 50 --target-flops 5.76e23
expect_rc 0
expect_msg "chinchilla fit of 75 points from points.csv" "std. error" "95% interval" \
  "alpha" "beta" "a = beta/(alpha+beta)" "N_opt (parameters)" "D_opt / N_opt" \
  "converged   yes" "residuals   RMS" "warnings    none"
grep -qE '^  alpha +0\.34 ' out || fail "table: no 'alpha 0.34' row: $(cat out)"

# the extrapolation check: without the 1e21 budget the noise-free law predicts it
fit holdout --points points.csv --law chinchilla --holdout --bootstrap 0 --json
expect_rc 0
"$py" - out <<'EOF' || fail "holdout: $(head -c 800 out)"
import json, sys
x = json.load(open(sys.argv[1]))["extrapolation"]
assert x["law"] == "chinchilla" and x["n_points"] == 60, x
d = x["derived"]
assert abs(d["holdout_flops"] / 1e21 - 1) < 1e-9 and d["holdout_rel_err"] < 1e-6, d
EOF
fit holdout-table --points points.csv --law chinchilla --holdout --bootstrap 0
expect_rc 0
expect_msg "extrapolation check (the largest budget held out)" "holdout_pred_loss" "holdout_rel_err"
fit holdout-kaplan --points points.csv --law kaplan --holdout
expect_rc 2
expect_msg "--holdout is the Chinchilla law's extrapolation check"

# bopt: per budget a batch ladder around B* = 0.292 C^0.3271 tokens and a
# learning-rate ladder around eta* = 0.3118 C^-0.125 (SCIENCE.md section 3)
"$py" - <<'EOF'
with open("bopt.csv", "w") as f:
    f.write("flops,tokens,batch_size,lr,loss,run\n")
    for c in range(4):
        C = 1e18 * 10 ** c
        bs, es = 0.292 * C ** 0.3271, 0.3118 * C ** -0.125
        for k in range(-3, 4):
            for j in range(-2, 3):
                f.write(f"{C:.17g},{C / 6e9:.17g},{bs * 2 ** k:.17g},{es * 2 ** j:.17g},"
                        f"{2 + 0.004 * k * k + 0.003 * j * j:.17g},r{c}-{k}-{j}\n")
EOF
fit bopt --points bopt.csv --law bopt --json --bootstrap 100
expect_rc 0
"$py" - out <<'EOF' || fail "bopt: $(head -c 800 out)"
import json, sys
o = json.load(open(sys.argv[1]))
p = o["params"]
assert abs(p["k_B"] / 0.292 - 1) < 1e-9 and abs(p["beta_B"] - 0.3271) < 1e-9, p
assert abs(p["k_eta"] / 0.3118 - 1) < 1e-9 and abs(p["beta_eta"] + 0.125) < 1e-9, p
assert len(o["budgets"]) == 4 and o["budgets"][0]["n_near"] == 21, o["budgets"]
assert len(o["ci95"]["beta_B"]) == 2, o["ci95"]
EOF
fit bopt-table --points bopt.csv --law bopt --bootstrap 0
expect_rc 0
expect_msg "bopt fit of 140 points" "k_B" "beta_eta" "B_opt" "eta_opt"

# seeds: every point of points.csv run three times, the loss off by exactly
# -1%, 0, +1% in ln L (runs named apart): the pooled seed SD of ln L is 0.01
# (df 150 over 75 cells), printed in the table and carried in the JSON
"$py" - <<'EOF'
import math
rows = open("points.csv").read().splitlines()
with open("seeds.csv", "w") as f:
    f.write(rows[0] + "\n")
    for r in rows[1:]:
        loss, rest = r.split(",", 1)
        for s, e in enumerate((-0.01, 0.0, 0.01)):
            f.write(f"{float(loss) * math.exp(e):.17g},{rest}-s{s}\n")
EOF
fit seeds-json --points seeds.csv --law chinchilla --json --bootstrap 40
expect_rc 0
"$py" - out <<'EOF' || fail "seeds json: $(head -c 800 out)"
import json, sys
s = json.load(open(sys.argv[1]))["seeds"]
assert s["cells"] == 75 and s["runs"] == 225 and s["df"] == 150, s
assert abs(s["sd_ln_loss"] - 0.01) < 1e-12, s
assert s["ci95"][0] < 0.01 < s["ci95"][1], s
EOF
fit seeds-table --points seeds.csv --law chinchilla --bootstrap 20
expect_rc 0
expect_msg "seeds       SD of ln L 0.01, 95% interval" "225 runs in 75 replicated cells (df 150)" \
  "bootstrap by cell"

# bad inputs: exit 2 and a message naming the file and what is wrong
printf 'params,loss\n1e6,3\n2e6,2.9\n3e6,2.8\n4e6,2.7\n5e6,2.6\n6e6,2.5\n7e6,2.4\n' >notokens.csv
fit missing --points notokens.csv --law chinchilla
expect_rc 2
expect_msg "notokens.csv" "column 'tokens' is missing"

printf 'params,tokens,loss\n1e6,1e9,3.5\n2e6,1e9,abc\n' >abc.csv
fit non-numeric --points abc.csv --law chinchilla
expect_rc 2
expect_msg "abc.csv:3:9: column 'loss': found 'abc', expected a positive number"

printf 'params,tokens,loss\r\n1e6,1e9,3.5\r\n2e6,-1e9,3.4\r\n' >neg.csv
fit non-positive --points neg.csv --law chinchilla
expect_rc 2
expect_msg "neg.csv:3:5: column 'tokens': found '-1e9', expected a positive number"

head -n 6 points.csv >few.csv
fit too-few --points few.csv --law chinchilla
expect_rc 2
expect_msg "few.csv" "too few points: 5" "at least 7"

{
  echo "params,tokens,loss"
  for i in 1 2 3 4 5 6 7 8; do echo "1e8,${i}e9,3.$i"; done
} >oneN.csv
fit one-N --points oneN.csv --law chinchilla
expect_rc 2
expect_msg "oneN.csv" "all 8 points have the same params"

: >empty.csv
fit empty --points empty.csv --law chinchilla
expect_rc 2
expect_msg "empty.csv: empty file"

fit no-file --points nonexistent.csv --law chinchilla
expect_rc 2
expect_msg "nonexistent.csv: cannot open"

fit no-law --points points.csv
expect_rc 2
expect_msg "--law is required"

fit bad-law --points points.csv --law chinchila
expect_rc 2
expect_msg "got 'chinchila'"

# a learning curve (steps, loss) from L(S) = 1.5 + (2000/S)^0.6, noise-free,
# evaluated every 100 steps to 1500: --law curve predicts step 5000
"$py" - <<'EOF'
with open("curve.csv", "w") as f:
    f.write("steps,loss\n")
    for s in range(100, 1600, 100):
        f.write(f"{s},{1.5 + (2000 / s) ** 0.6:.17g}\n")
EOF
fit curve --points curve.csv --law curve --target-steps 5000 --bootstrap 50 --json
expect_rc 0
"$py" - out <<'EOF' || fail "curve: $(head -c 800 out)"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["law"] == "curve" and o["n_points"] == 15, o
for k in ["params", "stderr", "ci95", "derived", "objective", "converged", "warnings"]:
    assert k in o, k
truth = {"L_inf": 1.5, "S_c": 2000, "alpha_S": 0.6}
for k, v in truth.items():
    # noise-free points: recovered to the optimiser's tolerance
    assert abs(o["params"][k] - v) <= 1e-4 * v, (k, o["params"][k], v)
    assert k in o["stderr"] and len(o["ci95"][k]) == 2, k
lt = 1.5 + (2000 / 5000) ** 0.6
assert abs(o["derived"]["loss_at_target"] - lt) < 1e-4 * lt, o["derived"]
assert len(o["ci95"]["loss_at_target"]) == 2
assert o["converged"] is True
EOF

fit curve-table --points curve.csv --law curve --target-steps 5000 --bootstrap 20
expect_rc 0
expect_msg "curve fit of 15 points from curve.csv" "alpha_S" "at S = 5000 steps" "converged   yes"

head -n 5 curve.csv >few-curve.csv
fit curve-few --points few-curve.csv --law curve
expect_rc 2
expect_msg "few-curve.csv" "at least 5"

fit curve-as-chinchilla --points curve.csv --law chinchilla
expect_rc 2
expect_msg "curve.csv" "only steps and loss" "use --law curve"

# a stored sweep needs a scheduler; with none reachable: a run-time failure
fit sweep 42 --url http://127.0.0.1:1
expect_rc 1
expect_msg "cannot reach the scheduler"

fit help --help
expect_rc 0
expect_msg "usage: scalesweep fit"

echo "cli_fit: all checks passed"

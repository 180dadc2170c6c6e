#!/usr/bin/env bash
# `scalesweep plan` through the real binary: every example under sweeps/examples
# plans (table and --json); --json parses, each config_hash is the SHA-256 of the
# config text as printed, and `scalesweep train --print-config` resolves a planned
# config to exactly the same text; the plan is deterministic; a bad spec exits 2
# with every problem (file, JSON path, found vs expected); malformed JSON names
# line:column; refusals (too small, D below one batch, max_hours); usage errors.
# Usage: test_plan.sh PATH/TO/scalesweep
set -euo pipefail

bin=${1:?usage: test_plan.sh PATH/TO/scalesweep}
[ -x "$bin" ] || { echo "FAIL: $bin is not an executable" >&2; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
root=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# plan ARGS...: stdout in out, stderr in err, the exit status in $rc.
plan() {
  rc=0
  timeout 60 "$bin" plan "$@" >out 2>err || rc=$?
}

# expect_err CODE NEEDLE...: the last plan exited CODE and stderr holds each NEEDLE.
expect_err() {
  local code=$1 n
  shift
  [ "$rc" = "$code" ] || fail "exit $rc, expected $code; stderr: $(head -c 1500 err)"
  for n in "$@"; do
    grep -qF -- "$n" err || fail "stderr lacks '$n': $(head -c 1500 err)"
  done
}

# ---- the examples plan; --json is consistent with itself and with `train`
for f in "$root"/sweeps/examples/*.json; do
  name=$(basename "$f")
  plan "$f"
  [ "$rc" = 0 ] || fail "$name: exit $rc: $(head -c 1500 err)"
  for n in "total:" "batch rule" "lr rule" "shape rule" "spec digest"; do
    grep -qF "$n" out || fail "$name: the table lacks '$n'"
  done
  plan "$f" --json
  [ "$rc" = 0 ] || fail "$name --json: exit $rc: $(head -c 1500 err)"
  cp out "$name.plan.json"
  "$py" - "$name.plan.json" "$name" <<'EOF' || fail "$name: --json check failed"
import hashlib, json, sys
text = open(sys.argv[1]).read()
runs = json.loads(text)
assert isinstance(runs, list) and runs, "not a non-empty list"
dec = json.JSONDecoder()
at = 0
for i, r in enumerate(runs):
    for k in ("config", "config_hash", "params", "nonembedding_params", "tokens",
              "batch_size", "flops", "est_seconds"):
        assert k in r, f"run {i} lacks {k}"
    assert r["index"] == i
    # the config text exactly as printed hashes to config_hash
    at = text.index('"config":', at) + len('"config":')
    _, end = dec.raw_decode(text, at)
    raw = text[at:end]
    assert hashlib.sha256(raw.encode()).hexdigest() == r["config_hash"], f"run {i}: hash"
    c = r["config"]
    assert c["train"]["batch_size"] == r["batch_size"]
    assert r["tokens"] % (r["batch_size"] * c["model"]["seq_len"]) == 0
    m = c["model"]
    L, d, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab_size"]
    if m.get("family") == "llama":  # docs/models.md: SwiGLU's three matrices, the rotation
        mult = m["mlp_multiple_of"]
        F = mult * -(-round(m["mlp_ratio"] * d * 1e9) // round(mult * 1e9))
        fpt = 6 * ((4 * d * d + 3 * F * d) * L + d * V) + 6 * L * T * d + 12 * L * d
    else:
        fpt = 6 * (12 * L * d * d + d * V) + 6 * L * T * d
    assert abs(r["flops"] - fpt * r["tokens"]) <= 1e-9 * r["flops"], f"run {i}: flops"
    if i == 0:
        open(sys.argv[2] + ".run0.json", "w").write(raw)
        open(sys.argv[2] + ".run0.hash", "w").write(r["config_hash"])
hashes = [r["config_hash"] for r in runs]
assert len(set(hashes)) == len(hashes), "duplicate runs"
EOF
  # `scalesweep train` resolves the planned config to the same canonical text
  "$bin" train --config "$name.run0.json" --print-config >resolved ||
    fail "$name: train --print-config refused the planned config"
  got=$(tr -d '\n' <resolved | sha256sum | cut -c1-64)
  [ "$got" = "$(cat "$name.run0.hash")" ] ||
    fail "$name: train --print-config gives a different config: $(head -c 600 resolved)"
  # deterministic
  plan "$f" --json
  cmp -s out "$name.plan.json" || fail "$name: two plans of the same spec differ"
done

# ---- a spec with many problems: all of them, with paths, exit 2
cat >bad.json <<'EOF'
{
  "name": "bad",
  "method": "isoflop",
  "colour": "blue",
  "base": {"model": {"seq_len": 64, "d_model": 48}, "train": {"lrate": 0.1}},
  "isoflop": {"flops": [1e12, "3e12", -1], "params": {"from": 1e6, "to": 1e4, "points": 5}},
  "priority": "high"
}
EOF
plan bad.json
expect_err 2 "bad.json: \$.colour: unknown key" \
  "bad.json: \$.isoflop.flops[1]: found a string \"3e12\", expected a compute budget" \
  "bad.json: \$.isoflop.flops[2]: found -1" \
  "bad.json: \$.isoflop.params: found from 1e+06 and to 10000; expected from < to" \
  "bad.json: \$.priority: found a string \"high\", expected an integer" \
  "bad.json: \$.base.model.d_model: found 48" \
  "bad.json: \$.base.train.lrate: unknown key" \
  "7 problem(s); nothing planned"
[ ! -s out ] || fail "a refused spec printed a plan: $(head -c 400 out)"

# ---- malformed JSON: file:line:column
printf '{"name": "x",\n "method": "grid" "grid": {}}\n' >mal.json
plan mal.json
expect_err 2 "mal.json:2:" "malformed JSON"

# ---- many problems: the first 50 in full, the rest counted
python3 -c '
import json
s = {"name": "many", "method": "grid", "grid": {"params": [1e4], "tokens": [1e6]}}
s.update({"k%d" % i: i for i in range(60)})
print(json.dumps(s))' >many.json
plan many.json
expect_err 2 "many.json: \$.k0: unknown key" "many.json: \$.k49: unknown key" \
  "many.json: ... and 10 more problem(s) not listed" \
  "scalesweep plan: 60 problem(s), the first 50 listed; nothing planned"
! grep -qF '$.k50:' err || fail "a problem past the first 50 was listed: $(tail -c 400 err)"
[ "$(grep -c ': unknown key' err)" = 50 ] || fail "expected 50 problems listed: $(head -c 400 err)"

# ---- plans that cannot run
cat >refuse.json <<'EOF'
{"name": "r", "method": "grid", "max_hours": 1,
 "grid": {"params": [500, 1e5], "tokens": [100, 1e9], "batch_size": [8]}}
EOF
plan refuse.json --json
expect_err 2 "refuse.json: \$.grid.params[0]: found target N = 500, below the smallest model" \
  "refuse.json: \$.grid.tokens[0]:" "smaller than one batch of 8 x 64 = 512 tokens" \
  "refuse.json: \$.max_hours: found 1, but the plan's estimated time is"

# ---- usage
plan
expect_err 2 "a spec FILE is required"
plan "$root/sweeps/examples/grid.json" --yaml
expect_err 2 "unknown option '--yaml'"
plan a.json b.json
expect_err 2 "unexpected argument 'b.json'"
plan missing.json
expect_err 2 "missing.json: cannot open"
plan --help
[ "$rc" = 0 ] && grep -qF "usage: scalesweep plan" out || fail "--help"

echo "cli_plan: all checks passed"

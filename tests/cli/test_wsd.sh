#!/usr/bin/env bash
# The warmup-stable-decay schedule and its branches through the real binary
# (docs/sweeps.md, "WSD branches"): the learning rate of every step against its
# closed form; a short run started from a longer run's branch-point checkpoint
# (--keep-steps, then --branch-from) prints, from the branch point on, exactly
# the lines the short run prints trained from scratch (fp32 with micro-batches,
# bf16 with 8-bit AdamW), also when the branch is stopped and resumed; and every
# checkpoint that cannot be a branch point is refused with exit 2 saying why;
# the same branches for the llama family (QK-norm, untied head) under muP,
# whose step lines carry the noise scale b_noise;
# constant-rate branches (the rungs of a critical batch size ladder) at their
# own batch size, and what they refuse.
# Usage: test_wsd.sh PATH/TO/scalesweep
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# branch_refused LABEL CONFIG CHECKPOINT NEEDLE...: `train --config CONFIG
# --branch-from CHECKPOINT` refuses the branch point (exit 2), saying each NEEDLE.
branch_refused() {
  local what=$1 config=$2 from=$3
  shift 3
  cli_run 60 train "$what" --config "$config" --branch-from "$from"
  expect_rc 2
  expect_msg "$@"
}

cat >"$tmp/h.py" <<'PY'
import json, math, re, sys

from clilib import TIMING, die

def lines(path):
    return [TIMING.sub("", l.rstrip("\n")) for l in open(path) if l.strip()]

def cfg(tokens, **kw):
    c = {"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "seq_len": 32},
         "data": {"synthetic": {"words": 256, "zipf": 1.2}},
         "train": {"batch_size": 8, "micro_batch_size": 4, "tokens": tokens, "lr": 3e-3,
                   "warmup_tokens": 2560, "schedule": "wsd"},
         "eval": {"every_tokens": 8192, "tokens": 2048}, "threads": 1}
    for k, v in kw.items():
        sec, key = k.split("__") if "__" in k else (None, k)
        (c.setdefault(sec, {}) if sec else c)[key] = v
    return c

def write(name, tokens, **kw):
    json.dump(cfg(tokens, **kw), open(name, "w"))

def lr_check(path):
    """every step's lr against the closed form (runcfg.h, rcfg_wsd_stable_steps)"""
    ev = [json.loads(l) for l in open(path)]
    c = ev[0]["config"]["train"]
    st = c["batch_size"] * 32
    steps = c["tokens"] // st
    decay = max(1, math.ceil(c["decay_frac"] * steps - 1e-9))
    stable = steps - decay
    lr, mn = c["lr"], c["lr"] * c["min_lr_ratio"]
    n = 0
    for e in ev:
        if e["event"] != "step":
            continue
        t = (e["step"] - 1) * st
        if t < c["warmup_tokens"]:
            want = lr * (t + 1) / (c["warmup_tokens"] + 1)
        elif e["step"] <= stable:
            want = lr
        else:
            p = (t + st - stable * st) / (steps * st - stable * st)
            want = mn + (lr - mn) * (1 - math.sqrt(p))
        if abs(e["lr"] - want) > 1e-15 * lr:
            die("%s: step %d: lr %r, expected %r (stable steps %d of %d)"
                % (path, e["step"], e["lr"], want, stable, steps))
        n += 1
    last = [e for e in ev if e["event"] == "step"][-1]
    if abs(last["lr"] - mn) > 1e-15:
        die("%s: the last step's lr is %r, expected min_lr_ratio x lr = %r" % (path, last["lr"], mn))
    if n != steps:
        die("%s: %d step lines, expected %d" % (path, n, steps))
    print("lr: %d steps, %d stable, decay to %g: as the closed form" % (steps, stable, mn))

def same_tail(scratch, branch, at):
    """BRANCH's lines after the config event equal SCRATCH's from step at+1 on"""
    a, b = lines(scratch), lines(branch)
    ca, cb = json.loads(a[0]), json.loads(b[0])
    if ca["config_hash"] != cb["config_hash"]:
        die("the branch's config hash %s differs from the run from scratch's %s"
            % (cb["config_hash"], ca["config_hash"]))
    def key(l):
        e = json.loads(l)
        return e["event"] in ("step", "eval") and e["step"] > at or e["event"] == "done"
    want = [l for l in a[1:] if key(l)]
    got = [l for l in b[1:] if json.loads(l)["event"] != "checkpoint"]
    if got != want:
        for i, (x, y) in enumerate(zip(want, got)):
            if x != y:
                die("%s differs from %s after step %d at line %d:\n  scratch %s\n  branch  %s"
                    % (branch, scratch, at, i, x, y))
        die("%s has %d lines after step %d, the run from scratch %d" % (branch, len(got), at, len(want)))
    first = json.loads(got[0])
    if first["event"] != "step" or first["step"] != at + 1:
        die("%s: the first line is %s, expected step %d" % (branch, got[0], at + 1))
    done = json.loads(got[-1])
    print("branch from step %d: %d lines as from scratch, final_val_loss %.17g"
          % (at, len(got), done["final_val_loss"]))

def kept(trunk, at):
    at = [int(x) for x in str(at).split(",")]
    ev = [json.loads(l) for l in open(trunk)]
    ck = [e for e in ev if e["event"] == "checkpoint" and e.get("branch")]
    if [e["step"] for e in ck] != at:
        die("%s: branch checkpoints at %s, expected %s" % (trunk, [e["step"] for e in ck], at))
    for e in ck:
        if not e["path"].endswith("/branch-%d/checkpoint.bin" % e["step"]):
            die("%s: branch checkpoint path %s" % (trunk, e["path"]))

if __name__ == "__main__":
    globals()[sys.argv[1]](*[int(x) if x.lstrip("-").isdigit() else x for x in sys.argv[2:]])
PY
h() { "$py" "$tmp/h.py" "$@"; }

# ---- 1. the schedule --------------------------------------------------------
# 100 steps of 256 tokens: 80 stable (10 of them warmup), 20 decaying
"$py" -c 'import sys; sys.path.insert(0, "'"$tmp"'"); import h
h.write("short.json", 25600); h.write("trunk.json", 51200)
h.write("short_q8.json", 25600, precision="bf16", optimizer__name="adamw8bit")
h.write("trunk_q8.json", 51200, precision="bf16", optimizer__name="adamw8bit")
h.write("short_lr.json", 25600, train__lr=2e-3)
h.write("short_frac.json", 25600, train__decay_frac=0.5)
h.write("short_cos.json", 25600, train__schedule="cosine")'
"$bin" train --config short.json >short.out || fail "the short wsd run failed"
h lr_check short.out

# ---- 2. branch points and branches ------------------------------------------
# the trunk (200 steps, stable until 160) keeps checkpoints at 40 and 80; the
# short run (stable until 80) starts from either and ends as from scratch
"$bin" train --config trunk.json --checkpoint-dir ck --keep-steps 40,80 >trunk.out ||
  fail "the trunk failed: $(tail -c 600 trunk.out)"
h kept trunk.out 40,80
for at in 80 40; do
  "$bin" train --config short.json --checkpoint-dir b$at \
    --branch-from ck/branch-$at/checkpoint.bin >branch$at.out ||
    fail "the branch from step $at failed: $(tail -c 600 branch$at.out)"
  h same_tail short.out branch$at.out $at
done
# bf16 with 8-bit AdamW (the quantised state travels in the checkpoint)
"$bin" train --config short_q8.json >short_q8.out
"$bin" train --config trunk_q8.json --checkpoint-dir ckq --keep-steps 80 >trunk_q8.out
"$bin" train --config short_q8.json --branch-from ckq/branch-80/checkpoint.bin >branch_q8.out ||
  fail "the bf16 branch failed: $(tail -c 600 branch_q8.out)"
h same_tail short_q8.out branch_q8.out 80

# the llama family (QK-norm, untied head) under muP: fp32 with micro-batches
# (the noise scale on every line) and bf16 with 8-bit AdamW, branched at 80
# and 40 as from scratch; a gpt2 run or another muP base width is refused
"$py" -c 'import sys; sys.path.insert(0, "'"$tmp"'"); import h
L = dict(model__family="llama", model__qk_norm=True, model__tie_embeddings=False,
         model__parametrization="mup", model__base_width=16)
h.write("short_l.json", 25600, **L); h.write("trunk_l.json", 51200, **L)
Q = dict(L, precision="bf16", optimizer__name="adamw8bit")
h.write("short_lq8.json", 25600, **Q); h.write("trunk_lq8.json", 51200, **Q)
h.write("short_lbw.json", 25600, **dict(L, model__base_width=32))'
"$bin" train --config short_l.json >short_l.out || fail "the short llama run failed"
grep -q '"family":"llama"' short_l.out || fail "the llama config did not go in"
h lr_check short_l.out
"$bin" train --config trunk_l.json --checkpoint-dir ckl --keep-steps 40,80 >trunk_l.out ||
  fail "the llama trunk failed: $(tail -c 600 trunk_l.out)"
h kept trunk_l.out 40,80
for at in 80 40; do
  "$bin" train --config short_l.json --branch-from ckl/branch-$at/checkpoint.bin \
    >branch_l$at.out || fail "the llama branch from step $at failed: $(tail -c 600 branch_l$at.out)"
  h same_tail short_l.out branch_l$at.out $at
done
"$py" - <<'PY' || exit 1
import json
st = [json.loads(l) for l in open("branch_l80.out") if '"event":"step"' in l]
bad = [e["step"] for e in st if not 0 < e.get("b_noise", -1) < float("inf")]
if not st or bad:
    raise SystemExit("FAIL: the llama branch's step lines %s lack a finite, positive b_noise" % bad[:5])
print("llama branch: b_noise on each of its %d step lines" % len(st))
PY
"$bin" train --config short_lq8.json >short_lq8.out
"$bin" train --config trunk_lq8.json --checkpoint-dir cklq --keep-steps 80 >trunk_lq8.out
"$bin" train --config short_lq8.json --branch-from cklq/branch-80/checkpoint.bin >branch_lq8.out ||
  fail "the llama bf16 branch failed: $(tail -c 600 branch_lq8.out)"
h same_tail short_lq8.out branch_lq8.out 80
branch_refused "a gpt2 run from a llama checkpoint" short.json ckl/branch-80/checkpoint.bin \
  '$.model.family: checkpoint has "llama", config has nothing'
branch_refused "another muP base width" short_lbw.json ckl/branch-80/checkpoint.bin \
  '$.model.base_width: checkpoint has 16, config has 32'

# a branch with checkpoints of its own (a later attempt) resumes from them, not
# from the branch point: here from its last, so it trains no step again
"$py" -c 'import json; c = json.load(open("short.json")); c["checkpoint"] = {"every_tokens": 2560}
json.dump(c, open("short_ck.json", "w"))'
"$bin" train --config short_ck.json --checkpoint-dir full_ck >full_ck.out
"$bin" train --config short_ck.json --checkpoint-dir rb --branch-from ck/branch-80/checkpoint.bin \
  >rb1.out || fail "the branch with checkpoints failed"
h same_tail full_ck.out rb1.out 80
"$bin" train --config short_ck.json --checkpoint-dir rb2 --resume rb \
  --branch-from ck/branch-80/checkpoint.bin >rb2.out || fail "the resumed branch failed"
grep -q '"event":"step"' rb2.out && fail "resumed after its last step, the branch trained again"
grep -q '"event":"done"' rb2.out || fail "the resumed branch printed no done line"
"$py" - <<'PY' || exit 1
import json
a = [json.loads(l) for l in open("full_ck.out")][-1]
b = [json.loads(l) for l in open("rb2.out")][-1]
if a["final_val_loss"] != b["final_val_loss"]:
    raise SystemExit("FAIL: resumed branch final %r, from scratch %r" % (b["final_val_loss"], a["final_val_loss"]))
print("resumed branch: its own checkpoint, final_val_loss as from scratch")
PY

# ---- 3. what cannot be a branch point ---------------------------------------
"$bin" train --config trunk.json --checkpoint-dir ck2 --keep-steps 120 >/dev/null
branch_refused "checkpoint after the branch's stable phase" short.json ck2/branch-120/checkpoint.bin \
  "ck2/branch-120/checkpoint.bin: holds step 120, after the stable phase of this run (80 steps)"
branch_refused "another learning rate" short_lr.json ck/branch-80/checkpoint.bin \
  '$.train.lr: checkpoint has 0.003, config has 0.002' "differs from it only in train.tokens"
branch_refused "another decay fraction" short_frac.json ck/branch-80/checkpoint.bin \
  '$.train.decay_frac: checkpoint has 0.2, config has 0.5'
branch_refused "a cosine run" short_cos.json ck/branch-40/checkpoint.bin \
  '$.train.schedule: checkpoint has "wsd", config has "cosine"'
branch_refused "no such file" short.json nowhere/checkpoint.bin \
  "nowhere/checkpoint.bin: cannot open checkpoint"
cli_run 10 train "descending keep steps" --config trunk.json --checkpoint-dir x --keep-steps 80,40
expect_rc 2
expect_msg "--keep-steps '80,40': at character 4: expected ascending steps >= 1"
cli_run 10 train "keep steps without a directory" --config trunk.json --keep-steps 40
expect_rc 2
expect_msg "--keep-steps: the branch points' checkpoints need a directory"
echo '{"train": {"schedule": "cosine", "decay_frac": 0.3}}' >cos_frac.json
cli_run 10 train "decay_frac without wsd" --config cos_frac.json --print-config
expect_rc 2
expect_msg '$.train.decay_frac: found a decay fraction with schedule "cosine"'
echo '{"train": {"schedule": "wsd", "decay_frac": 0}}' >zero_frac.json
cli_run 10 train "decay_frac 0" --config zero_frac.json --print-config
expect_rc 2
expect_msg '$.train.decay_frac'

# ---- 4. constant-rate branches: the rungs of a critical batch size ladder ----
# (docs/sweeps.md "Critical batch size by branching") a constant-rate trunk of
# 200 steps keeps checkpoints at 40 and 80; a rung at the trunk's own batch size
# continues exactly as the trunk does; one at 4x the batch starts at its own
# step 20 (the same 20480 tokens) at its own rate; a rung whose batch does not
# divide the point, one inside the warmup, or one that differs in anything but
# tokens, batch size, micro-batch and rate is refused with exit 2
"$py" -c 'import sys; sys.path.insert(0, "'"$tmp"'"); import h
h.write("ctrunk.json", 51200, train__schedule="constant")
h.write("c8.json", 25600, train__schedule="constant")
h.write("c32.json", 40960, train__schedule="constant", train__batch_size=32, train__lr=6e-3)
h.write("c24.json", 40960, train__schedule="constant", train__batch_size=24)
h.write("cwd.json", 40960, train__schedule="constant", train__batch_size=32, train__weight_decay=0.05)
h.write("cwarm.json", 51200, train__schedule="constant", train__warmup_tokens=15360)'
"$bin" train --config ctrunk.json --checkpoint-dir cck --keep-steps 40,80 >ctrunk.out ||
  fail "the constant-rate trunk failed: $(tail -c 600 ctrunk.out)"
h kept ctrunk.out 40,80
"$bin" train --config c8.json --branch-from cck/branch-80/checkpoint.bin >c8.out ||
  fail "the rung at the trunk's batch size failed: $(tail -c 600 c8.out)"
"$bin" train --config c32.json --branch-from cck/branch-80/checkpoint.bin >c32.out ||
  fail "the rung at 4x the batch failed: $(tail -c 600 c32.out)"
"$py" - <<'PY' || exit 1
import json
from clilib import TIMING
def steps(path, lo, hi):
    return [TIMING.sub("", l.strip()) for l in open(path)
            if '"event":"step"' in l and lo < json.loads(l)["step"] <= hi]
a, b = steps("ctrunk.out", 80, 100), steps("c8.out", 0, 10**9)
if len(b) != 20 or a != b:
    raise SystemExit("FAIL: the rung at the trunk's batch size: %d step lines; first differing:\n  %s\n  %s"
                     % (len(b), next((x for x, y in zip(a, b) if x != y), ""),
                        next((y for x, y in zip(a, b) if x != y), "")))
ev = [json.loads(l) for l in open("c32.out")]
st = [e for e in ev if e["event"] == "step"]
if [e["step"] for e in st] != list(range(21, 41)):
    raise SystemExit("FAIL: the 4x rung's steps are %s, expected 21..40" % [e["step"] for e in st][:3])
if st[0]["tokens"] != 21 * 1024 or any(e["lr"] != 6e-3 for e in st):
    raise SystemExit("FAIL: the 4x rung's first step: tokens %d (expected 21504), lr %r"
                     % (st[0]["tokens"], st[0]["lr"]))
done = ev[-1]
if done["event"] != "done" or done["steps"] != 40 or done["tokens"] != 40960:
    raise SystemExit("FAIL: the 4x rung's done line: %s" % done)
print("constant-rate rungs: the trunk's batch continues it exactly; 4x starts at step 21, tokens 21504")
PY
branch_refused "a rung whose batch does not divide the point" c24.json cck/branch-80/checkpoint.bin \
  "cck/branch-80/checkpoint.bin: holds 20480 tokens, not a whole number of this run's batches" \
  "batch_size 24 x seq_len 32 = 768 tokens"
branch_refused "a rung with another weight decay" cwd.json cck/branch-80/checkpoint.bin \
  '$.train.weight_decay: checkpoint has 0.1, config has 0.05' \
  "differs from the run it starts from only in train.tokens, batch_size, micro_batch_size and lr"
"$bin" train --config cwarm.json --checkpoint-dir cckw --keep-steps 40 >/dev/null
branch_refused "a rung inside the warmup" cwarm.json cckw/branch-40/checkpoint.bin \
  "cckw/branch-40/checkpoint.bin: holds 10240 tokens, inside the warmup" \
  "a constant-rate branch starts after it"

echo "PASS: wsd schedule and branches ($((SECONDS - started)) s)"

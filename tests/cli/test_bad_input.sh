#!/usr/bin/env bash
# `scalesweep train` on bad input through the real binary: exit code 2 and a message
# that names the file, the key or offset, and the value found vs expected, for bad
# configs, shards and checkpoints; exit 1 with an error event and the last checkpoint
# intact when the loss diverges; usage errors.
# Usage: test_bad_input.sh PATH/TO/scalesweep
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# train LABEL ARGS...: runs `scalesweep train ARGS` (lib.sh's cli_run).
train() { cli_run 60 train "$@"; }

# expect_error_event: stdout ends with a JSON error event (the worker reads stdout).
expect_error_event() {
  tail -n 1 out | "$py" -c '
import json, sys
o = json.loads(sys.stdin.read())
assert o["event"] == "error" and o["message"], o' 2>/dev/null ||
    fail "$label: stdout does not end with an error event: $(tail -c 400 out)"
}

# invalid LABEL JSON NEEDLE...: a config file holding JSON is refused with exit 2 and
# a message naming the file and every NEEDLE.
invalid() {
  local name=$1 json=$2
  shift 2
  printf '%s\n' "$json" >"$name.json"
  train "$name" --config "$tmp/$name.json"
  expect_rc 2
  expect_msg "$tmp/$name.json" "$@"
}

# write_shard PATH [magic=M] [trunc=BYTES] [bad=INDEX]: a 1000-token shard, with a
# wrong magic, its last BYTES cut off, or token INDEX set to 27 (= vocab_size).
write_shard() {
  "$py" - "$@" <<'PY'
import struct, sys
path, opts = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
toks = [(i * 7) % 27 for i in range(1000)]
if "bad" in opts:
    toks[int(opts["bad"])] = 27
b = struct.pack("<256i", int(opts.get("magic", 20240520)), 1, len(toks), *[0] * 253)
b += struct.pack("<%dH" % len(toks), *toks)
open(path, "wb").write(b[:len(b) - int(opts.get("trunc", 0))])
PY
}

small='"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16},"eval":{"tokens":64},"threads":1'

# ---- configs -------------------------------------------------------------------
printf '{\n  "model": {"n_layer": 2,\n    "d_model": 32,,\n  }\n}\n' >malformed.json
train malformed --config "$tmp/malformed.json"
expect_rc 2
grep -qE "$tmp/malformed.json:3:[0-9]+" msg ||
  fail "malformed JSON: no FILE:3:COL position in: $(cat msg)"

invalid unknown_key '{"train":{"lrr":0.1}}' '$.train.lrr' 'unknown key' 'expected one of' 'lr'
invalid wrong_type '{"model":{"n_layer":"two"}}' '$.model.n_layer' '"two"' 'expected an integer'
invalid heads '{"model":{"d_model":30,"n_head":4}}' '$.model.d_model' 'found 30' 'n_head (4)'
invalid micro '{"train":{"batch_size":8,"micro_batch_size":3}}' \
  '$.train.micro_batch_size' 'found 3' 'divisor of batch_size (8)'
invalid tokens '{"model":{"seq_len":32},"train":{"batch_size":8,"tokens":100}}' \
  '$.train.tokens' 'found 100' '256'
echo "ok configs: malformed JSON, unknown key, wrong type, d_model % n_head, micro-batch, tokens"

# ---- shards --------------------------------------------------------------------
"$bin" data synth --out "$tmp/good" --tokens 5000 --val-tokens 1024 >/dev/null ||
  fail "data synth exited $?"
mkdir shards empty
write_shard shards/magic.bin magic=20240521
write_shard shards/trunc.bin trunc=3
write_shard shards/vocab.bin bad=500
shard_run() { # shard_run LABEL TRAIN_GLOB
  printf '{"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16,"vocab_size":27},
 "data":{"train":"%s","val":"%s/good/val_*.bin"},"train":{"batch_size":4,"tokens":128},
 "eval":{"tokens":64},"threads":1}\n' "$2" "$tmp" >"$1.json"
  train "$1" --config "$tmp/$1.json"
}
shard_run magic "$tmp/shards/magic.bin"
expect_rc 2
expect_msg "$tmp/shards/magic.bin" "byte 0" 20240521 20240520
expect_error_event
shard_run trunc "$tmp/shards/trunc.bin"
expect_rc 2
expect_msg "$tmp/shards/trunc.bin" truncated "1000 tokens" 2000 1997
expect_error_event
shard_run vocab "$tmp/shards/vocab.bin"
expect_rc 2
expect_msg "$tmp/shards/vocab.bin" "token 500" "byte 2024" "is 27" "vocab_size 27"
expect_error_event
shard_run noglob "$tmp/empty/train_*.bin"
expect_rc 2
expect_msg "$tmp/empty/train_*.bin" "no files match"
expect_error_event
# the same for a directory that does not exist
shard_run nodir "$tmp/missing/train_*.bin"
expect_rc 2
expect_msg "$tmp/missing/train_*.bin" "no files match" '$.data.train'
echo "ok shards: magic, truncated, token >= vocab_size, glob matching nothing"

# ---- checkpoints -----------------------------------------------------------------
printf '{%s,"train":{"batch_size":4,"tokens":256,"lr":0.003},
 "checkpoint":{"dir":"ck","every_tokens":64}}\n' "$small" >ck.json
train ck_write --config "$tmp/ck.json"
expect_rc 0
[ -f ck/checkpoint.bin ] || fail "the run wrote no ck/checkpoint.bin"
size=$(wc -c <ck/checkpoint.bin | tr -d ' ')

mkdir garbage
head -c "$size" /dev/urandom >garbage/checkpoint.bin
# an 8-byte prefix chosen so that the magic is never right by chance
printf 'GARBAGE!' | dd of=garbage/checkpoint.bin conv=notrunc status=none
train garbage --config "$tmp/ck.json" --resume garbage
expect_rc 2
expect_msg garbage/checkpoint.bin "byte 0" "magic number is $(
  od -An -t d4 -N 4 garbage/checkpoint.bin | tr -d ' ')" expected
expect_error_event

mkdir truncated
head -c $((size - 100)) ck/checkpoint.bin >truncated/checkpoint.bin
train truncated --config "$tmp/ck.json" --resume truncated
expect_rc 2
expect_msg truncated/checkpoint.bin "$((size - 100))" "$size" truncated
expect_error_event

sed 's/"lr":0.003/"lr":0.004/' ck.json >ck_other.json
train other_config --config "$tmp/ck_other.json" --resume ck
expect_rc 2
expect_msg ck/checkpoint.bin '$.train.lr' 'checkpoint has 0.003' 'config has 0.004'
expect_error_event
echo "ok checkpoints: garbage, truncated, written by another config"

# ---- divergence --------------------------------------------------------------------
# fp16 with lr 3 and no clipping: within a few updates the fp16 activations
# overflow and the forward pass returns NaN (step 6 here). fp32 and bf16 do not
# diverge even at lr 10: Adam's steps are bounded by lr, so the loss grows to
# ~1e3-1e4 but stays finite. A checkpoint every step: the last one before the
# failing step must survive it.
printf '{%s,"precision":"fp16","train":{"batch_size":4,"tokens":6400,"lr":3,
 "warmup_tokens":0,"schedule":"constant","grad_clip":0,"weight_decay":0},
 "checkpoint":{"dir":"nan_ck","every_tokens":64}}\n' "$small" >nan.json
train nan --config "$tmp/nan.json"
expect_rc 1
expect_msg "training loss is"
grep -qE 'loss is -?(nan|inf)' msg || fail "nan: the message does not give the loss: $(cat msg)"
expect_error_event
grep -q '"event":"checkpoint"' out || fail "nan: no checkpoint before the failure"
last=$(grep '"event":"checkpoint"' out | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
# Resume that checkpoint into a second directory: the same step fails again, and
# the checkpoint file must keep the bytes it had before.
cp -r nan_ck nan_ck2
sed 's/"nan_ck"/"nan_ck2"/' nan.json >nan2.json
before=$(sha256sum <nan_ck2/checkpoint.bin)
train nan_resume --config "$tmp/nan2.json" --resume nan_ck2
expect_rc 1
expect_msg "training loss is" "at step $((last + 1))"
expect_error_event
grep -q '"event":"checkpoint"' out && fail "nan_resume: a checkpoint was written"
after=$(sha256sum <nan_ck2/checkpoint.bin)
[ "$before" = "$after" ] ||
  fail "the checkpoint changed across the failing step (sha256 ${before%% *} -> ${after%% *})"
left=(nan_ck2/*) # the checkpoint and the one before it, no temporary files
[ "${left[*]}" = "nan_ck2/checkpoint.bin nan_ck2/checkpoint.prev.bin" ] ||
  fail "files left beside the checkpoints: ${left[*]}"
echo "ok divergence: exit 1, error event, checkpoint of step $last intact"

# ---- usage -------------------------------------------------------------------------
train noconfig
expect_rc 2
expect_msg "--config"
train noconfig_value --config
expect_rc 2
expect_msg "--config"
train missing_file --config "$tmp/does_not_exist.json"
expect_rc 2
expect_msg "$tmp/does_not_exist.json"
echo "ok usage: missing --config, --config without a value, missing config file"

echo "run time: $((SECONDS - started)) s"
echo "all checks passed"

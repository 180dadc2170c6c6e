#!/usr/bin/env bash
# `scalesweep train` with "backend": "cuda" where it cannot run: a build without
# the CUDA backend refuses the config (exit 2, $.backend), a CUDA build on a
# machine with no GPU names cudaGetDeviceCount's answer (exit 1). Usage:
# test_cuda_backend.sh SCALESWEEP HAVE_CUDA(0|1)
set -u
bin=$1 have_cuda=$2
if [ "$have_cuda" = 1 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: a GPU is present (tests/gpu/run.sh trains on it)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/run.json" <<'JSON'
{"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16},
 "data": {"synthetic": {"seed": 1}},
 "train": {"batch_size": 2, "micro_batch_size": 2, "tokens": 128},
 "backend": "cuda"}
JSON
"$bin" train --config "$dir/run.json" >"$dir/out" 2>"$dir/err"
rc=$?
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$dir/out"; echo "--- stderr"; cat "$dir/err"; exit 1; }
if [ "$have_cuda" = 1 ]; then
  [ $rc -eq 1 ] || fail "expected exit 1 (no device at run time), got $rc"
  grep -q '"event":"error"' "$dir/out" || fail "no error event"
  grep -q 'cudaGetDeviceCount returned' "$dir/err" || fail "the error does not name cudaGetDeviceCount"
else
  [ $rc -eq 2 ] || fail "expected exit 2 (invalid config for this build), got $rc"
  grep -q '\$.backend' "$dir/err" || fail "the error does not name \$.backend"
  grep -q 'this build has no CUDA backend' "$dir/err" || fail "wrong message"
fi
# data parallelism is refused plainly, whatever the build
sed 's/"backend": "cuda"}/"backend": "cuda", "world_size": 2}/' "$dir/run.json" >"$dir/ws.json"
"$bin" train --config "$dir/ws.json" >"$dir/out" 2>"$dir/err"
rc=$?
[ $rc -eq 2 ] || fail "world_size 2: expected exit 2, got $rc"
grep -q 'world_size' "$dir/err" || fail "world_size 2: the error does not name world_size"
echo "ok"

#!/usr/bin/env bash
# `scalesweep train` with "backend": "cuda" where it cannot run (exit 1, the
# reason named): a build without nvcc has no CUDA module to load; a CUDA build
# on a machine with no GPU loads its module and names cudaGetDeviceCount's
# answer; a module that is not one (another library, or not a shared object)
# is refused by name. `scalesweep devices` says the same and exits 0. Usage:
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
  "$bin" devices --json >"$dir/dev" || fail "devices: exit $?"
  grep -q '"cuda":{"error":"cudaGetDeviceCount returned' "$dir/dev" || fail "devices: $(cat "$dir/dev")"
else
  [ $rc -eq 1 ] || fail "expected exit 1 (no CUDA module in this build), got $rc"
  grep -q 'cannot load the CUDA module libscalesweep_cuda.so' "$dir/err" || fail "wrong message"
fi
# a module that is not scalesweep's: refused by name, never called
jansson=$(ldconfig -p | awk '/libjansson\.so\.4 /{print $NF; exit}')
for bad in "$jansson:no kern_cuda_module_v4" "$dir/run.json:invalid ELF header" \
    "$dir/missing.so:not found"; do
  SCALESWEEP_CUDA_MODULE=${bad%%:*} "$bin" train --config "$dir/run.json" >"$dir/out" 2>"$dir/err"
  rc=$?
  [ $rc -eq 1 ] || fail "module ${bad%%:*}: expected exit 1, got $rc"
  grep -q "${bad#*:}" "$dir/err" || fail "module ${bad%%:*}: the error does not say '${bad#*:}'"
  SCALESWEEP_CUDA_MODULE=${bad%%:*} "$bin" devices >"$dir/dev" || fail "devices: exit $?"
  grep -q "^cuda: unavailable: .*${bad#*:}" "$dir/dev" || fail "devices with ${bad%%:*}: $(cat "$dir/dev")"
done
# two CUDA ranks where CUDA cannot run: both fail at once with the reason (no
# rank waits for the other), exit 1
sed 's/"batch_size": 2, "micro_batch_size": 2/"batch_size": 4, "micro_batch_size": 2/; s/"backend": "cuda"}/"backend": "cuda", "world_size": 2}/' \
  "$dir/run.json" >"$dir/ws.json"
start=$(date +%s)
timeout 60 "$bin" train --config "$dir/ws.json" >"$dir/out" 2>"$dir/err"
rc=$?
[ $rc -eq 1 ] || fail "world_size 2 on CUDA: expected exit 1, got $rc"
[ $(($(date +%s) - start)) -lt 30 ] || fail "world_size 2 on CUDA: a rank waited"
grep -q 'backend "cuda"' "$dir/err" || fail "world_size 2 on CUDA: no reason given"
echo "ok"

#!/usr/bin/env bash
# Builds (cmake -DSS_CUDA=ON: scalesweep and its CUDA module) and runs every GPU test and the GPU benchmark on
# a machine with a GPU, then prints a summary; about 5 minutes at most on an
# H100/H200 (most of it the build). Usage, from anywhere:
#   bash tests/gpu/run.sh            # SS_GPU_BUILD=DIR picks the build directory
#
# NOTE: written on a machine without a GPU. Everything it builds compiles in CI
# (sm_80, sm_90), but as of this writing none of these steps has run on a GPU:
# the CUDA kernels, tests/gpu/test_cuda_kernels.cu, the kill-and-resume check
# and the benchmark below are unexercised until this script first runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SS_GPU_BUILD:-$root/build-gpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
summary=()
failed=0
note() { summary+=("$1"); }

echo "== build ($build)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSS_CUDA=ON \
     >"$work/cmake.log" 2>&1 ||
   ! grep -q "CUDA kernels ON" "$work/cmake.log" ||
   ! grep -q "CUDA trainer module ON" "$work/cmake.log" ||
   ! cmake --build "$build" -j"$(nproc)" --target scalesweep test_cuda_residual test_cuda_kernels \
     >>"$work/cmake.log" 2>&1; then
  tail -40 "$work/cmake.log"
  echo "FAIL: build (is nvcc found? configure with -DSS_CUDA=ON)"
  exit 1
fi
bin=$build/scalesweep
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# the trainer loads its CUDA module and sees the GPUs, as a worker will ask it
echo "== scalesweep devices"
if timeout 60 "$bin" devices && timeout 60 "$bin" devices --json | grep -q '"devices":\[{'; then
  note "PASS  scalesweep devices (the CUDA module loads and lists the GPUs)"
else
  note "FAIL  scalesweep devices: the CUDA module or the GPUs not found"
  failed=1
fi

# ---- 1. kernels against their CPU twins --------------------------------------
for t in test_cuda_residual test_cuda_kernels; do
  echo "== $t"
  "$build/tests/$t"
  rc=$?
  if [ $rc -eq 0 ]; then note "PASS  $t"; else note "FAIL  $t (exit $rc)"; failed=1; fi
done

# ---- 2. kill and resume on the GPU, bit for bit --------------------------------
# A run killed with SIGKILL after its second checkpoint and resumed must print
# exactly the uninterrupted run's step and eval lines (timings aside); so must
# a run resumed from the uninterrupted run's previous checkpoint.
cat >"$work/resume.json" <<'JSON'
{"model": {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 64},
 "data": {"synthetic": {"seed": 3}},
 "train": {"batch_size": 8, "micro_batch_size": 4, "tokens": 204800, "lr": 0.003},
 "optimizer": {"name": "adamw8bit"},
 "eval": {"every_tokens": 20480, "tokens": 1024},
 "checkpoint": {"dir": "CKDIR", "every_tokens": 10240},
 "precision": "bf16", "backend": "cuda"}
JSON
cmp_runs() { # FULL RESUMED: same step/eval lines where both have them; resumed past step 1
  python3 - "$1" "$2" <<'PY'
import json, sys
def lines(path):
    out = {}
    for line in open(path):
        e = json.loads(line)
        if e.get("event") in ("step", "eval"):
            e.pop("tok_per_s", None)
            out[(e["event"], e["step"])] = e
    return out
full, res = lines(sys.argv[1]), lines(sys.argv[2])
steps = sorted(k[1] for k in res if k[0] == "step")
if not steps or steps[0] <= 1:
    sys.exit("the resumed run did not resume (first step %s)" % (steps[:1] or None))
bad = [k for k in res if full.get(k) != res[k]]
if bad:
    k = sorted(bad)[0]
    sys.exit("differs at %s: %s vs %s" % (k, full.get(k), res[k]))
if max(steps) != max(k[1] for k in full if k[0] == "step"):
    sys.exit("the resumed run stopped early")
print("resumed at step %d: %d lines identical" % (steps[0], len(res)))
PY
}
resume_check() {
  local d=$work/resume
  mkdir -p "$d/full" "$d/killed"
  sed "s#CKDIR#$d/full/ck#" "$work/resume.json" >"$d/full.json"
  sed "s#CKDIR#$d/killed/ck#" "$work/resume.json" >"$d/killed.json"
  "$bin" train --config "$d/full.json" >"$d/full.out" 2>"$d/full.err" || { cat "$d/full.err"; return 1; }
  "$bin" train --config "$d/killed.json" >"$d/killed.out" 2>"$d/killed.err" &
  local pid=$! i
  for i in $(seq 1 3000); do
    [ "$(grep -c '"event":"checkpoint"' "$d/killed.out")" -ge 2 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  if grep -q '"event":"done"' "$d/killed.out"; then
    echo "the run finished before the kill: make it longer"; return 1
  fi
  "$bin" train --config "$d/killed.json" --resume "$d/killed/ck" >"$d/resumed.out" 2>"$d/resumed.err" ||
    { cat "$d/resumed.err"; return 1; }
  cmp_runs "$d/full.out" "$d/resumed.out" || return 1
  # the deterministic variant: from the full run's previous checkpoint
  local prev
  prev=$(grep '"event":"checkpoint"' "$d/full.out" | tail -2 | head -1 | sed 's/.*"step":\([0-9]*\).*/\1/')
  cp -r "$d/full/ck" "$d/ck2"
  "$bin" train --config "$d/full.json" --resume "$d/ck2" --resume-max-step "$prev" \
    >"$d/resumed2.out" 2>"$d/resumed2.err" || { cat "$d/resumed2.err"; return 1; }
  cmp_runs "$d/full.out" "$d/resumed2.out"
}
echo "== kill and resume (cuda, bf16, adamw8bit)"
if msg=$(resume_check 2>&1); then
  echo "$msg"; note "PASS  kill-and-resume bitwise: ${msg//$'\n'/; }"
else
  echo "$msg"; note "FAIL  kill-and-resume: ${msg//$'\n'/; }"; failed=1
fi

# ---- 3. benchmark: tokens/s and MFU -----------------------------------------
# MFU = tokens/s x model FLOPs per token (the config event's flops_per_token)
# / the device's peak dense bf16 FLOP/s (H100/H200 SXM: 989e12).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in
  *H100* | *H200*) peak=989e12 ;;
  *A100*) peak=312e12 ;;
  *) peak= ;;
esac
bench() { # NAME L D H T V MICRO STEPS
  local name=$1 L=$2 D=$3 H=$4 T=$5 V=$6 B=$7 S=$8
  cat >"$work/$name.json" <<JSON
{"model": {"n_layer": $L, "d_model": $D, "n_head": $H, "seq_len": $T, "vocab_size": $V},
 "data": {"synthetic": {"seed": 1}},
 "train": {"batch_size": $B, "micro_batch_size": $B, "tokens": $((B * T * S)), "lr": 0.0006},
 "eval": {"every_tokens": 0, "tokens": $T},
 "precision": "bf16", "backend": "cuda"}
JSON
  "$bin" train --config "$work/$name.json" >"$work/$name.out" 2>"$work/$name.err" ||
    { tail -5 "$work/$name.err"; return 1; }
  python3 - "$work/$name.out" "$name" "$peak" <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
fpt = next(e for e in ev if e["event"] == "config")["flops_per_token"]
tps = [e["tok_per_s"] for e in ev if e["event"] == "step"][3:]  # after warm-up
done = next(e for e in ev if e["event"] == "done")
t = statistics.median(tps)
peak = float(sys.argv[3]) if sys.argv[3] else None
mfu = "%.1f%%" % (100 * t * fpt / peak) if peak else "n/a (unknown GPU)"
print("%s: %.0f tokens/s, MFU %s, peak device memory %.2f GiB, final loss %.4f"
      % (sys.argv[2], t, mfu, done.get("peak_device_bytes", 0) / 2**30, done["final_val_loss"]))
PY
}
echo "== benchmark on ${gpu:-unknown GPU} (bf16)"
for spec in "gpt2-124M 12 768 12 1024 50304 4 20" "L4-d256 4 256 4 1024 50304 8 30"; do
  set -- $spec
  if msg=$(bench "$@" 2>&1); then
    echo "$msg"; note "BENCH $msg"
  else
    echo "$msg"; note "FAIL  benchmark $1: ${msg//$'\n'/; }"; failed=1
  fi
done

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $failed

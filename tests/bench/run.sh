#!/usr/bin/env bash
# CPU training benchmark: scalesweep's trainer against PyTorch, same model,
# same machine, same run, 2 threads, fp32 and bf16, vocabulary 256.
#
#   shape a: L=2 d=128 heads=4 T=128 B=16
#   shape b: L=4 d=256 heads=4 T=256 B=8
#   shape c: L=6 d=384 heads=6 T=256 B=8
#
# Run from the repository root:  bash tests/bench/run.sh
# Prints a table and writes build/bench/results.json (raw logs: build/bench/raw/).
# The bars printed at the end are information, never a test failure.
#
# Method: each run's figure is the median tok/s of its timed steps; a side's
# figure is its best run (contention only slows runs down). The sgemm rate
# (tests/bench/sgemm_rate.c, built here against openblas-openmp) is measured at
# the start and sampled again before every shape of every repeat; the best
# sample is the denominator. Achieved FLOP/s uses SCIENCE.md's count,
# 6*(12*L*d^2 + d*V) + 6*L*T*d per token. For each run the table's notes give
# the CPU share other processes used and the host stole, to judge the noise.
#
# Environment (defaults keep the whole script under ~10 minutes on 2 cores):
#   BENCH_REPEATS=2         times each (shape, precision, side) is run; ours and
#                           PyTorch alternate shape by shape, order flipped per repeat
#   BENCH_WARMUP=3          steps discarded at the start of every run (both sides)
#   BENCH_STEPS_A=24 BENCH_STEPS_B=12 BENCH_STEPS_C=8   timed steps per run
#   BENCH_TORCH_BF16_DIV=1  PyTorch bf16 runs steps/DIV timed steps (raise it if
#                           autocast bf16 is slow on the CPU at hand)
#   BENCH_THREADS=2
#   BENCH_SHAPES="a b c"    subset of shapes
#   BENCH_PRECISIONS="fp32 bf16"
#   BENCH_BIN=build/scalesweep   the trainer binary (skip building when set)
#   BENCH_SKIP_OURS=1       PyTorch and sgemm only
#   BENCH_SGEMM_REPEATS=5
#   PYTHON=/usr/bin/python3 (Debian's, with python3-torch; a pyenv python lacks torch)
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
REPEATS=${BENCH_REPEATS:-2}
WARMUP=${BENCH_WARMUP:-3}
THREADS=${BENCH_THREADS:-2}
SHAPES=${BENCH_SHAPES:-a b c}
PRECISIONS=${BENCH_PRECISIONS:-fp32 bf16}
BF16_DIV=${BENCH_TORCH_BF16_DIV:-1}
SGEMM_REPEATS=${BENCH_SGEMM_REPEATS:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=$ROOT/build/bench
RAW=$OUT/raw
SKIP_OURS=${BENCH_SKIP_OURS:-0}

# shape -> "layers d heads T B steps"
shape_args() {
	case $1 in
	a) echo "2 128 4 128 16 ${BENCH_STEPS_A:-24}" ;;
	b) echo "4 256 4 256 8 ${BENCH_STEPS_B:-12}" ;;
	c) echo "6 384 6 256 8 ${BENCH_STEPS_C:-8}" ;;
	*) echo "run.sh: unknown shape '$1' (a, b or c)" >&2; exit 2 ;;
	esac
}

log() { echo "[bench $(date +%T)] $*" >&2; }

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "run.sh: $PYTHON cannot import torch (install python3-torch or set PYTHON)" >&2
	exit 1
fi

# Same thread settings everywhere: the trainer's config says threads=$THREADS,
# PyTorch calls torch.set_num_threads, OpenBLAS (OpenMP build) follows OMP.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

mkdir -p "$RAW"
# CPU time of the whole machine, in clock ticks: "busy steal" (busy excludes
# idle, iowait and steal). The load average is no guide here (it counts our
# own threads and, on this VM, sits near 2 when idle).
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $9; exit}' /proc/stat; }
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
# Another busy process on a 2-core machine makes every figure meaningless.
read -r b0 st0 <<<"$(cpu_ticks)"
sleep 1
read -r b1 st1 <<<"$(cpu_ticks)"
if [ $(((b1 - b0) * 100 / (HZ * NCPU))) -gt 15 ] || [ $(((st1 - st0) * 100 / (HZ * NCPU))) -gt 15 ]; then
	log "WARNING: the CPUs are $(((b1 - b0) * 100 / (HZ * NCPU)))% busy and $(((st1 - st0) * 100 / (HZ * NCPU)))% stolen before starting; figures will be noisy"
fi
rm -f "$RAW"/* "$OUT/runs.jsonl"

# ---- build ---------------------------------------------------------------
BIN=${BENCH_BIN:-}
if [ "$SKIP_OURS" != 1 ] && [ -z "$BIN" ]; then
	BIN=$ROOT/build/scalesweep
	if [ ! -f build/CMakeCache.txt ]; then
		log "configuring build/ (Release)"
		cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$RAW/cmake_configure.log" 2>&1 ||
			{ tail -20 "$RAW/cmake_configure.log" >&2; exit 1; }
	fi
	log "building scalesweep"
	if ! cmake --build build -j2 --target scalesweep >"$RAW/cmake_build.log" 2>&1; then
		tail -30 "$RAW/cmake_build.log" >&2
		echo "run.sh: the trainer does not build; BENCH_SKIP_OURS=1 runs PyTorch and sgemm only" >&2
		exit 1
	fi
fi
if [ "$SKIP_OURS" != 1 ] && [ ! -x "$BIN" ]; then
	echo "run.sh: no trainer binary at $BIN" >&2
	exit 1
fi
if [ "$SKIP_OURS" != 1 ]; then
	# run a snapshot, so a rebuild during the benchmark cannot mix versions
	cp "$BIN" "$OUT/scalesweep.bench"
	BIN=$OUT/scalesweep.bench
fi
BUILD_TYPE=$(sed -n "s/^CMAKE_BUILD_TYPE:[A-Z]*=//p" build/CMakeCache.txt 2>/dev/null || true)
[ -z "$BUILD_TYPE" ] && BUILD_TYPE="CMakeLists default (RelWithDebInfo, -O3 -g)"
BUILD_TYPE="$BUILD_TYPE; SS_NATIVE=$(sed -n "s/^SS_NATIVE:[A-Z]*=//p" build/CMakeCache.txt 2>/dev/null || true)"

log "building sgemm_rate"
# shellcheck disable=SC2046
gcc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -fopenmp tests/bench/sgemm_rate.c \
	-o "$OUT/sgemm_rate" $(pkg-config --cflags --libs openblas)

# ---- this machine's sgemm rate -------------------------------------------
dlist=""
for s in $SHAPES; do
	read -r _ d _ <<<"$(shape_args "$s")"
	dlist=${dlist:+$dlist,}$d
done
log "sgemm rate ($THREADS threads, OpenBLAS as detected)"
"$OUT/sgemm_rate" --threads "$THREADS" --repeats "$SGEMM_REPEATS" --bt 2048 --vocab 256 \
	--d "$dlist" >"$RAW/sgemm.json"
# The same with OpenBLAS's AVX-512 kernels forced, when the CPU has AVX-512:
# information only (0.3.21 does not know every new CPU and falls back to Haswell).
if grep -qw avx512f /proc/cpuinfo; then
	log "sgemm rate with OPENBLAS_CORETYPE=SkylakeX (information only)"
	OPENBLAS_CORETYPE=SkylakeX "$OUT/sgemm_rate" --threads "$THREADS" \
		--repeats "$SGEMM_REPEATS" --bt 2048 --vocab 256 --d "$dlist" >"$RAW/sgemm_skylakex.json"
fi

# ---- training runs ---------------------------------------------------------
manifest() { # side shape precision repeat log timefile "busy steal" before the run
	local b0 s0 b1 s1
	read -r b0 s0 <<<"$7"
	read -r b1 s1 <<<"$(cpu_ticks)"
	printf '{"side":"%s","shape":"%s","precision":"%s","repeat":%d,"log":"%s","time":"%s","busy_ticks":%d,"steal_ticks":%d,"hz":%d,"ncpu":%d}\n' \
		"$1" "$2" "$3" "$4" "$5" "$6" $((b1 - b0)) $((s1 - s0)) "$HZ" "$NCPU" >>"$OUT/runs.jsonl"
}
TIMEFMT='{"max_rss_kb": %M, "wall_s": %e, "user_s": %U, "sys_s": %S}'

run_ours() { # shape precision repeat
	local s=$1 p=$2 r=$3 L d h T B steps
	read -r L d h T B steps <<<"$(shape_args "$s")"
	local cfg=$RAW/ours_${s}_${p}_r${r}.config.json
	local logf=$RAW/ours_${s}_${p}_r${r}.jsonl
	local tokens=$(((WARMUP + steps) * B * T))
	cat >"$cfg" <<-EOF
	{"model":{"n_layer":$L,"d_model":$d,"n_head":$h,"seq_len":$T,"vocab_size":256},
	 "data":{"synthetic":{"seed":1}},
	 "train":{"batch_size":$B,"micro_batch_size":$B,"tokens":$tokens,"lr":0.001,"warmup_tokens":0},
	 "precision":"$p","backend":"cpu","threads":$THREADS,
	 "eval":{"every_tokens":0,"tokens":$((B * T))},
	 "checkpoint":{"every_tokens":0,"dir":"$RAW/ckpt_${s}_${p}_r${r}"}}
	EOF
	log "ours    $s $p repeat $r ($((WARMUP + steps)) steps)"
	local c0
	c0=$(cpu_ticks)
	if ! /usr/bin/time -f "$TIMEFMT" -o "$logf.time" \
		"$BIN" train --config "$cfg" >"$logf" 2>"$logf.err"; then
		log "ours $s $p failed: $(tail -3 "$logf.err" | tr '\n' ' ') $(grep '"error"' "$logf" | tail -1)"
	fi
	manifest ours "$s" "$p" "$r" "$logf" "$logf.time" "$c0"
}

run_torch() { # shape precision repeat
	local s=$1 p=$2 r=$3 L d h T B steps
	read -r L d h T B steps <<<"$(shape_args "$s")"
	[ "$p" = bf16 ] && steps=$(((steps + BF16_DIV - 1) / BF16_DIV))
	local logf=$RAW/torch_${s}_${p}_r${r}.jsonl
	log "pytorch $s $p repeat $r ($((WARMUP + steps)) steps)"
	local c0
	c0=$(cpu_ticks)
	if ! /usr/bin/time -f "$TIMEFMT" -o "$logf.time" \
		"$PYTHON" tests/bench/torch_gpt.py --layers "$L" --d "$d" --heads "$h" --T "$T" --B "$B" \
		--vocab 256 --steps "$steps" --warmup-steps "$WARMUP" --precision "$p" \
		--threads "$THREADS" --shape "$s" >"$logf" 2>"$logf.err"; then
		log "pytorch $s $p failed: $(tail -3 "$logf.err" | tr '\n' ' ')"
	fi
	manifest pytorch "$s" "$p" "$r" "$logf" "$logf.time" "$c0"
}

for r in $(seq 1 "$REPEATS"); do
	for s in $SHAPES; do
		# sample the sgemm rate between runs: the machine's speed drifts
		read -r _ d _ <<<"$(shape_args "$s")"
		"$OUT/sgemm_rate" --threads "$THREADS" --repeats 3 --quick --d "$d" \
			--bt 2048 --vocab 256 >"$RAW/sgemm_quick_r${r}_$s.json"
		for p in $PRECISIONS; do
			# alternate who goes first, so slow drift of a noisy machine
			# does not always favour the same side
			if [ "$SKIP_OURS" = 1 ]; then
				run_torch "$s" "$p" "$r"
			elif [ $((r % 2)) = 1 ]; then
				run_ours "$s" "$p" "$r"
				run_torch "$s" "$p" "$r"
			else
				run_torch "$s" "$p" "$r"
				run_ours "$s" "$p" "$r"
			fi
		done
	done
done

# ---- table + results.json ----------------------------------------------------
"$PYTHON" tests/bench/summarize.py --dir "$OUT" --warmup "$WARMUP" --threads "$THREADS" \
	--build-type "${BUILD_TYPE:-unknown}" --bin "${BIN:-}" --out "$OUT/results.json"

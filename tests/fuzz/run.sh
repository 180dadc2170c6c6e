#!/usr/bin/env bash
# A short fuzzing run of every harness (or of the ones named): builds them
# with clang (libFuzzer + ASan + UBSan, in build-fuzz/), runs each for
# SECONDS (default 60) on a scratch copy of its seed corpus and past
# reproducers (the committed directories are never written; dict/NAME.dict,
# the protocol's words, when there is one), and prints
# executions and findings per harness. Exits 1 on any finding: a crash or
# sanitizer report, a leak, a timeout (an input running over 10 s; 30 s for
# plan: a spec of SPEC_MAX_RUNS runs takes about 10 s to plan in this
# instrumented build, under 1 s in a release build) or an out-of-memory
# (over 2 GiB); each reproducer is saved as
# tests/fuzz/regressions/NAME/crash-SHA1 (leak-, timeout-, oom-; the only
# writes into the source tree, and only on a finding) and its path printed:
# fix the bug, give the file a name that says what it is, and commit it.
# scripts/test.sh runs it (20 s each) after the tests; needs clang,
# libclang-rt-dev and libomp-dev (scripts/install-deps.sh --fuzz).
#   tests/fuzz/run.sh [SECONDS] [NAME...]
# Environment: SS_FUZZ_BUILD (build directory, default build-fuzz),
# SS_FUZZ_JOBS (build jobs, default 2), SS_FUZZ_KEEP=1 (keep the scratch
# directory with the grown corpora even without findings), SS_WEB_NODE_MODULES
# (passed to CMake: the status page's node_modules, for a build offline).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/fuzz
secs=${1:-60}
[ $# -gt 0 ] && shift
case $secs in '' | *[!0-9]*) echo "usage: tests/fuzz/run.sh [SECONDS] [NAME...]" >&2; exit 2 ;; esac
all=(spec plan config proto http shard ckpt csv path wmsg route wconn tline)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
build=${SS_FUZZ_BUILD:-$root/build-fuzz}

targets=()
for h in "${names[@]}"; do
  [ -f "$here/fuzz_$h.c" ] || { echo "run.sh: no harness '$h' (have: ${all[*]})" >&2; exit 2; }
  targets+=("fuzz_$h")
done
command -v clang >/dev/null || { echo "run.sh: clang not found (scripts/install-deps.sh --fuzz)" >&2; exit 2; }
echo "run.sh: building ${targets[*]} in $build"
mkdir -p "$build"
web=()
[ -n "${SS_WEB_NODE_MODULES:-}" ] && web=(-DSS_WEB_NODE_MODULES="$SS_WEB_NODE_MODULES")
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="-O1 -g" -DSS_FUZZ=ON -DSS_CUDA=OFF -DSS_WERROR=ON "${web[@]}" \
  >"$build/fuzz-configure.log" 2>&1 ||
  { cat "$build/fuzz-configure.log" >&2; exit 2; }
cmake --build "$build" -j"${SS_FUZZ_JOBS:-2}" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -n 40 "$build/fuzz-build.log" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ssfuzz-run.XXXXXX")
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
total_findings=0
total_execs=0
summary=()
for h in "${names[@]}"; do
  d=$work/$h
  mkdir -p "$d/corpus" "$d/artifacts" "$d/tmp"
  cp "$here/corpus/$h"/* "$d/corpus/"
  if [ -d "$here/regressions/$h" ]; then
    cp "$here/regressions/$h"/* "$d/corpus/" 2>/dev/null || true
  fi
  echo "run.sh: fuzz_$h for ${secs}s"
  rc=0
  limit=10
  case $h in plan | route) limit=30 ;; esac # route: POST /api/sweeps plans
  dict=()
  [ -f "$here/dict/$h.dict" ] && dict=(-dict="$here/dict/$h.dict")
  TMPDIR=$d/tmp "$build/tests/fuzz/fuzz_$h" -max_total_time="$secs" -timeout="$limit" "${dict[@]}" \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$d/artifacts/" \
    "$d/corpus" >"$d/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -n 1)
  total_execs=$((total_execs + ${execs:-0}))
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$d/log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$d/log" | tail -n 1 || true)
  found=$(find "$d/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | sort)
  n=0
  [ -n "$found" ] && n=$(printf '%s\n' "$found" | wc -l)
  if [ "$rc" -ne 0 ] && [ "$n" -eq 0 ]; then
    n=1 # the harness died without an artifact (a report outside an input, a signal)
  fi
  total_findings=$((total_findings + n))
  saved=()
  for f in $found; do
    mkdir -p "$here/regressions/$h"
    kind=${f##*/}
    kind=${kind%%-*}
    dest=$here/regressions/$h/$kind-$(sha1sum "$f" | cut -c1-40)
    cp "$f" "$dest"
    saved+=("$dest")
  done
  line=$(printf '%-7s %10s execs %7s exec/s  %-22s %d finding(s)' "$h" "${execs:-?}" \
    "${rate:-?}" "${cov:-}" "$n")
  summary+=("$line")
  echo "  $line"
  if [ "$n" -gt 0 ]; then
    grep -E 'ERROR: |SUMMARY: |runtime error|==ERROR|Test unit written|deadly signal' "$d/log" |
      head -n 8 | sed 's/^/    /'
    [ ${#saved[@]} -gt 0 ] && printf '    reproducer: %s\n' "${saved[@]}"
    echo "    log: $d/log"
  fi
done

echo "run.sh: ${secs}s per harness"
printf '  %s\n' "${summary[@]}"
echo "run.sh: $total_execs executions in all"
if [ "$total_findings" -gt 0 ]; then
  echo "run.sh: $total_findings finding(s); scratch directory kept: $work" >&2
  exit 1
fi
if [ "${SS_FUZZ_KEEP:-0}" = 1 ]; then
  echo "run.sh: no findings; grown corpora in $work"
else
  rm -rf "$work"
  echo "run.sh: no findings"
fi

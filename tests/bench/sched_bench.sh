#!/usr/bin/env bash
# The scheduler benchmark (issue 3, "Benchmark"): dispatch rate and idle gap
# with fake instant runs, metric rows stored per second from 8 workers, and
# API latency with 10,000 runs and 10 million metric rows, the scheduler's memory
# and start-up with 20,000 queued runs, the queue's claim+finish rate and
# PostgreSQL's own insert rate as anchors (issue 18); see the docstring
# of tests/bench/sched_bench.py for the method and the BENCH_* variables.
#
# Run from anywhere:  bash tests/bench/sched_bench.sh
# Builds build/scalesweep when it is missing or older than the sources
# (SCALESWEEP_BUILD_DIR chooses another build folder), starts a throwaway
# PostgreSQL (tests/integration/run_with_pg.sh), prints a table and writes
# build/bench/sched.json. Exit 77 when PostgreSQL is not installed.
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${SCALESWEEP_BUILD_DIR:-$root/build}
bin=$build/scalesweep
stale=0
if [ ! -x "$bin" ]; then
  stale=1
elif [ -n "$(find "$root/CMakeLists.txt" "$root/cli" "$root/common" "$root/scheduler" \
           "$root/worker" "$root/sweeps" "$root/trainer" "$root/kernels" "$root/migrations" \
           "$root/web" -newer "$bin" \( -name '*.c' -o -name '*.h' -o -name '*.sql' \
           -o -name '*.txt' -o -name '*.cmake' -o -name '*.js' -o -name '*.css' -o -name '*.html' \) \
           -print -quit 2>/dev/null)" ]; then
  stale=1
fi
if [ "$stale" = 1 ]; then
  echo "sched_bench: building $bin"
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target scalesweep >/dev/null
fi
export BENCH_OUT=${BENCH_OUT:-$build/bench/sched.json}
exec bash "$root/tests/integration/run_with_pg.sh" \
  /usr/bin/python3 "$root/tests/bench/sched_bench.py" "$bin"

#!/usr/bin/env bash
# The load test of issue 7 ("Reliability and security", Load): 20,000 fake
# runs (tests/bench/sched_fake_trainer.sh, each printing FAKE_STEPS metric
# rows) through the scheduler on 8 workers with one slot each; prints runs/s,
# the idle gap per slot, metric rows stored per second and the scheduler's
# resident memory at the start, its peak and the end (sampled once a
# second), and checks in the table that every run finished. The figures
# are information, not assertions (tests/bench/sched_bench.py).
#
#   bash tests/bench/load_bench.sh            # BENCH_LOAD_RUNS=20000 FAKE_STEPS=20
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export BENCH_PARTS=dispatch
export BENCH_DISPATCH_LAYOUTS=8x1
export BENCH_DISPATCH_RUNS=${BENCH_LOAD_RUNS:-20000}
export BENCH_DISPATCH_TIMEOUT=${BENCH_DISPATCH_TIMEOUT:-3600}
export FAKE_STEPS=${FAKE_STEPS:-20}
export BENCH_OUT=${BENCH_OUT:-${SCALESWEEP_BUILD_DIR:-$root/build}/bench/load.json}
exec bash "$root/tests/bench/sched_bench.sh"

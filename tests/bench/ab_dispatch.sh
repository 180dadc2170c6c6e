#!/usr/bin/env bash
# Side by side: the dispatch part of the scheduler benchmark (8 workers x 1
# slot, instant fake runs) with two scalesweep binaries, alternating, each
# round on a fresh throwaway PostgreSQL; prints each round's runs/s, idle gap
# median and p99, and the gap's parts.
#   bash tests/bench/ab_dispatch.sh OLD_BIN NEW_BIN [ROUNDS (3)] [RUNS (1000)]
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
old=$1 new=$2 rounds=${3:-3} runs=${4:-1000}
out=$(mktemp -d)
for i in $(seq "$rounds"); do
  for which in old new; do
    bin=$old
    [ "$which" = new ] && bin=$new
    BENCH_PARTS=dispatch BENCH_DISPATCH_LAYOUTS=8x1 BENCH_DISPATCH_RUNS=$runs BENCH_PGSS=0 \
      BENCH_OUT=$out/$which-$i.json BENCH_LOG_DIR=$out/log-$which-$i \
      bash "$root/tests/integration/run_with_pg.sh" \
      python3 "$root/tests/bench/sched_bench.py" "$bin" >"$out/$which-$i.log" 2>&1
    echo "$which round $i: $(grep -m1 'runs/s, gap' "$out/$which-$i.log" | sed 's/.*8x1: //')"
    echo "  gap parts (exit->acked / acked->assigned / assigned->spawned): median" \
      "$(grep -m1 'spawned, median' "$out/$which-$i.log" | awk '{print $(NF-5),$(NF-4),$(NF-3),$(NF-2),$(NF-1)}')," \
      "p99 $(grep -m1 'same, p99 ms' "$out/$which-$i.log" | awk '{print $(NF-5),$(NF-4),$(NF-3),$(NF-2),$(NF-1)}') ms"
  done
done
echo "logs: $out"

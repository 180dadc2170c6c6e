#!/bin/sh
# A stand-in for `scalesweep train` for the scheduler benchmark
# (tests/bench/sched_bench.py): called as
#   sched_fake_trainer.sh train --config FILE [--resume DIR]
# it prints the trainer's JSON-lines events (docs/design.md#output-events) -- a
# config line, FAKE_STEPS step lines (default 0), an eval line when
# FAKE_STEPS > 0, and a done line -- and exits 0 at once. It never reads the
# config: a fake run costs only the start of /bin/sh (about 1 ms with dash),
# so what the benchmark times is the scheduler and the worker.
# FAKE_SLEEP (seconds, default 0) makes each run last that long instead.
[ "$1" = train ] || { echo "usage: $0 train --config FILE [--resume DIR]" >&2; exit 2; }
n=${FAKE_STEPS:-0}
printf '{"event":"config","config":{},"params":4416,"nonembedding_params":3200,"flops_per_token":26496}\n'
i=1
while [ "$i" -le "$n" ]; do
  printf '{"event":"step","step":%d,"tokens":%d,"train_loss":5.5,"lr":0.001,"grad_norm":1.0,"tok_per_s":100000}\n' "$i" $((i * 64))
  i=$((i + 1))
done
[ "$n" -gt 0 ] && printf '{"event":"eval","step":%d,"tokens":%d,"val_loss":5.25}\n' "$n" $((n * 64))
[ "${FAKE_SLEEP:-0}" = 0 ] || sleep "$FAKE_SLEEP"
# at least one step's tokens: the scheduler's refit takes only runs with tokens > 0
d=$((n > 0 ? n : 1))
printf '{"event":"done","final_val_loss":5.25,"params":4416,"nonembedding_params":3200,"flops":%d,"flops_6nd":%d,"tokens":%d,"steps":%d,"wall_s":0.001,"peak_rss_bytes":1048576}\n' $((d * 64 * 26496)) $((d * 64 * 19200)) $((d * 64)) "$d"
exit 0

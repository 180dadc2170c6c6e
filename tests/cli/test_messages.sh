#!/usr/bin/env bash
# The CLI's own words, byte for byte: usage errors, refusals and the short
# printouts of train, fit, up, launch, worker and next that need no server,
# each with its exit code, against tests/cli/golden/messages.txt (written by
# the binary before their option parsing was split into functions). A
# change to any of them is a change users see: update the golden file on
# purpose (SCALESWEEP_GOLDEN_UPDATE=1) and say so.
# Usage: test_messages.sh PATH/TO/scalesweep
set -euo pipefail

golden=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/golden/messages.txt
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# case ARGS...: runs `scalesweep ARGS` and appends its exit code, stdout and
# stderr to got (the scratch directory's path written as TMP).
case_() {
  local rc=0
  timeout 60 "$bin" "$@" >o 2>e </dev/null || rc=$?
  {
    printf '=== %s\n--- rc %s\n--- stdout\n' "$*" "$rc"
    cat o
    printf -- '--- stderr\n'
    cat e
  } | sed "s|$tmp|TMP|g" >>got
}
: >got

small='"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16},"eval":{"tokens":64},"threads":1'
printf '{%s}\n' "$small" >run.json
printf '{%s,"world_size":2}\n' "$small" >dp.json
printf '{%s,"trainer":"mine"}\n' "$small" >mine.json
mkdir -p shards

# ---- train ---------------------------------------------------------------------
case_ train --bogus
case_ train --config
case_ train --resume-max-step
case_ train --data-dir
case_ train
case_ train --config "$tmp/run.json" --data-dir "$tmp/nowhere"
case_ train --config "$tmp/run.json" --data-dir ''
case_ train --config "$tmp/run.json" --rank x
case_ train --config "$tmp/run.json" --dist-timeout -1
case_ train --config "$tmp/run.json" --dist-listen-fd 99999999
case_ train --config "$tmp/run.json" --resume-max-step -3
case_ train --config "$tmp/run.json" --resume-max-step 4
case_ train --config "$tmp/run.json" --keep-steps 3,2
case_ train --config "$tmp/run.json" --keep-steps 1,x
case_ train --config "$tmp/run.json" --branch-from ''
case_ train --config "$tmp/run.json" --checkpoint-dir ''
case_ train --config "$tmp/run.json" --no-data-dirs --data-dir "$tmp/shards"
case_ train --config "$tmp/run.json" --rank 0
case_ train --config "$tmp/run.json" --rank 3 --dist 127.0.0.1:1
case_ train --config "$tmp/mine.json"
case_ train --config "$tmp/run.json" --print-memory
case_ train --config "$tmp/run.json" --print-config
case_ train --config "$tmp/dp.json" --ranks ''
case_ train --config "$tmp/dp.json" --ranks 0,0
case_ train --config "$tmp/dp.json" --ranks 2
case_ train --config "$tmp/dp.json" --ranks 1
(
  export SCALESWEEP_DIST_SECRET=abc
  case_ train --config "$tmp/dp.json" --ranks 1 --dist nohost
)

# ---- fit -----------------------------------------------------------------------
printf 'steps,loss\n10,3.0\n20,2.5\n40,2.2\n80,2.0\n' >curve.csv
case_ fit
case_ fit 1 2
case_ fit 0
case_ fit --json=1
case_ fit --holdout=yes
case_ fit --nope
case_ fit --points
case_ fit --points=
case_ fit 3 --points x.csv
case_ fit --law chinchilla
case_ fit --points x.csv
case_ fit --points x.csv --law nope
case_ fit --points x.csv --law kaplan --holdout
case_ fit --points x.csv --law batch --method lbfgs
case_ fit --points x.csv --law batch --seed -1
case_ fit --points x.csv --law batch --bootstrap 2000000
case_ fit --points x.csv --law batch --threads 0
case_ fit --points x.csv --law batch --target-flops 0
case_ fit --points x.csv --law batch --target-steps abc
case_ fit --points x.csv --law batch --near-best -1
case_ fit --points "$tmp/nothere.csv" --law batch
case_ fit --points "$tmp/curve.csv" --law chinchilla
case_ fit --points="$tmp/curve.csv" --law=curve --bootstrap=0 --threads=1 --target-steps=160
case_ fit --points "$tmp/curve.csv" --law curve --bootstrap 0 --threads 1 --json

# ---- up ------------------------------------------------------------------------
case_ up --wait
case_ up --sweep "$tmp/nothere.json"
case_ up --bogus
case_ up --state
trainers=()
for i in $(seq 17); do trainers+=(--trainer "t$i=true"); done
case_ up "${trainers[@]}"

# ---- launch --------------------------------------------------------------------
case_ launch
case_ launch --world-size
case_ launch --world-size 0 -- true
case_ launch --world-size 2000 -- true
case_ launch --nope 1 -- true
case_ launch --world-size 2 --
case_ launch --ranks 0 -- true
case_ launch --world-size 2 --ranks 0,0 --dist h:1 -- true
case_ launch --world-size 2 --ranks 2 --dist h:1 -- true
case_ launch --world-size 2 --ranks 1 --dist h -- true
case_ launch --world-size 2 --ranks 1 --dist h:70000 -- true
case_ launch --world-size 3 --ranks 2 --dist '[::1]:29400' -- sh -c \
  'echo "rank $RANK of $WORLD_SIZE, local $LOCAL_RANK of $LOCAL_WORLD_SIZE, $MASTER_ADDR:$MASTER_PORT" >&2'
case_ launch --world-size 2 --ranks 0 --dist h:1 -- sh -c 'echo "rank $RANK out"; exit 3'
case_ launch -- "$tmp/not-a-program"

# ---- worker --------------------------------------------------------------------
case_ worker
case_ worker stray
case_ worker --scheduler
case_ worker --nope=1
case_ worker --gpus 0,x
case_ worker --cpu-slots 5000
case_ worker --cpu-slots=
case_ worker --hang-timeout -1
case_ worker --heartbeat 0
case_ worker --kill-grace 1e9
dirs=()
for i in $(seq 65); do dirs+=(--data-dir "d$i"); done
case_ worker "${dirs[@]}"
trainers=()
for i in $(seq 65); do trainers+=(--trainer "t$i=true"); done
case_ worker "${trainers[@]}"
case_ worker --token-file x
(unset SCALESWEEP_WORKER_TOKEN; case_ worker --scheduler 127.0.0.1:1)

# ---- next ----------------------------------------------------------------------
case_ next
case_ next 0
case_ next 1 2
case_ next --bogus
case_ next 1
case_ next 1 --flops -1
case_ next 1 --flops 1e20 --points 0
case_ next 1 --flops 1e20 --points 5x
case_ next 1 --flops

# ---- the commands read by cli_args_read (cli/args.c) ----------------------------
# (their words before it: usage errors printed the whole usage; now the
# one-line hint, as the commands above)
case_ plan --yaml
case_ plan a.json b.json
case_ plan
case_ migrate
case_ migrate --database
case_ migrate stray --database=x
case_ devices --bogus
case_ devices stray
case_ status 1 2
case_ cancel --bogus
case_ cancel 1 --url
case_ reproduce 1 --on ''
case_ status 1 --on w
case_ user add a b c d
case_ user --role
case_ usage stray
case_ usage --by nobody
case_ limits
case_ limits a --gpus
case_ limits a --since 2026-01-01
case_ priority 1 2 --bogus

if [ "${SCALESWEEP_GOLDEN_UPDATE:-}" = 1 ]; then
  cp got "$golden"
  echo "wrote $golden"
  exit 0
fi
diff -u "$golden" got >diff.txt || fail "the CLI's words changed (- golden, + now):
$(head -c 6000 diff.txt)"
echo "ok: $(grep -c '^=== ' got) printouts as in $golden ($((SECONDS - started)) s)"

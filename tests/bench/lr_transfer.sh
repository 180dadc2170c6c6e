#!/usr/bin/env bash
# muP's learning-rate transfer (docs/models.md, "muP"): the final validation
# loss of the llama family at 5 learning rates, at width 64 and at width 256,
# in standard parametrisation and under muP (base width 64), each run a
# real `scalesweep train` (2 layers, head size 16, seq_len 64, batch 8,
# 131072 tokens of the synthetic corpus, cosine schedule, fp32, 1 thread,
# JOBS side by side). Prints the table and, per parametrisation, the best
# rate at each width.
#   bash tests/bench/lr_transfer.sh BUILD/scalesweep [JOBS] [FAMILY]
set -euo pipefail
bin=${1:?usage: lr_transfer.sh SCALESWEEP [JOBS] [FAMILY]}
jobs=${2:-2}
family=${3:-llama}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lrs="0.001 0.003 0.01 0.03 0.1"
widths="64 256"
extra=""
[ "$family" = llama ] && extra=',"family":"llama"'
for p in sp mup; do
  for w in $widths; do
    for lr in $lrs; do
      par=""
      [ $p = mup ] && par=',"parametrization":"mup","base_width":64'
      cat >"$tmp/$p-$w-$lr.json" <<JSON
{"model":{"n_layer":2,"d_model":$w,"n_head":$((w / 16)),"seq_len":64$extra$par},
 "train":{"batch_size":8,"tokens":131072,"lr":$lr,"seed":1},
 "eval":{"every_tokens":131072,"tokens":32768},"precision":"fp32","threads":1}
JSON
    done
  done
done
ls "$tmp"/*.json | xargs -P "$jobs" -I{} sh -c '"$0" train --config "$1" > "$1.out" 2>"$1.err" || echo "failed: $1" >&2' "$bin" {}
python3 - "$tmp" "$lrs" "$widths" "$family" <<'PY'
import json, sys, os
tmp, lrs, widths, family = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
loss = {}
for f in os.listdir(tmp):
    if not f.endswith(".json.out"):
        continue
    p, w, lr = f[:-9].split("-")
    for line in open(os.path.join(tmp, f)):
        e = json.loads(line)
        if e.get("event") == "done":
            loss[(p, w, lr)] = e["final_val_loss"]
print(f"learning-rate transfer: {family}, 2 layers, head size 16, 131072 tokens, batch 8, "
      "final validation loss (32768 tokens)\n")
print("| parametrization | width | " + " | ".join(f"lr {l}" for l in lrs) + " | best |")
print("|---|---:|" + "---:|" * (len(lrs) + 1))
for p in ("sp", "mup"):
    for w in widths:
        row = [loss.get((p, w, l), float("nan")) for l in lrs]
        best = lrs[min(range(len(lrs)), key=lambda i: row[i])]
        cells = " | ".join(("**%.4f**" if l == best else "%.4f") % v for l, v in zip(lrs, row))
        print(f"| {'muP' if p == 'mup' else 'SP'} | {w} | {cells} | {best} |")
PY

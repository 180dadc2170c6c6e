#!/usr/bin/env bash
# Regenerates the binary seeds of the fuzz corpus with the real binary:
# token shards (corpus/shard) from `scalesweep data prepare` and `data
# synth`, and checkpoints (corpus/ckpt) from `scalesweep train` of the
# small config that fuzz_ckpt.c loads against (keep the two in step).
# Usage: tests/fuzz/make_seeds.sh PATH/TO/scalesweep
set -euo pipefail
bin=${1:?usage: make_seeds.sh PATH/TO/scalesweep}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

printf 'scalesweep fuzz seed: a few bytes of text.\n' >a.txt
"$bin" data prepare --out prep --val-fraction 0.25 --shard-tokens 24 a.txt >/dev/null
"$bin" data synth --out synth --tokens 64 --val-tokens 32 --letters 4 --words 16 \
  --min-len 1 --max-len 3 >/dev/null
rm -f "$here"/corpus/shard/*.bin
cp prep/train_000000.bin "$here/corpus/shard/prepare-train0.bin"
cp prep/train_000001.bin "$here/corpus/shard/prepare-train1.bin"
cp prep/val_000000.bin "$here/corpus/shard/prepare-val0.bin"
cp synth/train_000000.bin "$here/corpus/shard/synth-train.bin"

# fuzz_ckpt.c's CONFIG (keep the two in step), with a checkpoint every 32
# of its 64 tokens
cat >run.json <<'JSON'
{"model": {"n_layer": 1, "d_model": 8, "n_head": 2, "seq_len": 4},
 "data": {"synthetic": {"letters": 4, "words": 16, "min_len": 1, "max_len": 3, "seed": 1}},
 "train": {"batch_size": 2, "tokens": 64, "lr": 0.01},
 "eval": {"every_tokens": 0, "tokens": 4}, "precision": "bf16", "threads": 1,
 "checkpoint": {"dir": "ck", "every_tokens": 32}}
JSON
"$bin" train --config run.json >/dev/null
rm -f "$here"/corpus/ckpt/*.bin
cp ck/checkpoint.bin "$here/corpus/ckpt/train-bf16.bin"
ls -l "$here"/corpus/shard "$here"/corpus/ckpt

#!/usr/bin/env bash
# `scalesweep train --data-dir DIR`: token shards only from under DIR. A glob
# escape (.[.]), a pattern naming a file outside, a symlink inside DIR leading
# out: exit 2 with the JSON path and a message that says nothing about the
# file outside (not its size, not its bytes). --no-data-dirs refuses every
# shard and still trains on synthetic data; without either flag, any
# readable file is read as before.
# Usage: test_data_dirs.sh PATH/TO/scalesweep
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

train() { cli_run 60 train "$@"; }

"$bin" data synth --out "$tmp/data" --tokens 5000 --val-tokens 1024 >/dev/null ||
  fail "data synth exited $?"
mkdir outside
# 1234 bytes starting "SECR": the old loader's header check printed the size
# ("file has 1234 bytes") and the first 4 bytes as a number (1380140371)
"$py" -c 'open("outside/secret.bin","wb").write(b"SECR" + b"x" * 1230)'
ln -s "$tmp/outside/secret.bin" data/link.bin
ln -s "$tmp/outside" data/out

config() { # config NAME TRAIN_PATTERN [DATA_SECTION]
  local data="\"data\":{\"train\":\"$2\",\"val\":\"$tmp/data/val_*.bin\"}"
  [ $# -ge 3 ] && data=$3
  printf '{"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16,"vocab_size":27},
 %s,"train":{"batch_size":4,"tokens":128},"eval":{"tokens":64},"threads":1}\n' "$data" >"$1.json"
}

# no_leak: nothing of the secret file in the output
no_leak() {
  for n in 1234 1380140371 SECR "magic number" truncated; do
    if grep -qF -- "$n" msg; then fail "$label: the output leaks '$n': $(head -c 800 msg)"; fi
  done
}

refused() { # refused NAME PATTERN NEEDLE...
  local name=$1 pattern=$2
  shift 2
  config "$name" "$pattern"
  train "$name" --config "$tmp/$name.json" --data-dir "$tmp/data"
  expect_rc 2
  expect_msg '$.data.train' "$@"
  no_leak
}

refused escape "$tmp/data/.[.]/outside/secret.bin" "directory component"
refused escape_up "$tmp/data/.[.]/.[.]/.[.]/.[.]/.[.]/.[.]/.[.]/etc/passwd" "directory component"
refused outside_glob "$tmp/outside/secre[t].bin" "outside the allowed data directories"
refused outside_plain "$tmp/outside/secret.bin" "outside the allowed data directories"
refused dotdot "$tmp/data/../outside/secret.bin" "'..' component"
refused link "$tmp/data/link.bin" "resolves outside the allowed data directories"
refused link_glob "$tmp/data/lin?.bin" "resolves outside the allowed data directories"
refused dirlink "$tmp/data/out/secret.bin" "outside the allowed data directories"
refused star_dir "$tmp/*/secret.bin" "directory component"
echo "ok refused: glob escapes, files outside, symlinks leading out, wildcard directories"

# inside: trains; a relative pattern is taken from the working directory
config good "$tmp/data/train_*.bin"
train good --config "$tmp/good.json" --data-dir "$tmp/data"
expect_rc 0
config rel "data/train_*.bin"
train rel --config "$tmp/rel.json" --data-dir data
expect_rc 0
echo "ok inside: absolute and relative patterns train"

# --no-data-dirs: shards refused, synthetic data trains
config none "$tmp/data/train_*.bin"
train none --config "$tmp/none.json" --no-data-dirs
expect_rc 2
expect_msg '$.data.train' "no data directories"
config synth "" '"data":{"synthetic":{"seed":1}}'
train synth --config "$tmp/synth.json" --no-data-dirs
expect_rc 0
echo "ok --no-data-dirs: shards refused, synthetic data trains"

# usage errors
config good2 "$tmp/data/train_*.bin"
train baddir --config "$tmp/good2.json" --data-dir "$tmp/nowhere"
expect_rc 2
expect_msg "--data-dir" "expected a directory"
train both --config "$tmp/good2.json" --data-dir "$tmp/data" --no-data-dirs
expect_rc 2
expect_msg "one or the other"

# without --data-dir: direct CLI use reads anything the user can (documented)
config open "$tmp/outside/secret.bin"
train open --config "$tmp/open.json"
expect_rc 2
expect_msg "$tmp/outside/secret.bin" "magic number"
echo "ok usage errors; unconfined without --data-dir"
echo "PASS ($((SECONDS - started)) s)"

#!/usr/bin/env bash
# `scalesweep data prepare` and `data synth` through the real binary: shard
# files and sizes, the synth JSON line, and exit code 2 on bad usage.
# Usage: test_data.sh PATH/TO/scalesweep
set -euo pipefail

bin=${1:?usage: test_data.sh PATH/TO/scalesweep}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_size FILE TOKENS: a 1024-byte header, then 2 bytes per token.
expect_size() {
  [ -f "$1" ] || fail "$1 was not written"
  local want=$((1024 + 2 * $2)) got
  got=$(wc -c <"$1" | tr -d ' ')
  [ "$got" = "$want" ] || fail "$1 has $got bytes, expected $want ($2 tokens)"
}

# expect_usage NEEDLE ARGS...: exit code 2 and NEEDLE in the message.
expect_usage() {
  local needle=$1 rc=0
  shift
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "'$*' exited $rc, expected 2"
  grep -qF -- "$needle" "$tmp/err" ||
    fail "'$*': stderr lacks '$needle': $(cat "$tmp/err")"
}

# json_field KEY: the value of KEY in the JSON line in $tmp/out.
json_field() {
  sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\)\"\{0,1\}[,}].*/\1/p" "$tmp/out"
}

# ---- prepare ------------------------------------------------------------
head -c 600 /dev/urandom >"$tmp/a.txt"
printf '%0400d' 0 >"$tmp/b.txt"
# Stale shards from an earlier, larger run must disappear.
mkdir -p "$tmp/prep"
cp "$tmp/a.txt" "$tmp/prep/train_000007.bin"
"$bin" data prepare --out "$tmp/prep" --shard-tokens 50 "$tmp/a.txt" >/dev/null
"$bin" data prepare --out "$tmp/prep" --val-fraction 0.1 --shard-tokens 400 \
  "$tmp/a.txt" "$tmp/b.txt" >"$tmp/out" || fail "data prepare exited $?"
# 1000 bytes: 100 validation, 900 training in shards of 400, 400, 100.
expect_size "$tmp/prep/train_000000.bin" 400
expect_size "$tmp/prep/train_000001.bin" 400
expect_size "$tmp/prep/train_000002.bin" 100
expect_size "$tmp/prep/val_000000.bin" 100
[ ! -e "$tmp/prep/train_000003.bin" ] || fail "a stale train_000003.bin is left"
[ ! -e "$tmp/prep/val_000001.bin" ] || fail "a stale val_000001.bin is left"
[ "$(json_field train_tokens)" = 900 ] || fail "train_tokens: $(cat "$tmp/out")"
[ "$(json_field val_tokens)" = 100 ] || fail "val_tokens: $(cat "$tmp/out")"
# Header: magic 20240520, version 1, 400 tokens; then the first bytes of a.txt.
read -r magic version count < <(od -An -t d4 -N 12 "$tmp/prep/train_000000.bin")
[ "$magic $version $count" = "20240520 1 400" ] ||
  fail "train_000000.bin header is '$magic $version $count'"
want=$(od -An -t u1 -N 8 "$tmp/a.txt" | tr -s ' ')
got=$(od -An -t u2 -j 1024 -N 16 "$tmp/prep/train_000000.bin" | tr -s ' ')
[ "$want" = "$got" ] || fail "first tokens '$got', expected the bytes '$want'"

# --shuffle SEED: the files in an order drawn from SEED (the same order on every
# run and machine); without it, in the order given. Five one-letter files.
for f in 1 2 3 4 5; do printf "%0100d" "$f" | tr 0-9 "$(printf 'abcdefghij' | cut -c"$f")" >"$tmp/f$f.txt"; done
"$bin" data prepare --out "$tmp/plain" --val-fraction 0 "$tmp"/f{1,2,3,4,5}.txt >/dev/null
"$bin" data prepare --out "$tmp/sh1" --val-fraction 0 --shuffle 3 "$tmp"/f{1,2,3,4,5}.txt >/dev/null
"$bin" data prepare --out "$tmp/sh2" --val-fraction 0 --shuffle 3 "$tmp"/f{1,2,3,4,5}.txt >/dev/null
order() { od -An -t u2 -j 1024 -v "$1" | tr -s ' ' '\n' | grep . | awk 'NR % 100 == 1'; }
[ "$(order "$tmp/plain/train_000000.bin" | tr '\n' ' ')" = "97 98 99 100 101 " ] ||
  fail "data prepare without --shuffle: files in order $(order "$tmp/plain/train_000000.bin" | tr '\n' ' ')"
cmp -s "$tmp/sh1/train_000000.bin" "$tmp/sh2/train_000000.bin" ||
  fail "--shuffle 3 twice wrote different shards"
shuffled=$(order "$tmp/sh1/train_000000.bin" | tr '\n' ' ')
[ "$shuffled" != "97 98 99 100 101 " ] || fail "--shuffle 3 kept the files in order"
[ "$(order "$tmp/sh1/train_000000.bin" | sort -n | tr '\n' ' ')" = "97 98 99 100 101 " ] ||
  fail "--shuffle 3: files $shuffled, expected each of the five once"
expect_usage "--shuffle" data prepare --out "$tmp/x" --shuffle nope "$tmp/f1.txt"
# --chunk-bytes B: the files cut into pieces of at least B bytes ending at a
# line's end, the pieces of all files shuffled: lines of 10 bytes, so pieces
# of 20 bytes (2 lines) from the five files interleave
for f in 1 2 3 4 5; do
  for i in 1 2 3 4 5 6 7 8 9 10; do printf '%s\n' "$(printf "%09d" 0 | tr 0 "$(printf 'abcde' | cut -c"$f")")"; done >"$tmp/l$f.txt"
done
"$bin" data prepare --out "$tmp/ck" --val-fraction 0 --shuffle 3 --chunk-bytes 20 "$tmp"/l{1,2,3,4,5}.txt >/dev/null ||
  fail "data prepare --chunk-bytes exited $?"
pieces=$(od -An -t u2 -j 1024 -v "$tmp/ck/train_000000.bin" | tr -s ' ' '\n' | grep . | awk 'NR % 20 == 1' | tr '\n' ' ')
[ "$(echo "$pieces" | wc -w)" = 25 ] || fail "--chunk-bytes 20: $(echo "$pieces" | wc -w) pieces, expected 25"
[ "$(echo "$pieces" | tr ' ' '\n' | grep . | sort -n | uniq -c | awk '{print $1}' | tr '\n' ' ')" = "5 5 5 5 5 " ] ||
  fail "--chunk-bytes 20: pieces begin with letters $pieces, expected 5 of each file"
first5=$(echo "$pieces" | cut -d' ' -f1-5)
[ "$first5" != "97 97 97 97 97" ] || fail "--chunk-bytes 20 kept the files whole"
expect_usage "--chunk-bytes needs --shuffle" data prepare --out "$tmp/x" --chunk-bytes 20 "$tmp/f1.txt"

# ---- synth --------------------------------------------------------------
"$bin" data synth --out "$tmp/syn" --tokens 20000 --val-tokens 5000 \
  --words 500 --seq-len 64 >"$tmp/out" || fail "data synth exited $?"
[ "$(wc -l <"$tmp/out")" = 1 ] || fail "data synth printed: $(cat "$tmp/out")"
expect_size "$tmp/syn/train_000000.bin" 20000
expect_size "$tmp/syn/val_000000.bin" 5000
[ "$(json_field train)" = "$tmp/syn/train_000000.bin" ] ||
  fail "train path: $(cat "$tmp/out")"
[ "$(json_field seq_len)" = 64 ] || fail "seq_len: $(cat "$tmp/out")"
rate=$(json_field entropy_rate)
floor=$(json_field window_floor)
digest=$(json_field lexicon_digest)
[[ "$digest" =~ ^[0-9a-f]{16}$ ]] || fail "lexicon_digest '$digest'"
awk -v h="$rate" -v f="$floor" 'BEGIN { exit !(h > 0 && f > h && f < 2 * h) }' ||
  fail "expected 0 < entropy_rate < window_floor < 2 entropy_rate: $(cat "$tmp/out")"
# The same command writes the same bytes.
cp "$tmp/syn/train_000000.bin" "$tmp/first.bin"
"$bin" data synth --out "$tmp/syn" --tokens 20000 --val-tokens 5000 \
  --words 500 --seq-len 64 >/dev/null
cmp -s "$tmp/first.bin" "$tmp/syn/train_000000.bin" ||
  fail "two identical data synth runs wrote different train shards"

# ---- bad usage ----------------------------------------------------------
expect_usage "--out" data synth --tokens 10
expect_usage "--words" data synth --out "$tmp/x" --words abc
expect_usage "--tokens" data synth --out "$tmp/x" --tokens -5
expect_usage "--zipf" data synth --out "$tmp/x" --zipf abc
expect_usage "zipf: 0" data synth --out "$tmp/x" --zipf 0
expect_usage "letters: 300" data synth --out "$tmp/x" --letters 300
expect_usage "needs a value" data synth --out
expect_usage "--bogus" data synth --out "$tmp/x" --bogus 1
expect_usage "only 4" data synth --out "$tmp/x" --letters 2 --min-len 2 \
  --max-len 2 --words 3
expect_usage "input FILE" data prepare --out "$tmp/x"
expect_usage "--val-fraction" data prepare --out "$tmp/x" --val-fraction 1 \
  "$tmp/a.txt"
expect_usage "missing.txt" data prepare --out "$tmp/x" "$tmp/missing.txt"
expect_usage "frobnicate" data frobnicate
expect_usage "subcommand" data
"$bin" data --help | grep -q "usage: scalesweep data" || fail "no help text"

echo "all checks passed"

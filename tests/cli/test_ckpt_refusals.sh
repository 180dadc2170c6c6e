#!/usr/bin/env bash
# Every refusal of a checkpoint, byte for byte: a resume or a branch from a
# file that is missing, empty, another program's, another version's, cut
# short, forged (lengths that wrap, a checksum that does not match, a
# stored config that is not JSON or not a run config, sizes or a carried
# token that do not fit the model) or written by another run; each message
# and exit code against tests/cli/golden/ckpt_refusals.txt (written by the
# binary before trainer/ckpt.c's load was split into its checks). Forged
# files get a correct checksum, so that the check after it is reached.
# Usage: test_ckpt_refusals.sh PATH/TO/scalesweep
set -euo pipefail

golden=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/golden/ckpt_refusals.txt
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# case_ LABEL ARGS...: `scalesweep train ARGS`; its exit code and its stderr
# (the scratch directory written as TMP) appended to got.
case_() {
  local label=$1 rc=0
  shift
  timeout 120 "$bin" train "$@" >o 2>e </dev/null || rc=$?
  { printf '=== %s\n--- rc %s\n' "$label" "$rc"; sed "s|$tmp|TMP|g" e; } >>got
}
: >got

# a model of 1 layer, 64 tokens a step; wsd: 100 steps, stable for 80
cat >cfg.py <<'PY'
import json, sys
def cfg(tokens, **kw):
    c = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
         "train": {"batch_size": 4, "tokens": tokens, "lr": 3e-3, "warmup_tokens": 640,
                   "schedule": "wsd"},
         "eval": {"tokens": 64}, "threads": 1}
    for k, v in kw.items():
        sec, key = k.split("__")
        c[sec][key] = v
    return c
for name, tokens, kw in [("trunk", 6400, {}), ("short", 3200, {}), ("other", 6400, {"train__lr": 4e-3}),
                         ("long", 12800, {}),
                         ("cos", 3200, {"train__schedule": "cosine"}),
                         ("costrunk", 6400, {"train__schedule": "cosine"}),
                         ("ctrunk", 6400, {"train__schedule": "constant"}),
                         ("c8", 3200, {"train__schedule": "constant", "train__batch_size": 8}),
                         ("c12", 3200, {"train__schedule": "constant", "train__batch_size": 12}),
                         ("cwd", 3200, {"train__schedule": "constant", "train__weight_decay": 0.05})]:
    json.dump(cfg(tokens, **kw), open(name + ".json", "w"))
PY
"$py" cfg.py
"$bin" train --config trunk.json --checkpoint-dir ck --keep-steps 9,10,90 >trunk.out ||
  fail "the wsd trunk failed: $(tail -c 600 trunk.out)"
"$bin" train --config costrunk.json --checkpoint-dir cosck --keep-steps 10 >costrunk.out ||
  fail "the cosine trunk failed: $(tail -c 600 costrunk.out)"
"$bin" train --config ctrunk.json --checkpoint-dir cck --keep-steps 9,10 >ctrunk.out ||
  fail "the constant trunk failed: $(tail -c 600 ctrunk.out)"

# forge SRC DST EDIT...: a copy of checkpoint SRC with EDITs, its checksum
# made right again. EDIT: nparams=N, optim=N, carry=N (fields of the
# state after the 1024-byte header), config=TEXT (the stored config
# replaced, its length in the header), trunc=N (the last N bytes cut),
# byte=AT:V (one byte set, checksum left as it is).
cat >forge.py <<'PY'
import struct, sys
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
b = bytearray(open(src, "rb").read())
H, REC = 1024, 144  # header ints, the state record
clen = struct.unpack_from("<i", b, 9 * 4)[0]
fix = True
for e in edits:
    k, v = e.split("=", 1)
    if k == "nparams":
        struct.pack_into("<Q", b, H + 128, int(v))
    elif k == "optim":
        struct.pack_into("<Q", b, H + 136, int(v))
    elif k == "carry":
        struct.pack_into("<i", b, H + 120, int(v))
    elif k == "config":
        c = v.encode()
        b = b[:H + REC] + c + b[H + REC + clen:]
        struct.pack_into("<i", b, 9 * 4, len(c))
        clen = len(c)
    elif k == "trunc":
        b = b[:len(b) - int(v)]
        fix = False
    elif k == "byte":
        at, x = v.split(":")
        b[int(at)] = int(x)
        fix = False
if fix:
    h = 0xcbf29ce484222325
    for x in b[:-8]:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    struct.pack_into("<Q", b, len(b) - 8, h)
open(dst, "wb").write(b)
PY
f() { mkdir -p "$2"; "$py" forge.py ck/branch-90/checkpoint.bin "$2/checkpoint.bin" "${@:3}"; case_ "$1" --config trunk.json --resume "$2"; }
size=$(wc -c <ck/branch-90/checkpoint.bin | tr -d ' ')
params=$("$py" -c 'import struct,sys; print(struct.unpack_from("<Q", open(sys.argv[1],"rb").read(), 1152)[0])' ck/branch-90/checkpoint.bin)
optim=$("$py" -c 'import struct,sys; print(struct.unpack_from("<Q", open(sys.argv[1],"rb").read(), 1160)[0])' ck/branch-90/checkpoint.bin)
stored=$("$py" -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack_from("<i",b,36)[0]; print(b[1168:1168+n].decode())' ck/branch-90/checkpoint.bin)

# ---- the file ------------------------------------------------------------------
case_ missing --config trunk.json --resume nowhere
case_ missing_file --config short.json --branch-from nowhere.bin
mkdir empty && : >empty/checkpoint.bin
case_ empty --config trunk.json --resume empty
case_ empty_branch --config short.json --branch-from empty/checkpoint.bin
mkdir short_file && head -c 1000 ck/branch-90/checkpoint.bin >short_file/checkpoint.bin
case_ shorter_than_header --config trunk.json --resume short_file
f magic magic byte=0:71
f version version byte=4:9
f cut cut trunc=100
f wraps wraps "nparams=$((1 << 62))"
f declares_more declares_more "optim=$((optim + 4))"
f checksum checksum "byte=$((size - 20)):$((($(od -An -t u1 -j $((size - 20)) -N 1 ck/branch-90/checkpoint.bin) + 1) % 256))"

# ---- what it holds ---------------------------------------------------------------
f not_json not_json 'config={"model":'
f sizes sizes "nparams=$((params + 1))" "optim=$((optim - 4))"
f carry carry carry=27
f carry_negative carry_neg carry=-1
case_ other_config --config other.json --resume ck/branch-90

# ---- branches ----------------------------------------------------------------------
case_ wsd_after_stable --config short.json --branch-from ck/branch-90/checkpoint.bin
case_ wsd_after_their_stable --config long.json --branch-from ck/branch-90/checkpoint.bin
case_ wsd_from_constant --config short.json --branch-from cck/branch-10/checkpoint.bin
case_ cosine_from_wsd --config cos.json --branch-from ck/branch-10/checkpoint.bin
case_ cosine --config cos.json --branch-from cosck/branch-10/checkpoint.bin
case_ constant_in_warmup --config c8.json --branch-from cck/branch-9/checkpoint.bin
case_ constant_not_whole --config c12.json --branch-from cck/branch-10/checkpoint.bin
case_ constant_other_config --config cwd.json --branch-from cck/branch-10/checkpoint.bin
mkdir badrun
"$py" forge.py ck/branch-10/checkpoint.bin badrun/checkpoint.bin \
  "config=${stored%\}},\"bogus\":1}"
case_ stored_not_a_run_config --config short.json --branch-from badrun/checkpoint.bin

if [ "${SCALESWEEP_GOLDEN_UPDATE:-}" = 1 ]; then
  cp got "$golden"
  echo "wrote $golden"
  exit 0
fi
diff -u "$golden" got >diff.txt || fail "a checkpoint refusal changed (- golden, + now):
$(head -c 6000 diff.txt)"
echo "ok: $(grep -c '^=== ' got) refusals as in $golden ($((SECONDS - started)) s)"

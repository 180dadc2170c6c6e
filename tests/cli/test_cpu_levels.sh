#!/usr/bin/env bash
# One build for every x86-64 host (kernels/cpu/internal.h): the CPU kernels
# are compiled at three instruction-set levels and one is chosen at run time.
#   - every level this CPU runs (SCALESWEEP_CPU_KERNELS=v1, v3, v4) trains
#     an fp32 and a bf16 run to the same bits, and the config event says
#     which level ran;
#   - the binary runs under an emulated CPU without AVX, AVX2 or AVX-512
#     (qemu-x86_64 -cpu Nehalem, Debian's qemu-user), where it picks v1, and
#     prints the same bits as on this CPU with the same kernels (v1, and
#     OpenBLAS's Nehalem kernels on both sides): an instruction above the
#     baseline outside the level objects would stop it with SIGILL.
#   - "reproducible": "portable" pins OpenBLAS's kernels (cli/blas_pin.h):
#     with OPENBLAS_CORETYPE unset, a portable run on this CPU (OpenBLAS's
#     own choice here may be SkylakeX or Cooperlake) records Haswell, chosen
#     by "portable", at every level, and prints the same bits under
#     qemu-x86_64 -cpu Haswell (AVX2, no AVX-512: our v3 kernels, and
#     OpenBLAS's Haswell kernels by its own choice): two CPUs, two kernel
#     choices, the same numbers; an OPENBLAS_CORETYPE set before still wins.
# A -march=native build (SS_NATIVE=ON, "cpu_kernels": "native") is for its
# own machine only: the emulation parts are skipped for it.
#   test_cpu_levels.sh PATH/TO/scalesweep
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

cat >base.json <<'EOF'
{"model": {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 32},
 "data": {"synthetic": {"words": 256}},
 "train": {"batch_size": 8, "micro_batch_size": 4, "tokens": 5120, "lr": 0.003},
 "eval": {"every_tokens": 2560, "tokens": 1024}, "threads": 1}
EOF

# the run's lines without the timings and the kernels' names; the level that ran
strip() {
  "$py" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    for k in ("tok_per_s", "wall_s", "peak_rss_bytes", "environment"):
        e.pop(k, None)
    print(json.dumps(e, sort_keys=True))' "$1"
}
env_of() { "$py" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline()).get("environment", {}).get(sys.argv[2], "?"))' "$1" "$2"; }
level_of() { env_of "$1" cpu_kernels; }

flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
have() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
levels="v1"
have avx2 && have fma && have bmi2 && levels="$levels v3"
have avx512f && have avx512bw && have avx512vl && have avx512dq && levels="$levels v4"

SCALESWEEP_CPU_KERNELS=v1 timeout 120 "$bin" train --config base.json >first.out ||
  fail "the first run exited $?"
native=0
[ "$(level_of first.out)" = native ] && native=1

for prec in fp32 bf16; do
  sed "s/\"threads\": 1/\"threads\": 1, \"precision\": \"$prec\"/" base.json >"$prec.json"
  ref=""
  for l in $levels; do
    [ $native -eq 1 ] && [ "$l" != v1 ] && continue
    SCALESWEEP_CPU_KERNELS=$l timeout 120 "$bin" train --config "$prec.json" >"$prec.$l.out" ||
      fail "$prec at level $l exited $?"
    got=$(level_of "$prec.$l.out")
    want=$l
    [ $native -eq 1 ] && want=native
    [ "$got" = "$want" ] || fail "$prec: asked for level $l, the config event says $got"
    strip "$prec.$l.out" >"$prec.$l.lines"
    grep -q '"event": "done"' "$prec.$l.lines" || fail "$prec at level $l: no done line"
    if [ -z "$ref" ]; then
      ref=$l
    elif ! cmp -s "$prec.$ref.lines" "$prec.$l.lines"; then
      diff "$prec.$ref.lines" "$prec.$l.lines" | head -5 >&2
      fail "$prec: level $l does not print level $ref's bits"
    fi
  done
  echo "ok    $prec: levels $levels print the same bits"
done

# portable runs: OpenBLAS's kernels pinned, whatever this CPU would pick
if ! { have avx2 && have fma; }; then
  echo "skip  reproducible \"portable\": this CPU runs no AVX2 and FMA (OpenBLAS's Haswell kernels)"
else
  sed 's/"threads": 1/"threads": 1, "reproducible": "portable"/' base.json >portable.json
  sed 's/"threads": 1/"threads": 1, "reproducible": "portable", "precision": "bf16"/' base.json \
    >portable-bf16.json
  for cfg in portable portable-bf16; do
    ref=""
    for l in $levels; do
      [ $native -eq 1 ] && [ "$l" != v1 ] && continue
      env -u OPENBLAS_CORETYPE SCALESWEEP_CPU_KERNELS=$l timeout 120 "$bin" train \
        --config "$cfg.json" >"$cfg.$l.out" || fail "$cfg at level $l exited $?"
      core=$(env_of "$cfg.$l.out" blas_core) by=$(env_of "$cfg.$l.out" blas_core_by)
      [ "$core/$by" = Haswell/portable ] ||
        fail "$cfg at level $l: OpenBLAS's kernels $core chosen by $by, expected Haswell by portable"
      strip "$cfg.$l.out" >"$cfg.$l.lines"
      if [ -z "$ref" ]; then
        ref=$l
      elif ! cmp -s "$cfg.$ref.lines" "$cfg.$l.lines"; then
        fail "$cfg: level $l does not print level $ref's bits"
      fi
    done
    echo "ok    $cfg: OpenBLAS's Haswell kernels pinned at levels $levels, the same bits"
  done
  # from stdin too (the config survives running itself again), and the
  # owner's OPENBLAS_CORETYPE wins
  env -u OPENBLAS_CORETYPE SCALESWEEP_CPU_KERNELS=v1 timeout 120 "$bin" train --config - \
    <portable.json >stdin.out || fail "a portable config from stdin exited $?"
  strip stdin.out >stdin.lines
  cmp -s stdin.lines portable.v1.lines || fail "a portable config from stdin printed other bits"
  OPENBLAS_CORETYPE=Nehalem timeout 120 "$bin" train --config portable.json >owner.out ||
    fail "a portable run with OPENBLAS_CORETYPE=Nehalem exited $?"
  [ "$(env_of owner.out blas_core)/$(env_of owner.out blas_core_by)" = Nehalem/OPENBLAS_CORETYPE ] ||
    fail "OPENBLAS_CORETYPE=Nehalem (the owner's) did not win over portable's pin"
  echo "ok    portable from stdin: the same bits; an owner's OPENBLAS_CORETYPE wins"
fi

if [ $native -eq 1 ]; then
  echo "skip  emulated CPU: a -march=native build (SS_NATIVE=ON) runs on its build machine only"
elif [ -n "${SCALESWEEP_TEST_SANITIZED:-}" ]; then
  echo "skip  emulated CPU: a sanitized build (its shadow memory does not map under qemu-user)"
elif ! command -v qemu-x86_64 >/dev/null; then
  echo "skip  emulated CPU: no qemu-x86_64 (Debian's qemu-user; scripts/install-deps.sh installs it)"
else
  # OpenBLAS's Nehalem kernels on both sides: its own choice would differ
  # between the CPUs, and a core type the machine's owner set (Haswell,
  # say) would not run on the emulated one
  OPENBLAS_CORETYPE=Nehalem SCALESWEEP_CPU_KERNELS=v1 timeout 120 "$bin" train \
    --config fp32.json >here.out || fail "fp32 at v1 with OpenBLAS's Nehalem kernels exited $?"
  rc=0
  OPENBLAS_CORETYPE=Nehalem timeout 600 qemu-x86_64 -cpu Nehalem "$bin" train --config fp32.json \
    >emulated.out 2>emulated.err || rc=$?
  [ $rc -eq 0 ] || { tail -3 emulated.err >&2; fail "under qemu-x86_64 -cpu Nehalem: exit $rc (132: an instruction the baseline lacks)"; }
  [ "$(level_of emulated.out)" = v1 ] || fail "under an emulated Nehalem the level is $(level_of emulated.out), expected v1"
  strip here.out >here.lines
  strip emulated.out >emulated.lines
  cmp -s here.lines emulated.lines || { diff here.lines emulated.lines | head -5 >&2;
    fail "the emulated Nehalem's run differs from this CPU's at the same kernels"; }
  echo "ok    under qemu-x86_64 -cpu Nehalem (no AVX): level v1, the same bits as here"
  if [ -f portable.v1.lines ]; then
    rc=0
    env -u OPENBLAS_CORETYPE timeout 600 qemu-x86_64 -cpu Haswell "$bin" train \
      --config portable.json >haswell.out 2>haswell.err || rc=$?
    [ $rc -eq 0 ] || { tail -3 haswell.err >&2; fail "portable under qemu-x86_64 -cpu Haswell: exit $rc"; }
    [ "$(level_of haswell.out)/$(env_of haswell.out blas_core)" = v3/Haswell ] ||
      fail "under an emulated Haswell: level $(level_of haswell.out), OpenBLAS's $(env_of haswell.out blas_core) kernels; expected v3 and Haswell"
    strip haswell.out >haswell.lines
    cmp -s haswell.lines portable.v1.lines || { diff portable.v1.lines haswell.lines | head -5 >&2;
      fail "a portable run under an emulated Haswell differs from this CPU's"; }
    echo "ok    portable under qemu-x86_64 -cpu Haswell (no AVX-512): the same bits as this CPU's"
  fi
fi
echo "PASS ($((SECONDS - started)) s)"

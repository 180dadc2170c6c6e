#!/usr/bin/env bash
# Builds, on a machine without a GPU, what tests/gpu/run.sh runs on a bare GPU
# machine (nvcc's CUDA libraries, Python, and none of Debian's libraries):
# scalesweep, its CUDA module and the GPU tests, with every shared library
# they need that is neither glibc's nor CUDA's (OpenBLAS, OpenMP, cJSON,
# Jansson, libpq, libuv, ...) beside them, packed as one file to carry:
#
#   bash tests/gpu/bundle.sh [BUILD_DIR]     # default build-gpu; writes BUILD_DIR/bundle.tar.xz
#
# Then, on the GPU machine, from the repository root:
#   bash tests/gpu/run.sh RESULTS_DIR        # finds BUILD_DIR/bundle.tar.xz and runs from it
#
# Before packing, the bundle is checked here as the GPU machine will see it:
# each binary runs in a mount namespace whose /usr/lib/x86_64-linux-gnu holds
# glibc's libraries only (the system's copies of everything else hidden), so
# a library the bundle lacks fails here, not on the GPU machine. The CPU
# instructions are x86-64-v3 (AVX2), not this machine's: the GPU host's CPU
# is another. Needs root for the namespace (CI and the dev machine are).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac
jobs=$(nproc)
say() { echo "bundle.sh: $*"; }

if ! unshare -m true 2>/dev/null; then
  say "skipped: no mount namespace here (unshare -m needs root), so the bundle cannot be checked"
  exit 77
fi
say "building in $build (Release, CUDA, x86-64-v3)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSS_CUDA=ON -DSS_NATIVE=OFF \
  -DCMAKE_C_FLAGS="-march=x86-64-v3" >"$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; exit 1; }
grep -q "CUDA trainer module ON" "$build.configure.log" ||
  { say "nvcc not found: no CUDA module to bundle"; exit 1; }
cmake --build "$build" -j"$jobs" --target scalesweep test_cuda_kernels test_cuda_residual \
  >"$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }

b=$build/bundle
rm -rf "$b"
mkdir -p "$b/bin" "$b/lib"
for f in scalesweep libscalesweep_cuda.so tests/test_cuda_kernels tests/test_cuda_residual; do
  cp "$build/$f" "$b/bin/"
  strip --strip-debug "$b/bin/$(basename "$f")"
done

# glibc's own (the GPU machine has them) and CUDA's (its toolkit has them)
# stay out; everything else goes in under its soname
system_lib() {
  case $(basename "$1") in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*.so.* | \
      libresolv.so.* | libutil.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libnvidia-*) return 0 ;;
  esac
  return 1
}
for f in "$b"/bin/*; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  system_lib "$soname" || cp -L "$path" "$b/lib/$soname"
done
say "$(ls "$b/lib" | wc -l) libraries bundled: $(ls "$b/lib" | tr '\n' ' ')"

# ---- the check: the bundle alone, the system's copies hidden -----------------
core=$(mktemp -d)
trap 'rm -rf "$core"' EXIT
for l in /usr/lib/x86_64-linux-gnu/{libc.so.6,libm.so.6,libpthread.so.0,libdl.so.2,librt.so.1,libresolv.so.2,ld-linux-x86-64.so.2}; do
  cp -L "$l" "$core/"
done
cuda_lib=$(dirname "$(ldd "$b/bin/libscalesweep_cuda.so" | awk '/libcublasLt/ {print $3}')")
hidden() { # COMMAND...: run with only glibc, the bundle and CUDA's libraries
  unshare -m bash -c 'mount --bind "$1" /usr/lib/x86_64-linux-gnu && shift &&
    exec env LD_LIBRARY_PATH="$BUNDLE_LIB:$CUDA_LIB" "$@"' hidden "$core" "$@"
}
export BUNDLE_LIB=$b/lib CUDA_LIB=$cuda_lib
missing=0
for f in "$b"/bin/*; do
  rc=0
  out=$(hidden /lib64/ld-linux-x86-64.so.2 --list "$f" 2>&1) || rc=$?
  if [ $rc -ne 0 ] || grep -q "not found\|error while loading" <<<"$out"; then
    say "FAIL: $(basename "$f") with the system's libraries hidden (exit $rc): $(grep 'not found\|error while loading' <<<"$out" | tr -s ' \n\t' ' ')"
    missing=1
  fi
done
[ $missing -eq 0 ] || exit 1
cfg=$(mktemp)
printf '%s' '{"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16},
  "data": {"synthetic": {"seed": 1}}, "train": {"batch_size": 4, "tokens": 2048}, "threads": 1}' >"$cfg"
hidden "$b/bin/scalesweep" train --config "$cfg" | grep -q '"event":"done"' ||
  { say "FAIL: a CPU run from the bundle with the system's libraries hidden"; exit 1; }
# the module and its CUDA libraries load (no GPU here: CUDA answers why)
dev=$(hidden "$b/bin/scalesweep" devices --json)
grep -q '"cuda":{"\(devices\|error\)":' <<<"$dev" && ! grep -q "cannot load the CUDA module" <<<"$dev" ||
  { say "FAIL: scalesweep devices from the bundle: $dev"; exit 1; }
rc=0
hidden "$b/bin/test_cuda_kernels" >/dev/null 2>&1 || rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] ||
  { say "FAIL: test_cuda_kernels from the bundle exited $rc (0, or 77 without a GPU)"; exit 1; }
rm -f "$cfg"
say "checked with the system's libraries hidden: every binary's libraries resolve; a CPU run trains; the CUDA module loads (${dev:0:120})"

tar -C "$build" -cJf "$build/bundle.tar.xz" bundle
say "wrote $build/bundle.tar.xz ($(du -h "$build/bundle.tar.xz" | cut -f1)): carry it with the tree and run bash tests/gpu/run.sh RESULTS_DIR"

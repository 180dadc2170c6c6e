#!/usr/bin/env bash
# Builds and runs every GPU test and benchmark on a machine with a GPU.
# Usage (from the repository root): bash tests/gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SS_GPU_BUILD:-$root/build-gpu}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target test_cuda_residual
"$build/tests/test_cuda_residual"

#!/usr/bin/env bash
# The test command: installs what is missing, builds with warnings as errors,
# runs every test under ctest, then the unit and integration tests again in
# an AddressSanitizer + UndefinedBehaviorSanitizer build, then every fuzz
# harness for 20 s (tests/fuzz/run.sh: a finding fails).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh --fuzz
jobs=$(nproc)

cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSS_WERROR=ON >/dev/null
cmake --build build-ci -j"$jobs"
(cd build-ci && ctest --output-on-failure -j"$jobs" -LE slow)

# Sanitizers: the same tests but the GPU ones, those whose subject is the
# PyTorch trainer (label torch: PyTorch's run time, not our C, is what they
# spend) and the README's tour (label readme: 616 s of a 55-minute CI run,
# most of it trainers; the -Werror pass above runs it, and the scheduler,
# worker and client paths it takes have sanitized end-to-end tests of their
# own); leaks count as failures.
# -O1, as AddressSanitizer's documentation advises: at -O0 the trainer-heavy
# tests spent most of this pass (cli_train 721 s at -O0 against 327 s at -O1,
# dp_cpu past its 600 s limit against 269 s, on one loaded machine).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DSS_WERROR=ON \
  -DSS_SANITIZE=ON -DSS_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -L 'unit|integration' -LE 'torch|readme')

# Fuzzing: 20 s per harness (clang + libFuzzer, in build-fuzz/); the status
# page's assets come from build-ci's node_modules when it has them.
if [ -z "${SS_WEB_NODE_MODULES:-}" ] && [ -d build-ci/scheduler/web_npm/node_modules ]; then
  export SS_WEB_NODE_MODULES=$root/build-ci/scheduler/web_npm/node_modules
fi
SS_FUZZ_JOBS=$jobs tests/fuzz/run.sh 20

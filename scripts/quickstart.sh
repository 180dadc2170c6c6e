#!/usr/bin/env bash
# The main job, for now: installs what is missing, builds, and trains a small
# GPT on the built-in synthetic corpus, printing its losses as JSON lines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target scalesweep >/dev/null
exec ./build/scalesweep train --config trainer/examples/quickstart.json "$@"

#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the quick-start
# scaling-law study (sweeps/examples/quickstart.json, docs/study.md) with
# `scalesweep up --wait`: a private PostgreSQL, the scheduler and a local
# worker; about 15 minutes on 2 CPU cores; it ends by printing the fitted
# L(N, D), E against the corpus's true entropy rate, the compute-optimal
# exponents, the critical batch size and the extrapolation check.
# Each call uses a fresh state directory under .scalesweep/ (the database and
# logs stay there; .scalesweep/quickstart-latest points to the newest), but
# after an interruption (Ctrl-C) the next call goes on with that study: its
# finished runs stay, the interrupted ones resume from their checkpoints.
# Extra arguments go to `scalesweep up` (say, --listen 127.0.0.1:0 when port
# 8080 is taken).
# The single-model demo is `./build/scalesweep train --config
# trainer/examples/quickstart.json`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target scalesweep >/dev/null
# OpenMP's spin-waiting makes trainers many times slower on busy cores; the
# results do not depend on it
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p .scalesweep
# .scalesweep/quickstart-latest: the newest study, for `up --state` and the
# client commands afterwards (README, "Afterwards"); "ended" marks one that
# was not interrupted
latest=.scalesweep/quickstart-latest
if [ -L "$latest" ] && [ -d "$latest" ] && [ ! -e "$latest/ended" ]; then
  state=.scalesweep/$(readlink "$latest")
  echo "quickstart: going on with the interrupted study in $state"
else
  name=quickstart-$(date +%Y%m%d-%H%M%S)
  state=.scalesweep/$name
  mkdir "$state"
  ln -sfn "$name" "$latest"
fi
rc=0
./build/scalesweep up --state "$state" --sweep sweeps/examples/quickstart.json --wait "$@" || rc=$?
# 130/143: interrupted (Ctrl-C, SIGTERM); 2: bad arguments, nothing ran
case $rc in 130 | 143 | 2) ;; *) touch "$state/ended" ;; esac
exit "$rc"

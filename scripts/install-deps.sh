#!/usr/bin/env bash
# Installs every system package scalesweep needs on Debian 12, as root.
# Quiet and quick when everything is already there.
#   --bench   also what the benchmarks compare with (Debian's python3-scipy)
#   --fuzz    also clang with libFuzzer and OpenMP for tests/fuzz/run.sh
#             (scripts/test.sh asks for them: it runs the fuzzers)
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev   # sgemm; the OpenMP build shares the trainer's threads
  libcjson-dev             # JSON in the trainer
  libjansson-dev           # JSON everywhere else (positions in errors)
  libssl-dev               # SHA-256 of token shards
  libuv1-dev               # scheduler and worker event loops
  libpq-dev postgresql     # the store
  libgsl-dev               # fits
  node-llhttp              # HTTP parser sources
  python3                  # test helpers
  curl                     # the README's HTTP examples
  chromium                 # the status page's browser test (headless)
  slurm-wlm munge          # a real Slurm cluster in the tests (slurm_workers)
  python3-torch            # the reference PyTorch trainer (trainers/torch) and its tests
  qemu-user                # an older CPU, emulated: the build runs on any x86-64 (cli_cpu_levels)
)
# npm fetches the status page's charting library (web/package-lock.json) and
# the browser test's driver at build time; Debian's npm brings Node.js. A
# Node.js installed otherwise (with its own npm) is used as it is.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi
for opt in "$@"; do
  case $opt in
    --bench) packages+=(python3-scipy) ;;
    --fuzz) packages+=(clang libclang-rt-dev libomp-dev) ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (or with sudo)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

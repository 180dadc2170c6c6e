# Sourced by the tests of the real binary (tests/cli/test_*.sh), after
# `set -euo pipefail`:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   cli_setup "$@"
# cli_setup BIN: $bin, the binary made absolute (a usage error without it, a
# failure when it is not executable); $py; $tmp, a fresh directory removed at
# exit and the working directory; $started, for the run time; and
# OMP_WAIT_POLICY=PASSIVE: libgomp spins while waiting, and with threads: 2
# on 2 cores shared with other ctest jobs a spinning run is 20-50x slower.
# Passive waiting changes no result. The Python the tests run finds
# clilib.py, the helpers they share, on PYTHONPATH.
cli_setup() {
  export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
  bin=${1:?usage: $(basename "$0") PATH/TO/scalesweep}
  [ -x "$bin" ] || { echo "FAIL: $bin is not an executable" >&2; exit 1; }
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  py=/usr/bin/python3
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cd "$tmp"
  started=$SECONDS
  export OMP_WAIT_POLICY=PASSIVE
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# cli_run SECONDS COMMAND LABEL ARGS...: runs `scalesweep COMMAND ARGS` for at
# most SECONDS; stdout in out, stderr in err, stdout and stderr together in
# msg, the exit status in $rc, LABEL in $label for the messages below.
cli_run() {
  local secs=$1 cmd=$2
  label=$3
  shift 3
  rc=0
  timeout "$secs" "$bin" "$cmd" "$@" >out 2>err || rc=$?
  cat out err >msg
}

# expect_rc CODE: the last command exited CODE.
expect_rc() {
  [ "$rc" = "$1" ] || fail "$label: exit $rc, expected $1; output: $(head -c 800 msg)"
}

# expect_msg NEEDLE...: each NEEDLE (fixed string) is in the last command's output.
expect_msg() {
  local n
  for n in "$@"; do
    grep -qF -- "$n" msg || fail "$label: the output lacks '$n': $(head -c 800 msg)"
  done
}

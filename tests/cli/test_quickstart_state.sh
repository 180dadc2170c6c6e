#!/usr/bin/env bash
# scripts/quickstart.sh's choice of state directory, with stand-ins for the
# install script, cmake and `scalesweep up` (the study itself is
# study_quickstart's): a fresh directory under .scalesweep/ for the first
# study, the same one again after an interruption (exit 130 or 143), a fresh
# one once a study has ended (any other exit, kept in `ended`), and
# .scalesweep/quickstart-latest pointing to the one in use.
# Usage: test_quickstart_state.sh (from anywhere)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# a checkout with the real script and stand-ins for what it calls
mkdir -p "$tmp/repo/scripts" "$tmp/repo/build" "$tmp/bin"
cp "$src/scripts/quickstart.sh" "$tmp/repo/scripts/"
printf '#!/bin/sh\nexit 0\n' >"$tmp/repo/scripts/install-deps.sh"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/cmake"
# `up`: records its arguments, exits with $FAKE_UP_RC
cat >"$tmp/repo/build/scalesweep" <<'EOF'
#!/bin/sh
echo "$@" >>"$FAKE_UP_LOG"
exit "${FAKE_UP_RC:-0}"
EOF
chmod +x "$tmp/bin/cmake" "$tmp/repo/build/scalesweep"
export PATH="$tmp/bin:$PATH" FAKE_UP_LOG="$tmp/up.log"

# quickstart RC: runs the script with `up` exiting RC; prints the --state it got
quickstart() {
  local rc=0
  : >"$FAKE_UP_LOG"
  FAKE_UP_RC=$1 bash "$tmp/repo/scripts/quickstart.sh" --listen 127.0.0.1:0 \
    >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" = "$1" ] || fail "quickstart.sh exited $rc, expected $1 (up's exit): $(cat "$tmp/out")"
  grep -q -- "--sweep sweeps/examples/quickstart.json --wait --listen 127.0.0.1:0" \
    "$FAKE_UP_LOG" || fail "up was called as: $(cat "$FAKE_UP_LOG")"
  sed -n 's/^up --state \([^ ]*\) .*/\1/p' "$FAKE_UP_LOG"
}
latest() { readlink "$tmp/repo/.scalesweep/quickstart-latest"; }

first=$(quickstart 130) # interrupted
[ "$first" = ".scalesweep/$(latest)" ] || fail "quickstart-latest -> $(latest), used $first"
[ ! -e "$tmp/repo/$first/ended" ] || fail "an interrupted study was marked ended"
sleep 1.1 # state names carry the second
again=$(quickstart 143) # the same study again, interrupted by SIGTERM this time
[ "$again" = "$first" ] || fail "after an interruption: $again, expected $first again"
grep -q "going on with the interrupted study in $first" "$tmp/out" ||
  fail "no word of going on: $(cat "$tmp/out")"
done=$(quickstart 1) # it ends (a run failed)
[ "$done" = "$first" ] || fail "the third call used $done, expected $first"
[ -e "$tmp/repo/$first/ended" ] || fail "an ended study was not marked"
sleep 1.1
fresh=$(quickstart 0)
[ "$fresh" != "$first" ] || fail "after a study ended, the next call reused $first"
[ "$fresh" = ".scalesweep/$(latest)" ] || fail "quickstart-latest -> $(latest), used $fresh"
[ -e "$tmp/repo/$fresh/ended" ] || fail "a study that succeeded was not marked ended"
echo "quickstart.sh: a fresh state, the same one after exit 130 and 143, a fresh one after an end"

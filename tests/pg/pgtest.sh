# Throwaway PostgreSQL clusters for integration tests. Source this file, then:
#
#   pg_available          true when the server programs (initdb, pg_ctl) exist
#   pg_start              initdb in a fresh temp dir, start the server on a Unix
#                         socket in that dir (no TCP), create database scalesweep,
#                         export SCALESWEEP_TEST_DB (a libpq conninfo), and stop
#                         and remove everything on exit (trap EXIT; INT and TERM
#                         exit through it). Returns 77 when PostgreSQL is missing.
#   pg_stop               stop the server and remove the cluster (idempotent)
#   pg_server_stop        stop the server, keeping the cluster (pg_ctl stop -m fast)
#   pg_server_start       start it again; the same SCALESWEEP_TEST_DB works
#   pg_restart_after S    stop the server now, start it again S seconds later in
#                         the background, and return at once
#   pg_wait_restart       wait until that restart has finished
#   pg_psql ARGS...       psql on the test database
#
# SS_PG_DURABLE=1 (set before pg_start) keeps PostgreSQL's production durability
# settings (fsync, synchronous_commit, full_page_writes on: what a crash test needs);
# by default they are off, which is faster and enough for a cluster thrown away.
#
# As root, the server programs run as ${SCALESWEEP_PG_USER:-postgres} (PostgreSQL
# refuses root), and the temp dir belongs to that user. The server state is in
# exported variables (PG_TEST_DIR, PG_TEST_BINDIR, PG_TEST_USER), so a child
# process can stop and start the same server with
#   bash -c '. "$PGTEST_SH" && pg_server_stop'
# A test that sets its own EXIT trap must call pg_stop from it.

pg_bindir() {
  local d
  if [ -n "${SCALESWEEP_PG_BINDIR:-}" ]; then
    [ -x "$SCALESWEEP_PG_BINDIR/initdb" ] && [ -x "$SCALESWEEP_PG_BINDIR/pg_ctl" ] &&
      { echo "$SCALESWEEP_PG_BINDIR"; return 0; }
    return 1
  fi
  if command -v pg_config >/dev/null 2>&1; then
    d=$(pg_config --bindir 2>/dev/null)
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

pg_available() { pg_bindir >/dev/null; }

# Runs a command as the cluster's owner, from a directory that user can enter.
_pg_as() {
  if [ -n "${PG_TEST_USER:-}" ]; then
    if command -v setpriv >/dev/null 2>&1; then
      (cd "$PG_TEST_DIR" && setpriv --reuid="$PG_TEST_USER" --regid="$(id -g "$PG_TEST_USER")" \
        --init-groups -- "$@")
    else
      (cd "$PG_TEST_DIR" && runuser -u "$PG_TEST_USER" -- "$@")
    fi
  else
    (cd "$PG_TEST_DIR" && "$@")
  fi
}

pg_server_start() {
  _pg_as "$PG_TEST_BINDIR/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/log" -w -t 60 -s start \
    >/dev/null || { echo "pgtest: PostgreSQL did not start; its log ends with:" >&2
                    tail -n 20 "$PG_TEST_DIR/log" >&2; return 1; }
}

pg_server_stop() {
  _pg_as "$PG_TEST_BINDIR/pg_ctl" -D "$PG_TEST_DIR/data" -m fast -w -t 60 -s stop >/dev/null
}

pg_restart_after() {
  pg_server_stop || return 1
  ( sleep "$1"; pg_server_start ) &
  PG_TEST_RESTART_PID=$!
}

pg_wait_restart() {
  [ -n "${PG_TEST_RESTART_PID:-}" ] || return 0
  wait "$PG_TEST_RESTART_PID"
  local rc=$?
  PG_TEST_RESTART_PID=
  return $rc
}

pg_psql() {
  "$PG_TEST_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$SCALESWEEP_TEST_DB" "$@"
}

pg_start() {
  PG_TEST_BINDIR=$(pg_bindir) || {
    echo "pgtest: PostgreSQL server programs (initdb, pg_ctl) not found" >&2; return 77; }
  PG_TEST_USER=
  if [ "$(id -u)" = 0 ]; then
    PG_TEST_USER=${SCALESWEEP_PG_USER:-postgres}
    id "$PG_TEST_USER" >/dev/null 2>&1 || {
      echo "pgtest: running as root, and user '$PG_TEST_USER' (who runs PostgreSQL) does not exist" >&2
      return 1; }
  fi
  # /tmp, not $TMPDIR: a Unix socket path must stay under ~100 bytes.
  PG_TEST_DIR=$(mktemp -d /tmp/sspg.XXXXXX) || return 1
  export PG_TEST_DIR PG_TEST_BINDIR PG_TEST_USER
  export PGTEST_SH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
  trap pg_stop EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  [ -z "$PG_TEST_USER" ] || chown "$PG_TEST_USER:" "$PG_TEST_DIR" || return 1
  _pg_as mkdir -m 700 "$PG_TEST_DIR/socket" || return 1
  _pg_as "$PG_TEST_BINDIR/initdb" -D "$PG_TEST_DIR/data" -U scalesweep -A trust --no-locale \
    -E UTF8 --no-sync >"$PG_TEST_DIR/initdb.log" 2>&1 || {
      echo "pgtest: initdb failed:" >&2; cat "$PG_TEST_DIR/initdb.log" >&2; return 1; }
  # Durability settings off unless SS_PG_DURABLE=1: a test cluster is thrown away
  # (a clean stop still writes everything, so pg_server_stop/start keep the data).
  local durable=off
  [ "${SS_PG_DURABLE:-0}" = 1 ] && durable=on
  _pg_as tee -a "$PG_TEST_DIR/data/postgresql.conf" >/dev/null <<CONF

# pgtest.sh
listen_addresses = ''
unix_socket_directories = '$PG_TEST_DIR/socket'
unix_socket_permissions = 0700
fsync = $durable
synchronous_commit = $durable
full_page_writes = $durable
CONF
  echo "local all all trust" | _pg_as tee "$PG_TEST_DIR/data/pg_hba.conf" >/dev/null
  pg_server_start || return 1
  export SCALESWEEP_TEST_DB="host=$PG_TEST_DIR/socket port=5432 user=scalesweep dbname=scalesweep"
  "$PG_TEST_BINDIR/createdb" -h "$PG_TEST_DIR/socket" -p 5432 -U scalesweep scalesweep || return 1
}

pg_stop() {
  [ -n "${PG_TEST_DIR:-}" ] || return 0
  pg_wait_restart 2>/dev/null
  if [ -f "$PG_TEST_DIR/data/postmaster.pid" ]; then
    pg_server_stop 2>/dev/null ||
      _pg_as "$PG_TEST_BINDIR/pg_ctl" -D "$PG_TEST_DIR/data" -m immediate -w -s stop >/dev/null 2>&1
  fi
  rm -rf "$PG_TEST_DIR"
  unset PG_TEST_DIR SCALESWEEP_TEST_DB
}

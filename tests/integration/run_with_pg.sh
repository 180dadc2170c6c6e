#!/usr/bin/env bash
# Runs COMMAND [ARGS...] against a throwaway PostgreSQL cluster (tests/pg/pgtest.sh):
# starts it, runs the command with SCALESWEEP_TEST_DB set, stops and removes the
# cluster, and exits with the command's status; 77 (skipped) when PostgreSQL is
# not installed.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../pg/pgtest.sh"
if ! pg_available; then
  echo "skipped: PostgreSQL server programs (initdb, pg_ctl) not found; install postgresql"
  exit 77
fi
pg_start || { echo "run_with_pg: could not start a PostgreSQL cluster" >&2; exit 1; }
"$@"
rc=$?
pg_stop
exit $rc

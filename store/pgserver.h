/* The private PostgreSQL of `scalesweep up`: a cluster under the state
 * directory, created on first use, started and stopped with `up`.
 *
 * Layout under STATE (the state directory):
 *   STATE/pg/data    the cluster (initdb on first use; the bootstrap
 *                    superuser is "scalesweep", and the database
 *                    "scalesweep" is created when missing)
 *   STATE/pg/socket  its Unix socket; no TCP at all (listen_addresses is
 *                    empty), and the socket is mode 0700, so only the
 *                    server's OS user (and root) can connect, with trust
 *                    authentication
 *   STATE/pg/log     the server log (appended to)
 * When STATE/pg/socket is too long for a Unix socket path (about 90
 * bytes), the socket goes to a fresh /tmp/scalesweep-pg-XXXXXX directory
 * instead, removed by pgs_stop.
 *
 * PostgreSQL refuses to run as root. When the caller is root, initdb,
 * pg_ctl and the server run as the owner of STATE/pg/data when it exists,
 * else as SCALESWEEP_PG_USER, else as "postgres"; STATE/pg is chowned to
 * that user, and STATE (when owned by root) gains o+x so that user can
 * reach STATE/pg (the directories above STATE must be searchable by it
 * too, or pgs_start says so). A caller that is not root runs everything as
 * itself and ignores SCALESWEEP_PG_USER.
 *
 * The binaries come from SCALESWEEP_PG_BINDIR, else the bin directory of
 * the existing cluster's major version under /usr/lib/postgresql, else
 * `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin.
 *
 * Both calls block (seconds: initdb, start, recovery after a crash) and
 * are meant for start-up and shutdown, before and after the event loop.
 * The server runs in its own session, so Ctrl-C at the terminal does not
 * reach it: stop it with pgs_stop. */
#ifndef SS_STORE_PGSERVER_H
#define SS_STORE_PGSERVER_H

#include <stddef.h>

/* Creates STATE (and parents) if missing, initdb on first use, starts the
 * server unless it is already running, waits until it accepts connections,
 * creates the database "scalesweep" if missing, and writes its libpq
 * conninfo to url_out:
 *   host='/abs/STATE/pg/socket' port=5432 user=scalesweep dbname=scalesweep
 * A stale postmaster.pid left by a crash is dealt with by pg_ctl and the
 * server. Returns 0, or an SS_E* code with a message in err (including
 * the tail of the server log when the server would not start). */
int pgs_start(const char *state_dir, char *url_out, size_t url_len, char *err, size_t errlen);

/* Stops the server of STATE (pg_ctl stop -m fast, waiting until it has
 * exited). Returns 0 also when it was not running or STATE has no cluster;
 * an SS_E* code with a message in err when it could not be stopped. */
int pgs_stop(const char *state_dir, char *err, size_t errlen);

#endif

/* db_migrate: applies the embedded SQL migrations (db.h), blocking.
 *
 * The advisory lock is taken before schema_migrations is created: two
 * sessions running CREATE TABLE IF NOT EXISTS at the same moment can both
 * miss the table and one then fails on the catalog's unique index. A
 * migration runs with the simple query protocol (a file holds several
 * statements and has no parameters) inside BEGIN ... COMMIT together with
 * the insert of its schema_migrations row, so it is applied whole or not at
 * all; statements that cannot run in a transaction block (CREATE INDEX
 * CONCURRENTLY, ...) are therefore not allowed in migrations. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "store/db.h"
#include "store/internal.h"
#include "store/migrate.h"

/* pg_advisory_lock's key for migrations: the bytes of "scalswep". */
#define MIGRATE_LOCK_KEY "8314596455477634416"

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* Runs sql (parameters as in PQexecParams); 0, or SS_EIO with the server's
 * message after what. */
static int exec(PGconn *c, const char *sql, int n, const char *const *params, const char *what,
                char *err, size_t errlen) {
  PGresult *r = n ? PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0) : PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
    PQclear(r);
    return 0;
  }
  err_setf(err, errlen, "%s: %s", what, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
  PQclear(r);
  return SS_EIO;
}

static int apply(PGconn *c, const db_migration *m, char *err, size_t errlen) {
  char what[128], version[16];
  snprintf(what, sizeof what, "migration %03d_%s", m->version, m->name);
  snprintf(version, sizeof version, "%d", m->version);
  const char *const row[] = {version, m->name};
  int rc = exec(c, "BEGIN", 0, NULL, what, err, errlen);
  if (!rc)
    rc = exec(c, m->sql, 0, NULL, what, err, errlen);
  if (!rc)
    rc = exec(c, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, row, what, err,
              errlen);
  if (!rc)
    rc = exec(c, "COMMIT", 0, NULL, what, err, errlen);
  if (rc)
    PQclear(PQexec(c, "ROLLBACK"));
  return rc;
}

static int migrate_locked(PGconn *c, int *applied, char *err, size_t errlen) {
  int rc = exec(c,
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY,"
                " name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())",
                0, NULL, "creating schema_migrations", err, errlen);
  if (rc)
    return rc;
  PGresult *r = PQexec(c, "SELECT version FROM schema_migrations");
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    err_setf(err, errlen, "reading schema_migrations: %s", PQresultErrorMessage(r));
    PQclear(r);
    return SS_EIO;
  }
  int ndone = PQntuples(r);
  for (int i = 0; i < db_nmigrations && !rc; i++) {
    int done = 0;
    for (int j = 0; j < ndone && !done; j++)
      done = atoi(PQgetvalue(r, j, 0)) == db_migrations[i].version;
    if (done)
      continue;
    rc = apply(c, &db_migrations[i], err, errlen);
    if (!rc)
      (*applied)++;
  }
  PQclear(r);
  return rc;
}

PGconn *store__connect_blocking(const char *url, const char *app, int *rc, char *err,
                                size_t errlen) {
  static const char *const keys[] = {"fallback_application_name", "connect_timeout", "dbname",
                                     NULL};
  const char *const vals[] = {app, "10", url ? url : "", NULL};
  PGconn *c = PQconnectdbParams(keys, vals, 1);
  if (!c) {
    err_setf(err, errlen, "out of memory");
    *rc = SS_ENOMEM;
    return NULL;
  }
  if (PQstatus(c) != CONNECTION_OK) {
    err_setf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(c));
    PQfinish(c);
    *rc = SS_EIO;
    return NULL;
  }
  return c;
}

int db_migrate(const char *url, int *applied, char *err, size_t errlen) {
  int dummy;
  if (!applied)
    applied = &dummy;
  *applied = 0;
  if (err && errlen)
    err[0] = '\0';
  int rc;
  PGconn *c = store__connect_blocking(url, "scalesweep-migrate", &rc, err, errlen);
  if (!c)
    return rc;
  PQsetNoticeProcessor(c, quiet, NULL);
  rc = exec(c, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", 0, NULL,
            "taking the migration lock", err, errlen);
  if (!rc) {
    rc = migrate_locked(c, applied, err, errlen);
    /* Ending the session would release the lock too; unlock to be tidy. */
    PQclear(PQexec(c, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
  }
  PQfinish(c);
  return rc;
}

/* Shared scaffolding of the store's PostgreSQL tests (db_testlib.h). */
#include "db_testlib.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "store/migrate.h"

const char *dbt_base_url;

char *dbt_url_with_db(const char *dbname) {
  char *errmsg = NULL;
  PQconninfoOption *opts = PQconninfoParse(dbt_base_url, &errmsg);
  if (!opts) {
    fprintf(stderr, "bad SCALESWEEP_TEST_DB: %s\n", errmsg ? errmsg : "?");
    exit(1);
  }
  size_t cap = 4096, n = 0;
  char *out = malloc(cap);
  out[0] = '\0';
  for (PQconninfoOption *o = opts; o->keyword; o++) {
    const char *v = strcmp(o->keyword, "dbname") ? o->val : dbname;
    if (!v)
      continue;
    n += (size_t)snprintf(out + n, cap - n, "%s='", o->keyword);
    for (; *v && n + 4 < cap; v++) {
      if (*v == '\'' || *v == '\\')
        out[n++] = '\\';
      out[n++] = *v;
    }
    n += (size_t)snprintf(out + n, cap - n, "' ");
  }
  PQconninfoFree(opts);
  return out;
}

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

PGconn *dbt_connect(const char *url) {
  PGconn *c = PQconnectdb(url);
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "cannot connect to %s: %s\n", url, PQerrorMessage(c));
    exit(1);
  }
  PQsetNoticeProcessor(c, quiet, NULL);
  return c;
}

int dbt_exec(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  int rc = 0;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    fprintf(stderr, "%s: %s\n", sql, PQresultErrorMessage(r));
    rc = -1;
  }
  PQclear(r);
  return rc;
}

int dbt_fresh_database(const char *name) {
  PGconn *c = dbt_connect(dbt_base_url);
  char sql[256];
  snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
  int rc = dbt_exec(c, sql);
  snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
  rc |= dbt_exec(c, sql);
  PQfinish(c);
  return rc;
}

long dbt_count(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  long n = PQresultStatus(r) == PGRES_TUPLES_OK ? atol(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return n;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  return remove(path);
}

void dbt_rmtree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

int dbt_run(int argc, char **argv, const dbt_test *tests, size_t n, const int *failures) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dbt_base_url = getenv("SCALESWEEP_TEST_DB");
  if (!dbt_base_url || !*dbt_base_url) {
    printf("skipped: %s\n",
           "SCALESWEEP_TEST_DB not set (run through tests/integration/run_with_pg.sh)");
    return 77;
  }
  for (size_t i = 0; i < n; i++) {
    int wanted = argc < 2;
    for (int j = 1; j < argc; j++)
      wanted |= !strcmp(argv[j], tests[i].name);
    if (!wanted)
      continue;
    uint64_t t0 = uv_hrtime();
    int before = *failures;
    tests[i].fn();
    printf("%-20s %s (%.1f s)\n", tests[i].name, *failures > before ? "FAILED" : "ok",
           (double)(uv_hrtime() - t0) / 1e9);
  }
  return 0;
}

char *dbt_migrated_db(const char *name) {
  if (dbt_fresh_database(name) != 0) {
    fprintf(stderr, "cannot create database %s\n", name);
    exit(1);
  }
  char *url = dbt_url_with_db(name);
  int applied;
  char err[512];
  if (db_migrate(url, &applied, err, sizeof err) != 0) {
    fprintf(stderr, "migrating %s: %s\n", name, err);
    exit(1);
  }
  return url;
}

int dbt_run_until(uv_loop_t *loop, const int *v, int target, double secs) {
  uv_update_time(loop);
  uint64_t end = uv_now(loop) + (uint64_t)(secs * 1000);
  while (*v < target) {
    if (uv_now(loop) >= end)
      return 0;
    uv_run(loop, UV_RUN_ONCE);
  }
  return 1;
}

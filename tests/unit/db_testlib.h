/* What the store's tests against a real PostgreSQL share (test_db.c,
 * test_migrate.c, test_pgserver.c, test_store_lr_tune.c): the cluster that
 * tests/integration/run_with_pg.sh started (SCALESWEEP_TEST_DB), fresh
 * databases in it, blocking queries, and a main that runs the named tests. */
#ifndef SS_TESTS_DB_TESTLIB_H
#define SS_TESTS_DB_TESTLIB_H

#include <libpq-fe.h>
#include <stddef.h>
#include <uv.h>

/* SCALESWEEP_TEST_DB, set by dbt_run before the tests run. */
extern const char *dbt_base_url;

/* dbt_base_url with dbname replaced; malloc'd. */
char *dbt_url_with_db(const char *dbname);

/* A connection to url with notices silenced; exits the test when it fails. */
PGconn *dbt_connect(const char *url);

/* Runs sql; 0 when it succeeded, else -1 with the statement and the error
 * on stderr. */
int dbt_exec(PGconn *c, const char *sql);

/* DROP DATABASE IF EXISTS name, then CREATE DATABASE name; 0 or -1. */
int dbt_fresh_database(const char *name);

/* The first column of the first row of sql as a number; -1 when it fails. */
long dbt_count(PGconn *c, const char *sql);

/* A fresh database name with every migration applied; its URL, malloc'd.
 * Exits the test, saying why, when either fails. */
char *dbt_migrated_db(const char *name);

/* Runs loop until *v >= target: 1, or 0 after secs seconds without (the
 * loop needs a repeating timer so that UV_RUN_ONCE returns to look). */
int dbt_run_until(uv_loop_t *loop, const int *v, int target, double secs);

/* rm -rf dir */
void dbt_rmtree(const char *dir);

typedef struct dbt_test {
  const char *name;
  void (*fn)(void);
} dbt_test;

/* `test_x [NAME...]`: runs the named tests only (all without arguments),
 * printing each one's name, ok or FAILED (from *failures, the program's
 * check count) and time. Returns 77 (skipped, with the reason printed)
 * when SCALESWEEP_TEST_DB is not set, else 0. */
int dbt_run(int argc, char **argv, const dbt_test *tests, size_t n, const int *failures);

/* main() of a test program: `NAME [TEST...]` runs the tests given, each
 * {"name", fn}, through dbt_run. */
#define DBT_MAIN(...)                                                                    \
  int main(int argc, char **argv) {                                                      \
    static const dbt_test tests[] = {__VA_ARGS__};                                       \
    if (dbt_run(argc, argv, tests, sizeof tests / sizeof *tests, &check__failures) != 0) \
      return 77;                                                                         \
    CHECK_DONE();                                                                        \
  }

/* One statement that must succeed, counted as a failed check if not. */
#define DBT_EXEC_OK(c, sql) CHECK(dbt_exec((c), (sql)) == 0)

#endif

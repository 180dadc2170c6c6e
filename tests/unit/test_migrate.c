/* store/migrate.c (the embedded migrations, applied once, concurrently,
 * and the schema's constraints) and cli/cmd_migrate.c against a real
 * PostgreSQL: run by tests/integration/run_with_pg.sh, which starts a
 * throwaway cluster and sets SCALESWEEP_TEST_DB. */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db_testlib.h"
#include "cli/commands.h"
#include "store/db.h"
#include "store/migrate.h"

static void test_embedded(void) {
  CHECK(db_nmigrations >= 1);
  CHECK_INT_EQ(db_migrations[0].version, 1);
  CHECK(!strcmp(db_migrations[0].name, "init"));
  CHECK(strstr(db_migrations[0].sql, "CREATE TABLE metrics") != NULL);
  for (int i = 1; i < db_nmigrations; i++)
    CHECK(db_migrations[i].version > db_migrations[i - 1].version);
}

static void test_migrate_once(void) {
  CHECK_INT_EQ(dbt_fresh_database("ss_mig1"), 0);
  char *url = dbt_url_with_db("ss_mig1");
  int applied = -1;
  char err[512];
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  CHECK_INT_EQ(applied, db_nmigrations);
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  CHECK_INT_EQ(applied, 0);
  PGconn *c = dbt_connect(url);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM schema_migrations WHERE version = 1 AND name = "
                            "'init' AND applied_at IS NOT NULL"),
               1);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM information_schema.tables WHERE table_name IN "
                            "('sweeps', 'runs', 'metrics', 'fits', 'workers')"),
               5);
  PQfinish(c);
  free(url);

  /* unreachable: an error, not a crash */
  applied = -1;
  int rc = db_migrate("host=/nonexistent-dir port=1 dbname=x", &applied, err, sizeof err);
  CHECK(rc < 0);
  CHECK_INT_EQ(applied, 0);
  CHECK(strstr(err, "cannot connect") != NULL);
}

typedef struct mig_thread {
  const char *url;
  pthread_barrier_t *barrier;
  int rc, applied;
  char err[512];
} mig_thread;

static void *migrate_thread(void *arg) {
  mig_thread *t = arg;
  pthread_barrier_wait(t->barrier);
  t->rc = db_migrate(t->url, &t->applied, t->err, sizeof t->err);
  return NULL;
}

static void test_migrate_concurrent(void) {
  enum { N = 4 };
  CHECK_INT_EQ(dbt_fresh_database("ss_mig2"), 0);
  char *url = dbt_url_with_db("ss_mig2");
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, N);
  mig_thread t[N];
  pthread_t tid[N];
  for (int i = 0; i < N; i++) {
    t[i] = (mig_thread){.url = url, .barrier = &barrier};
    pthread_create(&tid[i], NULL, migrate_thread, &t[i]);
  }
  int total = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(tid[i], NULL);
    if (t[i].rc)
      fprintf(stderr, "thread %d: %s\n", i, t[i].err);
    CHECK_INT_EQ(t[i].rc, 0);
    total += t[i].applied;
  }
  pthread_barrier_destroy(&barrier);
  CHECK_INT_EQ(total, db_nmigrations);
  PGconn *c = dbt_connect(url);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  PQfinish(c);
  free(url);
}

/* The schema forbids bad states. */
static void test_constraints(void) {
  char *url = dbt_migrated_db("ss_constraints");
  PGconn *c = dbt_connect(url);
  DBT_EXEC_OK(c, "INSERT INTO sweeps (name, spec, spec_hash, owner_id) VALUES ('s', '{}', 'h1', "
                 "(SELECT id FROM users WHERE name = 'admin'))");
  DBT_EXEC_OK(c, "INSERT INTO workers (name, host) VALUES ('w1', 'localhost')");

  PGresult *r = PQexec(c, "INSERT INTO runs (sweep_id, config, config_hash, status) "
                          "SELECT id, '{}', 'c', 'running' FROM sweeps");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  CHECK(state && !strcmp(state, "23514"));
  CHECK(strstr(PQresultErrorMessage(r), "running_has_lease") != NULL);
  PQclear(r);

  DBT_EXEC_OK(c,
              "INSERT INTO runs (sweep_id, config, config_hash) SELECT id, '{}', 'c' FROM sweeps");
  DBT_EXEC_OK(c, "UPDATE runs SET status = 'running', worker = (SELECT id FROM workers), "
                 "lease_until = now() + interval '30 s'");
  r = PQexec(c, "UPDATE runs SET lease_until = NULL");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = PQexec(c, "UPDATE runs SET status = 'queued'"); /* queued while holding a worker */
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = PQexec(c, "UPDATE runs SET status = 'lost'");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = PQexec(c, "UPDATE runs SET attempt = max_attempts + 1");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = PQexec(c, "INSERT INTO sweeps (name, spec, spec_hash, owner_id) VALUES ('again', '{}', 'h1', "
                "(SELECT id FROM users WHERE name = 'admin'))");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);

  /* metrics: a resent row changes nothing */
  const char *ins = "INSERT INTO metrics (run_id, step, tokens, train_loss) "
                    "SELECT id, 0, 256, %s FROM runs ON CONFLICT DO NOTHING";
  char sql[256];
  snprintf(sql, sizeof sql, ins, "3.5");
  r = PQexec(c, sql);
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  CHECK(!strcmp(PQcmdTuples(r), "1"));
  PQclear(r);
  snprintf(sql, sizeof sql, ins, "9.9");
  r = PQexec(c, sql);
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  CHECK(!strcmp(PQcmdTuples(r), "0"));
  PQclear(r);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM metrics"), 1);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM metrics WHERE train_loss = 3.5"), 1);
  r = PQexec(c, "INSERT INTO metrics (run_id, step, tokens) SELECT id, 0, 1 FROM runs");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR); /* without ON CONFLICT: refused */
  PQclear(r);
  /* deleting a sweep deletes its runs and their metrics: by the trigger of
   * migration 004, which replaced the per-row foreign key check */
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM pg_trigger WHERE tgname = 'runs_delete_metrics'"),
               1);
  CHECK_INT_EQ(dbt_count(c,
                         "SELECT count(*) FROM pg_constraint WHERE conrelid = 'metrics'::regclass "
                         "AND contype = 'f'"),
               0);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM metrics WHERE run_id IN (SELECT id FROM runs)"),
               1);
  r = PQexec(c, "DELETE FROM sweeps WHERE id = (SELECT sweep_id FROM runs WHERE id = "
                "(SELECT run_id FROM metrics))");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  PQclear(r);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM metrics"), 0);
  PQfinish(c);
  free(url);
}

/* ---- scalesweep migrate --------------------------------------------------- */

static int migrate_cli(int argc, const char **args) {
  char *argv[8];
  for (int i = 0; i < argc; i++)
    argv[i] = (char *)args[i];
  argv[argc] = NULL;
  fflush(stdout);
  return cmd_migrate(argc, argv);
}

static void test_cmd_migrate(void) {
  CHECK_INT_EQ(dbt_fresh_database("ss_mig3"), 0);
  char *url = dbt_url_with_db("ss_mig3");
  const char *none[] = {"migrate"};
  CHECK_INT_EQ(migrate_cli(1, none), 2);
  const char *bad[] = {"migrate", "--frobnicate"};
  CHECK_INT_EQ(migrate_cli(2, bad), 2);
  const char *novalue[] = {"migrate", "--database"};
  CHECK_INT_EQ(migrate_cli(2, novalue), 2);
  const char *down[] = {"migrate", "--database", "host=/nonexistent-dir port=1 dbname=x"};
  CHECK_INT_EQ(migrate_cli(3, down), 1);
  const char *ok[] = {"migrate", "--database", url};
  CHECK_INT_EQ(migrate_cli(3, ok), 0);
  CHECK_INT_EQ(migrate_cli(3, ok), 0);
  PGconn *c = dbt_connect(url);
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  PQfinish(c);
  free(url);
}

/* test_migrate [NAME...]: runs the named tests only (all without arguments). */
DBT_MAIN({"embedded", test_embedded}, {"migrate_once", test_migrate_once},
         {"migrate_concurrent", test_migrate_concurrent}, {"constraints", test_constraints},
         {"cmd_migrate", test_cmd_migrate})

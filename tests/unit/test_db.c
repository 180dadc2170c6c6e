/* scheduler/db.c, migrate.c, pgserver.c and cli/cmd_migrate.c against a real
 * PostgreSQL: run by tests/integration/run_with_pg.sh, which starts a
 * throwaway cluster and sets SCALESWEEP_TEST_DB (and PGTEST_SH, so that the
 * reconnect test can stop and start that server). */
#include <errno.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "cli/commands.h"
#include "store/db.h"
#include "store/migrate.h"
#include "store/pgserver.h"

static const char *base_url;

/* ---- blocking helpers ---------------------------------------------------- */

/* base_url with dbname replaced; malloc'd. */
static char *url_with_db(const char *dbname) {
  char *errmsg = NULL;
  PQconninfoOption *opts = PQconninfoParse(base_url, &errmsg);
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

static PGconn *connect_url(const char *url) {
  PGconn *c = PQconnectdb(url);
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "cannot connect to %s: %s\n", url, PQerrorMessage(c));
    exit(1);
  }
  PQsetNoticeProcessor(c, quiet, NULL);
  return c;
}

/* Runs sql; returns its result (caller clears). */
static PGresult *q(PGconn *c, const char *sql) { return PQexec(c, sql); }

static void exec_ok(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    fprintf(stderr, "%s: %s\n", sql, PQresultErrorMessage(r));
    check__failures++;
  }
  PQclear(r);
}

static void fresh_database(const char *name) {
  PGconn *c = connect_url(base_url);
  char sql[256];
  snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
  exec_ok(c, sql);
  snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
  exec_ok(c, sql);
  PQfinish(c);
}

static long count(PGconn *c, const char *sql) {
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

/* ---- migrations ---------------------------------------------------------- */

static void test_embedded(void) {
  CHECK(db_nmigrations >= 1);
  CHECK_INT_EQ(db_migrations[0].version, 1);
  CHECK(!strcmp(db_migrations[0].name, "init"));
  CHECK(strstr(db_migrations[0].sql, "CREATE TABLE metrics") != NULL);
  for (int i = 1; i < db_nmigrations; i++)
    CHECK(db_migrations[i].version > db_migrations[i - 1].version);
}

static void test_migrate_once(void) {
  fresh_database("ss_mig1");
  char *url = url_with_db("ss_mig1");
  int applied = -1;
  char err[512];
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  CHECK_INT_EQ(applied, db_nmigrations);
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  CHECK_INT_EQ(applied, 0);
  PGconn *c = connect_url(url);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM schema_migrations WHERE version = 1 AND name = "
                        "'init' AND applied_at IS NOT NULL"),
               1);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM information_schema.tables WHERE table_name IN "
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
  fresh_database("ss_mig2");
  char *url = url_with_db("ss_mig2");
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
  PGconn *c = connect_url(url);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  PQfinish(c);
  free(url);
}

/* The schema forbids bad states. */
static void test_constraints(void) {
  fresh_database("ss_constraints");
  char *url = url_with_db("ss_constraints");
  int applied;
  char err[512];
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  PGconn *c = connect_url(url);
  exec_ok(c, "INSERT INTO sweeps (name, spec, spec_hash) VALUES ('s', '{}', 'h1')");
  exec_ok(c, "INSERT INTO workers (name, host) VALUES ('w1', 'localhost')");

  PGresult *r = q(c, "INSERT INTO runs (sweep_id, config, config_hash, status) "
                     "SELECT id, '{}', 'c', 'running' FROM sweeps");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  CHECK(state && !strcmp(state, "23514"));
  CHECK(strstr(PQresultErrorMessage(r), "running_has_lease") != NULL);
  PQclear(r);

  exec_ok(c, "INSERT INTO runs (sweep_id, config, config_hash) SELECT id, '{}', 'c' FROM sweeps");
  exec_ok(c, "UPDATE runs SET status = 'running', worker = (SELECT id FROM workers), "
             "lease_until = now() + interval '30 s'");
  r = q(c, "UPDATE runs SET lease_until = NULL");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = q(c, "UPDATE runs SET status = 'queued'"); /* queued while holding a worker */
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = q(c, "UPDATE runs SET status = 'lost'");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = q(c, "UPDATE runs SET attempt = max_attempts + 1");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  r = q(c, "INSERT INTO sweeps (name, spec, spec_hash) VALUES ('again', '{}', 'h1')");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);

  /* metrics: a resent row changes nothing */
  const char *ins = "INSERT INTO metrics (run_id, step, tokens, train_loss) "
                    "SELECT id, 0, 256, %s FROM runs ON CONFLICT DO NOTHING";
  char sql[256];
  snprintf(sql, sizeof sql, ins, "3.5");
  r = q(c, sql);
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  CHECK(!strcmp(PQcmdTuples(r), "1"));
  PQclear(r);
  snprintf(sql, sizeof sql, ins, "9.9");
  r = q(c, sql);
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  CHECK(!strcmp(PQcmdTuples(r), "0"));
  PQclear(r);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM metrics"), 1);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM metrics WHERE train_loss = 3.5"), 1);
  r = q(c, "INSERT INTO metrics (run_id, step, tokens) SELECT id, 0, 1 FROM runs");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR); /* without ON CONFLICT: refused */
  PQclear(r);
  /* deleting a sweep deletes its runs and their metrics: by the trigger of
   * migration 004, which replaced the per-row foreign key check */
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM pg_trigger WHERE tgname = 'runs_delete_metrics'"), 1);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'metrics'::regclass "
                        "AND contype = 'f'"),
               0);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM metrics WHERE run_id IN (SELECT id FROM runs)"), 1);
  r = q(c, "DELETE FROM sweeps WHERE id = (SELECT sweep_id FROM runs WHERE id = "
           "(SELECT run_id FROM metrics))");
  CHECK_INT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  PQclear(r);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM metrics"), 0);
  PQfinish(c);
  free(url);
}

/* ---- the asynchronous layer ---------------------------------------------- */

typedef struct qres {
  int done, status, order, ntuples, null0;
  char msg[256], v0[64], v1[64];
} qres;

static int ncompleted;
static uv_timer_t tick;

static void on_res(void *ud, int status, PGresult *res, const char *errmsg) {
  qres *r = ud;
  CHECK(!r->done);
  r->done = 1;
  r->status = status;
  r->order = ncompleted++;
  if (status == 0) {
    CHECK(res != NULL);
  } else {
    CHECK(res == NULL);
    CHECK(errmsg != NULL);
  }
  if (errmsg)
    snprintf(r->msg, sizeof r->msg, "%s", errmsg);
  if (res) {
    r->ntuples = PQntuples(res);
    if (r->ntuples > 0 && PQnfields(res) > 0) {
      r->null0 = PQgetisnull(res, 0, 0);
      snprintf(r->v0, sizeof r->v0, "%s", PQgetvalue(res, 0, 0));
      if (PQnfields(res) > 1)
        snprintf(r->v1, sizeof r->v1, "%s", PQgetvalue(res, 0, 1));
    }
  }
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* Runs the loop until *v >= target; 0 on timeout. */
static int run_until(uv_loop_t *loop, const int *v, int target, double secs) {
  uv_update_time(loop);
  uint64_t end = uv_now(loop) + (uint64_t)(secs * 1000);
  while (*v < target) {
    if (uv_now(loop) >= end)
      return 0;
    uv_run(loop, UV_RUN_ONCE);
  }
  return 1;
}

static void run_for(uv_loop_t *loop, int ms) {
  uv_update_time(loop);
  uint64_t end = uv_now(loop) + (uint64_t)ms;
  while (uv_now(loop) < end)
    uv_run(loop, UV_RUN_ONCE);
}

static int all_done(const qres *r, int n) {
  for (int i = 0; i < n; i++)
    if (!r[i].done)
      return 0;
  return 1;
}

static int wait_done(uv_loop_t *loop, qres *r, int n, double secs) {
  uv_update_time(loop);
  uint64_t end = uv_now(loop) + (uint64_t)(secs * 1000);
  while (!all_done(r, n)) {
    if (uv_now(loop) >= end)
      return 0;
    uv_run(loop, UV_RUN_ONCE);
  }
  return 1;
}

static db *chain_db;
static qres chain_second;

static void on_chain(void *ud, int status, PGresult *res, const char *errmsg) {
  on_res(ud, status, res, errmsg);
  db_query(chain_db, "SELECT 'chained'", 0, NULL, on_res, &chain_second);
}

static int closed;
static void on_closed(void *ud) { *(int *)ud += 1; }

static void test_async_basics(uv_loop_t *loop) {
  fresh_database("ss_async");
  char *url = url_with_db("ss_async");
  PGconn *c = connect_url(url);
  exec_ok(c, "CREATE TABLE tt (x integer PRIMARY KEY)");
  PQfinish(c);

  db *d = db_open(loop, url);
  CHECK(d != NULL);

  /* in order, queued before the connection is up */
  enum { N = 50 };
  static qres r[N];
  char num[16];
  for (int i = 0; i < N; i++) {
    snprintf(num, sizeof num, "%d", i);
    const char *p[] = {num};
    db_query(d, "SELECT $1::int", 1, p, on_res, &r[i]);
    num[0] = 'x'; /* the layer copied the parameter */
  }
  CHECK_INT_EQ(db_queue_length(d), N);
  CHECK(wait_done(loop, r, N, 10));
  CHECK(db_ready(d));
  for (int i = 0; i < N; i++) {
    CHECK_INT_EQ(r[i].status, 0);
    CHECK_INT_EQ(r[i].order, r[0].order + i);
    CHECK_INT_EQ(atoi(r[i].v0), i);
  }
  CHECK_INT_EQ(db_queue_length(d), 0);

  /* NULL parameters */
  qres rn = {0}, rn2 = {0};
  const char *pn[] = {NULL, "41"};
  db_query(d, "SELECT $1::text IS NULL, $2::int + 1", 2, pn, on_res, &rn);
  db_query(d, "SELECT $1::text", 1, pn, on_res, &rn2);
  CHECK(!rn.done); /* callbacks never run inside db_query */
  CHECK(wait_done(loop, &rn2, 1, 5));
  CHECK(rn.done && rn.status == 0 && !strcmp(rn.v0, "t") && !strcmp(rn.v1, "42"));
  CHECK(rn2.status == 0 && rn2.null0 == 1);

  /* a failing query: the server's message, and the next one still runs */
  qres rf = {0}, rnext = {0};
  db_query(d, "SELECT * FROM no_such_table", 0, NULL, on_res, &rf);
  db_query(d, "SELECT 7", 0, NULL, on_res, &rnext);
  CHECK(wait_done(loop, &rnext, 1, 5));
  CHECK_INT_EQ(rf.status, SS_EQUERY);
  CHECK(strstr(rf.msg, "no_such_table") != NULL && strstr(rf.msg, "does not exist") != NULL);
  CHECK(rnext.status == 0 && !strcmp(rnext.v0, "7"));
  CHECK(db_ready(d));

  /* a transaction: the last statement's result; a query queued behind it
   * does not run inside it (SET LOCAL is gone after COMMIT) */
  qres rt = {0}, rafter = {0};
  {
    const char *sqls[] = {"INSERT INTO tt VALUES ($1)", "SET LOCAL application_name = 'in_tx'",
                          "INSERT INTO tt VALUES ($1) RETURNING x, current_setting($2)"};
    const int np[] = {1, 0, 2};
    const char *p0[] = {"1"}, *p2[] = {"2", "application_name"};
    const char *const *ps[] = {p0, NULL, p2};
    db_tx(d, 3, sqls, np, ps, on_res, &rt);
    db_query(d, "SELECT current_setting('application_name')", 0, NULL, on_res, &rafter);
  }
  CHECK(wait_done(loop, &rafter, 1, 5));
  CHECK_INT_EQ(rt.status, 0);
  CHECK(!strcmp(rt.v0, "2") && !strcmp(rt.v1, "in_tx"));
  CHECK(rafter.status == 0 && strcmp(rafter.v0, "in_tx") != 0);

  /* a transaction that fails rolls back everything */
  qres rb = {0}, rcount = {0}, rtx0 = {0}, rtxnull = {0};
  {
    const char *sqls[] = {"INSERT INTO tt VALUES (10)", "INSERT INTO tt VALUES (11)",
                          "INSERT INTO tt VALUES (10)", "INSERT INTO tt VALUES (12)"};
    db_tx(d, 4, sqls, NULL, NULL, on_res, &rb);
    db_query(d, "SELECT count(*) FROM tt WHERE x >= 10", 0, NULL, on_res, &rcount);
    db_tx(d, 0, NULL, NULL, NULL, on_res, &rtx0);
    const char *s1[] = {"SELECT $1::text IS NULL"};
    const int np[] = {1};
    db_tx(d, 1, s1, np, NULL, on_res, &rtxnull);
  }
  CHECK(wait_done(loop, &rtxnull, 1, 5));
  CHECK_INT_EQ(rb.status, SS_EQUERY);
  CHECK(strstr(rb.msg, "duplicate key") != NULL);
  CHECK(rcount.status == 0 && !strcmp(rcount.v0, "0"));
  CHECK_INT_EQ(rtx0.status, 0);
  CHECK(rtxnull.status == 0 && !strcmp(rtxnull.v0, "t"));

  /* a query queued from inside a callback */
  qres rc1 = {0};
  memset(&chain_second, 0, sizeof chain_second);
  chain_db = d;
  db_query(d, "SELECT 'first'", 0, NULL, on_chain, &rc1);
  CHECK(wait_done(loop, &chain_second, 1, 5));
  CHECK(rc1.status == 0 && chain_second.status == 0);
  CHECK(!strcmp(chain_second.v0, "chained"));

  /* COPY is refused, and the layer recovers */
  qres rcopy = {0}, rpost = {0};
  db_query(d, "COPY tt FROM STDIN", 0, NULL, on_res, &rcopy);
  db_query(d, "SELECT 8", 0, NULL, on_res, &rpost);
  CHECK(wait_done(loop, &rpost, 1, 10));
  CHECK_INT_EQ(rcopy.status, SS_EQUERY);
  CHECK(rpost.status == 0 && !strcmp(rpost.v0, "8"));

  /* db_close with a query in flight and one waiting: both fail */
  qres rslow = {0}, rwait = {0}, rlate = {0};
  db_query(d, "SELECT pg_sleep(10)", 0, NULL, on_res, &rslow);
  db_query(d, "SELECT 1", 0, NULL, on_res, &rwait);
  run_for(loop, 100);
  closed = 0;
  db_close(d, on_closed, &closed);
  CHECK(rslow.done && rslow.status == SS_ECONN);
  CHECK(rwait.done && rwait.status == SS_ECONN);
  db_query(d, "SELECT 1", 0, NULL, on_res, &rlate); /* before the close callback */
  CHECK(rlate.done && rlate.status == SS_ECONN);
  CHECK(run_until(loop, &closed, 1, 5));
  free(url);
}

/* An unreachable server: queries wait; db_close fails them. */
static void test_async_unreachable(uv_loop_t *loop) {
  db *d = db_open(loop, "host=/nonexistent-dir port=1 dbname=x");
  qres r[3] = {{0}};
  for (int i = 0; i < 3; i++)
    db_query(d, "SELECT 1", 0, NULL, on_res, &r[i]);
  run_for(loop, 400); /* attempts at 0, 100, 300 ms */
  CHECK(!db_ready(d));
  CHECK_INT_EQ(db_queue_length(d), 3);
  CHECK(!r[0].done && !r[1].done && !r[2].done);
  closed = 0;
  db_close(d, on_closed, &closed);
  for (int i = 0; i < 3; i++)
    CHECK(r[i].done && r[i].status == SS_ECONN);
  CHECK(run_until(loop, &closed, 1, 5));
}

static int helper_done;
static int64_t helper_status;

static void on_helper_exit(uv_process_t *p, int64_t status, int sig) {
  helper_status = sig ? 128 + sig : status;
  helper_done = 1;
  uv_close((uv_handle_t *)p, NULL);
}

/* Runs a pgtest.sh function (pg_server_stop, pg_server_start) in a child
 * while the loop keeps running. */
static int pg_helper(uv_loop_t *loop, const char *fn) {
  static uv_process_t proc;
  char script[128];
  snprintf(script, sizeof script, ". \"$PGTEST_SH\" && %s", fn);
  char *args[] = {"bash", "-c", script, NULL};
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 1;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.file = "bash";
  o.args = args;
  o.exit_cb = on_helper_exit;
  o.stdio = stdio;
  o.stdio_count = 3;
  helper_done = 0;
  int rc = uv_spawn(loop, &proc, &o);
  if (rc) {
    fprintf(stderr, "uv_spawn: %s\n", uv_strerror(rc));
    return -1;
  }
  if (!run_until(loop, &helper_done, 1, 90))
    return -1;
  run_for(loop, 1); /* the process handle's close callback */
  return (int)helper_status;
}

/* PostgreSQL stops with a query in flight and five waiting, and comes back. */
static void test_async_reconnect(uv_loop_t *loop) {
  if (!getenv("PGTEST_SH")) {
    printf("reconnect test skipped: PGTEST_SH not set (run through run_with_pg.sh)\n");
    return;
  }
  char *url = url_with_db("ss_async");
  db *d = db_open(loop, url);
  qres first = {0};
  db_query(d, "SELECT 1", 0, NULL, on_res, &first);
  CHECK(wait_done(loop, &first, 1, 10));
  CHECK(db_ready(d));

  enum { N = 5 };
  qres slow = {0}, r[N];
  memset(r, 0, sizeof r);
  db_query(d, "SELECT pg_sleep(30)", 0, NULL, on_res, &slow);
  char num[16];
  for (int i = 0; i < N; i++) {
    snprintf(num, sizeof num, "%d", 100 + i);
    const char *p[] = {num};
    db_query(d, "SELECT $1::int", 1, p, on_res, &r[i]);
  }
  run_for(loop, 200);
  CHECK_INT_EQ(pg_helper(loop, "pg_server_stop"), 0);
  CHECK(wait_done(loop, &slow, 1, 10));
  CHECK_INT_EQ(slow.status, SS_ECONN);
  run_for(loop, 700); /* a few failed attempts: 100, 200, 400 ms */
  CHECK(!db_ready(d));
  CHECK_INT_EQ(db_queue_length(d), N);
  for (int i = 0; i < N; i++)
    CHECK(!r[i].done);

  CHECK_INT_EQ(pg_helper(loop, "pg_server_start"), 0);
  CHECK(wait_done(loop, r, N, 20));
  CHECK(db_ready(d));
  for (int i = 0; i < N; i++) {
    CHECK_INT_EQ(r[i].status, 0);
    CHECK_INT_EQ(atoi(r[i].v0), 100 + i);
    CHECK_INT_EQ(r[i].order, r[0].order + i);
  }
  closed = 0;
  db_close(d, on_closed, &closed);
  CHECK(run_until(loop, &closed, 1, 5));
  free(url);
}

static void test_async(void) {
  uv_loop_t loop;
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 20, 20); /* so UV_RUN_ONCE returns to check timeouts */
  test_async_basics(&loop);
  test_async_unreachable(&loop);
  test_async_reconnect(&loop);
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
}

/* ---- the private server of `up` ------------------------------------------ */

/* The host='...' of a pgs_start conninfo (in place). */
static const char *socket_dir(char *url) {
  char *host = strstr(url, "host='");
  if (!host)
    return "";
  host += 6;
  char *end = strchr(host, '\'');
  if (end)
    *end = '\0';
  return host;
}

static void test_pgserver_dir(const char *state, int expect_tmp_socket) {
  char url[1024], url2[1024], err[2048];
  int rc = pgs_start(state, url, sizeof url, err, sizeof err);
  if (rc) {
    fprintf(stderr, "pgs_start: %s\n", err);
    check__failures++;
    return;
  }
  printf("pgs_start(%s): %s\n", state, url);
  CHECK(strstr(url, "user=scalesweep dbname=scalesweep") != NULL);
  CHECK((strstr(url, "host='/tmp/scalesweep-pg-") != NULL) == expect_tmp_socket);
  if (!expect_tmp_socket)
    CHECK(strstr(url, "/pg/socket'") != NULL);
  if (geteuid() == 0) {
    char pgdir[1100];
    struct stat st;
    snprintf(pgdir, sizeof pgdir, "%s/pg", state);
    const char *user = getenv("SCALESWEEP_PG_USER");
    struct passwd *pw = getpwnam(user && *user ? user : "postgres");
    CHECK(stat(pgdir, &st) == 0 && pw && st.st_uid == pw->pw_uid && st.st_uid != 0);
  }
  PGconn *c = connect_url(url);
  exec_ok(c, "CREATE TABLE kept (x integer)");
  exec_ok(c, "INSERT INTO kept VALUES (7)");
  PGresult *r = PQexec(c, "SHOW listen_addresses");
  CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && !strcmp(PQgetvalue(r, 0, 0), ""));
  PQclear(r);
  PQfinish(c);

  /* a second start while it runs finds it running */
  CHECK_INT_EQ(pgs_start(state, url2, sizeof url2, err, sizeof err), 0);
  CHECK(!strcmp(url, url2));
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0);
  CHECK(PQping(url) != PQPING_OK);

  /* a second start after a stop finds the data */
  rc = pgs_start(state, url2, sizeof url2, err, sizeof err);
  if (rc)
    fprintf(stderr, "pgs_start again: %s\n", err);
  CHECK_INT_EQ(rc, 0);
  c = connect_url(url2);
  CHECK_INT_EQ(count(c, "SELECT x FROM kept"), 7);
  PQfinish(c);

  /* a crash (SIGKILL) leaves a stale postmaster.pid: the next start
   * recovers the data */
  char pidfile[1100];
  snprintf(pidfile, sizeof pidfile, "%s/pg/data/postmaster.pid", state);
  FILE *f = fopen(pidfile, "r");
  long pid = 0;
  CHECK(f && fscanf(f, "%ld", &pid) == 1 && pid > 1);
  if (f)
    fclose(f);
  if (pid > 1)
    kill((pid_t)pid, SIGKILL);
  char crashed[1024];
  snprintf(crashed, sizeof crashed, "%s", url2);
  rc = pgs_start(state, url2, sizeof url2, err, sizeof err);
  if (rc)
    fprintf(stderr, "pgs_start after a crash: %s\n", err);
  CHECK_INT_EQ(rc, 0);
  /* the crashed server's /tmp socket directory is gone */
  if (expect_tmp_socket)
    CHECK(access(socket_dir(crashed), F_OK) != 0);
  c = connect_url(url2);
  CHECK_INT_EQ(count(c, "SELECT x FROM kept"), 7);
  PQfinish(c);
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0);
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0); /* not running: fine */
  /* the /tmp socket directory is gone */
  if (expect_tmp_socket)
    CHECK(access(socket_dir(url2), F_OK) != 0);
}

static void test_pgserver(void) {
  char dir[] = "/tmp/sspgs.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  /* as root, the server's user must get through it (pgs_start makes the
   * state directory itself searchable, not the directories above) */
  chmod(dir, 0711);
  char state[1024];
  snprintf(state, sizeof state, "%s/state", dir);
  test_pgserver_dir(state, 0);

  /* a path too long for a Unix socket: the socket goes to /tmp */
  snprintf(state, sizeof state,
           "%s/a-state-directory-with-a-rather-long-name/"
           "and-another-level-below-it-to-pass-the-limit",
           dir);
  test_pgserver_dir(state, 1);

  char err[256];
  CHECK_INT_EQ(pgs_stop("/nonexistent-state-dir", err, sizeof err), 0);
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
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
  fresh_database("ss_mig3");
  char *url = url_with_db("ss_mig3");
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
  PGconn *c = connect_url(url);
  CHECK_INT_EQ(count(c, "SELECT count(*) FROM schema_migrations"), db_nmigrations);
  PQfinish(c);
  free(url);
}

/* test_db [NAME...]: runs the named tests only (all without arguments). */
int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  base_url = getenv("SCALESWEEP_TEST_DB");
  if (!base_url || !*base_url)
    SKIP("SCALESWEEP_TEST_DB not set (run through tests/integration/run_with_pg.sh)");
  static const struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {
      {"embedded", test_embedded},
      {"migrate_once", test_migrate_once},
      {"migrate_concurrent", test_migrate_concurrent},
      {"constraints", test_constraints},
      {"async", test_async},
      {"cmd_migrate", test_cmd_migrate},
      {"pgserver", test_pgserver},
  };
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    int wanted = argc < 2;
    for (int j = 1; j < argc; j++)
      wanted |= !strcmp(argv[j], tests[i].name);
    if (!wanted)
      continue;
    uint64_t t0 = uv_hrtime();
    int before = check__failures;
    tests[i].fn();
    printf("%-20s %s (%.1f s)\n", tests[i].name, check__failures > before ? "FAILED" : "ok",
           (double)(uv_hrtime() - t0) / 1e9);
  }
  CHECK_DONE();
}

/* store/db.c, the asynchronous layer, against a real PostgreSQL: run by
 * tests/integration/run_with_pg.sh, which starts a throwaway cluster and
 * sets SCALESWEEP_TEST_DB (and PGTEST_SH, so that the reconnect test can
 * stop and start that server). */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "db_testlib.h"
#include "store/db.h"

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
  CHECK_INT_EQ(dbt_fresh_database("ss_async"), 0);
  char *url = dbt_url_with_db("ss_async");
  PGconn *c = dbt_connect(url);
  DBT_EXEC_OK(c, "CREATE TABLE tt (x integer PRIMARY KEY)");
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
  CHECK(dbt_run_until(loop, &closed, 1, 5));
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
  CHECK(dbt_run_until(loop, &closed, 1, 5));
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
  if (!dbt_run_until(loop, &helper_done, 1, 90))
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
  char *url = dbt_url_with_db("ss_async");
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
  CHECK(dbt_run_until(loop, &closed, 1, 5));
  free(url);
}

/* The read pool (db_options): PostgreSQL's statement_timeout and a limit
 * on waiting in the queue, both SS_ETIMEOUT naming the limit; read-only
 * sessions; heavy reads kept off the last connection. The sleeps are 0.6 s
 * against a 1 s limit, so a loaded machine has 0.4 s of slack. */
static void test_async_read_pool(uv_loop_t *loop) {
  char *url = dbt_url_with_db("ss_async");
  db_options o = {.timeout_ms = 1000, .read_only = 1};
  db_pool *p = db_pool_open(loop, url, 2, &o);
  CHECK(p != NULL);
  db *heavy = db_pool_get(p, 1), *control = db_open(loop, url);
  qres up[3] = {{0}};
  db_query(heavy, "SHOW statement_timeout", 0, NULL, on_res, &up[0]);
  db_query(control, "SHOW statement_timeout", 0, NULL, on_res, &up[1]);
  db_query(heavy, "CREATE TABLE ro_probe (x int)", 0, NULL, on_res, &up[2]);
  CHECK(wait_done(loop, up, 3, 10));
  CHECK(!strcmp(up[0].v0, "1s"));
  CHECK(strcmp(up[1].v0, "1s") != 0); /* the control connection keeps the server's */
  CHECK_INT_EQ(up[2].status, SS_EQUERY);
  CHECK(strstr(up[2].msg, "read-only") != NULL);
  CHECK(db_pool_ready(p));

  /* the second connection may still be connecting on a loaded machine:
   * with a read queued on the first, wait until a light read would go to
   * the second (least loaded, once it is up) */
  qres warm = {0};
  db_query(heavy, "SELECT pg_sleep(0.9)", 0, NULL, on_res, &warm); /* under the 1 s limit */
  for (int i = 0; i < 200 && db_pool_get(p, 0) == heavy; i++)
    run_for(loop, 50);
  CHECK(wait_done(loop, &warm, 1, 10));

  /* heavy reads stay on the first connection; a light one goes to the idle one */
  qres r[4] = {{0}};
  db_query(heavy, "SELECT pg_sleep(0.6)", 0, NULL, on_res, &r[0]);
  db_query(heavy, "SELECT pg_sleep(0.6)", 0, NULL, on_res, &r[1]);
  db_query(heavy, "SELECT 1", 0, NULL, on_res, &r[2]); /* waits 1.2 s: over the limit */
  CHECK(db_pool_get(p, 1) == heavy);
  CHECK(db_pool_get(p, 0) != heavy);
  CHECK_INT_EQ(db_pool_queue_length(p), 3);
  db_query(db_pool_get(p, 0), "SELECT pg_sleep(5)", 0, NULL, on_res, &r[3]);
  CHECK(wait_done(loop, r, 4, 10));
  CHECK_INT_EQ(r[0].status, 0);
  CHECK_INT_EQ(r[1].status, 0);
  CHECK_INT_EQ(r[2].status, SS_ETIMEOUT);
  CHECK(strstr(r[2].msg, "waited") && strstr(r[2].msg, "1000 ms read limit"));
  CHECK_INT_EQ(r[3].status, SS_ETIMEOUT);
  CHECK(strstr(r[3].msg, "ran over the 1000 ms read limit") != NULL);
  printf("read pool: %s / %s\n", r[2].msg, r[3].msg);

  closed = 0;
  db_pool_close(p, on_closed, &closed);
  db_close(control, on_closed, &closed);
  CHECK(dbt_run_until(loop, &closed, 2, 5));
  free(url);
}

static void test_async(void) {
  uv_loop_t loop;
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 20, 20); /* so UV_RUN_ONCE returns to check timeouts */
  test_async_basics(&loop);
  test_async_unreachable(&loop);
  test_async_read_pool(&loop);
  test_async_reconnect(&loop);
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
}

/* test_db [NAME...]: runs the named tests only (all without arguments). */
DBT_MAIN({"async", test_async})

/* The store's side of a sweep's lr tune (store/sweeps.h; migration 017)
 * against a real PostgreSQL: run by tests/integration/run_with_pg.sh, which
 * starts a throwaway cluster and sets SCALESWEEP_TEST_DB.
 *
 * - store_sweeps_lr_tuned stores the decision and the study's runs in one
 *   statement, once: two of them at once on two connections (two
 *   schedulers, or one deciding again after a lost answer) add the runs
 *   once, and a later one adds nothing; an undecided tune's record may give
 *   way to a decision; a cancelled sweep gets nothing.
 * - store_sweeps_lr_tune_runs answers only while the tune waits for its
 *   decision (with reproductions of tune runs).
 * - A sweep whose tune runs have all ended stays running until the
 *   decision; an undecided tune fails it.
 * - store_sweeps_spec gives a decided sweep its study's spec. */
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "db_testlib.h"
#include "store/db.h"
#include "store/sweeps.h"

static uv_timer_t tick;
static void on_tick(uv_timer_t *t) { (void)t; }

typedef struct tuned {
  int done, status;
  int64_t sweep_id, added;
} tuned;

static void on_tuned(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  tuned *t = ud;
  if (status)
    fprintf(stderr, "  store_sweeps_lr_tuned: %s\n", errmsg);
  *t = (tuned){1, status, sweep_id, added};
}

typedef struct tune_read {
  int done, status, n, spec;
  char status0[16];
  double lr0;
} tune_read;

static void on_tune_runs(void *ud, int status, const char *spec_json, const store_lr_tune_run *runs,
                         int n, const char *errmsg) {
  tune_read *t = ud;
  (void)errmsg;
  *t = (tune_read){.done = 1, .status = status, .n = n, .spec = spec_json != NULL};
  if (n > 0) {
    snprintf(t->status0, sizeof t->status0, "%s", runs[0].status);
    t->lr0 = runs[0].lr;
  }
}

typedef struct spec_read {
  int done;
  json_t *spec;
} spec_read;

static void on_spec(void *ud, int status, const char *spec_json, const char *sweep_status,
                    const char *errmsg) {
  spec_read *r = ud;
  (void)sweep_status, (void)errmsg;
  r->done = 1;
  r->spec = status == 0 && spec_json ? json_loads(spec_json, 0, NULL) : NULL;
}

static void on_closed(void *ud) { *(int *)ud += 1; }

static int status_done;
static void on_status(void *ud, int status, int64_t sweep_id, const char *new_status,
                      const char *errmsg) {
  (void)ud, (void)status, (void)sweep_id, (void)new_status, (void)errmsg;
  status_done++;
}

#define SPEC                                                                                   \
  "{\"name\": \"%s\", \"method\": \"grid\", \"base\": {\"model\": {\"parametrization\": " \
  "\"mup\", \"base_width\": 32}}, \"lr_tune\": {\"lr\": [0.001, 0.01, 0.1]}}"

/* A sweep with an lr tune and its three tune runs (statuses s1..s3); its id. */
static long add_sweep(PGconn *c, const char *name, const char *s1, const char *s2,
                      const char *s3) {
  char sql[1024], spec[512];
  snprintf(spec, sizeof spec, SPEC, name);
  snprintf(sql, sizeof sql,
           "INSERT INTO sweeps (name, spec, spec_hash, status, owner_id) VALUES ('%s', '%s', "
           "'%s', 'running', (SELECT id FROM users WHERE name = 'admin')) RETURNING id",
           name, spec, name);
  long id = dbt_count(c, sql);
  const char *st[3] = {s1, s2, s3};
  const double lr[3] = {0.001, 0.01, 0.1};
  for (int i = 0; i < 3; i++) {
    snprintf(sql, sizeof sql,
             "INSERT INTO runs (sweep_id, config, config_hash, status, part, final_val_loss) "
             "VALUES (%ld, '{\"train\": {\"lr\": %g}}', 'tune-%s-%d', '%s', 'lr_tune', %s)",
             id, lr[i], name, i, st[i], strcmp(st[i], "succeeded") ? "NULL" : "3.0");
    DBT_EXEC_OK(c, sql);
  }
  return id;
}

#define STUDY                                                                                  \
  "[{\"config\": {\"train\": {\"lr\": 0.01}}, \"config_hash\": \"study-a\", \"part\": "   \
  "\"grid\", \"params\": 10, \"nonembedding_params\": 8, \"tokens\": 100, \"batch_size\": 4, " \
  "\"flops\": 1e6}, {\"config\": {\"train\": {\"lr\": 0.01}}, \"config_hash\": \"study-b\", "  \
  "\"part\": \"grid\", \"params\": 20, \"nonembedding_params\": 16, \"tokens\": 100, "         \
  "\"batch_size\": 4, \"flops\": 2e6}]"
#define DECIDED "{\"status\": \"decided\", \"lr\": 0.01, \"rates\": []}"
#define UNDECIDED "{\"status\": \"undecided\", \"lr\": null, \"reason\": \"too few\"}"

static void test_tuned(void) {
  char *url = dbt_migrated_db("ss_lrtune");
  PGconn *c = dbt_connect(url);
  uv_loop_t loop;
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 20, 20);
  db *d1 = db_open(&loop, url), *d2 = db_open(&loop, url);
  store_sweep_new sw = {.priority = 0, .gpus = 0, .max_attempts = 3, .runs_json = STUDY};

  /* every tune run has ended: the runs are read while undecided, and the
   * sweep stays running */
  long a = add_sweep(c, "a", "succeeded", "succeeded", "failed");
  tune_read tr = {0};
  store_sweeps_lr_tune_runs(d1, a, on_tune_runs, &tr);
  CHECK(dbt_run_until(&loop, &tr.done, 1, 10));
  CHECK(tr.status == 0 && tr.n == 3 && tr.spec && tr.lr0 == 0.001);
  CHECK(!strcmp(tr.status0, "succeeded"));
  status_done = 0;
  store_sweeps_update_status(d1, a, on_status, NULL);
  CHECK(dbt_run_until(&loop, &status_done, 1, 10));
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM sweeps WHERE name = 'a' AND status = 'running'"),
               1);

  /* two decisions at once, on two connections: the study once */
  tuned t1 = {0}, t2 = {0};
  store_sweeps_lr_tuned(d1, a, DECIDED, &sw, on_tuned, &t1);
  store_sweeps_lr_tuned(d2, a, DECIDED, &sw, on_tuned, &t2);
  CHECK(dbt_run_until(&loop, &t1.done, 1, 10) && dbt_run_until(&loop, &t2.done, 1, 10));
  CHECK(!t1.status && !t2.status);
  CHECK_INT_EQ(t1.added + t2.added, 2);
  CHECK((t1.sweep_id == a) != (t2.sweep_id == a)); /* one of them, the other skipped */
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE sweep_id = %ld", a);
  CHECK_INT_EQ(dbt_count(c, sql), 5);
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM sweeps WHERE id = %ld AND lr_tune->>'status' = 'decided' "
           "AND lr_tune ? 'decided_at'",
           a);
  CHECK_INT_EQ(dbt_count(c, sql), 1);
  /* and again, later: nothing */
  t1 = (tuned){0};
  store_sweeps_lr_tuned(d1, a, DECIDED, &sw, on_tuned, &t1);
  CHECK(dbt_run_until(&loop, &t1.done, 1, 10));
  CHECK(t1.sweep_id == 0 && t1.added == 0);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE sweep_id = %ld", a);
  CHECK_INT_EQ(dbt_count(c, sql), 5);
  /* decided: nothing to read any more; the study's spec */
  tr = (tune_read){0};
  store_sweeps_lr_tune_runs(d1, a, on_tune_runs, &tr);
  CHECK(dbt_run_until(&loop, &tr.done, 1, 10));
  CHECK(tr.status == 0 && tr.n == 0 && !tr.spec);
  spec_read sr = {0};
  store_sweeps_spec(d1, a, on_spec, &sr);
  CHECK(dbt_run_until(&loop, &sr.done, 1, 10));
  json_t *base = json_object_get(sr.spec, "base");
  CHECK(sr.spec && !json_object_get(sr.spec, "lr_tune"));
  CHECK(json_number_value(json_object_get(json_object_get(base, "train"), "lr")) == 0.01);
  CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(base, "model"), "base_width")),
               32);
  json_decref(sr.spec);

  /* undecided: no runs, and the sweep fails; a decision may follow (a
   * failed run reproduced) */
  long b = add_sweep(c, "b", "failed", "failed", "succeeded");
  t1 = (tuned){0};
  sw.runs_json = "[]";
  store_sweeps_lr_tuned(d1, b, UNDECIDED, &sw, on_tuned, &t1);
  CHECK(dbt_run_until(&loop, &t1.done, 1, 10));
  CHECK(t1.sweep_id == b && t1.added == 0);
  status_done = 0;
  store_sweeps_update_status(d1, b, on_status, NULL);
  CHECK(dbt_run_until(&loop, &status_done, 1, 10));
  CHECK_INT_EQ(dbt_count(c, "SELECT count(*) FROM sweeps WHERE name = 'b' AND status = 'failed'"),
               1);
  snprintf(sql, sizeof sql,
           "INSERT INTO runs (sweep_id, config, config_hash, status, final_val_loss, reproduces) "
           "SELECT sweep_id, config, config_hash, 'succeeded', 2.5, id FROM runs WHERE "
           "sweep_id = %ld AND part = 'lr_tune' AND status = 'failed'",
           b);
  DBT_EXEC_OK(c, sql);
  tr = (tune_read){0};
  store_sweeps_lr_tune_runs(d1, b, on_tune_runs, &tr);
  CHECK(dbt_run_until(&loop, &tr.done, 1, 10));
  CHECK_INT_EQ(tr.n, 5); /* the reproductions count */
  t1 = (tuned){0};
  sw.runs_json = STUDY;
  store_sweeps_lr_tuned(d1, b, DECIDED, &sw, on_tuned, &t1);
  CHECK(dbt_run_until(&loop, &t1.done, 1, 10));
  CHECK(t1.sweep_id == b && t1.added == 2);

  /* cancelled: nothing read, nothing added */
  long x = add_sweep(c, "x", "succeeded", "succeeded", "succeeded");
  snprintf(sql, sizeof sql, "UPDATE sweeps SET status = 'cancelled' WHERE id = %ld", x);
  DBT_EXEC_OK(c, sql);
  t1 = (tuned){0};
  store_sweeps_lr_tuned(d1, x, DECIDED, &sw, on_tuned, &t1);
  CHECK(dbt_run_until(&loop, &t1.done, 1, 10));
  CHECK(t1.sweep_id == 0 && t1.added == 0);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE sweep_id = %ld", x);
  CHECK_INT_EQ(dbt_count(c, sql), 3);

  int closed = 0;
  db_close(d1, on_closed, &closed);
  db_close(d2, on_closed, &closed);
  CHECK(dbt_run_until(&loop, &closed, 2, 5));
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  PQfinish(c);
  free(url);
}

/* test_store_lr_tune [NAME...] */
DBT_MAIN({"tuned", test_tuned})

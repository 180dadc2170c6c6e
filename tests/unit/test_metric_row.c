/* The metric row's pieces agree (common/metric_row.h): the table's stored
 * columns are the metrics table's after the migrations (names and types),
 * a row written by the trainer's writer (trainer/emit.c) is read back by
 * the protocol (proto_metric_row) to the same values, stored through
 * store_metrics_insert and served by the run page's query with the same
 * columns and values. Run by tests/integration/run_with_pg.sh. */
#include <jansson.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "common/metric_row.h"
#include "common/proto.h"
#include "db_testlib.h"
#include "scheduler/pages_json.h"
#include "store/db.h"
#include "store/metrics.h"
#include "store/migrate.h"
#include "store/pages.h"
#include "trainer/emit.h"

/* A step line and an eval line of step 7 as the trainer writes them, each
 * optional column given (grad_norm as null: a skipped fp16 step). */
static char *trainer_lines(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  TRN_EMIT(f, step, .step = trn_i(7), .tokens = trn_i(896), .train_loss = trn_d(3.2772057075053453),
           .lr = trn_d(0.003), .grad_norm = trn_null(), .b_noise = trn_d(2.8076849142212721),
           .loss_scale = trn_d(32768), .skipped = trn_b(1), .host_syncs = trn_i(1),
           .tok_per_s = trn_d(216146), .wall_s = trn_d(1.5));
  TRN_EMIT(f, eval, .step = trn_i(7), .tokens = trn_i(896), .val_loss = trn_d(2.4569632725324482));
  fclose(f);
  return text;
}

static void test_round_trip(void) {
  char *text = trainer_lines();
  char *eol = strchr(text, '\n');
  CHECK(eol != NULL);
  json_t *step = json_loadb(text, (size_t)(eol - text), 0, NULL);
  json_t *eval = json_loads(eol + 1, JSON_DISABLE_EOF_CHECK, NULL);
  CHECK(step && eval);
  char err[256];
  CHECK_INT_EQ(proto_check_row(step, err, sizeof err), 0);
  CHECK_INT_EQ(proto_check_row(eval, err, sizeof err), 0);
  ss_metric_row a, b;
  CHECK_INT_EQ(proto_metric_row(step, &a), SS_ML_STEP);
  CHECK_INT_EQ(proto_metric_row(eval, &b), SS_ML_EVAL);
  CHECK(a.v[SS_MCOL_step] == 7 && a.v[SS_MCOL_tokens] == 896);
  CHECK(a.v[SS_MCOL_train_loss] == 3.2772057075053453); /* %.17g round-trips */
  CHECK(a.v[SS_MCOL_lr] == 0.003);
  CHECK(isnan(a.v[SS_MCOL_grad_norm])); /* null: absent */
  CHECK(a.v[SS_MCOL_skipped] == 1 && a.v[SS_MCOL_host_syncs] == 1);
  CHECK(a.v[SS_MCOL_tok_per_s] == 216146 && a.v[SS_MCOL_wall_s] == 1.5);
  CHECK(isnan(a.v[SS_MCOL_val_loss]));
  CHECK(b.v[SS_MCOL_val_loss] == 2.4569632725324482 && isnan(b.v[SS_MCOL_train_loss]));
  /* every column the writer writes is one the protocol reads: each key of
   * the lines is a column of its line, the required ones there */
  json_t *lines[2] = {step, eval};
  for (int l = 0; l < 2; l++) {
    const char *key;
    json_t *v;
    json_object_foreach(lines[l], key, v) {
      int col = -1;
      for (int i = 0; i < SS_MCOL_N; i++)
        if (!strcmp(ss_metric_cols[i].name, key))
          col = i;
      CHECK(!strcmp(key, "event") || (col >= 0 && (ss_metric_cols[col].line & (l + 1))));
    }
  }
  json_decref(step);
  json_decref(eval);
  free(text);
}

/* The metrics table's columns after every migration, beside run_id: the
 * table's stored ones, in its order, with their types. */
static void test_schema(void) {
  CHECK_INT_EQ(dbt_fresh_database("ss_metric_row"), 0);
  char *url = dbt_url_with_db("ss_metric_row");
  char err[512];
  int applied = 0;
  CHECK_INT_EQ(db_migrate(url, &applied, err, sizeof err), 0);
  PGconn *c = dbt_connect(url);
  PGresult *r = PQexec(c, "SELECT column_name, udt_name FROM information_schema.columns "
                          "WHERE table_name = 'metrics' AND column_name <> 'run_id' "
                          "ORDER BY ordinal_position");
  CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
  int n = 0;
  for (int i = 0; i < SS_MCOL_N; i++) {
    if (!ss_metric_stored(i))
      continue;
    const char *want = ss_metric_sql_type(i);
    const char *udt = n < PQntuples(r) ? PQgetvalue(r, n, 1) : "";
    int same_type = !strcmp(want, "int")      ? !strcmp(udt, "int4")
                    : !strcmp(want, "bigint") ? !strcmp(udt, "int8")
                                              : !strcmp(udt, "float8");
    if (n >= PQntuples(r) || strcmp(PQgetvalue(r, n, 0), ss_metric_cols[i].name) || !same_type)
      fprintf(stderr, "metrics column %d: the table says %s %s, the database %s %s\n", n,
              ss_metric_cols[i].name, want, n < PQntuples(r) ? PQgetvalue(r, n, 0) : "(none)", udt);
    CHECK(n < PQntuples(r) && !strcmp(PQgetvalue(r, n, 0), ss_metric_cols[i].name) && same_type);
    n++;
  }
  CHECK_INT_EQ(PQntuples(r), n);
  PQclear(r);
  PQfinish(c);
  free(url);
}

typedef struct waited {
  int done, status;
  int64_t rows;
  char *json;
} waited;

static void on_done(void *ud, int status, int64_t rows, const char *errmsg) {
  waited *w = ud;
  w->done = 1, w->status = status, w->rows = rows;
  if (status)
    fprintf(stderr, "insert: %s\n", errmsg ? errmsg : "?");
}

/* The run's document as the API serves it (scheduler/pages_json.c). */
static void on_run(void *ud, int status, const store_run_doc *doc, const char *errmsg) {
  waited *w = ud;
  w->done = 1, w->status = status;
  if (doc) {
    sched__buf b = {0};
    sched__json_run_doc(&b, doc, NULL);
    w->json = b.p;
  }
  if (status)
    fprintf(stderr, "run page: %s\n", errmsg ? errmsg : "?");
}

static void on_closed(void *ud) { *(int *)ud = 1; }

static void wait_for(uv_loop_t *loop, const int *flag) {
  for (int i = 0; i < 5000 && !*flag; i++)
    uv_run(loop, UV_RUN_ONCE);
}

/* The trainer's lines stored and served: the run page's metrics rows
 * carry exactly the stored columns, with the values the lines had. */
static void test_stored_and_served(void) {
  char *url = dbt_url_with_db("ss_metric_row"); /* test_schema's */
  PGconn *c = dbt_connect(url);
  DBT_EXEC_OK(c, "INSERT INTO sweeps (id, name, spec, spec_hash, owner_id) VALUES (1, 's', '{}', 'h', "
                 "(SELECT id FROM users WHERE name = 'admin'))");
  DBT_EXEC_OK(c, "INSERT INTO workers (id, name, host) VALUES (1, 'w', 'h')");
  DBT_EXEC_OK(c, "INSERT INTO runs (id, sweep_id, config, config_hash, status, attempt, worker, "
                 "lease_until) VALUES (1, 1, '{}', 'c', 'running', 1, 1, now() + interval '1h')");
  PQfinish(c);

  char *text = trainer_lines();
  json_t *rows = json_array();
  for (char *p = text; *p;) {
    char *e = strchr(p, '\n');
    json_array_append_new(rows, json_loadb(p, (size_t)(e - p), 0, NULL));
    p = e + 1;
  }
  ss_metric_row row, ev;
  CHECK(proto_metric_row(json_array_get(rows, 0), &row) &&
        proto_metric_row(json_array_get(rows, 1), &ev));
  row.v[SS_MCOL_val_loss] = ev.v[SS_MCOL_val_loss]; /* the scheduler's merge of one step's lines */

  uv_loop_t loop;
  uv_loop_init(&loop);
  db *d = db_open(&loop, url);
  waited ins = {0}, page = {0};
  store_metrics_insert(d, 1, 1, 1, &row, 1, on_done, &ins);
  wait_for(&loop, &ins.done);
  CHECK(ins.done && ins.status == 0 && ins.rows == 1);
  store_pages_run(d, 1, 10, 0, on_run, &page);
  wait_for(&loop, &page.done);
  CHECK(page.done && page.status == 0 && page.json);
  json_t *doc = page.json ? json_loads(page.json, 0, NULL) : NULL;
  json_t *served = json_array_get(json_object_get(doc, "metrics"), 0);
  CHECK(json_is_object(served));
  int nstored = 0;
  for (int i = 0; i < SS_MCOL_N; i++) {
    if (!ss_metric_stored(i))
      continue;
    nstored++;
    json_t *v = json_object_get(served, ss_metric_cols[i].name);
    CHECK(v != NULL);
    if (isnan(row.v[i]))
      CHECK(json_is_null(v));
    else
      CHECK(json_is_number(v) && json_number_value(v) == row.v[i]);
  }
  CHECK_INT_EQ((int)json_object_size(served), nstored);
  json_decref(doc);
  free(page.json);
  json_decref(rows);
  free(text);
  int closed = 0;
  db_close(d, on_closed, &closed);
  wait_for(&loop, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  free(url);
}

DBT_MAIN({"round_trip", test_round_trip}, {"schema", test_schema},
         {"stored_and_served", test_stored_and_served})

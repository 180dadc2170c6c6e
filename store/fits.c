/* Fits: their SQL (store/fits.h). */
#include "store/fits.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"

/* One call's callback and its user data, freed once the callback ran. */
typedef struct call {
  union {
    store_fits_points_cb points;
    store_fits_ladder_cb ladder;
    store_done_cb done;
    store_json_cb json;
  } cb;
  void *ud;
} call;

static call *call_new(void *ud) {
  call *c = calloc(1, sizeof *c);
  if (c)
    c->ud = ud;
  return c;
}

/* Queues sql with the sweep's id as $1; c's callback runs from on. */
static void query_sweep(db *d, const char *sql, int64_t sweep_id, db_cb on, call *c) {
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  const char *p[1] = {id};
  db_query(d, sql, 1, p, on, c);
}

static double num_or_nan(const PGresult *res, int row, int col) {
  return PQgetisnull(res, row, col) ? NAN : strtod(PQgetvalue(res, row, col), NULL);
}

/* rows: nonembedding_params, tokens, flops, final_val_loss, batch size in
 * tokens, steps, lr, part, entropy_rate, window_floor, seq_len */
static void on_points(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  int n = status == 0 ? PQntuples(res) : 0;
  store_fit_point *pts = calloc(n ? (size_t)n : 1, sizeof *pts);
  store_corpus corpus = {NAN, NAN, 0};
  if (!pts && status == 0) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
    n = 0;
  }
  for (int k = 0; k < n; k++) {
    store_fit_point *p = &pts[k];
    p->params = strtod(PQgetvalue(res, k, 0), NULL);
    p->tokens = strtod(PQgetvalue(res, k, 1), NULL);
    p->flops = strtod(PQgetvalue(res, k, 2), NULL);
    p->loss = strtod(PQgetvalue(res, k, 3), NULL);
    p->batch_size = strtod(PQgetvalue(res, k, 4), NULL);
    p->steps = num_or_nan(res, k, 5);
    p->lr = num_or_nan(res, k, 6);
    p->isoflop = !strcmp(PQgetvalue(res, k, 7), "isoflop");
  }
  if (n > 0)
    corpus.seq_len = atoi(PQgetvalue(res, 0, 10));
  for (int k = 0; k < n && isnan(corpus.entropy_rate); k++)
    if (!PQgetisnull(res, k, 8) && !PQgetisnull(res, k, 9) &&
        atoi(PQgetvalue(res, k, 10)) == corpus.seq_len) {
      corpus.entropy_rate = num_or_nan(res, k, 8);
      corpus.window_floor = num_or_nan(res, k, 9);
    }
  c->cb.points(c->ud, status, pts, n, &corpus, errmsg);
  free(pts);
  free(c);
}

/* rows: run id, batch size in tokens, target losses (JSON array), the
 * evaluations (JSON), median late b_noise in tokens (or NULL) */
static void on_ladder(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  int n = status == 0 ? PQntuples(res) : 0;
  store_ladder_run *runs = calloc(n ? (size_t)n : 1, sizeof *runs);
  if (!runs && status == 0) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
    n = 0;
  }
  for (int k = 0; k < n; k++)
    runs[k] = (store_ladder_run){.batch_tokens = strtod(PQgetvalue(res, k, 1), NULL),
                                 .target_loss = PQgetvalue(res, k, 2),
                                 .evals = PQgetvalue(res, k, 3),
                                 .b_noise = num_or_nan(res, k, 4)};
  c->cb.ladder(c->ud, status, runs, n, errmsg);
  free(runs);
  free(c);
}

static void on_done(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  int64_t rows = status == 0 ? strtoll(PQcmdTuples(res), NULL, 10) : 0;
  if (c->cb.done)
    c->cb.done(c->ud, status, rows, errmsg);
  free(c);
}

static void on_json(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  c->cb.json(c->ud, status, status == 0 && PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : NULL,
             errmsg);
  free(c);
}

void store_fits_points(db *d, int64_t sweep_id, store_fits_points_cb cb, void *ud) {
  call *c = call_new(ud);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, 0, NULL, "out of memory");
    return;
  }
  c->cb.points = cb;
  query_sweep(d,
              "SELECT nonembedding_params, tokens, flops, final_val_loss, "
              "batch_size * (config->'model'->>'seq_len')::int, "
              "tokens / nullif(batch_size * (config->'model'->>'seq_len')::int, 0), "
              "(config->'train'->>'lr')::float8, coalesce(part, ''), "
              "entropy_rate, window_floor, (config->'model'->>'seq_len')::int "
              "FROM runs WHERE sweep_id = $1 AND status = 'succeeded' "
              "AND coalesce(part, '') <> 'batch' AND reproduces IS NULL "
              "AND final_val_loss > 0 AND nonembedding_params > 0 AND tokens > 0 ORDER BY id",
              sweep_id, on_points, c);
}

void store_fits_ladder(db *d, int64_t sweep_id, store_fits_ladder_cb cb, void *ud) {
  call *c = call_new(ud);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, 0, "out of memory");
    return;
  }
  c->cb.ladder = cb;
  /* each run's evaluations (the partial index metrics_evals finds them
   * without its steps) and its late gradient noise scale */
  query_sweep(d,
              "SELECT r.id, r.batch_size * (r.config->'model'->>'seq_len')::int, "
              "coalesce(r.target_loss, '[]'::jsonb)::text, "
              "(SELECT coalesce(json_agg(json_build_array(m.step, m.val_loss) ORDER BY m.step), "
              "'[]') FROM metrics m WHERE m.run_id = r.id AND m.val_loss IS NOT NULL)::text, "
              "(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY m.b_noise) FROM metrics m "
              "WHERE m.run_id = r.id AND m.b_noise IS NOT NULL AND m.step * 2 > "
              "(SELECT max(step) FROM metrics WHERE run_id = r.id)) * "
              "(r.config->'model'->>'seq_len')::int "
              "FROM runs r WHERE r.sweep_id = $1 AND r.status = 'succeeded' AND r.part = 'batch' "
              "ORDER BY r.id",
              sweep_id, on_ladder, c);
}

void store_fits_insert(db *d, int64_t sweep_id, const char *law, const char *fit_json, int n_points,
                       store_done_cb cb, void *ud) {
  call *c = call_new(ud);
  if (!c) {
    if (cb)
      cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  c->cb.done = cb;
  char id[32], np[16];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  snprintf(np, sizeof np, "%d", n_points);
  const char *p[4] = {id, law, fit_json, np};
  db_query(d,
           "INSERT INTO fits (sweep_id, law, params, intervals, n_points) "
           "VALUES ($1, $2, $3::jsonb, jsonb_build_object('ci95', $3::jsonb->'ci95', "
           "'stderr', $3::jsonb->'stderr'), $4::int)",
           4, p, on_done, c);
}

void store_fits_latest(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  call *c = call_new(ud);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  c->cb.json = cb;
  query_sweep(d,
              "SELECT coalesce((SELECT json_object_agg(law, params) FROM (SELECT DISTINCT ON "
              "(law) law, params FROM fits WHERE sweep_id = $1 ORDER BY law, created_at DESC) f), "
              "'{}') FROM sweeps WHERE id = $1",
              sweep_id, on_json, c);
}

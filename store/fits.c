/* Fits: their SQL (store/fits.h). */
#include "store/fits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

/* rows: nonembedding_params, tokens, flops, final_val_loss, batch size in
 * tokens, steps, lr, part, entropy_rate, window_floor, seq_len */
typedef struct point_row {
  store_fit_point pt;
  int has_corpus; /* entropy_rate and window_floor are both there */
  double entropy_rate, window_floor;
  int seq_len;
} point_row;

static void decode_point(const PGresult *res, int k, void *elem) {
  *(point_row *)elem = (point_row){.pt = {.params = strtod(PQgetvalue(res, k, 0), NULL),
                                          .tokens = strtod(PQgetvalue(res, k, 1), NULL),
                                          .flops = strtod(PQgetvalue(res, k, 2), NULL),
                                          .loss = strtod(PQgetvalue(res, k, 3), NULL),
                                          .batch_size = strtod(PQgetvalue(res, k, 4), NULL),
                                          .steps = store__num_or_nan(res, k, 5),
                                          .lr = store__num_or_nan(res, k, 6),
                                          .isoflop = !strcmp(PQgetvalue(res, k, 7), "isoflop")},
                                   .has_corpus = !PQgetisnull(res, k, 8) && !PQgetisnull(res, k, 9),
                                   .entropy_rate = store__num_or_nan(res, k, 8),
                                   .window_floor = store__num_or_nan(res, k, 9),
                                   .seq_len = atoi(PQgetvalue(res, k, 10))};
}

/* the corpus figures: the first run's sequence length, and the first
 * stored figures at that length */
static void deliver_points(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  const point_row *r = rows;
  store_fit_point *pts = calloc(n ? (size_t)n : 1, sizeof *pts);
  store_corpus corpus = {NAN, NAN, 0};
  if (!pts && status == 0) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
  }
  if (!pts)
    n = 0;
  for (int k = 0; k < n; k++)
    pts[k] = r[k].pt;
  if (n > 0)
    corpus.seq_len = r[0].seq_len;
  for (int k = 0; k < n && isnan(corpus.entropy_rate); k++)
    if (r[k].has_corpus && r[k].seq_len == corpus.seq_len) {
      corpus.entropy_rate = r[k].entropy_rate;
      corpus.window_floor = r[k].window_floor;
    }
  ((store_fits_points_cb)c->cb)(c->ud, status, pts, n, &corpus, errmsg);
  free(pts);
}

static const store__rows_spec points = {sizeof(point_row), decode_point, deliver_points};

/* rows: run id, batch size in tokens, target losses (JSON array), the
 * evaluations (JSON), median late b_noise in tokens (or NULL) */
static void decode_ladder(const PGresult *res, int k, void *elem) {
  *(store_ladder_run *)elem =
      (store_ladder_run){.batch_tokens = strtod(PQgetvalue(res, k, 1), NULL),
                         .target_loss = PQgetvalue(res, k, 2),
                         .evals = PQgetvalue(res, k, 3),
                         .b_noise = store__num_or_nan(res, k, 4)};
}

STORE__ARRAY_SPEC(ladder, store_ladder_run, decode_ladder, store_fits_ladder_cb);

void store_fits_points(db *d, int64_t sweep_id, store_fits_points_cb cb, void *ud) {
  store__query_rows_id(
      d,
      "SELECT nonembedding_params, tokens, flops, final_val_loss, "
      "batch_size * (config->'model'->>'seq_len')::int, "
      "tokens / nullif(batch_size * (config->'model'->>'seq_len')::int, 0), "
      "(config->'train'->>'lr')::float8, coalesce(part, ''), "
      "entropy_rate, window_floor, (config->'model'->>'seq_len')::int "
      "FROM runs WHERE sweep_id = $1 AND status = 'succeeded' "
      "AND coalesce(part, '') NOT IN ('batch', 'bcrit', 'lr_tune') AND reproduces IS NULL "
      "AND final_val_loss > 0 AND nonembedding_params > 0 AND tokens > 0 ORDER BY id",
      sweep_id, &points, (void (*)(void))cb, ud);
}

/* SQL: run r's seq_len, and its evaluations [[AT, val_loss], ...] in step
 * order as text, AT its steps or its tokens (the partial index
 * metrics_evals finds them without its steps). */
#define SEQ_LEN_SQL "(r.config->'model'->>'seq_len')"
#define EVALS_SQL(at)                                                                   \
  "(SELECT coalesce(json_agg(json_build_array(m." at ", m.val_loss) ORDER BY m.step), " \
  "'[]') FROM metrics m WHERE m.run_id = r.id AND m.val_loss IS NOT NULL)::text"
#define EVALS_BY_STEP_SQL EVALS_SQL("step")
#define EVALS_BY_TOKENS_SQL EVALS_SQL("tokens")

void store_fits_ladder(db *d, int64_t sweep_id, store_fits_ladder_cb cb, void *ud) {
  /* each run's evaluations and its late gradient noise scale */
  store__query_rows_id(
      d,
      "SELECT r.id, r.batch_size * " SEQ_LEN_SQL "::int, "
      "coalesce(r.target_loss, '[]'::jsonb)::text, " EVALS_BY_STEP_SQL ", "
      "(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY m.b_noise) FROM metrics m "
      "WHERE m.run_id = r.id AND m.b_noise IS NOT NULL AND m.step * 2 > "
      "(SELECT max(step) FROM metrics WHERE run_id = r.id)) * " SEQ_LEN_SQL "::int "
      "FROM runs r WHERE r.sweep_id = $1 AND r.status = 'succeeded' AND r.part = 'batch' "
      "ORDER BY r.id",
      sweep_id, &ladder, (void (*)(void))cb, ud);
}

static void decode_bcrit(const PGresult *res, int k, void *elem) {
  *(store_bcrit_run *)elem =
      (store_bcrit_run){.id = store__int(res, k, 0),
                        .branch_of = PQgetisnull(res, k, 1) ? 0 : store__int(res, k, 1),
                        .branch_step = PQgetisnull(res, k, 2) ? 0 : store__int(res, k, 2),
                        .batch_tokens = strtod(PQgetvalue(res, k, 3), NULL),
                        .trunk_batch_tokens = strtod(PQgetvalue(res, k, 4), NULL),
                        .train_tokens = strtod(PQgetvalue(res, k, 5), NULL),
                        .first_step = PQgetisnull(res, k, 6) ? 0 : store__int(res, k, 6),
                        .evals = PQgetvalue(res, k, 7),
                        .b_noise = PQgetvalue(res, k, 8)};
}

STORE__ARRAY_SPEC(bcrit, store_bcrit_run, decode_bcrit, store_fits_bcrit_cb);

void store_fits_bcrit(db *d, int64_t sweep_id, store_fits_bcrit_cb cb, void *ud) {
  /* evaluations by tokens (the rungs count steps in their own batches);
   * a trunk's noise scale in tokens, for the page beside B_crit */
  store__query_rows_id(
      d,
      "SELECT r.id, r.branch_of, r.branch_step, r.batch_size * " SEQ_LEN_SQL "::float8, "
      "coalesce(t.batch_size, r.batch_size) * " SEQ_LEN_SQL "::float8, "
      "(r.config->'train'->>'tokens')::float8, "
      "(SELECT min(m.step) FROM metrics m WHERE m.run_id = r.id), " EVALS_BY_TOKENS_SQL ", "
      "CASE WHEN r.branch_of IS NULL THEN (SELECT coalesce(json_agg(json_build_array(m.tokens, "
      "m.b_noise * " SEQ_LEN_SQL "::float8) ORDER BY m.step), '[]') "
      "FROM metrics m WHERE m.run_id = r.id AND m.b_noise IS NOT NULL)::text ELSE '[]' END "
      "FROM runs r LEFT JOIN runs t ON t.id = r.branch_of "
      "WHERE r.sweep_id = $1 AND r.status = 'succeeded' AND r.part = 'bcrit' ORDER BY r.id",
      sweep_id, &bcrit, (void (*)(void))cb, ud);
}

void store_fits_insert(db *d, int64_t sweep_id, const char *law, const char *fit_json, int n_points,
                       store_done_cb cb, void *ud) {
  char id[24], np[24];
  const char *p[4] = {store__itoa(id, sizeof id, sweep_id), law, fit_json,
                      store__itoa(np, sizeof np, n_points)};
  store__exec(d,
              "INSERT INTO fits (sweep_id, law, params, intervals, n_points) "
              "VALUES ($1, $2, $3::jsonb, jsonb_build_object('ci95', $3::jsonb->'ci95', "
              "'stderr', $3::jsonb->'stderr'), $4::int)",
              4, p, cb, ud);
}

void store_fits_latest(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  store__query_json_id(
      d, "SELECT coalesce(" STORE__LATEST_FITS_SQL ", '{}') FROM sweeps WHERE id = $1", sweep_id,
      cb, ud);
}

/* Running runs' curves and predictions (predictions.h). */
#include "store/predictions.h"

#include <stdlib.h>

#include "store/rows.h"

static void on_curves(void *ud, int status, PGresult *res, const char *errmsg) {
  store__call *c = ud;
  store_curves_cb cb = (store_curves_cb)c->cb;
  void *cud = c->ud;
  free(c);
  int n = status == 0 ? PQntuples(res) : 0;
  store_curve *runs = calloc(n ? (size_t)n : 1, sizeof *runs);
  if (!runs) {
    cb(cud, SS_ENOMEM, NULL, 0, "out of memory");
    return;
  }
  for (int k = 0; k < n; k++) {
    runs[k].id = store__int(res, k, 0);
    runs[k].n = store__num(res, k, 1);
    runs[k].d = store__num(res, k, 2);
    runs[k].steps = store__num(res, k, 3);
    runs[k].warmup_steps = store__num(res, k, 4);
    runs[k].evals = PQgetvalue(res, k, 5);
    runs[k].fit = PQgetisnull(res, k, 6) ? NULL : PQgetvalue(res, k, 6);
  }
  cb(cud, status, runs, n, errmsg);
  free(runs);
}

void store_predictions_curves(db *d, store_curves_cb cb, void *ud) {
  store__call *c = store__call_new((void (*)(void))cb, ud);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, 0, "out of memory");
    return;
  }
  db_query(d,
           "SELECT r.id, r.nonembedding_params, r.tokens, "
           "floor(r.tokens / nullif(r.batch_size * (r.config->'model'->>'seq_len')::float8, 0)), "
           "coalesce((r.config->'train'->>'warmup_tokens')::float8, 0) / "
           "nullif(r.batch_size * (r.config->'model'->>'seq_len')::float8, 0), "
           "(SELECT coalesce(json_agg(json_build_array(m.step, m.val_loss) ORDER BY m.step), "
           "'[]') FROM metrics m WHERE m.run_id = r.id AND m.val_loss IS NOT NULL)::text, "
           "(SELECT f.params::text FROM fits f WHERE f.sweep_id = r.sweep_id "
           "AND f.law = 'chinchilla' ORDER BY f.created_at DESC LIMIT 1) "
           "FROM runs r WHERE r.status = 'running' AND coalesce(r.part, '') <> 'batch' "
           "ORDER BY r.id LIMIT 1000",
           0, NULL, on_curves, c);
}

void store_predictions_set(db *d, int64_t run_id, const char *json, store_done_cb cb, void *ud) {
  char id[24];
  const char *p[2] = {store__itoa(id, sizeof id, run_id), json};
  store__exec(d, "UPDATE runs SET prediction = $2::jsonb WHERE id = $1 AND status = 'running'", 2,
              p, cb, ud);
}

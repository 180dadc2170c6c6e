/* Running runs' curves and predictions (predictions.h). */
#include "store/predictions.h"

#include <stdlib.h>

#include "store/internal.h"

static void decode_curve(const PGresult *res, int k, void *elem) {
  *(store_curve *)elem = (store_curve){store__int(res, k, 0),
                                       store__num(res, k, 1),
                                       store__num(res, k, 2),
                                       store__num(res, k, 3),
                                       store__num(res, k, 4),
                                       PQgetvalue(res, k, 5),
                                       PQgetisnull(res, k, 6) ? NULL : PQgetvalue(res, k, 6)};
}

STORE__ARRAY_SPEC(curves, store_curve, decode_curve, store_curves_cb);

void store_predictions_curves(db *d, store_curves_cb cb, void *ud) {
  store__query_rows(
      d,
      "SELECT r.id, r.nonembedding_params, r.tokens, "
      "floor(r.tokens / nullif(r.batch_size * (r.config->'model'->>'seq_len')::float8, 0)), "
      "coalesce((r.config->'train'->>'warmup_tokens')::float8, 0) / "
      "nullif(r.batch_size * (r.config->'model'->>'seq_len')::float8, 0), "
      "(SELECT coalesce(json_agg(json_build_array(m.step, m.val_loss) ORDER BY m.step), "
      "'[]') FROM metrics m WHERE m.run_id = r.id AND m.val_loss IS NOT NULL)::text, "
      "(SELECT f.params::text FROM fits f WHERE f.sweep_id = r.sweep_id "
      "AND f.law = 'chinchilla' ORDER BY f.created_at DESC LIMIT 1) "
      "FROM runs r WHERE r.status = 'running' AND coalesce(r.part, '') NOT IN ('batch', 'bcrit', "
      "'lr_tune') "
      /* a wsd curve is flat-then-decaying, no power law in steps: not predicted */
      "AND coalesce(r.config->'train'->>'schedule', '') <> 'wsd' "
      "ORDER BY r.id LIMIT 1000",
      0, NULL, &curves, (void (*)(void))cb, ud);
}

void store_predictions_set(db *d, int64_t run_id, const char *json, store_done_cb cb, void *ud) {
  char id[24];
  const char *p[2] = {store__itoa(id, sizeof id, run_id), json};
  store__exec(d, "UPDATE runs SET prediction = $2::jsonb WHERE id = $1 AND status = 'running'", 2,
              p, cb, ud);
}

/* The API's changes to sweeps and runs (store/actions.h). */
#include <stdlib.h>
#include <string.h>

#include "store/actions.h"
#include "store/internal.h"

/* rows: (run id, or NULL for the sweep's own row; its status) */
static void on_cancelled(void *ud, int status, PGresult *res, const char *errmsg) {
  store__req q = *(store__req *)ud;
  free(ud);
  if (status != 0) {
    q.cb.cancel(q.ud, status, 0, NULL, 0, errmsg);
    return;
  }
  int rows = PQntuples(res), n = 0;
  store_cancelled *runs = calloc(rows ? (size_t)rows : 1, sizeof *runs);
  if (!runs) {
    q.cb.cancel(q.ud, SS_ENOMEM, 0, NULL, 0, "out of memory");
    return;
  }
  for (int i = 0; i < rows; i++) {
    if (PQgetisnull(res, i, 0))
      continue;
    runs[n].run_id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
    runs[n++].running = !strcmp(PQgetvalue(res, i, 1), "running");
  }
  q.cb.cancel(q.ud, 0, rows > 0, runs, n, NULL);
  free(runs);
}

static void cancel(db *d, const char *sql, int64_t id, store_cancel_cb cb, void *ud) {
  store__req *q = store__req_new(ud);
  if (!q) {
    cb(ud, SS_ENOMEM, 0, NULL, 0, "out of memory");
    return;
  }
  q->cb.cancel = cb;
  char ids[24];
  const char *p[1] = {store__id(ids, id)};
  db_query(d, sql, 1, p, on_cancelled, q);
}

void store_actions_cancel_sweep(db *d, int64_t sweep_id, store_cancel_cb cb, void *ud) {
  cancel(d,
         "WITH q AS (UPDATE runs SET status = 'cancelled', finished_at = now() "
         "WHERE sweep_id = $1 AND status = 'queued' RETURNING id, 'queued'::text AS st), "
         "sw AS (UPDATE sweeps SET status = 'cancelled' WHERE id = $1 RETURNING id) "
         "SELECT id, st FROM q UNION ALL "
         "SELECT id, 'running' FROM runs WHERE sweep_id = $1 AND status = 'running' "
         "UNION ALL SELECT NULL, 'sweep' FROM sw",
         sweep_id, cb, ud);
}

void store_actions_cancel_run(db *d, int64_t run_id, store_cancel_cb cb, void *ud) {
  cancel(d,
         "WITH q AS (UPDATE runs SET status = 'cancelled', finished_at = now() "
         "WHERE id = $1 AND status = 'queued' RETURNING id, 'queued'::text AS st) "
         "SELECT id, st FROM q UNION ALL "
         "SELECT id, status::text FROM runs WHERE id = $1 AND status <> 'queued'",
         run_id, cb, ud);
}

/* Row: the original's status and the new run's JSON (either NULL). */
static void on_reproduced(void *ud, int status, PGresult *res, const char *errmsg) {
  store__req q = *(store__req *)ud;
  free(ud);
  if (status == 0 && PQntuples(res) != 1) {
    status = SS_EQUERY;
    errmsg = "reproduce: expected one row";
  }
  if (status != 0) {
    q.cb.reproduce(q.ud, status, NULL, NULL, errmsg);
    return;
  }
  q.cb.reproduce(q.ud, 0, PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0),
                 PQgetisnull(res, 0, 1) ? NULL : PQgetvalue(res, 0, 1), NULL);
}

void store_actions_reproduce(db *d, int64_t run_id, store_reproduce_cb cb, void *ud) {
  store__req *q = store__req_new(ud);
  if (!q) {
    cb(ud, SS_ENOMEM, NULL, NULL, "out of memory");
    return;
  }
  q->cb.reproduce = cb;
  char ids[24];
  const char *p[1] = {store__id(ids, run_id)};
  db_query(d,
           "WITH o AS (SELECT * FROM runs WHERE id = $1), "
           "n AS (INSERT INTO runs (sweep_id, config, config_hash, gpus, priority, "
           "max_attempts, params, nonembedding_params, tokens, batch_size, flops, reproduces) "
           "SELECT sweep_id, config, config_hash, gpus, priority, max_attempts, params, "
           "nonembedding_params, tokens, batch_size, flops, id FROM o "
           "WHERE status IN ('succeeded', 'failed', 'cancelled') "
           "RETURNING json_build_object('id', id, 'reproduces', reproduces) AS j) "
           "SELECT (SELECT status FROM o), (SELECT j FROM n)",
           1, p, on_reproduced, q);
}

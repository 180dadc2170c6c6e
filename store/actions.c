/* The API's changes to sweeps and runs (store/actions.h). */
#include <stdlib.h>
#include <string.h>

#include "store/actions.h"

#include "store/internal.h"

/* rows: (run id, or NULL for the sweep's own row; its status) */
typedef struct cancel_row {
  int is_run;
  store_cancelled run;
} cancel_row;

static void decode_cancel(const PGresult *res, int row, void *elem) {
  cancel_row *r = elem;
  r->is_run = !PQgetisnull(res, row, 0);
  r->run.run_id = store__int(res, row, 0);
  r->run.running = !strcmp(PQgetvalue(res, row, 1), "running");
}

/* found: any row (the sweep or run exists); runs: the cancelled runs only */
static void deliver_cancel(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  const cancel_row *r = rows;
  store_cancelled *runs = NULL;
  int k = 0;
  if (status == 0 && !(runs = calloc(n ? (size_t)n : 1, sizeof *runs))) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
  }
  for (int i = 0; runs && i < n; i++)
    if (r[i].is_run)
      runs[k++] = r[i].run;
  ((store_cancel_cb)c->cb)(c->ud, status, status == 0 && n > 0, runs, k,
                           status == 0 ? NULL : errmsg);
  free(runs);
}

static const store__rows_spec cancelled = {sizeof(cancel_row), decode_cancel, deliver_cancel};

static void cancel(db *d, const char *sql, int64_t id, store_cancel_cb cb, void *ud) {
  store__query_rows_id(d, sql, id, &cancelled, (void (*)(void))cb, ud);
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

/* Row: the original's status, the new run's JSON (either NULL) and whether
 * the worker asked for is known. */
typedef struct reproduce_row {
  const char *original_status, *run;
  int known;
} reproduce_row;

static void decode_reproduce(const PGresult *res, int row, void *elem) {
  *(reproduce_row *)elem =
      (reproduce_row){store__str_or_null(res, row, 0), store__str_or_null(res, row, 1),
                      PQgetvalue(res, row, 2)[0] == 't'};
}

static void deliver_reproduce(const store__call *c, int status, const void *rows, int n,
                              const char *errmsg) {
  const reproduce_row *r = rows;
  if (status == 0 && n != 1) {
    status = SS_EQUERY;
    errmsg = "reproduce: expected one row";
  }
  if (status != 0)
    ((store_reproduce_cb)c->cb)(c->ud, status, NULL, NULL, 0, errmsg);
  else
    ((store_reproduce_cb)c->cb)(c->ud, 0, r->original_status, r->run, r->known, NULL);
}

static const store__rows_spec reproduced = {sizeof(reproduce_row), decode_reproduce,
                                            deliver_reproduce};

void store_actions_reproduce(db *d, int64_t run_id, const char *on, store_reproduce_cb cb,
                             void *ud) {
  char id[24];
  const char *p[2] = {store__itoa(id, sizeof id, run_id), on};
  store__query_rows(
      d,
      "WITH o AS (SELECT * FROM runs WHERE id = $1), "
      "k AS (SELECT $2::text IS NULL OR EXISTS (SELECT 1 FROM workers "
      "WHERE name = $2::text OR host = $2::text) AS known), "
      "n AS (INSERT INTO runs (sweep_id, config, config_hash, gpus, priority, "
      "max_attempts, params, nonembedding_params, tokens, batch_size, flops, reproduces, "
      "on_worker) "
      "SELECT sweep_id, config, config_hash, gpus, priority, max_attempts, params, "
      "nonembedding_params, tokens, batch_size, flops, id, $2::text FROM o, k "
      "WHERE status IN ('succeeded', 'failed', 'cancelled') AND k.known "
      "RETURNING json_build_object('id', id, 'reproduces', reproduces, 'on_worker', on_worker) "
      "AS j) "
      "SELECT (SELECT status FROM o), (SELECT j FROM n), (SELECT known FROM k)",
      2, p, &reproduced, (void (*)(void))cb, ud);
}

void store_actions_set_priority(db *d, int64_t sweep_id, int priority, store_done_cb cb, void *ud) {
  char id[24], prio[24];
  const char *p[2] = {store__itoa(id, sizeof id, sweep_id),
                      store__itoa(prio, sizeof prio, priority)};
  store__exec(d,
              "WITH sw AS (UPDATE sweeps SET priority = $2::int WHERE id = $1 RETURNING id), "
              "q AS (UPDATE runs SET priority = $2::int WHERE sweep_id IN (SELECT id FROM sw) "
              "AND status = 'queued') SELECT id FROM sw",
              2, p, cb, ud);
}

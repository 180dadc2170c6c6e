/* Sweeps: their SQL (store/sweeps.h). */
#include "store/sweeps.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/db.h"

/* One call's callback and its user data, freed once the callback ran. */
typedef struct call {
  union {
    store_sweeps_inserted_cb inserted;
    store_sweeps_id_cb id;
    store_sweeps_status_cb status;
  } cb;
  void *ud;
  int64_t sweep_id;
} call;

/* sweep_id: the sweep the call is about (0: none yet) */
static call *call_new(void *ud, int64_t sweep_id) {
  call *c = malloc(sizeof *c);
  if (c) {
    c->ud = ud;
    c->sweep_id = sweep_id;
  }
  return c;
}

static void on_inserted(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  if (status != 0)
    c->cb.inserted(c->ud, status, 0, 0, errmsg);
  else if (PQgetisnull(res, 0, 0)) /* ON CONFLICT: the spec is there already */
    c->cb.inserted(c->ud, 0, 0, 0, NULL);
  else
    c->cb.inserted(c->ud, 0, strtoll(PQgetvalue(res, 0, 0), NULL, 10),
                   strtoll(PQgetvalue(res, 0, 1), NULL, 10), NULL);
  free(c);
}

static void on_found(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  int64_t id = status == 0 && PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
  c->cb.id(c->ud, status, id, errmsg);
  free(c);
}

static void on_status(void *ud, int status, PGresult *res, const char *errmsg) {
  call *c = ud;
  c->cb.status(c->ud, status, c->sweep_id,
               status == 0 && PQntuples(res) == 1 ? PQgetvalue(res, 0, 1) : NULL, errmsg);
  free(c);
}

void store_sweeps_insert(db *d, const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  call *c = call_new(ud, 0);
  if (!c) {
    cb(ud, SS_ENOMEM, 0, 0, "out of memory");
    return;
  }
  c->cb.inserted = cb;
  char gpus[16], prio[16], maxa[16];
  snprintf(gpus, sizeof gpus, "%d", sw->gpus);
  snprintf(prio, sizeof prio, "%d", sw->priority);
  snprintf(maxa, sizeof maxa, "%d", sw->max_attempts);
  const char *p[7] = {sw->name, sw->spec_json, sw->spec_hash, prio, gpus, maxa, sw->runs_json};
  db_query(d,
           "WITH sw AS (INSERT INTO sweeps (name, spec, spec_hash, priority) "
           "VALUES ($1, $2::jsonb, $3, $4::int) ON CONFLICT (spec_hash) DO NOTHING "
           "RETURNING id), "
           "ins AS (INSERT INTO runs (sweep_id, config, config_hash, gpus, priority, "
           "max_attempts, params, nonembedding_params, tokens, batch_size, flops, part, "
           "target_loss) "
           "SELECT sw.id, e->'config', e->>'config_hash', $5::int, $4::int, $6::int, "
           "(e->>'params')::bigint, (e->>'nonembedding_params')::bigint, "
           "(e->>'tokens')::bigint, (e->>'batch_size')::int, (e->>'flops')::float8, "
           "e->>'part', e->'target_loss' "
           "FROM sw, jsonb_array_elements($7::jsonb) WITH ORDINALITY AS t(e, i) "
           "ORDER BY t.i RETURNING 1) "
           "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
           7, p, on_inserted, c);
}

void store_sweeps_find_by_hash(db *d, const char *spec_hash, store_sweeps_id_cb cb, void *ud) {
  call *c = call_new(ud, 0);
  if (!c) {
    cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  c->cb.id = cb;
  const char *p[1] = {spec_hash};
  db_query(d, "SELECT id FROM sweeps WHERE spec_hash = $1", 1, p, on_found, c);
}

void store_sweeps_update_status(db *d, int64_t sweep_id, store_sweeps_status_cb cb, void *ud) {
  call *c = call_new(ud, sweep_id);
  if (!c) {
    cb(ud, SS_ENOMEM, sweep_id, NULL, "out of memory");
    return;
  }
  c->cb.status = cb;
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  const char *p[1] = {id};
  db_query(d,
           "UPDATE sweeps sw SET status = x.st FROM (SELECT CASE "
           "WHEN count(*) FILTER (WHERE status IN ('queued', 'running')) > 0 THEN "
           "CASE WHEN count(*) FILTER (WHERE status <> 'queued') > 0 THEN 'running' "
           "ELSE 'queued' END "
           "WHEN count(*) FILTER (WHERE status = 'failed') > 0 THEN 'failed' "
           "WHEN count(*) FILTER (WHERE status = 'succeeded') > 0 THEN 'succeeded' "
           "ELSE 'cancelled' END::run_status AS st FROM runs WHERE sweep_id = $1) x "
           "WHERE sw.id = $1 AND sw.status <> 'cancelled' AND sw.status <> x.st "
           "RETURNING sw.id, sw.status",
           1, p, on_status, c);
}

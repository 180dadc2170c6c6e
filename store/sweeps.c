/* Sweeps: their SQL (store/sweeps.h). */
#include "store/sweeps.h"

#include <stdlib.h>

#include "common/err.h"
#include "store/internal.h"

typedef struct inserted_row {
  int64_t sweep_id, runs;
} inserted_row;

/* sweep_id NULL: ON CONFLICT, the spec is there already (then 0, 0) */
static void decode_inserted(const PGresult *res, int row, void *elem) {
  int there = PQgetisnull(res, row, 0);
  *(inserted_row *)elem =
      (inserted_row){there ? 0 : store__int(res, row, 0), there ? 0 : store__int(res, row, 1)};
}

static void deliver_inserted(const store__call *c, int status, const void *rows, int n,
                             const char *errmsg) {
  const inserted_row *r = status == 0 && n > 0 ? rows : &(inserted_row){0, 0};
  ((store_sweeps_inserted_cb)c->cb)(c->ud, status, r->sweep_id, r->runs,
                                    status == 0 ? NULL : errmsg);
}

static const store__rows_spec inserted = {sizeof(inserted_row), decode_inserted, deliver_inserted};

static void deliver_found(const store__call *c, int status, const void *rows, int n,
                          const char *errmsg) {
  ((store_sweeps_id_cb)c->cb)(c->ud, status, status == 0 && n == 1 ? *(const int64_t *)rows : 0,
                              errmsg);
}

static const store__rows_spec found = {sizeof(int64_t), store__decode_id, deliver_found};

/* rows: (id, new status); c->key: the sweep */
static void decode_status(const PGresult *res, int row, void *elem) {
  *(const char **)elem = PQgetvalue(res, row, 1);
}

static void deliver_status(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  ((store_sweeps_status_cb)c->cb)(
      c->ud, status, c->key, status == 0 && n == 1 ? *(const char *const *)rows : NULL, errmsg);
}

static const store__rows_spec status_changed = {sizeof(const char *), decode_status,
                                                deliver_status};

void store_sweeps_insert(db *d, const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  char gpus[24], prio[24], maxa[24], owner[24];
  const char *p[8] = {sw->name,
                      sw->spec_json,
                      sw->spec_hash,
                      store__itoa(prio, sizeof prio, sw->priority),
                      store__itoa(gpus, sizeof gpus, sw->gpus),
                      store__itoa(maxa, sizeof maxa, sw->max_attempts),
                      sw->runs_json,
                      store__itoa(owner, sizeof owner, sw->owner_id)};
  store__query_rows(
      d,
      "WITH sw AS (INSERT INTO sweeps (name, spec, spec_hash, priority, owner_id) "
      "VALUES ($1, $2::jsonb, $3, $4::int, $8::bigint) ON CONFLICT (spec_hash) DO NOTHING "
      "RETURNING id), "
      /* ids drawn first, so that a branch names its trunk's (the plan's
       * branch_of is the trunk's index in the list) */
      "pl AS MATERIALIZED (SELECT t.e, t.i, nextval(pg_get_serial_sequence("
      "'runs', 'id')) AS id FROM sw, jsonb_array_elements($7::jsonb) "
      "WITH ORDINALITY AS t(e, i) ORDER BY t.i), "
      "ins AS (INSERT INTO runs (id, sweep_id, config, config_hash, gpus, priority, "
      "max_attempts, params, nonembedding_params, tokens, batch_size, flops, part, "
      "target_loss, branch_of, branch_step, keep_steps) "
      "SELECT pl.id, sw.id, pl.e->'config', pl.e->>'config_hash', $5::int, $4::int, "
      "$6::int, (pl.e->>'params')::bigint, (pl.e->>'nonembedding_params')::bigint, "
      "(pl.e->>'tokens')::bigint, (pl.e->>'batch_size')::int, (pl.e->>'flops')::float8, "
      "pl.e->>'part', pl.e->'target_loss', "
      "tr.id, (pl.e->>'branch_step')::bigint, pl.e->'keep_steps' "
      "FROM sw CROSS JOIN pl LEFT JOIN pl tr "
      "ON tr.i = (pl.e->>'branch_of')::bigint + 1 ORDER BY pl.i RETURNING 1) "
      "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
      8, p, &inserted, (void (*)(void))cb, ud);
}

/* The runs of $5 (a plan's runs as store_sweeps_insert takes them, each
 * with "designed" when designed) added to the sweep of the CTE sw (one row,
 * locked; none: nothing added) as queued runs with priority $2, gpus $3 and
 * max_attempts $4: the CTEs pl and ins. A run the sweep already has is
 * not added again; ids are drawn first, as in store_sweeps_insert, so that
 * a branch names its trunk's when the trunk is added too (a WSD grid's next
 * budget: sweeps/next.h), and starts from scratch when the trunk is not.
 * Two inserts of one budget from two connections: the second's NOT EXISTS
 * may not see the first's rows, and the unique index on designed runs
 * (migration 009) skips them instead. */
#define EXTEND_RUNS_SQL                                                                           \
  "pl AS MATERIALIZED (SELECT t.e, t.i, nextval(pg_get_serial_sequence('runs', 'id')) AS id, "    \
  "NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = sw.id AND "                                \
  "r.config_hash = t.e->>'config_hash') AS new "                                                  \
  "FROM sw, jsonb_array_elements($5::jsonb) WITH ORDINALITY AS t(e, i) ORDER BY t.i), "           \
  "ins AS (INSERT INTO runs (id, sweep_id, config, config_hash, gpus, priority, "                 \
  "max_attempts, params, nonembedding_params, tokens, batch_size, flops, part, "                  \
  "target_loss, designed, branch_of, branch_step, branch_path, keep_steps) "                      \
  "SELECT pl.id, sw.id, pl.e->'config', pl.e->>'config_hash', $3::int, $2::int, $4::int, "        \
  "(pl.e->>'params')::bigint, (pl.e->>'nonembedding_params')::bigint, "                           \
  "(pl.e->>'tokens')::bigint, (pl.e->>'batch_size')::int, (pl.e->>'flops')::float8, "             \
  "pl.e->>'part', pl.e->'target_loss', pl.e->'designed', "                                        \
  "coalesce(tr.id, kr.id), "                                                                      \
  "CASE WHEN tr.id IS NOT NULL OR kr.id IS NOT NULL THEN (pl.e->>'branch_step')::bigint END, "    \
  "CASE WHEN kr.id IS NOT NULL THEN pl.e->>'branch_path' END, pl.e->'keep_steps' "                \
  "FROM sw CROSS JOIN pl LEFT JOIN pl tr "                                                        \
  "ON tr.i = (pl.e->>'branch_of')::bigint + 1 AND tr.new " /* an adaptive round's branch of a run \
                                                            * the sweep trained in an earlier     \
                                                            * round, from the checkpoint that run \
                                                            * kept (runs.kept) */                 \
  "LEFT JOIN runs kr ON kr.id = (pl.e->>'branch_run')::bigint AND kr.sweep_id = sw.id "           \
  "AND kr.status = 'succeeded' AND kr.kept ? (pl.e->>'branch_step') "                             \
  "WHERE pl.new ORDER BY pl.i "                                                                   \
  "ON CONFLICT (sweep_id, config_hash) WHERE designed IS NOT NULL DO NOTHING "                    \
  "RETURNING 1) "

/* $1 the sweep, $2..$5 as EXTEND_RUNS_SQL reads them */
static void extend_params(const char *p[5], char id[24], char prio[24], char gpus[24],
                          char maxa[24], int64_t sweep_id, const store_sweep_new *sw) {
  p[0] = store__itoa(id, 24, sweep_id);
  p[1] = store__itoa(prio, 24, sw->priority);
  p[2] = store__itoa(gpus, 24, sw->gpus);
  p[3] = store__itoa(maxa, 24, sw->max_attempts);
  p[4] = sw->runs_json;
}

void store_sweeps_extend(db *d, int64_t sweep_id, const store_sweep_new *sw,
                         store_sweeps_inserted_cb cb, void *ud) {
  char id[24], gpus[24], prio[24], maxa[24];
  const char *p[5];
  extend_params(p, id, prio, gpus, maxa, sweep_id, sw);
  /* the sweep's row locked: a cancel that commits first leaves nothing
   * added (the lock's re-check sees it cancelled). A cancel sent on another
   * connection while this runs could miss the added runs (its snapshot
   * predates them), so the scheduler sends both on one connection. */
  store__query_rows(d,
                    "WITH sw AS (SELECT id FROM sweeps WHERE id = $1 AND status <> 'cancelled' "
                    "FOR UPDATE), " EXTEND_RUNS_SQL
                    "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
                    5, p, &inserted, (void (*)(void))cb, ud);
}

void store_sweeps_lr_tuned(db *d, int64_t sweep_id, const char *decision_json,
                           const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  char id[24], gpus[24], prio[24], maxa[24];
  const char *p[6];
  extend_params(p, id, prio, gpus, maxa, sweep_id, sw);
  p[5] = decision_json;
  /* as store_sweeps_extend, and only while the tune has not decided: the
   * lock's re-check skips the sweep when a decision committed meanwhile,
   * so that of two decisions at once (or one made again after a restart
   * that lost its answer) only the first adds the study; the decision
   * itself is written by the same statement, so neither is ever stored
   * without the other */
  store__query_rows(d,
                    "WITH sw AS (SELECT id FROM sweeps WHERE id = $1 AND status <> 'cancelled' "
                    "AND spec ? 'lr_tune' AND (lr_tune IS NULL OR lr_tune->>'status' <> "
                    "'decided') FOR UPDATE), "
                    "dec AS (UPDATE sweeps s SET lr_tune = $6::jsonb || "
                    "jsonb_build_object('decided_at', now()) FROM sw WHERE s.id = sw.id "
                    "RETURNING 1), " EXTEND_RUNS_SQL
                    "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
                    6, p, &inserted, (void (*)(void))cb, ud);
}

typedef struct tune_rows {
  const char *spec;
  store_lr_tune_run run;
} tune_rows;

static void decode_tune(const PGresult *res, int row, void *elem) {
  *(tune_rows *)elem = (tune_rows){store__str_or_null(res, row, 0),
                                   {.id = store__int(res, row, 1),
                                    .lr = store__num_or_nan(res, row, 2),
                                    .status = PQgetvalue(res, row, 3),
                                    .loss = store__num_or_nan(res, row, 4),
                                    .n_layer = (int)store__int(res, row, 5),
                                    .d_model = (int)store__int(res, row, 6),
                                    .n_head = (int)store__int(res, row, 7),
                                    .batch_size = (int)store__int(res, row, 8),
                                    .nonembedding_params = store__int(res, row, 9),
                                    .tokens = store__int(res, row, 10)}};
}

static void deliver_tune(const store__call *c, int status, const void *rows, int n,
                         const char *errmsg) {
  const tune_rows *t = rows;
  store_lr_tune_run *runs = status == 0 && n > 0 ? malloc((size_t)n * sizeof *runs) : NULL;
  if (status == 0 && n > 0 && !runs) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
  }
  for (int i = 0; runs && i < n; i++)
    runs[i] = t[i].run;
  ((store_sweeps_lr_tune_cb)c->cb)(c->ud, status, runs ? t[0].spec : NULL, runs, runs ? n : 0,
                                   status == 0 ? NULL : errmsg);
  free(runs);
}

static const store__rows_spec tune_read = {sizeof(tune_rows), decode_tune, deliver_tune};

void store_sweeps_lr_tune_runs(db *d, int64_t sweep_id, store_sweeps_lr_tune_cb cb, void *ud) {
  char id[24];
  const char *p[1] = {store__itoa(id, sizeof id, sweep_id)};
  /* the tune's runs, and reproductions of them (what `reproduce` makes of
   * a failed one: the same config, part NULL); the spec once, on the first
   * row */
  store__query_rows(
      d,
      "SELECT CASE WHEN row_number() OVER (ORDER BY r.id) = 1 THEN sw.spec::text END, r.id, "
      "(r.config->'train'->>'lr')::float8, r.status::text, r.final_val_loss, "
      "(r.config->'model'->>'n_layer')::int, (r.config->'model'->>'d_model')::int, "
      "(r.config->'model'->>'n_head')::int, r.batch_size, r.nonembedding_params, r.tokens "
      "FROM sweeps sw JOIN runs r ON r.sweep_id = sw.id AND (r.part = 'lr_tune' OR EXISTS "
      "(SELECT 1 FROM runs o WHERE o.id = r.reproduces AND o.part = 'lr_tune')) "
      "WHERE sw.id = $1 AND sw.spec ? 'lr_tune' AND sw.status <> 'cancelled' "
      "AND (sw.lr_tune IS NULL OR sw.lr_tune->>'status' <> 'decided') ORDER BY r.id",
      1, p, &tune_read, (void (*)(void))cb, ud);
}

void store_sweeps_adaptive_round(db *d, int64_t sweep_id, int rounds, const char *adaptive_json,
                                 const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  char id[24], gpus[24], prio[24], maxa[24], nr[24];
  const char *p[7];
  extend_params(p, id, prio, gpus, maxa, sweep_id, sw);
  p[5] = adaptive_json;
  p[6] = store__itoa(nr, sizeof nr, rounds);
  /* as store_sweeps_lr_tuned: the lock's re-check skips the sweep when a
   * round committed meanwhile (its count of rounds moved on) */
  store__query_rows(
      d,
      "WITH sw AS (SELECT id FROM sweeps WHERE id = $1 AND status <> 'cancelled' "
      "AND spec ? 'adaptive' AND coalesce(adaptive->>'status', 'running') = 'running' "
      "AND coalesce(jsonb_array_length(adaptive->'rounds'), 0) = $7::int FOR UPDATE), "
      "dec AS (UPDATE sweeps s SET adaptive = CASE WHEN jsonb_array_length($6::jsonb->"
      "'rounds') > 0 THEN jsonb_set($6::jsonb, '{rounds}', ($6::jsonb->'rounds') - (-1) || "
      "jsonb_build_array(($6::jsonb->'rounds'->-1) || jsonb_build_object('decided_at', now()))) "
      "ELSE $6::jsonb END FROM sw WHERE s.id = sw.id RETURNING 1), " EXTEND_RUNS_SQL
      "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
      7, p, &inserted, (void (*)(void))cb, ud);
}

typedef struct adaptive_rows {
  const char *spec, *adaptive;
  store_adaptive_run run;
} adaptive_rows;

static void decode_adaptive(const PGresult *res, int row, void *elem) {
  *(adaptive_rows *)elem =
      (adaptive_rows){store__str_or_null(res, row, 0),
                      store__str_or_null(res, row, 1),
                      {store__int(res, row, 4), PQgetvalue(res, row, 2), PQgetvalue(res, row, 3),
                       store__str_or_null(res, row, 5)}};
}

static void deliver_adaptive(const store__call *c, int status, const void *rows, int n,
                             const char *errmsg) {
  const adaptive_rows *t = rows;
  store_adaptive_run *runs = status == 0 && n > 0 ? malloc((size_t)n * sizeof *runs) : NULL;
  if (status == 0 && n > 0 && !runs) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
  }
  for (int i = 0; runs && i < n; i++)
    runs[i] = t[i].run;
  ((store_sweeps_adaptive_cb)c->cb)(c->ud, status, runs ? t[0].spec : NULL,
                                    runs ? t[0].adaptive : NULL, runs, runs ? n : 0,
                                    status == 0 ? NULL : errmsg);
  free(runs);
}

static const store__rows_spec adaptive_read = {sizeof(adaptive_rows), decode_adaptive,
                                               deliver_adaptive};

void store_sweeps_adaptive_runs(db *d, int64_t sweep_id, store_sweeps_adaptive_cb cb, void *ud) {
  char id[24];
  const char *p[1] = {store__itoa(id, sizeof id, sweep_id)};
  /* the spec and the rounds once, on the first row */
  store__query_rows(
      d,
      "SELECT CASE WHEN row_number() OVER (ORDER BY r.id) = 1 THEN sw.spec::text END, "
      "CASE WHEN row_number() OVER (ORDER BY r.id) = 1 THEN sw.adaptive::text END, "
      "r.config_hash, r.status::text, r.id, r.kept::text "
      "FROM sweeps sw JOIN runs r ON r.sweep_id = sw.id AND r.part = 'isoflop' "
      "AND r.reproduces IS NULL "
      "WHERE sw.id = $1 AND sw.spec ? 'adaptive' AND sw.status <> 'cancelled' "
      "AND coalesce(sw.adaptive->>'status', 'running') = 'running' ORDER BY r.id",
      1, p, &adaptive_read, (void (*)(void))cb, ud);
}

typedef struct spec_row {
  const char *spec, *status;
} spec_row;

static void decode_spec(const PGresult *res, int row, void *elem) {
  *(spec_row *)elem = (spec_row){PQgetvalue(res, row, 0), PQgetvalue(res, row, 1)};
}

static void deliver_spec(const store__call *c, int status, const void *rows, int n,
                         const char *errmsg) {
  const spec_row *r = status == 0 && n == 1 ? rows : &(spec_row){NULL, NULL};
  ((store_sweeps_spec_cb)c->cb)(c->ud, status, r->spec, r->status, status == 0 ? NULL : errmsg);
}

static const store__rows_spec spec_read = {sizeof(spec_row), decode_spec, deliver_spec};

void store_sweeps_spec(db *d, int64_t sweep_id, store_sweeps_spec_cb cb, void *ud) {
  char id[24];
  const char *p[1] = {store__itoa(id, sizeof id, sweep_id)};
  /* a decided lr tune: the study's spec (sweeps/lr_tune.h
   * lr_tune_study_root, but for the numbers, which next.c makes whole) */
  store__query_rows(d,
                    "SELECT CASE WHEN spec ? 'lr_tune' AND lr_tune->>'status' = 'decided' THEN "
                    "(spec - 'lr_tune') || jsonb_build_object('base', coalesce(spec->'base', "
                    "'{}') || jsonb_build_object('train', coalesce(spec->'base'->'train', '{}') "
                    "|| jsonb_build_object('lr', lr_tune->'lr'))) ELSE spec END::text, "
                    "status::text FROM sweeps WHERE id = $1",
                    1, p, &spec_read, (void (*)(void))cb, ud);
}

void store_sweeps_find_by_hash(db *d, const char *spec_hash, store_sweeps_id_cb cb, void *ud) {
  const char *p[1] = {spec_hash};
  store__query_rows(d, "SELECT id FROM sweeps WHERE spec_hash = $1", 1, p, &found,
                    (void (*)(void))cb, ud);
}

void store_sweeps_update_status(db *d, int64_t sweep_id, store_sweeps_status_cb cb, void *ud) {
  store__call *c = store__rows_call(&status_changed, (void (*)(void))cb, ud, sweep_id);
  if (!c)
    return;
  char id[24];
  const char *p[1] = {store__itoa(id, sizeof id, sweep_id)};
  db_query(d,
           "UPDATE sweeps sw SET status = x.st FROM (SELECT CASE "
           "WHEN count(*) FILTER (WHERE status IN ('queued', 'running')) > 0 THEN "
           "CASE WHEN count(*) FILTER (WHERE status <> 'queued') > 0 THEN 'running' "
           "ELSE 'queued' END "
           /* an lr tune whose runs have all ended: the study's runs are to come */
           "WHEN (SELECT s2.spec ? 'lr_tune' AND s2.lr_tune IS NULL FROM sweeps s2 "
           "WHERE s2.id = $1) THEN 'running' "
           "WHEN (SELECT s2.lr_tune->>'status' IN ('undecided', 'failed') FROM sweeps s2 "
           "WHERE s2.id = $1) THEN 'failed' "
           /* an adaptive design: its next round is to come, or it has
            * stopped (a failed run was replaced by a later round) */
           "WHEN (SELECT s2.spec ? 'adaptive' AND coalesce(s2.adaptive->>'status', 'running') = "
           "'running' FROM sweeps s2 WHERE s2.id = $1) THEN 'running' "
           "WHEN (SELECT s2.adaptive->>'status' = 'failed' FROM sweeps s2 WHERE s2.id = $1) "
           "THEN 'failed' "
           "WHEN (SELECT s2.spec ? 'adaptive' FROM sweeps s2 WHERE s2.id = $1) AND "
           "count(*) FILTER (WHERE status = 'succeeded') > 0 THEN 'succeeded' "
           /* a decided lr tune's diverged rate is what a tune is for, not a
            * failure of the sweep */
           "WHEN count(*) FILTER (WHERE status = 'failed' AND part IS DISTINCT FROM 'lr_tune') "
           "> 0 THEN 'failed' "
           "WHEN count(*) FILTER (WHERE status = 'succeeded') > 0 THEN 'succeeded' "
           "ELSE 'cancelled' END::run_status AS st FROM runs WHERE sweep_id = $1) x "
           "WHERE sw.id = $1 AND sw.status <> 'cancelled' AND sw.status <> x.st "
           "RETURNING sw.id, sw.status",
           1, p, store__on_rows, c);
}

STORE__ARRAY_SPEC(unfinished, int64_t, store__decode_id, store_ids_cb);

void store_sweeps_unfinished(db *d, store_ids_cb cb, void *ud) {
  store__query_rows(d, "SELECT id FROM sweeps WHERE status IN ('queued', 'running') ORDER BY id", 0,
                    NULL, &unfinished, (void (*)(void))cb, ud);
}

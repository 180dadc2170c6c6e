/* The read documents of the API and the status page (store/pages.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/pages.h"

#include "store/internal.h"

/* For a run that reproduces another (runs.reproduces), once both have
 * finished (succeeded, failed or cancelled): does its curve match the
 * original's exactly (DESIGN.md: the same config on the same backend and
 * thread count gives the same losses), and if not, the largest difference of
 * a training or validation loss at a common step and where. A cancelled run
 * stored only a prefix of the curve: the steps both stored are compared, and
 * its status is there to say so. NULL for other runs and while either is
 * queued or running. Used by the API's run and the run page; $1 is the run. */
#define REPRODUCTION_SQL                                                                 \
  "(SELECT json_build_object('of', o.id, 'status_original', o.status, "                  \
  "'status_reproduced', me.status, 'steps_original', c.no, 'steps_reproduced', c.nr, "   \
  "'steps_compared', c.n, 'final_val_loss_original', o.final_val_loss, "                 \
  "'final_val_loss_reproduced', me.final_val_loss, "                                     \
  "'identical', c.n = c.no AND c.n = c.nr AND c.same AND "                               \
  "o.final_val_loss IS NOT DISTINCT FROM me.final_val_loss, "                            \
  "'identical_where_both', c.same AND c.n = least(c.no, c.nr), "                         \
  "'max_abs_diff', c.diff, 'at_step', c.at) "                                            \
  "FROM runs me JOIN runs o ON o.id = me.reproduces, LATERAL (SELECT "                   \
  "(SELECT count(*) FROM metrics WHERE run_id = o.id) AS no, "                           \
  "(SELECT count(*) FROM metrics WHERE run_id = me.id) AS nr, "                          \
  "count(*) AS n, coalesce(bool_and(a.train_loss IS NOT DISTINCT FROM b.train_loss AND " \
  "a.val_loss IS NOT DISTINCT FROM b.val_loss), true) AS same, "                         \
  "coalesce(max(greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "                \
  "coalesce(abs(a.val_loss - b.val_loss), 0))), 0) AS diff, "                            \
  "(array_agg(a.step ORDER BY greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "  \
  "coalesce(abs(a.val_loss - b.val_loss), 0)) DESC, a.step))[1] AS at "                  \
  "FROM metrics a JOIN metrics b ON b.run_id = me.id AND b.step = a.step "               \
  "WHERE a.run_id = o.id) c "                                                            \
  "WHERE me.id = $1 AND me.status IN ('succeeded', 'failed', 'cancelled') "              \
  "AND o.status IN ('succeeded', 'failed', 'cancelled'))"

/* a run of `runs` that started from its trunk's checkpoint: it was told of
 * one and has no step 1 (a worker that could not read the file trains from
 * scratch) */
#define BRANCHED_SQL                                                              \
  "(runs.branch_path IS NOT NULL AND NOT EXISTS (SELECT 1 FROM metrics m1 WHERE " \
  "m1.run_id = runs.id AND m1.step = 1))"

/* compute a run has spent: all of it when it succeeded, else the share of
 * its tokens its last stored step reached */
#define SPENT_SQL                                                                       \
  "CASE WHEN r.status = 'succeeded' THEN r.flops WHEN r.attempt > 0 THEN r.flops * "    \
  "least(1.0, coalesce((SELECT m.tokens FROM metrics m WHERE m.run_id = r.id ORDER BY " \
  "m.step DESC LIMIT 1), 0)::float8 / greatest(r.tokens, 1)) ELSE 0 END"

#define TS_SQL(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"

/* a run's duration so far, in seconds */
#define DURATION_SQL "extract(epoch FROM coalesce(r.finished_at, now()) - r.started_at)::float8"

static const char run_columns[] =
    "r.id, r.sweep_id, r.status, r.attempt, r.max_attempts, r.gpus, r.priority, r.worker, "
    "r.lease_until, r.params, r.nonembedding_params, r.tokens, r.batch_size, r.flops, "
    "r.final_val_loss, r.started_at, r.finished_at, r.reproduces, r.code_version, r.error, "
    "r.checkpoint_step, r.config_hash, r.part, r.target_loss, r.prediction, r.designed, "
    "r.branch_of, r.branch_step";

static const char *const sort_columns[] = {
    "id",          "status",     "attempt", "params",         "nonembedding_params",
    "tokens",      "batch_size", "flops",   "final_val_loss", "started_at",
    "finished_at", "worker",     NULL};

const char *store_pages_sort_column(const char *name) {
  for (int i = 0; name && sort_columns[i]; i++)
    if (!strcmp(name, sort_columns[i]))
      return sort_columns[i];
  return NULL;
}

/* ---- the API's documents ---------------------------------------------------------------- */

void store_pages_sweeps(db *d, store_json_cb cb, void *ud) {
  store__query_json(d,
                    "SELECT coalesce(json_agg(t ORDER BY t.id DESC), '[]') FROM ("
                    "SELECT sw.id, sw.name, sw.status, sw.priority, sw.created_at, sw.spec_hash, "
                    "count(r.id) AS runs, "
                    "count(r.id) FILTER (WHERE r.status = 'succeeded') AS succeeded, "
                    "count(r.id) FILTER (WHERE r.status = 'failed') AS failed, "
                    "count(r.id) FILTER (WHERE r.status = 'running') AS running, "
                    "count(r.id) FILTER (WHERE r.status = 'queued') AS queued, "
                    "coalesce(max(r.gpus) FILTER (WHERE r.status = 'queued'), 0) AS queued_gpus, "
                    "coalesce(max(CASE WHEN r.gpus = 0 THEN greatest(coalesce((r.config->>'world_size')::int, 1), 1) END) FILTER (WHERE r.status = 'queued'), 1) AS queued_slots, "
                    "coalesce(sum(r.flops), 0) AS flops_planned, "
                    "coalesce(sum(r.flops) FILTER (WHERE r.status = 'succeeded'), 0) AS flops_done "
                    "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
                    "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 1000) t",
                    0, NULL, cb, ud);
}

/* The keys of a page of a sweep's runs: "runs_total", "runs_offset",
 * "runs_limit", "runs" ($1 the sweep, $2 limit, $3 offset, $4 a status or
 * NULL; sw the sweep's row). */
static void runs_page_keys(char *buf, size_t n, const store_runs_page *pg) {
  const char *sort = store_pages_sort_column(pg->sort), *order = pg->desc ? "DESC" : "ASC";
  snprintf(buf, n,
           "'runs_total', (SELECT count(*) FROM runs WHERE sweep_id = sw.id "
           "AND ($4::run_status IS NULL OR status = $4)), "
           "'runs_offset', $3::bigint, 'runs_limit', $2::bigint, "
           "'runs', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT %s FROM runs r "
           "WHERE r.sweep_id = sw.id AND ($4::run_status IS NULL OR r.status = $4) "
           "ORDER BY r.%s %s NULLS LAST, r.id %s LIMIT $2 OFFSET $3) t)",
           run_columns, sort ? sort : "id", order, order);
}

static void page_params(const char *p[4], char ids[24], char lim[24], char off[24],
                        int64_t sweep_id, const store_runs_page *pg) {
  p[0] = store__itoa(ids, 24, sweep_id);
  p[1] = store__itoa(lim, 24, pg->limit);
  p[2] = store__itoa(off, 24, pg->offset);
  p[3] = pg->status;
}

static void decode_sweep_doc(const PGresult *res, int row, void *elem) {
  *(store_sweep_doc *)elem =
      (store_sweep_doc){store__str_or_null(res, row, 0), store__int(res, row, 1),
                        store__int(res, row, 2), store__int(res, row, 3)};
}

static void deliver_sweep_doc(const store__call *c, int status, const void *rows, int n,
                              const char *errmsg) {
  ((store_sweep_doc_cb)c->cb)(c->ud, status, status == 0 && n > 0 ? rows : NULL, errmsg);
}

static const store__rows_spec sweep_doc = {sizeof(store_sweep_doc), decode_sweep_doc,
                                           deliver_sweep_doc};

/* The counts come from one pass over the sweep's runs (c), given both to
 * the document and, as columns, to the scheduler. */
void store_pages_sweep(db *d, int64_t sweep_id, const store_runs_page *pg, store_sweep_doc_cb cb,
                       void *ud) {
  char page[2048], sql[4096], ids[24], lim[24], off[24];
  runs_page_keys(page, sizeof page, pg);
  snprintf(sql, sizeof sql,
           "SELECT json_build_object('id', sw.id, 'name', sw.name, 'status', sw.status, "
           "'priority', sw.priority, 'created_at', sw.created_at, 'spec', sw.spec, "
           "'spec_hash', sw.spec_hash, 'counts', json_build_object('queued', c.queued, "
           "'queued_gpus', c.queued_gpus, 'queued_slots', c.queued_slots, "
           "'running', c.running, 'succeeded', c.succeeded, 'failed', c.failed, "
           "'cancelled', c.cancelled, 'total', c.total, 'flops_planned', c.flops_planned, "
           "'flops_done', c.flops_done, 'branched', c.branched, 'flops_trained', "
           "c.flops_trained), %s), c.queued, c.queued_gpus, c.queued_slots "
           "FROM sweeps sw CROSS JOIN LATERAL (SELECT "
           "count(*) FILTER (WHERE status = 'queued') AS queued, "
           "coalesce(max(gpus) FILTER (WHERE status = 'queued'), 0) AS queued_gpus, "
           "coalesce(max(CASE WHEN gpus = 0 THEN greatest(coalesce((config->>'world_size')::int, "
           "1), 1) END) FILTER (WHERE status = 'queued'), 1) AS queued_slots, "
           "count(*) FILTER (WHERE status = 'running') AS running, "
           "count(*) FILTER (WHERE status = 'succeeded') AS succeeded, "
           "count(*) FILTER (WHERE status = 'failed') AS failed, "
           "count(*) FILTER (WHERE status = 'cancelled') AS cancelled, "
           "count(*) AS total, coalesce(sum(flops), 0) AS flops_planned, "
           "coalesce(sum(flops) FILTER (WHERE status = 'succeeded'), 0) AS flops_done, "
           /* wsd branches (migration 010): the succeeded runs that started from a
            * trunk's checkpoint, and the FLOPs the succeeded runs trained themselves */
           "count(*) FILTER (WHERE status = 'succeeded' AND " BRANCHED_SQL ") AS branched, "
           "coalesce(sum(CASE WHEN " BRANCHED_SQL " THEN flops * greatest(0.0, 1.0 - "
           "branch_step::float8 * coalesce((SELECT p.batch_size FROM runs p WHERE p.id = "
           "runs.branch_of), batch_size) * (config->'model'->>'seq_len')::float8 / "
           "greatest(tokens, 1)) ELSE flops END) FILTER (WHERE status = 'succeeded'), 0) "
           "AS flops_trained "
           "FROM runs WHERE sweep_id = sw.id) c WHERE sw.id = $1",
           page);
  const char *p[4];
  page_params(p, ids, lim, off, sweep_id, pg);
  store__query_rows(d, sql, 4, p, &sweep_doc, (void (*)(void))cb, ud);
}

void store_pages_sweep_runs(db *d, int64_t sweep_id, const store_runs_page *pg, store_json_cb cb,
                            void *ud) {
  char page[2048], sql[2560], ids[24], lim[24], off[24];
  runs_page_keys(page, sizeof page, pg);
  snprintf(sql, sizeof sql, "SELECT json_build_object(%s) FROM sweeps sw WHERE sw.id = $1", page);
  const char *p[4];
  page_params(p, ids, lim, off, sweep_id, pg);
  store__query_json(d, sql, 4, p, cb, ud);
}

void store_pages_run(db *d, int64_t run_id, int64_t limit, int64_t offset, store_json_cb cb,
                     void *ud) {
  char sql[4096], rid[24], lim[24], off[24];
  snprintf(sql, sizeof sql,
           "SELECT json_build_object('run', (SELECT row_to_json(t) FROM (SELECT %s, "
           "r.config FROM runs r WHERE r.id = $1) t), "
           "'metrics', (SELECT coalesce(json_agg(m ORDER BY m.step), '[]') FROM "
           "(SELECT step, tokens, train_loss, val_loss, lr, grad_norm, b_noise, loss_scale, "
           "tok_per_s FROM metrics WHERE run_id = $1 ORDER BY step LIMIT $2 OFFSET $3) m), "
           "'metrics_total', (SELECT count(*) FROM metrics WHERE run_id = $1), "
           "'metrics_offset', $3::bigint, 'metrics_limit', $2::bigint, "
           "'reproduction', %s) "
           "WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1)",
           run_columns, REPRODUCTION_SQL);
  const char *p[3] = {store__itoa(rid, sizeof rid, run_id), store__itoa(lim, sizeof lim, limit),
                      store__itoa(off, sizeof off, offset)};
  store__query_json(d, sql, 3, p, cb, ud);
}

static void decode_counts(const PGresult *res, int row, void *elem) {
  *(store_run_counts *)elem = (store_run_counts){store__int(res, row, 0), store__int(res, row, 1),
                                                 store__int(res, row, 2), store__int(res, row, 3)};
}

static void deliver_counts(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  if (status == 0 && n != 1)
    status = SS_EQUERY;
  ((store_run_counts_cb)c->cb)(c->ud, status, status == 0 ? rows : NULL,
                               status == 0 ? NULL : errmsg);
}

static const store__rows_spec counts = {sizeof(store_run_counts), decode_counts, deliver_counts};

void store_pages_run_counts(db *d, store_run_counts_cb cb, void *ud) {
  store__query_rows(d,
                    "SELECT count(*) FILTER (WHERE status = 'queued'), "
                    "count(*) FILTER (WHERE status = 'running'), "
                    "count(*) FILTER (WHERE status = 'succeeded'), "
                    "count(*) FILTER (WHERE status = 'failed') FROM runs",
                    0, NULL, &counts, (void (*)(void))cb, ud);
}

/* ---- the status page's documents ------------------------------------------------------- */

void store_pages_overview(db *d, store_json_cb cb, void *ud) {
  store__query_json(
      d,
      "SELECT json_build_object("
      "'sweeps', (SELECT coalesce(json_agg(t ORDER BY t.id DESC), '[]') FROM ("
      "SELECT sw.id, sw.name, sw.status, count(r.id) AS total, "
      "count(r.id) FILTER (WHERE r.status IN ('succeeded', 'failed', 'cancelled')) AS done, "
      "count(r.id) FILTER (WHERE r.status = 'running') AS running, "
      "count(r.id) FILTER (WHERE r.status = 'queued') AS queued, "
      "count(r.id) FILTER (WHERE r.status = 'failed') AS failed, "
      "coalesce(sum(r.flops), 0) AS flops_planned, "
      "coalesce(sum(" SPENT_SQL "), 0) AS flops_spent "
      "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
      "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 50) t), "
      "'sweeps_total', (SELECT count(*) FROM sweeps), "
      "'queue', (SELECT json_build_object('runs', count(*), 'gpus', coalesce(sum(gpus), 0), "
      "'cpu', count(*) FILTER (WHERE gpus = 0)) FROM runs WHERE status = 'queued'), "
      "'next', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, r.sweep_id, sw.name AS "
      "sweep, r.gpus, r.nonembedding_params, r.flops, r.attempt FROM runs r JOIN sweeps sw ON "
      "sw.id = r.sweep_id WHERE r.status = 'queued' ORDER BY r.priority DESC, r.sweep_id, "
      "r.flops NULLS LAST, r.id LIMIT 10) t), "
      "'failures', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, r.sweep_id, sw.name AS "
      "sweep, r.attempt, r.error, " TS_SQL(
          "r.finished_at") " AS finished_at FROM runs r "
                           "JOIN sweeps sw ON sw.id = r.sweep_id WHERE r.status = 'failed' "
                           "ORDER BY r.finished_at DESC NULLS LAST, r.id DESC LIMIT 10) t))",
      0, NULL, cb, ud);
}

void store_pages_sweep_page(db *d, int64_t sweep_id, const char *status, int64_t offset, int limit,
                            store_json_cb cb, void *ud) {
  char ids[24], off[24], lim[24];
  const char *p[4] = {store__itoa(ids, sizeof ids, sweep_id), status,
                      store__itoa(off, sizeof off, offset), store__itoa(lim, sizeof lim, limit)};
  store__query_json(
      d,
      "SELECT json_build_object('sweep', (SELECT json_build_object('id', id, 'name', name, "
      "'status', status, 'method', spec->>'method', 'description', spec->>'description', "
      "'created_at', " TS_SQL(
          "created_at") ") FROM sweeps WHERE id = $1), "
                        "'counts', (SELECT json_build_object('total', count(*), "
                        "'done', count(*) FILTER (WHERE r.status IN ('succeeded', 'failed', "
                        "'cancelled')), "
                        "'queued', count(*) FILTER (WHERE r.status = 'queued'), "
                        "'queued_gpus', coalesce(max(r.gpus) FILTER (WHERE r.status = "
                        "'queued'), 0), "
                        "'queued_slots', coalesce(max(CASE WHEN r.gpus = 0 THEN "
                        "greatest(coalesce((r.config->>'world_size')::int, 1), 1) END) FILTER "
                        "(WHERE r.status = 'queued'), 1), "
                        "'running', count(*) FILTER (WHERE r.status = 'running'), "
                        "'succeeded', count(*) FILTER (WHERE r.status = 'succeeded'), "
                        "'failed', count(*) FILTER (WHERE r.status = 'failed'), "
                        "'cancelled', count(*) FILTER (WHERE r.status = 'cancelled'), "
                        "'flops_planned', coalesce(sum(r.flops), 0), "
                        "'flops_spent', coalesce(sum(" SPENT_SQL
                        "), 0)) FROM runs r WHERE r.sweep_id = $1), "
                        "'fits', coalesce(" STORE__LATEST_FITS_SQL ", '{}'), "
                        /* the runs `next` designed (runs.designed), predicted beside
                         * measured: the first 200 by budget and size */
                        "'designed', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, "
                        "r.status, r.nonembedding_params, r.tokens, r.final_val_loss, r.designed "
                        "FROM runs r WHERE r.sweep_id = $1 AND r.designed IS NOT NULL "
                        "ORDER BY (r.designed->>'flops')::float8, r.nonembedding_params, r.id "
                        "LIMIT 200) t), "
                        "'runs_total', (SELECT count(*) FROM runs WHERE sweep_id = $1 "
                        "AND ($2::run_status IS NULL OR status = $2)), "
                        "'runs', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, r.status, "
                        "r.nonembedding_params, r.tokens, r.batch_size, r.flops, r.final_val_loss, "
                        "r.attempt, "
                        "r.max_attempts, wk.name AS worker, " DURATION_SQL " AS duration_s "
                        "FROM runs r LEFT JOIN workers wk ON wk.id = r.worker WHERE r.sweep_id = "
                        "$1 "
                        "AND ($2::run_status IS NULL OR r.status = $2) ORDER BY r.id LIMIT $4 "
                        "OFFSET $3) t)) "
                        "WHERE EXISTS (SELECT 1 FROM sweeps WHERE id = $1)",
      4, p, cb, ud);
}

void store_pages_run_page(db *d, int64_t run_id, store_json_cb cb, void *ud) {
  store__query_json_id(
      d,
      "SELECT json_build_object('id', r.id, 'sweep_id', r.sweep_id, 'sweep', sw.name, "
      "'status', r.status, 'attempt', r.attempt, 'max_attempts', r.max_attempts, "
      "'worker', wk.name, 'params', r.params, 'nonembedding_params', r.nonembedding_params, "
      "'tokens', r.tokens, 'batch_size', r.batch_size, 'flops', r.flops, "
      "'final_val_loss', r.final_val_loss, 'started_at', " TS_SQL(
          "r.started_at") ", "
                          "'finished_at', " TS_SQL(
                              "r.finished_at") ", 'duration_s', " DURATION_SQL ", "
                                               "'reproduces', r.reproduces, 'config_hash', "
                                               "r.config_hash, "
                                               "'code_version', r.code_version, 'error', r.error, "
                                               "'log_tail', r.log_tail, "
                                               "'prediction', r.prediction, 'designed', "
                                               "r.designed, 'branch_of', r.branch_of, "
                                               "'branch_step', r.branch_step, "
                                               "'reproduction', " REPRODUCTION_SQL ", "
                                               "'reproduced_by', (SELECT "
                                               "json_agg(json_build_object('id', x.id, 'status', "
                                               "x.status) "
                                               "ORDER BY x.id) FROM runs x WHERE x.reproduces = "
                                               "r.id), 'config', r.config) "
                                               "FROM runs r JOIN sweeps sw ON sw.id = r.sweep_id "
                                               "LEFT JOIN workers wk ON wk.id = r.worker "
                                               "WHERE r.id = $1",
      run_id, cb, ud);
}

/* The samples of one column of a run's curve (alias: their table): for
 * g = 0..P ($2) the first step at or after t_g = ceil(smax^(g/P)), found in
 * one of two ways, whichever reads less for this run (mx.dense, decided by
 * its last step against P). Sparse (many more steps than samples): one
 * index seek per t_g, so the cost does not grow with the curve's length;
 * the bound must be an integer, as step is, or the seek becomes a scan of
 * the run's rows for every sample. Dense: one ordered pass over the run's
 * rows, keeping a step when some t_g lies in (previous step, step], that is
 * when floor(P ln(step) / ln(smax)) exceeds the previous step's: the same
 * steps, without the seeks. Evaluations likewise (the metrics_evals
 * index). The last step is always included. */
#define CURVE_BUCKET_SQL(x) "least($2::float8, floor($2::float8 * ln(" x "::float8 + 1e-6) / mx.l))"
#define SAMPLE_SQL(col, alias)                                                                  \
  "CROSS JOIN LATERAL (SELECT array_agg(p.tokens ORDER BY p.step) AS tokens, "                  \
  "array_agg(p." col " ORDER BY p.step) AS loss FROM ("                                         \
  "SELECT p.step, p.tokens, p." col " FROM (SELECT m.step, m.tokens, m." col                    \
  ", lag(m.step) OVER (ORDER BY m.step) AS prev FROM metrics m WHERE m.run_id = mx.id "         \
  "AND m." col " IS NOT NULL) p WHERE mx.dense AND p.step >= 1 AND (p.prev IS NULL OR "         \
  "p.prev < 1 OR mx.l = 0 OR " CURVE_BUCKET_SQL("p.step") " > " CURVE_BUCKET_SQL(               \
      "p.prev") ") "                                                                            \
                "UNION ALL SELECT DISTINCT q.* FROM generate_series(0, $2::int) g CROSS JOIN "  \
                "LATERAL "                                                                      \
                "(SELECT m.step, m.tokens, m." col                                              \
                " FROM metrics m WHERE m.run_id = mx.id AND m." col                             \
                " IS NOT NULL AND m.step >= ceil(exp(mx.l * g::float8 / $2::int) - 1e-6)::int " \
                "ORDER BY m.step LIMIT 1) q WHERE NOT mx.dense) p) " alias " "

void store_pages_curves(db *d, int64_t sweep_id, const char *run_ids, int64_t points, int64_t limit,
                        int64_t offset, store_json_cb cb, void *ud) {
  char sid[24], pts[24], lim[24], off[24];
  const char *p[5] = {sweep_id ? store__itoa(sid, sizeof sid, sweep_id) : NULL,
                      store__itoa(pts, sizeof pts, points), run_ids,
                      store__itoa(lim, sizeof lim, limit), store__itoa(off, sizeof off, offset)};
  /* dense: an ordered pass reads about smax rows, seeks cost about as much
   * as 2 rows each and there are 2 (P + 1) of them per column */
  store__query_json(
      d,
      "SELECT coalesce(json_agg(json_build_object('run_id', mx.id, 'status', mx.status, "
      "'nonembedding_params', mx.n, 'steps', mx.smax, 'tokens', c.tokens, 'train_loss', "
      "c.loss, 'val_tokens', v.tokens, 'val_loss', v.loss) ORDER BY mx.id), '[]') "
      "FROM (SELECT r.id, r.status, r.nonembedding_params AS n, s.smax, "
      "ln(greatest(s.smax, 1)) AS l, s.smax <= 2 * ($2::int + 1) AS dense FROM runs r "
      "CROSS JOIN LATERAL (SELECT max(m.step) AS smax FROM metrics m WHERE m.run_id = r.id) s "
      "WHERE ($1::bigint IS NULL OR r.sweep_id = $1) AND ($3::bigint[] IS NULL OR r.id = "
      "ANY($3)) ORDER BY r.id LIMIT $4 OFFSET $5) mx " SAMPLE_SQL("train_loss", "c")
          SAMPLE_SQL("val_loss", "v"),
      5, p, cb, ud);
}

void store_pages_points(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  store__query_json_id(
      d,
      "SELECT json_build_object('run_id', coalesce(json_agg(id ORDER BY id), '[]'), "
      "'nonembedding_params', coalesce(json_agg(nonembedding_params ORDER BY id), '[]'), "
      "'tokens', coalesce(json_agg(tokens ORDER BY id), '[]'), "
      "'flops', coalesce(json_agg(flops ORDER BY id), '[]'), "
      "'batch_size', coalesce(json_agg(batch_size ORDER BY id), '[]'), "
      "'final_val_loss', coalesce(json_agg(final_val_loss ORDER BY id), '[]'), "
      "'part', coalesce(json_agg(part ORDER BY id), '[]')) "
      "FROM runs WHERE sweep_id = $1 AND status = 'succeeded' AND final_val_loss > 0 "
      "AND reproduces IS NULL AND EXISTS (SELECT 1 FROM sweeps WHERE id = $1)",
      sweep_id, cb, ud);
}

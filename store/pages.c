/* The read documents of the API and the status page (store/pages.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/pages.h"

#include "common/metric_row.h"
#include "store/internal.h"

/* For a run that reproduces another (runs.reproduces), once both have
 * finished (succeeded, failed or cancelled): does its curve match the
 * original's exactly (docs/design.md#determinism: the same config on the same backend and
 * thread count gives the same losses), and if not, the largest difference of
 * a training or validation loss at a common step and where. A cancelled run
 * stored only a prefix of the curve: the steps both stored are compared, and
 * its status is there to say so. Beside it, the two environments
 * (migration 014), the keys of REPRO_ENV_KEYS where they differ
 * (environment_differs: key -> [original, reproduced]; null when none),
 * same_environment, and whether the final loss lies within the run's
 * tolerance (REPRO_TOLERANCE_SQL). NULL for other runs and while either is
 * queued or running. Used by the API's run and the run page; $1 is the run. */
/* What decides a run's numbers, of the environment a run records
 * (migration 014): the same values and the same config must give the same
 * bits; host, CPU model, worker and the CPU kernels' level do not (every
 * level computes the same bits: tests/cli/test_cpu_levels.sh). */
#define REPRO_ENV_KEYS                                                             \
  "'backend', 'threads', 'blas_core', 'scalesweep', 'gpu', 'compute_capability', " \
  "'cuda_runtime', 'cuda_driver', 'cublas', 'nccl', 'trainer', 'torch'"

/* How far a reproduction in another environment may land from the
 * original's final validation loss, relative: what the run's precision
 * leaves of rounding after the summation order changes (fp32: the two
 * trainers of docs/trainers.md agree to ~1e-7 per step after 100 steps,
 * OpenBLAS's kernel sets to ~5e-9; a margin of 1e-4 for longer runs;
 * bf16 and fp16: ~3e-4 measured, 1e-2 allowed) */
#define REPRO_TOLERANCE_SQL                                                                        \
  "(CASE WHEN me.config->>'precision' = 'fp32' OR me.config->>'precision' IS NULL THEN 1e-4 ELSE " \
  "1e-2 END)"

#define REPRODUCTION_SQL                                                                           \
  "(SELECT json_build_object('of', o.id, 'status_original', o.status, "                            \
  "'status_reproduced', me.status, 'steps_original', c.no, 'steps_reproduced', c.nr, "             \
  "'steps_compared', c.n, 'final_val_loss_original', o.final_val_loss, "                           \
  "'final_val_loss_reproduced', me.final_val_loss, "                                               \
  "'identical', c.n = c.no AND c.n = c.nr AND c.same AND "                                         \
  "o.final_val_loss IS NOT DISTINCT FROM me.final_val_loss, "                                      \
  "'identical_where_both', c.same AND c.n = least(c.no, c.nr), "                                   \
  "'max_abs_diff', c.diff, 'at_step', c.at, "                                                      \
  "'environment_original', o.environment, 'environment_reproduced', me.environment, "              \
  "'environment_differs', e.differs, 'same_environment', o.environment IS NOT NULL AND "           \
  "me.environment IS NOT NULL AND e.differs IS NULL, "                                             \
  "'tolerance', " REPRO_TOLERANCE_SQL ", 'within_tolerance', "                                     \
  "abs(me.final_val_loss - o.final_val_loss) <= " REPRO_TOLERANCE_SQL " * abs(o.final_val_loss)) " \
  "FROM runs me JOIN runs o ON o.id = me.reproduces, LATERAL (SELECT "                             \
  "json_object_agg(k, json_build_array(o.environment->k, me.environment->k)) AS differs "          \
  "FROM unnest(ARRAY[" REPRO_ENV_KEYS "]) k WHERE (o.environment->k) IS DISTINCT FROM "            \
  "(me.environment->k)) e, LATERAL (SELECT "                                                       \
  "(SELECT count(*) FROM metrics WHERE run_id = o.id) AS no, "                                     \
  "(SELECT count(*) FROM metrics WHERE run_id = me.id) AS nr, "                                    \
  "count(*) AS n, coalesce(bool_and(a.train_loss IS NOT DISTINCT FROM b.train_loss AND "           \
  "a.val_loss IS NOT DISTINCT FROM b.val_loss), true) AS same, "                                   \
  "coalesce(max(greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "                          \
  "coalesce(abs(a.val_loss - b.val_loss), 0))), 0) AS diff, "                                      \
  "(array_agg(a.step ORDER BY greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "            \
  "coalesce(abs(a.val_loss - b.val_loss), 0)) DESC, a.step))[1] AS at "                            \
  "FROM metrics a JOIN metrics b ON b.run_id = me.id AND b.step = a.step "                         \
  "WHERE a.run_id = o.id) c "                                                                      \
  "WHERE me.id = $1 AND me.status IN ('succeeded', 'failed', 'cancelled') "                        \
  "AND o.status IN ('succeeded', 'failed', 'cancelled'))"

/* a run r that started from its trunk's checkpoint: it was told of one
 * and has no step 1 (a worker that could not read the file trains from
 * scratch) */
#define BRANCHED_SQL                                                           \
  "(r.branch_path IS NOT NULL AND NOT EXISTS (SELECT 1 FROM metrics m1 WHERE " \
  "m1.run_id = r.id AND m1.step = 1))"

/* compute a run has spent: all of it when it succeeded, else the share of
 * its tokens its last stored step reached */
#define SPENT_SQL                                                                       \
  "CASE WHEN r.status = 'succeeded' THEN r.flops WHEN r.attempt > 0 THEN r.flops * "    \
  "least(1.0, coalesce((SELECT m.tokens FROM metrics m WHERE m.run_id = r.id ORDER BY " \
  "m.step DESC LIMIT 1), 0)::float8 / greatest(r.tokens, 1)) ELSE 0 END"

#define TS_SQL(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"

/* a run's duration so far, in seconds */
#define DURATION_SQL "extract(epoch FROM coalesce(r.finished_at, now()) - r.started_at)::float8"

/* a failed run's next attempt, while it waits for it */
#define RETRY_AFTER_SQL \
  "CASE WHEN r.status = 'queued' AND r.retry_after > now() THEN " TS_SQL("r.retry_after") " END"

/* A run's model family and parametrisation as rcfg_model_text words them
 * (runcfg/flops.h, the plan's "model:" line): "gpt2, SP", "llama, muP (base
 * width 64)"; a config names them only where they are not gpt2's and SP's.
 * Of the runs row r. */
#define MODEL_R                                                                            \
  "((CASE WHEN r.config->'model'->>'family' = 'llama' THEN 'llama' ELSE 'gpt2' END) "      \
  "|| (CASE WHEN r.config->'model'->>'parametrization' = 'mup' THEN ', muP (base width ' " \
  "|| (r.config->'model'->>'base_width') || ')' ELSE ', SP' END))"

/* A run's row (store_run, in its order; decode_run), as the API writes it:
 * times as ISO 8601 text, (to_json(t)#>>'{}'), as PostgreSQL writes them
 * in JSON. */
static const char run_columns[] =
    "r.id, r.sweep_id, r.status, r.attempt, r.max_attempts, r.gpus, r.priority, r.worker, "
    "(to_json(r.lease_until)#>>'{}') AS lease_until, r.params, r.nonembedding_params, r.tokens, "
    "r.batch_size, r.flops, r.final_val_loss, (to_json(r.started_at)#>>'{}') AS started_at, "
    "(to_json(r.finished_at)#>>'{}') AS finished_at, r.reproduces, r.code_version, r.error, "
    "r.checkpoint_step, r.config_hash, r.part, r.target_loss, r.prediction, r.designed, "
    "r.branch_of, r.branch_step, " RETRY_AFTER_SQL
    " AS retry_after, r.environment, r.on_worker, " MODEL_R " AS model";

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

/* A sweep's lr tune in its documents (docs/sweeps.md, "Tuning the learning
 * rate on a muP proxy"): the decision once made (sweeps.lr_tune, migration
 * 017); before it, for a spec with "lr_tune", {"status": "tuning" (a tune
 * run is queued or running), "deciding" (the study's runs are being
 * planned) or "cancelled", "lr": null, "rates": each rate's tune runs so
 * far, their mean final loss}; NULL without a tune. sw: the sweep's row. */
#define LR_TUNE_SQL                                                                                \
  "CASE WHEN sw.lr_tune IS NOT NULL THEN sw.lr_tune::json WHEN sw.spec ? 'lr_tune' THEN "          \
  "json_build_object('status', CASE WHEN sw.status = 'cancelled' THEN 'cancelled' WHEN EXISTS "    \
  "(SELECT 1 FROM runs x WHERE x.sweep_id = sw.id AND x.part = 'lr_tune' AND x.status IN "         \
  "('queued', 'running')) THEN 'tuning' ELSE 'deciding' END, 'lr', NULL, 'rates', (SELECT "        \
  "coalesce(json_agg(t ORDER BY t.lr), '[]') FROM (SELECT (x.config->'train'->>'lr')::float8 "     \
  "AS lr, avg(x.final_val_loss) FILTER (WHERE x.status = 'succeeded') AS loss, count(*) AS runs, " \
  "count(*) FILTER (WHERE x.status = 'succeeded') AS succeeded, count(*) FILTER (WHERE "           \
  "x.status = 'failed') AS failed, count(*) FILTER (WHERE x.status = 'cancelled') AS cancelled "   \
  "FROM runs x WHERE x.sweep_id = sw.id AND x.part = 'lr_tune' GROUP BY 1) t)) END"

/* A sweep's adaptive design in its documents (docs/sweeps.md, "An
 * adaptive design"): sweeps.adaptive (migration 018) once its first round
 * has ended (its status "cancelled" once the sweep is, while it ran);
 * before that, for a spec with "adaptive", {"status": "running" (or
 * "cancelled"), "question": null, "rounds": []}; NULL without one. */
#define ADAPTIVE_SQL                                                                     \
  "CASE WHEN sw.adaptive IS NOT NULL THEN (CASE WHEN sw.status = 'cancelled' AND "       \
  "sw.adaptive->>'status' = 'running' THEN jsonb_set(sw.adaptive, '{status}', "          \
  "'\"cancelled\"') ELSE sw.adaptive END)::json WHEN sw.spec ? 'adaptive' THEN "         \
  "json_build_object('status', CASE WHEN sw.status = 'cancelled' THEN 'cancelled' ELSE " \
  "'running' END, 'question', NULL, 'rounds', '[]'::json) END"

/* ---- reading the typed rows -------------------------------------------------------------- */

/* Field (row, col) as an integer, STORE_NULL_INT for SQL NULL. */
static int64_t int_or_null(const PGresult *res, int row, int col) {
  return PQgetisnull(res, row, col) ? STORE_NULL_INT : store__int(res, row, col);
}

/* Every row of res decoded into a malloc'd array of n elements of size
 * bytes (NULL with n 0 when there is none); -1 when out of memory. */
static int decode_all(const PGresult *res, size_t size,
                      void (*decode)(const PGresult *, int, void *), int first, void **out,
                      int *n) {
  int rows = PQntuples(res) - first;
  *out = NULL;
  *n = rows > 0 ? rows : 0;
  if (*n == 0)
    return 0;
  char *a = calloc((size_t)*n, size);
  if (!a)
    return -1;
  for (int i = 0; i < *n; i++)
    decode(res, first + i, a + (size_t)i * size);
  *out = a;
  return 0;
}

/* A row's columns as X(field, kind), in its statement's order: DECODER
 * makes the decode that reads them (name, from column 0; name_at, from
 * column k), each kind with its reader: i64 (0 for
 * NULL), f64 (NAN for NULL), str (never NULL), text (NULL for NULL). */
#define COL_i64 store__int
#define COL_f64 store__num_or_nan
#define COL_str PQgetvalue
#define COL_text store__str_or_null
#define DECODE_COLUMN(field, kind) e->field = COL_##kind(res, row, k++);
#define DECODER(name, type, COLS)                                          \
  static void name##_at(const PGresult *res, int row, int k, void *elem) { \
    type *e = elem;                                                        \
    *e = (type){0};                                                        \
    COLS(DECODE_COLUMN)                                                    \
  }                                                                        \
  static void name(const PGresult *res, int row, void *elem) { name##_at(res, row, 0, elem); }

/* Statements queued together on one connection (which answers them in
 * order), decoded together once the last has answered, so that a page's
 * parts reach its callback as one value; the rows' strings point into the
 * results, cleared after the callback. */
#define GATHER_MAX 4
typedef struct gather gather;
struct gather {
  int n, got, status;
  char why[STORE__DB_MSG_MAX];
  PGresult *res[GATHER_MAX];
  struct gather_part {
    gather *g;
    int i;
  } part[GATHER_MAX];
  /* decodes res[] and answers cb (status 0), or answers cb the failure */
  void (*done)(gather *g, int status, const char *errmsg);
  void (*cb)(void);
  void *ud;
};

static void on_gather_part(void *ud, int status, PGresult *res, const char *errmsg) {
  struct gather_part *p = ud;
  gather *g = p->g;
  if (status == 0) {
    store__db_keep_result(res);
    g->res[p->i] = res;
  } else if (g->status == 0) {
    g->status = status;
    snprintf(g->why, sizeof g->why, "%s", errmsg ? errmsg : "the query failed");
  }
  if (++g->got < g->n)
    return;
  g->done(g, g->status, g->status ? g->why : NULL);
  for (int i = 0; i < g->n; i++)
    PQclear(g->res[i]);
  free(g);
}

/* A gather for n statements answering cb through done; NULL (after
 * done's failure) when out of memory. */
static gather *gather_new(int n, void (*done)(gather *, int, const char *), void (*cb)(void),
                          void *ud) {
  gather *g = calloc(1, sizeof *g);
  if (!g) {
    gather tmp = {.cb = cb, .ud = ud};
    done(&tmp, SS_ENOMEM, "out of memory");
    return NULL;
  }
  g->n = n;
  g->done = done;
  g->cb = cb;
  g->ud = ud;
  for (int i = 0; i < n; i++)
    g->part[i] = (struct gather_part){g, i};
  return g;
}

static void gather_query(gather *g, int i, db *d, const char *sql, int nparams,
                         const char *const *params) {
  db_query(d, sql, nparams, params, on_gather_part, &g->part[i]);
}

/* ---- sweeps ------------------------------------------------------------------------------ */

/* The sweep sw's runs' models, each once, in order: grouped by a hash in
 * a pass of their own, the same text as string_agg(DISTINCT ...) in
 * COUNTS_SQL's pass, which sorted every run's model. On a 10,000-run
 * sweep the counts with this pass took 13 to 13.5 ms of PostgreSQL's CPU,
 * 14 to 16 with the sort. */
#define MODELS_SQL                                                             \
  "(SELECT string_agg(m, '; ' ORDER BY m) FROM (SELECT " MODEL_R " AS m FROM " \
  "runs r WHERE r.sweep_id = sw.id GROUP BY 1) mo)"

/* The sweep sw's runs counted (store_sweep_counts, in SWEEP_COLS'
 * order), as the lateral c: one pass over them, and MODELS_SQL's. Of wsd branches (migration
 * 010), branched and trained: BRANCHED_COUNT_SQL and TRAINED_SUM_SQL, or
 * "0" where they are not read. */
#define COUNTS_SQL(branched, trained)                                                             \
  "CROSS JOIN LATERAL (SELECT count(*) AS total, "                                                \
  "count(*) FILTER (WHERE r.status = 'queued') AS queued, "                                       \
  "count(*) FILTER (WHERE r.status = 'running') AS running, "                                     \
  "count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded, "                                 \
  "count(*) FILTER (WHERE r.status = 'failed') AS failed, "                                       \
  "count(*) FILTER (WHERE r.status = 'cancelled') AS cancelled, "                                 \
  "count(*) FILTER (WHERE r.status IN ('succeeded', 'failed', 'cancelled')) AS done, "            \
  "coalesce(max(r.gpus) FILTER (WHERE r.status = 'queued'), 0) AS queued_gpus, "                  \
  "coalesce(max(CASE WHEN r.gpus = 0 THEN greatest(coalesce((r.config->>'world_size')::int, 1), " \
  "1) END) FILTER (WHERE r.status = 'queued'), 1) AS queued_slots, "                              \
  "coalesce(string_agg(DISTINCT coalesce(r.config->>'trainer', 'builtin'), ',') FILTER (WHERE "   \
  "r.status = 'queued'), '') AS queued_trainers, " branched " AS branched, "                      \
  "coalesce(sum(r.flops), 0) AS flops_planned, "                                                  \
  "coalesce(sum(r.flops) FILTER (WHERE r.status = 'succeeded'), 0) AS flops_done, "               \
  "coalesce(sum(" SPENT_SQL "), 0) AS flops_spent, " trained " AS flops_trained, " MODELS_SQL     \
  " AS models FROM runs r WHERE r.sweep_id = sw.id) c "

/* COUNTS_SQL's wsd counts: the succeeded runs that started from a trunk's
 * checkpoint, and the FLOPs the succeeded runs trained themselves (the
 * API's; the page shows neither, and leaves out their subplans: planning
 * its statement took 1.6 times as long as d6fa629's page statement with
 * them, 1.2 without, on a 10,000-run sweep). */
#define BRANCHED_COUNT_SQL "count(*) FILTER (WHERE r.status = 'succeeded' AND " BRANCHED_SQL ")"
#define TRAINED_SUM_SQL                                                             \
  "coalesce(sum(CASE WHEN " BRANCHED_SQL " THEN r.flops * greatest(0.0, 1.0 - "     \
  "r.branch_step::float8 * coalesce((SELECT p.batch_size FROM runs p WHERE p.id = " \
  "r.branch_of), r.batch_size) * (r.config->'model'->>'seq_len')::float8 / "        \
  "greatest(r.tokens, 1)) ELSE r.flops END) FILTER (WHERE r.status = 'succeeded'), 0)"

/* The name of sweep sw's owner (migration 020). */
#define OWNER_SQL "(SELECT u.name FROM users u WHERE u.id = sw.owner_id)"

/* The columns every sweep's row starts with. */
#define SWEEP_HEAD_COLS(X) \
  X(id, i64)               \
  X(priority, i64) X(name, str) X(status, str) X(spec_hash, str) X(owner, str) X(created_at, str)

/* A sweep's row: the columns SWEEP_SQL selects, then its counts (c.*). */
#define SWEEP_COLS(X)                                                                    \
  SWEEP_HEAD_COLS(X)                                                                     \
  X(created_utc, str)                                                                    \
  X(method, text) X(description, text) X(spec, text) X(lr_tune, text) X(adaptive, text)  \
      X(fits, text) X(counts.total, i64) X(counts.queued, i64) X(counts.running, i64)    \
          X(counts.succeeded, i64) X(counts.failed, i64) X(counts.cancelled, i64)        \
              X(counts.done, i64) X(counts.queued_gpus, i64) X(counts.queued_slots, i64) \
                  X(counts.queued_trainers, str) X(counts.branched, i64)                 \
                      X(counts.flops_planned, f64) X(counts.flops_done, f64)             \
                          X(counts.flops_spent, f64) X(counts.flops_trained, f64)        \
                              X(counts.models, text)
/* GET /api/sweeps's row (store_pages_sweeps) */
#define SWEEP_LIST_COLS(X)                                                                    \
  SWEEP_HEAD_COLS(X)                                                                          \
  X(counts.total, i64)                                                                        \
  X(counts.succeeded, i64) X(counts.failed, i64) X(counts.running, i64) X(counts.queued, i64) \
      X(counts.queued_gpus, i64) X(counts.queued_slots, i64) X(counts.queued_trainers, str)   \
          X(counts.flops_planned, f64) X(counts.flops_done, f64)

DECODER(decode_sweep, store_sweep, SWEEP_COLS)
DECODER(decode_sweep_summary, store_sweep, SWEEP_LIST_COLS)

/* The sweep $1's row as sw, its spec read from TOAST once. Each mention of
 * a stored sw.spec in one select list decompresses it anew, and those
 * copies pile up in the row's memory: on a 10,000-run sweep (a 290 kB
 * spec, 44 kB stored) the five mentions of SWEEP_SQL took longer than its
 * pass over the runs, and made the page slower than d6fa629's, which
 * spread them over separate subqueries. #> '{}' is the document itself,
 * decompressed; OFFSET 0 keeps the subquery from being merged into the
 * statement, which would put the #> back in each mention. */
#define SWEEP_ROW_SQL                                                                        \
  "(SELECT id, priority, name, status, spec_hash, owner_id, created_at, lr_tune, adaptive, " \
  "spec #> '{}' AS spec FROM sweeps WHERE id = $1 OFFSET 0) sw "

/* SWEEP_COLS's statement, its spec the column spec: the page has no use
 * for a spec that may be most of a megabyte (NULL), the API passes it on. */
#define SWEEP_SQL(spec, branched, trained)                                                \
  "SELECT sw.id, sw.priority, sw.name, sw.status, sw.spec_hash, " OWNER_SQL ", "          \
  "(to_json(sw.created_at)#>>'{}'), "                                                     \
  "to_char(sw.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "                  \
  "sw.spec->>'method', sw.spec->>'description', " spec ", " LR_TUNE_SQL ", " ADAPTIVE_SQL \
  ", " STORE__LATEST_FITS_SQL ", c.* FROM " SWEEP_ROW_SQL                                 \
  COUNTS_SQL(branched, trained)

STORE__ARRAY_SPEC(sweep_list, store_sweep, decode_sweep_summary, store_sweep_list_cb);

void store_pages_sweeps(db *d, store_sweep_list_cb cb, void *ud) {
  store__query_rows(d,
                    "SELECT sw.id, sw.priority, sw.name, sw.status, sw.spec_hash, " OWNER_SQL
                    ", (to_json(sw.created_at)#>>'{}'), "
                    "count(r.id), count(r.id) FILTER (WHERE r.status = 'succeeded'), "
                    "count(r.id) FILTER (WHERE r.status = 'failed'), "
                    "count(r.id) FILTER (WHERE r.status = 'running'), "
                    "count(r.id) FILTER (WHERE r.status = 'queued'), "
                    "coalesce(max(r.gpus) FILTER (WHERE r.status = 'queued'), 0), "
                    "coalesce(max(CASE WHEN r.gpus = 0 THEN "
                    "greatest(coalesce((r.config->>'world_size')::int, "
                    "1), 1) END) FILTER (WHERE r.status = 'queued'), 1), "
                    "coalesce(string_agg(DISTINCT coalesce(r.config->>'trainer', "
                    "'builtin'), ',') FILTER (WHERE "
                    "r.status = 'queued'), ''), "
                    "coalesce(sum(r.flops), 0), coalesce(sum(r.flops) FILTER (WHERE "
                    "r.status = 'succeeded'), 0) "
                    "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
                    "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 1000",
                    0, NULL, &sweep_list, (void (*)(void))cb, ud);
}

/* ---- a page of a sweep's runs ------------------------------------------------------------ */

static void decode_run(const PGresult *res, int row, int c, store_run *r) {
  *r = (store_run){.id = store__int(res, row, c),
                   .sweep_id = store__int(res, row, c + 1),
                   .status = PQgetvalue(res, row, c + 2),
                   .attempt = store__int(res, row, c + 3),
                   .max_attempts = store__int(res, row, c + 4),
                   .gpus = store__int(res, row, c + 5),
                   .priority = store__int(res, row, c + 6),
                   .worker = int_or_null(res, row, c + 7),
                   .lease_until = store__str_or_null(res, row, c + 8),
                   .params = int_or_null(res, row, c + 9),
                   .nonembedding_params = int_or_null(res, row, c + 10),
                   .tokens = int_or_null(res, row, c + 11),
                   .batch_size = int_or_null(res, row, c + 12),
                   .flops = store__num_or_nan(res, row, c + 13),
                   .final_val_loss = store__num_or_nan(res, row, c + 14),
                   .started_at = store__str_or_null(res, row, c + 15),
                   .finished_at = store__str_or_null(res, row, c + 16),
                   .reproduces = int_or_null(res, row, c + 17),
                   .code_version = store__str_or_null(res, row, c + 18),
                   .error = store__str_or_null(res, row, c + 19),
                   .checkpoint_step = int_or_null(res, row, c + 20),
                   .config_hash = PQgetvalue(res, row, c + 21),
                   .part = store__str_or_null(res, row, c + 22),
                   .target_loss = store__str_or_null(res, row, c + 23),
                   .prediction = store__str_or_null(res, row, c + 24),
                   .designed = store__str_or_null(res, row, c + 25),
                   .branch_of = int_or_null(res, row, c + 26),
                   .branch_step = int_or_null(res, row, c + 27),
                   .retry_after = store__str_or_null(res, row, c + 28),
                   .environment = store__str_or_null(res, row, c + 29),
                   .on_worker = store__str_or_null(res, row, c + 30),
                   .model = PQgetvalue(res, row, c + 31)};
}

/* The page's rows after its total (column 0); a sweep without runs on
 * the page has one row, its run columns NULL. */
static void decode_page_run(const PGresult *res, int row, void *elem) {
  decode_run(res, row, 1, elem);
}

/* The page of runs res holds (runs_sql); 0, -1 out of memory, 1 no such sweep. */
static int decode_runs(const PGresult *res, const store_runs_page *pg, store_runs *out) {
  if (PQntuples(res) == 0)
    return 1;
  void *rows;
  int n;
  int empty = PQgetisnull(res, 0, 1);
  if (decode_all(res, sizeof(store_run), decode_page_run, 0, &rows, &n))
    return -1;
  *out = (store_runs){store__int(res, 0, 0), pg->offset, pg->limit, rows, empty ? 0 : n};
  return 0;
}

/* The statement of a page of runs ($1 the sweep, $2 limit, $3 offset, $4 a
 * status or NULL): the total, then the runs, in the page's order (k).
 * malloc'd to its length (NULL when out of memory). */
static char *runs_sql(const store_runs_page *pg) {
  const char *sort = store_pages_sort_column(pg->sort), *order = pg->desc ? "DESC" : "ASC";
  sort = sort ? sort : "id";
  static const char fmt[] =
      "SELECT (SELECT count(*) FROM runs WHERE sweep_id = $1 AND ($4::run_status IS NULL OR "
      "status = $4)), p.* FROM sweeps sw LEFT JOIN LATERAL (SELECT %s, row_number() OVER "
      "(ORDER BY r.%s %s NULLS LAST, r.id %s) AS k FROM runs r WHERE r.sweep_id = sw.id AND "
      "($4::run_status IS NULL OR r.status = $4) ORDER BY r.%s %s NULLS LAST, r.id %s "
      "LIMIT $2 OFFSET $3) p ON true WHERE sw.id = $1 ORDER BY p.k";
  int n = snprintf(NULL, 0, fmt, run_columns, sort, order, order, sort, order, order);
  char *sql = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (sql)
    snprintf(sql, (size_t)n + 1, fmt, run_columns, sort, order, order, sort, order, order);
  return sql;
}

static void page_params(const char *p[4], char ids[24], char lim[24], char off[24],
                        int64_t sweep_id, const store_runs_page *pg) {
  p[0] = store__itoa(ids, 24, sweep_id);
  p[1] = store__itoa(lim, 24, pg->limit);
  p[2] = store__itoa(off, 24, pg->offset);
  p[3] = pg->status;
}

typedef struct runs_call {
  store_runs_page pg;
  store_runs_cb cb;
  void *ud;
} runs_call;

static void on_runs(void *ud, int status, PGresult *res, const char *errmsg) {
  runs_call *c = ud;
  store_runs page = {0};
  int rc = status == 0 ? decode_runs(res, &c->pg, &page) : 0;
  if (status != 0 || rc < 0)
    c->cb(c->ud, status ? status : SS_ENOMEM, NULL, status ? errmsg : "out of memory");
  else
    c->cb(c->ud, 0, rc == 0 ? &page : NULL, NULL);
  if (status == 0 && rc == 0)
    free((void *)page.runs);
  free(c);
}

void store_pages_sweep_runs(db *d, int64_t sweep_id, const store_runs_page *pg, store_runs_cb cb,
                            void *ud) {
  char ids[24], lim[24], off[24];
  char *sql = runs_sql(pg);
  runs_call *c = sql ? malloc(sizeof *c) : NULL;
  if (!c) {
    free(sql);
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  *c = (runs_call){*pg, cb, ud};
  const char *p[4];
  page_params(p, ids, lim, off, sweep_id, pg);
  db_query(d, sql, 4, p, on_runs, c); /* which copies sql */
  free(sql);
}

/* GET /api/sweeps/{id}: the sweep and a page of its runs, read together. */
typedef struct sweep_doc_call {
  gather g;
  store_runs_page pg;
} sweep_doc_call;

static void sweep_doc_done(gather *g, int status, const char *errmsg) {
  store_sweep_doc_cb cb = (store_sweep_doc_cb)g->cb;
  if (status != 0) {
    cb(g->ud, status, NULL, NULL, errmsg);
    return;
  }
  store_sweep sw = {0};
  store_runs page = {0};
  int found = PQntuples(g->res[0]) > 0;
  if (found)
    decode_sweep(g->res[0], 0, &sw);
  int rc = found ? decode_runs(g->res[1], &((sweep_doc_call *)g)->pg, &page) : 1;
  if (rc < 0)
    cb(g->ud, SS_ENOMEM, NULL, NULL, "out of memory");
  else
    cb(g->ud, 0, rc == 0 ? &sw : NULL, rc == 0 ? &page : NULL, NULL);
  if (rc == 0)
    free((void *)page.runs);
}

void store_pages_sweep_doc(db *d, int64_t sweep_id, const store_runs_page *pg,
                           store_sweep_doc_cb cb, void *ud) {
  char ids[24], lim[24], off[24];
  char *sql = runs_sql(pg);
  sweep_doc_call *c = sql ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    free(sql);
    cb(ud, SS_ENOMEM, NULL, NULL, "out of memory");
    return;
  }
  /* a gather_new by hand: the call carries the page beside it */
  c->g = (gather){.n = 2, .done = sweep_doc_done, .cb = (void (*)(void))cb, .ud = ud};
  for (int i = 0; i < 2; i++)
    c->g.part[i] = (struct gather_part){&c->g, i};
  c->pg = *pg;
  const char *p[4];
  page_params(p, ids, lim, off, sweep_id, pg);
  gather_query(&c->g, 0, d, SWEEP_SQL("sw.spec", BRANCHED_COUNT_SQL, TRAINED_SUM_SQL), 1, p);
  gather_query(&c->g, 1, d, sql, 4, p);
  free(sql);
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

/* ---- the status page's rows -------------------------------------------------------------- */

/* The rows of the status page (DECODER). */
#define OVERVIEW_SWEEP_COLS(X) \
  X(id, i64)                   \
  X(name, str)                 \
  X(status, str)               \
  X(owner, str)                \
  X(total, i64)                \
  X(done, i64)                 \
  X(running, i64) X(queued, i64) X(failed, i64) X(flops_planned, f64) X(flops_spent, f64)
#define OVERVIEW_RUN_COLS(X) \
  X(id, i64)                 \
  X(sweep_id, i64)           \
  X(sweep, str)              \
  X(attempt, i64)            \
  X(gpus, i64) X(nonembedding_params, f64) X(flops, f64) X(finished_utc, text) X(error, text)
#define PAGE_RUN_COLS(X)      \
  X(id, i64)                  \
  X(attempt, i64)             \
  X(max_attempts, i64)        \
  X(status, str)              \
  X(worker, text)             \
  X(nonembedding_params, f64) \
  X(tokens, f64)              \
  X(batch_size, f64) X(flops, f64) X(final_val_loss, f64) X(duration_s, f64) X(designed, text)

DECODER(decode_overview_sweep, store_overview_sweep, OVERVIEW_SWEEP_COLS)
DECODER(decode_overview_run, store_overview_run, OVERVIEW_RUN_COLS)
DECODER(decode_page_run_row, store_page_run, PAGE_RUN_COLS)

/* One result of a gather decoded as an array (rows, n) for its callback. */
typedef struct gather_rows {
  int res;
  size_t size;
  void (*decode)(const PGresult *res, int row, void *elem);
  void *rows;
  int n;
} gather_rows;

/* Decodes each of k results: 0, or -1 with nothing left allocated. */
static int gather_decode(const gather *g, gather_rows *parts, int k) {
  for (int i = 0; i < k; i++)
    if (decode_all(g->res[parts[i].res], parts[i].size, parts[i].decode, 0, &parts[i].rows,
                   &parts[i].n)) {
      while (i-- > 0)
        free(parts[i].rows);
      return -1;
    }
  return 0;
}

static void gather_free(gather_rows *parts, int k) {
  for (int i = 0; i < k; i++)
    free(parts[i].rows);
}

/* Decodes k results of a gather whose res[0] holds its object's row: 1
 * when there is one; 0 with status and errmsg the failure (status 0 when
 * there is none). */
static int gather_found(const gather *g, gather_rows *parts, int k, int *status,
                        const char **errmsg) {
  if (*status != 0 || PQntuples(g->res[0]) == 0)
    return 0;
  if (gather_decode(g, parts, k)) {
    *status = SS_ENOMEM;
    *errmsg = "out of memory";
    return 0;
  }
  return 1;
}

/* ---- a run ------------------------------------------------------------------------------- */

#define ATTEMPT_COLS(X) X(attempt, i64) X(worker, text) X(started_at, text) X(environment, text)
DECODER(decode_attempt, store_attempt, ATTEMPT_COLS)

/* A metric row: the stored columns in SS_METRIC_COLS' order (the
 * statement's, metric_columns), so a new column needs no edit here. */
static void decode_metric_row(const PGresult *res, int row, void *elem) {
  ss_metric_row *m = elem;
  ss_metric_row_clear(m);
  for (int i = 0, k = 0; i < SS_MCOL_N; i++)
    if (ss_metric_stored(i))
      m->v[i] = store__num_or_nan(res, row, k++);
}

/* The metric table's stored columns, comma-separated (cols of size n). */
static void metric_columns(char *cols, size_t n) {
  size_t len = 0;
  cols[0] = '\0';
  for (int i = 0; i < SS_MCOL_N; i++)
    if (ss_metric_stored(i) && len < n)
      len += (size_t)snprintf(cols + len, n - len, "%s%s", len ? ", " : "", ss_metric_cols[i].name);
}

typedef struct run_doc_call {
  gather g;
  int64_t limit, offset;
} run_doc_call;

/* res[0]: the run (run_columns), its config, metric rows and reproduction
 * check; res[1]: its attempts; res[2]: the page of metric rows. */
static void run_doc_done(gather *g, int status, const char *errmsg) {
  run_doc_call *c = (run_doc_call *)g;
  gather_rows parts[] = {{1, sizeof(store_attempt), decode_attempt, NULL, 0},
                         {2, sizeof(ss_metric_row), decode_metric_row, NULL, 0}};
  if (!gather_found(g, parts, 2, &status, &errmsg)) {
    ((store_run_doc_cb)g->cb)(g->ud, status, NULL, errmsg);
    return;
  }
  const PGresult *r = g->res[0];
  store_run_doc doc = {
      .config = PQgetvalue(r, 0, 32),
      .attempts = parts[0].rows,
      .nattempts = parts[0].n,
      .metrics = {store__int(r, 0, 33), c->offset, c->limit, parts[1].rows, parts[1].n},
      .reproduction = store__str_or_null(r, 0, 34)};
  decode_run(r, 0, 0, &doc.run);
  ((store_run_doc_cb)g->cb)(g->ud, 0, &doc, NULL);
  gather_free(parts, 2);
}

void store_pages_run(db *d, int64_t run_id, int64_t limit, int64_t offset, store_run_doc_cb cb,
                     void *ud) {
  char sql[1024], rid[24], lim[24], off[24], cols[512];
  metric_columns(cols, sizeof cols);
  snprintf(sql, sizeof sql,
           "SELECT %s FROM metrics WHERE run_id = $1 ORDER BY step LIMIT $2 OFFSET $3", cols);
  const char *p[3] = {store__itoa(rid, sizeof rid, run_id), store__itoa(lim, sizeof lim, limit),
                      store__itoa(off, sizeof off, offset)};
  run_doc_call *c = calloc(1, sizeof *c);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  c->g = (gather){.n = 3, .done = run_doc_done, .cb = (void (*)(void))cb, .ud = ud};
  for (int i = 0; i < 3; i++)
    c->g.part[i] = (struct gather_part){&c->g, i};
  c->limit = limit;
  c->offset = offset;
  char run_sql[8192]; /* db_query copies it */
  snprintf(run_sql, sizeof run_sql,
           "SELECT %s, r.config, (SELECT count(*) FROM metrics WHERE run_id = $1), %s "
           "FROM runs r WHERE r.id = $1",
           run_columns, REPRODUCTION_SQL);
  gather_query(&c->g, 0, d, run_sql, 1, p);
  gather_query(&c->g, 1, d,
               "SELECT attempt, worker, (to_json(started_at)#>>'{}'), environment "
               "FROM attempts WHERE run_id = $1 ORDER BY attempt",
               1, p);
  gather_query(&c->g, 2, d, sql, 3, p);
}

static void overview_done(gather *g, int status, const char *errmsg) {
  gather_rows parts[] = {{0, sizeof(store_overview_sweep), decode_overview_sweep, NULL, 0},
                         {2, sizeof(store_overview_run), decode_overview_run, NULL, 0},
                         {3, sizeof(store_overview_run), decode_overview_run, NULL, 0}};
  if (status == 0 && gather_decode(g, parts, 3)) {
    status = SS_ENOMEM;
    errmsg = "out of memory";
  }
  if (status != 0) {
    ((store_overview_cb)g->cb)(g->ud, status, NULL, errmsg);
    return;
  }
  const PGresult *q = g->res[1]; /* one row: the sweeps and the queue counted */
  store_overview o = {parts[0].rows,       parts[0].n,          store__int(q, 0, 0),
                      store__int(q, 0, 1), store__int(q, 0, 2), store__int(q, 0, 3),
                      parts[1].rows,       parts[1].n,          parts[2].rows,
                      parts[2].n};
  ((store_overview_cb)g->cb)(g->ud, 0, &o, NULL);
  gather_free(parts, 3);
}

void store_pages_overview(db *d, store_overview_cb cb, void *ud) {
  gather *g = gather_new(4, overview_done, (void (*)(void))cb, ud);
  if (!g)
    return;
  gather_query(g, 0, d,
               "SELECT sw.id, sw.name, sw.status, " OWNER_SQL ", count(r.id), "
               "count(r.id) FILTER (WHERE r.status IN ('succeeded', 'failed', 'cancelled')), "
               "count(r.id) FILTER (WHERE r.status = 'running'), "
               "count(r.id) FILTER (WHERE r.status = 'queued'), "
               "count(r.id) FILTER (WHERE r.status = 'failed'), "
               "coalesce(sum(r.flops), 0), coalesce(sum(" SPENT_SQL "), 0) "
               "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
               "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 50",
               0, NULL);
  gather_query(g, 1, d,
               "SELECT (SELECT count(*) FROM sweeps), count(*), coalesce(sum(gpus), 0), "
               "count(*) FILTER (WHERE gpus = 0) FROM runs WHERE status = 'queued'",
               0, NULL);
  /* the queue's order (migration 012) */
  gather_query(g, 2, d,
               "SELECT r.id, r.sweep_id, sw.name, r.attempt, r.gpus, r.nonembedding_params, "
               "r.flops, NULL, NULL FROM runs r JOIN sweeps sw ON sw.id = r.sweep_id "
               "WHERE r.status = 'queued' ORDER BY r.priority DESC, r.sweep_id, "
               "r.flops DESC NULLS LAST, r.id LIMIT 10",
               0, NULL);
  gather_query(g, 3, d,
               "SELECT r.id, r.sweep_id, sw.name, r.attempt, r.gpus, NULL, NULL, " TS_SQL(
                   "r.finished_at") ", r.error FROM runs r JOIN sweeps sw ON sw.id = r.sweep_id "
                                    "WHERE r.status = 'failed' ORDER BY r.finished_at DESC "
                                    "NULLS LAST, r.id DESC LIMIT 10",
               0, NULL);
}

/* A run's row on the sweep page (PAGE_RUN_COLS), then part (0: designed,
 * 1: the page's) and k (its place in its part). */
#define PAGE_RUN_SQL(part_k)                                                                       \
  "SELECT r.id, r.attempt, r.max_attempts, r.status, wk.name, r.nonembedding_params, r.tokens, "   \
  "r.batch_size, r.flops, r.final_val_loss, " DURATION_SQL ", r.designed, " part_k " FROM runs r " \
  "LEFT JOIN workers wk ON wk.id = r.worker "

/* The runs `next` designed (runs.designed), predicted beside measured: the
 * first 200 by budget and size; and the page's runs ($2 the status or NULL,
 * $3 offset, $4 limit). */
#define DESIGNED_K                                                                                 \
  "0 AS part, row_number() OVER (ORDER BY (r.designed->>'flops')::float8, r.nonembedding_params, " \
  "r.id) AS k"
#define DESIGNED_SQL \
  PAGE_RUN_SQL(DESIGNED_K) "WHERE r.sweep_id = $1 AND r.designed IS NOT NULL ORDER BY k LIMIT 200"
#define RUNS_K "1, r.id" /* in id order: k needs no window over the rows skipped */
#define RUNS_SQL                                                         \
  PAGE_RUN_SQL(RUNS_K)                                                   \
  "WHERE r.sweep_id = $1 AND ($2::run_status IS NULL OR r.status = $2) " \
  "ORDER BY r.id LIMIT $4 OFFSET $3"

/* The page's runs of status (NULL: all of them), from its counts. */
static int64_t runs_of_status(const store_sweep_counts *c, const char *status) {
  static const char *const names[] = {"queued", "running", "succeeded", "failed", "cancelled"};
  const int64_t n[] = {c->queued, c->running, c->succeeded, c->failed, c->cancelled};
  for (int i = 0; status && i < 5; i++)
    if (!strcmp(status, names[i]))
      return n[i];
  return c->total;
}

/* The page's rows (PAGE_RUN_COLS, part, k) then the sweep's (SWEEP_COLS)
 * in one statement, one round trip: its first row, part -1, is the
 * sweep's (NULL when there is none), with NULL run columns; the others the
 * designed runs' and the page's, with NULL sweep columns. Without the wsd
 * counts, which the page does not show. */
#define PAGE_NCOLS 14 /* PAGE_RUN_COLS, part and k */
/* the sweep's cost and waste (store_sweep_page.usage), last on its row:
 * of its attempts that have ended (a running one's grows by the second) */
#define SWEEP_USAGE_SQL                                                                       \
  "CASE WHEN u.part = -1 THEN (SELECT row_to_json(g) FROM (SELECT " STORE__USAGE_SUMS "FROM " \
  "attempt_accounting a WHERE a.sweep_id = $1 AND a.ended_at IS NOT NULL) g) END"
#define SWEEP_PAGE_SQL                                                                        \
  "WITH s AS MATERIALIZED (" SWEEP_SQL(                                                       \
      "NULL", "0", "0") ") SELECT u.*, s.*, " SWEEP_USAGE_SQL " FROM ((" DESIGNED_SQL         \
                        ") UNION ALL (" RUNS_SQL                                              \
                        ") UNION ALL (SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, "      \
                        "NULL, NULL, NULL, NULL, NULL, -1, 0)) u LEFT JOIN s ON u.part = -1 " \
                        "ORDER BY u.part, u.k"

typedef struct sweep_page_call {
  const char *status; /* the caller's: valid until its callback */
  store_sweep_page_cb cb;
  void *ud;
} sweep_page_call;

/* The page from SWEEP_PAGE_SQL's rows: 0, 1 no such sweep, -1 out of
 * memory. */
static int decode_sweep_page(const PGresult *res, const char *status, store_sweep_page *p) {
  if (PQntuples(res) == 0 || PQgetisnull(res, 0, PAGE_NCOLS))
    return 1;
  void *rows;
  int n, designed = 0; /* the designed come first (part 0) */
  if (decode_all(res, sizeof(store_page_run), decode_page_run_row, 1, &rows, &n))
    return -1;
  while (designed < n && store__int(res, 1 + designed, 12) == 0)
    designed++;
  *p = (store_sweep_page){.designed = rows,
                          .ndesigned = designed,
                          .runs = (store_page_run *)rows + designed,
                          .nruns = n - designed};
  decode_sweep_at(res, 0, PAGE_NCOLS, &p->sweep);
  p->usage = store__str_or_null(res, 0, PQnfields(res) - 1);
  p->runs_total = runs_of_status(&p->sweep.counts, status);
  return 0;
}

static void on_sweep_page(void *ud, int status, PGresult *res, const char *errmsg) {
  sweep_page_call *c = ud;
  store_sweep_page p;
  int rc = status == 0 ? decode_sweep_page(res, c->status, &p) : 0;
  if (status != 0 || rc < 0)
    c->cb(c->ud, status ? status : SS_ENOMEM, NULL, status ? errmsg : "out of memory");
  else
    c->cb(c->ud, 0, rc == 0 ? &p : NULL, NULL);
  if (status == 0 && rc == 0)
    free((void *)p.designed);
  free(c);
}

void store_pages_sweep_page(db *d, int64_t sweep_id, const char *status, int64_t offset, int limit,
                            store_sweep_page_cb cb, void *ud) {
  char ids[24], off[24], lim[24];
  const char *p[4] = {store__itoa(ids, sizeof ids, sweep_id), status,
                      store__itoa(off, sizeof off, offset), store__itoa(lim, sizeof lim, limit)};
  sweep_page_call *c = malloc(sizeof *c);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  *c = (sweep_page_call){status, cb, ud};
  db_query(d, SWEEP_PAGE_SQL, 4, p, on_sweep_page, c);
}

#define RUN_REF_COLS(X) X(id, i64) X(status, str)
DECODER(decode_run_ref, store_run_ref, RUN_REF_COLS)

/* res[0]: the run (run_columns) and the page's columns after it; res[1]:
 * its attempts; res[2]: the runs that reproduce it. */
static void run_page_done(gather *g, int status, const char *errmsg) {
  gather_rows parts[] = {{1, sizeof(store_attempt), decode_attempt, NULL, 0},
                         {2, sizeof(store_run_ref), decode_run_ref, NULL, 0}};
  if (!gather_found(g, parts, 2, &status, &errmsg)) {
    ((store_run_page_cb)g->cb)(g->ud, status, NULL, errmsg);
    return;
  }
  const PGresult *r = g->res[0];
  store_run_page p = {.sweep = PQgetvalue(r, 0, 32),
                      .worker_name = store__str_or_null(r, 0, 33),
                      .started_utc = store__str_or_null(r, 0, 34),
                      .finished_utc = store__str_or_null(r, 0, 35),
                      .duration_s = store__num_or_nan(r, 0, 36),
                      .log_tail = store__str_or_null(r, 0, 37),
                      .config = PQgetvalue(r, 0, 38),
                      .reproduction = store__str_or_null(r, 0, 39),
                      .owner = store__str_or_null(r, 0, 40),
                      .attempts = parts[0].rows,
                      .nattempts = parts[0].n,
                      .reproduced_by = parts[1].rows,
                      .nreproduced_by = parts[1].n};
  decode_run(r, 0, 0, &p.run);
  ((store_run_page_cb)g->cb)(g->ud, 0, &p, NULL);
  gather_free(parts, 2);
}

void store_pages_run_page(db *d, int64_t run_id, store_run_page_cb cb, void *ud) {
  char rid[24], sql[8192]; /* db_query copies it */
  const char *p[1] = {store__itoa(rid, sizeof rid, run_id)};
  gather *g = gather_new(3, run_page_done, (void (*)(void))cb, ud);
  if (!g)
    return;
  snprintf(sql, sizeof sql,
           "SELECT %s, sw.name, wk.name, " TS_SQL("r.started_at") ", " TS_SQL(
               "r.finished_at") ", " DURATION_SQL ", r.log_tail, r.config, %s, (SELECT name FROM "
                                "users WHERE id = sw.owner_id) FROM runs r "
                                "JOIN sweeps sw ON sw.id = r.sweep_id LEFT JOIN workers wk ON "
                                "wk.id = r.worker WHERE r.id = $1",
           run_columns, REPRODUCTION_SQL);
  gather_query(g, 0, d, sql, 1, p);
  gather_query(g, 1, d,
               "SELECT attempt, worker, " TS_SQL("started_at") ", environment FROM attempts "
                                                               "WHERE run_id = $1 ORDER BY attempt",
               1, p);
  gather_query(g, 2, d, "SELECT id, status FROM runs WHERE reproduces = $1 ORDER BY id", 1, p);
}

/* The samples of one column of a run's curve: for g = 0..P the first step
 * at or after t_g = ceil(smax^(g/P)), found in one of two ways, whichever
 * reads less for this run (mx.dense, decided by its last step against P).
 * Sparse (many more steps than samples): one index seek per t_g in SQL, so
 * the cost does not grow with the curve's length; the bound must be an
 * integer, as step is, or the seek becomes a scan of the run's rows for
 * every sample. Dense: the run's rows, every one, as three arrays in one
 * pass, sampled here (curve_column): a step is kept when some t_g lies in
 * (previous step, step], that is when floor(P ln(step) / ln(smax)) exceeds
 * the previous step's; the same steps as the seeks would find. Doing that
 * test, and writing the JSON, in SQL cost 30 of the 35 ms a sweep's 50
 * curves of 1,000 steps took (docs/runtime.md). Evaluations likewise (the
 * metrics_evals index). The arrays come in no particular order (each
 * lateral's aggregates see the same rows in the same order), and are sorted
 * by step here. */
#define CURVE_SQL(col)                                                                           \
  "CROSS JOIN LATERAL (SELECT array_agg(p.step::int8) AS steps, array_agg(p.tokens) AS tokens, " \
  "array_agg(p." col ") AS loss FROM (SELECT m.step, m.tokens, m." col " FROM metrics m "        \
  "WHERE mx.dense AND m.run_id = mx.id AND m." col " IS NOT NULL "                               \
  "UNION ALL SELECT DISTINCT q.* FROM generate_series(0, $2::int) g CROSS JOIN LATERAL "         \
  "(SELECT m.step, m.tokens, m." col " FROM metrics m WHERE m.run_id = mx.id AND m." col         \
  " IS NOT NULL AND m.step >= ceil(exp(mx.l * g::float8 / $2::int) - 1e-6)::int "                \
  "ORDER BY m.step LIMIT 1) q WHERE NOT mx.dense) p) "

typedef struct curve_pt {
  int64_t step, tokens;
  double loss;
} curve_pt;

/* A sweep's curves: the rows, then the sampling and the JSON on libuv's
 * thread pool (50 runs of 1,000 steps: a few ms; the heaviest a client may
 * ask for, 1,000 runs of 4,002: a second), so that the scheduler's loop,
 * which renews leases, never waits on them. */
typedef struct curves_call {
  uv_work_t work;
  int64_t points;
  store_json_cb cb;
  void *ud;
  uv_loop_t *loop;
  PGresult *res; /* kept (store__db_keep_result) */
  char *json;    /* the answer; NULL with status and why when it failed */
  int status;
  const char *why;
} curves_call;

/* A growable text buffer; ok drops to 0 when out of memory. */
typedef struct cbuf {
  char *p;
  size_t len, cap;
  int ok;
} cbuf;

static void cb_put(cbuf *b, const char *s, size_t n) {
  if (!b->ok)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (b->len + n + 1 > cap)
      cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->ok = 0;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void cb_puts(cbuf *b, const char *s) { cb_put(b, s, strlen(s)); }

static void cb_int(cbuf *b, int64_t v) {
  char t[24];
  cb_put(b, t, (size_t)snprintf(t, sizeof t, "%" PRId64, v));
}

/* %.17g, which always reads back as v (trailing zeros dropped: 5.5 stays
 * "5.5"); null when not finite (JSON has no NaN). Trying shorter
 * precisions first, as PostgreSQL's shortest form does, cost three
 * snprintf and strtod calls a value for the losses, whose digits run out
 * at 17: 20 of a sweep's curves' 30 ms. */
static void cb_num(cbuf *b, double v) {
  if (!isfinite(v)) {
    cb_puts(b, "null");
    return;
  }
  char t[32];
  cb_put(b, t, (size_t)snprintf(t, sizeof t, "%.17g", v));
}

/* Big-endian integers of PostgreSQL's binary format. */
static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* A one-dimensional array of 8-byte elements (int8 or float8) as
 * array_send writes it (ndim, has-nulls flag, element type, length, lower
 * bound, then each element's length and bytes): how many, with *data at
 * the first element's length word; -1 when it is anything else. */
static int bin_array(const char *v, int len, const unsigned char **data) {
  const unsigned char *p = (const unsigned char *)v;
  if (len < 12)
    return -1;
  uint32_t ndim = be32(p);
  if (ndim == 0) { /* an empty array */
    *data = p + 12;
    return 0;
  }
  if (ndim != 1 || len < 20)
    return -1;
  uint32_t n = be32(p + 12);
  if (n > (uint32_t)(len - 20) / 12 || (size_t)len != 20 + (size_t)n * 12)
    return -1; /* a NULL element (length -1) changes the size: refused */
  for (uint32_t k = 0; k < n; k++)
    if (be32(p + 20 + 12 * (size_t)k) != 8)
      return -1;
  *data = p + 20;
  return (int)n;
}

static int cmp_pt(const void *a, const void *b) {
  const curve_pt *x = a, *y = b;
  return (x->step > y->step) - (x->step < y->step);
}

static double curve_bucket(double P, double step, double l) {
  double b = floor(P * log(step + 1e-6) / l);
  return b < P ? b : P;
}

/* One column of a run from row i's cells col.. col + 2 (steps, tokens,
 * losses) as "tokens":[..],"loss":[..] under the given keys, sampled when
 * dense; null for both when nothing is left. 0, or -1 when malformed. */
static int curve_column(cbuf *b, const PGresult *res, int i, int col, int dense, double l, double P,
                        const char *tk, const char *lk) {
  int n = 0, rc = 0;
  const unsigned char *ps = NULL, *pk = NULL, *pl = NULL;
  if (!PQgetisnull(res, i, col)) {
    n = bin_array(PQgetvalue(res, i, col), PQgetlength(res, i, col), &ps);
    int n2 = PQgetisnull(res, i, col + 1)
                 ? -1
                 : bin_array(PQgetvalue(res, i, col + 1), PQgetlength(res, i, col + 1), &pk);
    int n3 = PQgetisnull(res, i, col + 2)
                 ? -1
                 : bin_array(PQgetvalue(res, i, col + 2), PQgetlength(res, i, col + 2), &pl);
    if (n < 0 || n2 != n || n3 != n)
      rc = -1;
  }
  curve_pt *pt = !rc && n > 0 ? malloc(sizeof(curve_pt) * (size_t)n) : NULL;
  if (!rc && n > 0 && !pt)
    rc = -1;
  for (int k = 0; pt && k < n; k++) {
    uint64_t lb = be64(pl + 12 * (size_t)k + 4);
    double loss;
    memcpy(&loss, &lb, sizeof loss);
    pt[k] = (curve_pt){(int64_t)be64(ps + 12 * (size_t)k + 4),
                       (int64_t)be64(pk + 12 * (size_t)k + 4), loss};
  }
  int kept = 0;
  if (!rc && n > 0) {
    qsort(pt, (size_t)n, sizeof *pt, cmp_pt);
    if (!dense)
      kept = n;
    else { /* the first step at or after each t_g: a new bucket */
      int64_t prev = 0;
      for (int k = 0; k < n; k++) {
        curve_pt q = pt[k];
        if (q.step >= 1 && (k == 0 || prev < 1 || l == 0 ||
                            curve_bucket(P, (double)q.step, l) > curve_bucket(P, (double)prev, l)))
          pt[kept++] = q; /* kept <= k: never a point not yet read */
        prev = q.step;
      }
    }
  }
  cb_puts(b, ",\"");
  cb_puts(b, tk);
  cb_puts(b, "\":");
  if (!kept)
    cb_puts(b, "null");
  for (int k = 0; k < kept; k++) {
    cb_puts(b, k ? "," : "[");
    cb_int(b, pt[k].tokens);
  }
  cb_puts(b, kept ? "],\"" : ",\"");
  cb_puts(b, lk);
  cb_puts(b, "\":");
  if (!kept)
    cb_puts(b, "null");
  for (int k = 0; k < kept; k++) {
    cb_puts(b, k ? "," : "[");
    cb_num(b, pt[k].loss);
  }
  if (kept)
    cb_puts(b, "]");
  free(pt);
  return rc;
}

static void curves_work(uv_work_t *w) {
  curves_call *c = w->data;
  const PGresult *res = c->res;
  cbuf b = {NULL, 0, 0, 1};
  cb_puts(&b, "[");
  int n = PQntuples(res), bad = 0;
  double P = (double)c->points;
  for (int i = 0; i < n && !bad; i++) {
    /* binary cells: int8 id, text status, int8 N, int8 smax, bool dense */
    if (PQgetisnull(res, i, 0) || PQgetlength(res, i, 0) != 8 ||
        (!PQgetisnull(res, i, 2) && PQgetlength(res, i, 2) != 8) ||
        (!PQgetisnull(res, i, 3) && PQgetlength(res, i, 3) != 8)) {
      bad = 1;
      break;
    }
    int dense =
        !PQgetisnull(res, i, 4) && PQgetlength(res, i, 4) == 1 && PQgetvalue(res, i, 4)[0] == 1;
    int64_t smax =
        PQgetisnull(res, i, 3) ? -1 : (int64_t)be64((const unsigned char *)PQgetvalue(res, i, 3));
    double l = log(smax > 1 ? (double)smax : 1.0);
    cb_puts(&b, i ? ",{\"run_id\":" : "{\"run_id\":");
    cb_int(&b, (int64_t)be64((const unsigned char *)PQgetvalue(res, i, 0)));
    cb_puts(&b, ",\"status\":\"");
    /* a run_status: lower-case letters only */
    cb_put(&b, PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1));
    cb_puts(&b, "\",\"nonembedding_params\":");
    if (PQgetisnull(res, i, 2))
      cb_puts(&b, "null");
    else
      cb_int(&b, (int64_t)be64((const unsigned char *)PQgetvalue(res, i, 2)));
    cb_puts(&b, ",\"steps\":");
    if (smax < 0)
      cb_puts(&b, "null");
    else
      cb_int(&b, smax);
    bad = curve_column(&b, res, i, 5, dense, l, P, "tokens", "train_loss") ||
          curve_column(&b, res, i, 8, dense, l, P, "val_tokens", "val_loss");
    cb_puts(&b, "}");
  }
  cb_puts(&b, "]");
  if (bad || !b.ok) {
    c->status = bad ? SS_EQUERY : SS_ENOMEM;
    c->why = bad ? "a curve's arrays could not be read" : "out of memory";
    free(b.p);
  } else
    c->json = b.p;
}

static void curves_done(uv_work_t *w, int status) {
  curves_call *c = w->data;
  if (status != 0 && !c->json && !c->status) { /* cancelled: the loop is closing */
    c->status = SS_ECONN;
    c->why = "the scheduler is stopping";
  }
  c->cb(c->ud, c->json ? 0 : c->status, c->json, c->json ? NULL : c->why);
  free(c->json);
  PQclear(c->res);
  free(c);
}

static void on_curves(void *ud, int status, PGresult *res, const char *errmsg) {
  curves_call *c = ud;
  if (status != 0) {
    c->cb(c->ud, status, NULL, errmsg);
    free(c);
    return;
  }
  store__db_keep_result(res);
  c->res = res;
  c->work.data = c;
  int rc = uv_queue_work(c->loop, &c->work, curves_work, curves_done);
  if (rc != 0) {
    c->status = SS_ENOMEM;
    c->why = "the thread pool refused the work";
    curves_done(&c->work, rc);
  }
}

void store_pages_curves(db *d, int64_t sweep_id, const char *run_ids, int64_t points, int64_t limit,
                        int64_t offset, store_json_cb cb, void *ud) {
  char sid[24], pts[24], lim[24], off[24];
  const char *p[5] = {sweep_id ? store__itoa(sid, sizeof sid, sweep_id) : NULL,
                      store__itoa(pts, sizeof pts, points), run_ids,
                      store__itoa(lim, sizeof lim, limit), store__itoa(off, sizeof off, offset)};
  curves_call *c = malloc(sizeof *c);
  if (!c) {
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  *c = (curves_call){.points = points, .cb = cb, .ud = ud, .loop = d->loop};
  /* dense: an ordered pass reads about smax rows, seeks cost about as much
   * as 2 rows each and there are 2 (P + 1) of them per column */
  db_query_binary(
      d,
      "SELECT mx.id, mx.status::text, mx.n::int8, mx.smax::int8, mx.dense, c.steps, c.tokens, "
      "c.loss, v.steps, v.tokens, v.loss "
      "FROM (SELECT r.id, r.status, r.nonembedding_params AS n, s.smax, "
      "ln(greatest(s.smax, 1)) AS l, s.smax <= 2 * ($2::int + 1) AS dense FROM runs r "
      "CROSS JOIN LATERAL (SELECT max(m.step) AS smax FROM metrics m WHERE m.run_id = r.id) s "
      "WHERE ($1::bigint IS NULL OR r.sweep_id = $1) AND ($3::bigint[] IS NULL OR r.id = "
      "ANY($3)) ORDER BY r.id LIMIT $4 OFFSET $5) mx " CURVE_SQL("train_loss") "c " CURVE_SQL(
          "val_loss") "v ORDER BY mx.id",
      5, p, on_curves, c);
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
      "AND reproduces IS NULL AND coalesce(part, '') <> 'lr_tune' AND EXISTS (SELECT 1 FROM sweeps "
      "WHERE id = $1)",
      sweep_id, cb, ud);
}

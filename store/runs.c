/* The runs' life cycle (runs.h): placement's queue, claims, leases, what
 * trainers report, results. */
#include "store/runs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

/* ---- the queue and claims ------------------------------------------------ */

/* a queued run r that may start: no branch, its branch point reported, or
 * its trunk gone or ended without reporting it (it trains from scratch) */
#define BRANCH_READY                                                                       \
  "(r.branch_of IS NULL OR r.branch_path IS NOT NULL OR NOT EXISTS (SELECT 1 FROM runs p " \
  "WHERE p.id = r.branch_of AND p.status IN ('queued', 'running'))) "

/* a queued run r whose last attempt failed has waited its retry delay */
#define RETRY_DUE "(r.retry_after IS NULL OR r.retry_after <= now()) "

static void decode_queued(const PGresult *res, int row, void *elem) {
  store_queued *r = elem;
  r->id = store__int(res, row, 0);
  r->gpus = (int)store__int(res, row, 1);
  r->slots = (int)store__int(res, row, 2);
  r->flops = PQgetisnull(res, row, 3) ? 0 : strtod(PQgetvalue(res, row, 3), NULL);
  r->throughput = PQgetisnull(res, row, 4) ? 0 : strtod(PQgetvalue(res, row, 4), NULL);
  snprintf(r->trainer, sizeof r->trainer, "%s", PQgetvalue(res, row, 5));
  snprintf(r->on, sizeof r->on, "%s", PQgetvalue(res, row, 6));
  r->owner_id = store__int(res, row, 7);
  r->sweep_id = store__int(res, row, 8);
  r->priority = (int)store__int(res, row, 9);
  r->owner_usage = strtod(PQgetvalue(res, row, 10), NULL);
  r->owner_gpus = (int)store__int(res, row, 11);
  r->owner_max_gpus = (int)store__int(res, row, 12);
}

STORE__ARRAY_SPEC(queued, store_queued, decode_queued, store_queue_cb);

/* A person's queued runs that may start, in their placement order ($1 the
 * limit a person, $2 the trainers, $3 the workers; o.id the person) */
#define QUEUE_OF_OWNER                                                                             \
  "SELECT r.id, r.gpus, CASE WHEN r.gpus > 0 THEN 0 "                                              \
  "ELSE greatest(coalesce((r.config->>'world_size')::int, 1), 1) END AS slots, "                   \
  "r.flops, r.sweep_id, r.priority, coalesce(r.config->>'trainer', 'builtin') AS trainer, "        \
  "coalesce(r.on_worker, '') AS on_worker, r.owner_id "                                            \
  "FROM runs r WHERE r.owner_id = o.id AND r.status = 'queued' AND " BRANCH_READY "AND " RETRY_DUE \
  "AND ($2::text[] IS NULL OR coalesce(r.config->>'trainer', 'builtin') = ANY ($2::text[])) "      \
  "AND ($3::text[] IS NULL OR r.on_worker IS NULL OR r.on_worker = ANY ($3::text[])) "             \
  "ORDER BY r.priority DESC, r.sweep_id, r.flops DESC NULLS LAST, r.id LIMIT (SELECT k FROM n)"

/* The queue (runs.h): a sweep's throughput comes from its spec once per
 * sweep among the runs read, not once per run: the spec of a sweep of
 * 10,000 runs is 300 kB of TOASTed jsonb, and reading it for each of 256
 * runs cost 16-35 ms of the control connection, where claims and finishes
 * wait (1.5-4 ms this way). */
void store_runs_queue(db *d, int limit, const char *trainers, const char *workers,
                      store_queue_cb cb, void *ud) {
  char lim[24];
  const char *p[3] = {store__itoa(lim, sizeof lim, limit), trainers, workers};
  store__query_rows(
      d,
      /* a probe of the index per person: an EXISTS here becomes a semi-join
       * that, before the table's statistics are there (a queue just
       * submitted), scans every queued run */
      "WITH o AS MATERIALIZED (SELECT u.id FROM users u CROSS JOIN LATERAL (SELECT 1 FROM runs r "
      "WHERE r.owner_id = u.id AND r.status = 'queued' LIMIT 1) e), "
      "n AS (SELECT greatest($1::int / greatest(count(*), 1), 16) AS k FROM o), "
      "q AS MATERIALIZED (SELECT x.* FROM o CROSS JOIN LATERAL (" QUEUE_OF_OWNER ") x), "
      "t AS MATERIALIZED (SELECT sw.id, CASE WHEN "
      "jsonb_typeof(sw.spec->'throughput_flops') = 'number' "
      "THEN (sw.spec->>'throughput_flops')::float8 END AS throughput "
      "FROM sweeps sw WHERE sw.id IN (SELECT sweep_id FROM q)) "
      "SELECT q.id, q.gpus, q.slots, q.flops, t.throughput, q.trainer, q.on_worker, q.owner_id, "
      "q.sweep_id, q.priority, coalesce(u.usage_s, 0), coalesce(u.gpus, 0), "
      "coalesce(l.max_gpus, -1) FROM q JOIN t ON t.id = q.sweep_id "
      "LEFT JOIN share_effective u ON u.owner_id = q.owner_id LEFT JOIN user_limits l ON l.user_id "
      "= q.owner_id "
      "ORDER BY q.owner_id, q.priority DESC, q.sweep_id, q.flops DESC NULLS LAST, q.id",
      3, p, &queued, (void (*)(void))cb, ud);
}

/* the claimed run's steps before its first: its branch point when it starts
 * from one (in its own batches: a batch ladder's rung counts the trunk's
 * tokens in its own batch size), else 0 */
#define FIRST0                                                                                     \
  "(CASE WHEN runs.branch_path IS NOT NULL THEN coalesce(runs.branch_step * (SELECT p.batch_size " \
  "FROM runs p WHERE p.id = runs.branch_of) / runs.batch_size, runs.branch_step) ELSE 0 END)"

static void decode_claim(const PGresult *res, int row, void *elem) {
  *(store_claim *)elem =
      (store_claim){.attempt = (int)store__int(res, row, 0),
                    .config = PQgetvalue(res, row, 1),
                    .sweep_id = store__int(res, row, 2),
                    .resume_max_step = PQgetisnull(res, row, 3) ? -1 : store__int(res, row, 3),
                    .branch_path = PQgetisnull(res, row, 4) ? NULL : PQgetvalue(res, row, 4),
                    .keep_steps = PQgetvalue(res, row, 5)};
}

static void deliver_claim(const store__call *c, int status, const void *rows, int n,
                          const char *errmsg) {
  ((store_claim_cb)c->cb)(c->ud, status, n == 1 ? rows : NULL, errmsg);
}

static const store__rows_spec claimed = {sizeof(store_claim), decode_claim, deliver_claim};

void store_runs_claim(db *d, int64_t run_id, int64_t worker_id, int lease_s, store_claim_cb cb,
                      void *ud) {
  char rid[24], wid[24], lease[24];
  const char *p[3] = {store__itoa(rid, sizeof rid, run_id), store__itoa(wid, sizeof wid, worker_id),
                      store__itoa(lease, sizeof lease, lease_s)};
  store__query_rows(
      d,
      "UPDATE runs SET status = 'running', worker = $2, attempt = attempt + 1, "
      "lease_until = now() + $3 * interval '1 second', "
      "started_at = coalesce(started_at, now()), error = NULL "
      "WHERE id = $1 AND status = 'queued' AND attempt - interruptions < max_attempts AND "
      "EXISTS (SELECT 1 FROM runs r WHERE r.id = $1 AND " BRANCH_READY "AND " RETRY_DUE ") "
      /* the stored metrics' gap-free prefix from the run's first step (FIRST0:
       * the step before it, the branch point of a branch that starts there) */
      "RETURNING attempt, config, sweep_id, CASE WHEN attempt > 1 THEN "
      "(SELECT CASE WHEN min(step) = " FIRST0 " + 1 THEN min(step) FILTER "
      "(WHERE nxt IS DISTINCT FROM step + 1) ELSE " FIRST0 " END FROM (SELECT step, "
      "lead(step) OVER (ORDER BY step) AS nxt FROM metrics WHERE run_id = $1 "
      "AND step >= " FIRST0 " + 1) t) END, branch_path, "
      /* the steps to keep a checkpoint at: the waiting branches', and those
       * an adaptive design may branch from later (runs.keep_steps) */
      "array_to_json(ARRAY(SELECT DISTINCT u.s FROM (SELECT c.branch_step AS s FROM runs c "
      "WHERE c.branch_of = $1 AND c.status = 'queued' AND c.branch_path IS NULL UNION ALL "
      "SELECT k::bigint FROM jsonb_array_elements_text(coalesce(keep_steps, '[]'::jsonb)) k) u "
      "ORDER BY 1))",
      3, p, &claimed, (void (*)(void))cb, ud);
}

/* ---- leases ----------------------------------------------------------------- */

static void decode_change(const PGresult *res, int row, void *elem) {
  store_run_change *r = elem;
  r->id = store__int(res, row, 0);
  r->status = PQgetvalue(res, row, 1);
  r->worker = store__int(res, row, 2);
  r->sweep_id = store__int(res, row, 3);
}

STORE__ARRAY_SPEC(changes, store_run_change, decode_change, store_changes_cb);

void store_runs_expire(db *d, store_changes_cb cb, void *ud) {
  store__query_rows(d,
                    "WITH x AS (SELECT id, worker, coalesce(stopping_attempt = attempt, false) "
                    "AS stopped, attempt - interruptions >= max_attempts AS spent FROM runs "
                    "WHERE status = 'running' AND lease_until < now() FOR UPDATE) "
                    "UPDATE runs r SET status = CASE WHEN x.spent AND NOT x.stopped "
                    "THEN 'failed'::run_status ELSE 'queued'::run_status END, "
                    "interruptions = r.interruptions + x.stopped::int, "
                    "worker = NULL, lease_until = NULL, "
                    "error = CASE WHEN x.stopped THEN 'interrupted: its worker stopped and "
                    "its report was lost' ELSE 'lease expired: worker lost' END, "
                    "finished_at = CASE WHEN x.spent AND NOT x.stopped THEN now() END "
                    "FROM x WHERE r.id = x.id RETURNING r.id, r.status, x.worker, r.sweep_id",
                    0, NULL, &changes, (void (*)(void))cb, ud);
}

void store_runs_extend_leases(db *d, int lease_s, store_done_cb cb, void *ud) {
  char lease[24];
  const char *p[1] = {store__itoa(lease, sizeof lease, lease_s)};
  store__exec(d,
              "UPDATE runs SET lease_until = greatest(lease_until, "
              "now() + $1 * interval '1 second') WHERE status = 'running'",
              1, p, cb, ud);
}

void store_runs_reconcile(db *d, int64_t run_id, int attempt, int64_t worker_id, int lease_s,
                          store_done_cb cb, void *ud) {
  char rid[24], att[24], wid[24], lease[24];
  const char *p[4] = {store__itoa(rid, sizeof rid, run_id), store__itoa(att, sizeof att, attempt),
                      store__itoa(wid, sizeof wid, worker_id),
                      store__itoa(lease, sizeof lease, lease_s)};
  store__exec(d,
              "UPDATE runs SET lease_until = now() + $4 * interval '1 second' "
              "WHERE id = $1 AND attempt = $2 AND worker = $3 AND status = 'running' "
              "RETURNING id",
              4, p, cb, ud);
}

void store_runs_reconcile_part(db *d, int64_t run_id, int attempt, store_done_cb cb, void *ud) {
  char rid[24], att[24];
  const char *p[2] = {store__itoa(rid, sizeof rid, run_id), store__itoa(att, sizeof att, attempt)};
  store__exec(d, "SELECT id FROM runs WHERE id = $1 AND attempt = $2 AND status = 'running'", 2, p,
              cb, ud);
}

void store_runs_requeue_orphans(db *d, int64_t worker_id, const int64_t *kept, int nkept,
                                store_changes_cb cb, void *ud) {
  char wid[24];
  char *ids = store__ids_json(kept, nkept);
  const char *p[2] = {store__itoa(wid, sizeof wid, worker_id), ids ? ids : "[]"};
  store__query_rows(d,
                    "UPDATE runs SET status = CASE WHEN attempt - interruptions >= max_attempts "
                    "AND stopping_attempt IS DISTINCT FROM attempt "
                    "THEN 'failed'::run_status ELSE 'queued'::run_status END, "
                    "interruptions = interruptions + "
                    "(stopping_attempt IS NOT DISTINCT FROM attempt)::int, "
                    "worker = NULL, lease_until = NULL, error = CASE WHEN stopping_attempt "
                    "IS NOT DISTINCT FROM attempt THEN 'interrupted: its worker stopped and "
                    "restarted' ELSE 'worker restarted: run lost' END, "
                    "finished_at = CASE WHEN attempt - interruptions >= max_attempts "
                    "AND stopping_attempt IS DISTINCT FROM attempt THEN now() END "
                    "WHERE worker = $1 AND status = 'running' "
                    "AND id NOT IN (SELECT jsonb_array_elements_text($2::jsonb)::bigint) "
                    "RETURNING id, status, worker, sweep_id",
                    2, p, &changes, (void (*)(void))cb, ud);
  free(ids);
}

STORE__ARRAY_SPEC(renewed, int64_t, store__decode_id, store_ids_cb);

void store_runs_renew(db *d, int64_t worker_id, int lease_s, const int64_t *runs, int nruns,
                      store_ids_cb cb, void *ud) {
  char wid[24], lease[24];
  char *ids = store__ids_json(runs, nruns);
  if (!ids) {
    cb(ud, SS_ENOMEM, NULL, 0, "out of memory");
    return;
  }
  store__call *c = store__rows_call(&renewed, (void (*)(void))cb, ud, 0);
  if (!c) {
    free(ids);
    return;
  }
  const char *sqls[2] = {
      "UPDATE workers SET last_seen = now() WHERE id = $1",
      "UPDATE runs SET lease_until = now() + $2 * interval '1 second' "
      "WHERE worker = $1 AND status = 'running' "
      "AND id IN (SELECT jsonb_array_elements_text($3::jsonb)::bigint) RETURNING id"};
  const char *p1[1] = {store__itoa(wid, sizeof wid, worker_id)};
  const char *p2[3] = {wid, store__itoa(lease, sizeof lease, lease_s), ids};
  const char *const *ps[2] = {p1, p2};
  const int np[2] = {1, 3};
  db_tx(d, 2, sqls, np, ps, store__on_rows, c);
  free(ids);
}

/* ---- what trainers report ---------------------------------------------------- */

void store_runs_started(db *d, const store_started *st, store_done_cb cb, void *ud) {
  char rid[24], att[24], wid[24], params[32], nep[32], fpt[32], er[32], wf[32];
  snprintf(params, sizeof params, "%.0f", st->params);
  snprintf(nep, sizeof nep, "%.0f", st->nonembedding_params);
  snprintf(fpt, sizeof fpt, "%.17g", st->flops_per_token);
  const char *p[10] = {store__itoa(rid, sizeof rid, st->run_id),
                       store__itoa(att, sizeof att, st->attempt),
                       store__itoa(wid, sizeof wid, st->worker_id),
                       params,
                       nep,
                       fpt,
                       store__dtoa(er, sizeof er, st->entropy_rate),
                       store__dtoa(wf, sizeof wf, st->window_floor),
                       st->environment ? st->environment : "{}",
                       st->worker ? st->worker : ""};
  store__exec(d,
              "WITH u AS (UPDATE runs SET params = $4::bigint, nonembedding_params = $5::bigint, "
              "flops = coalesce(flops, $6::float8 * tokens), "
              "entropy_rate = $7::float8, window_floor = $8::float8, environment = $9::jsonb, "
              "code_version = $9::jsonb->>'scalesweep' "
              "WHERE id = $1 AND attempt = $2 AND worker = $3 RETURNING id) "
              "INSERT INTO attempts (run_id, attempt, worker, environment) "
              "SELECT $1, $2, $10, $9::jsonb FROM u ON CONFLICT (run_id, attempt) DO UPDATE "
              "SET worker = EXCLUDED.worker, environment = EXCLUDED.environment",
              10, p, cb, ud);
}

/* sql ($1 run, $2 attempt, $3 step, $4 path, $5 worker) on what one attempt reports */
static void attempt_step(db *d, const char *sql, int64_t run_id, int attempt, int64_t worker_id,
                         int64_t step, const char *path, store_done_cb cb, void *ud) {
  char rid[24], att[24], wid[24], st[24];
  const char *p[5] = {store__itoa(rid, sizeof rid, run_id), store__itoa(att, sizeof att, attempt),
                      store__itoa(st, sizeof st, step), path,
                      store__itoa(wid, sizeof wid, worker_id)};
  store__exec(d, sql, 5, p, cb, ud);
}

void store_runs_branch_point(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                             const char *path, store_done_cb cb, void *ud) {
  /* only from the trunk's attempt that is running on that worker; the
   * count of rows is the branches it frees (0 also when none waits) */
  attempt_step(d,
               /* recorded on the trunk too (runs.kept), for the branches an
                * adaptive design adds later */
               "WITH k AS (UPDATE runs SET kept = coalesce(kept, '{}'::jsonb) || "
               "jsonb_build_object($3::bigint::text, $4::text) WHERE id = $1 AND attempt = $2 AND "
               "worker = $5 AND status = 'running' RETURNING 1) "
               "UPDATE runs SET branch_path = $4 WHERE branch_of = $1 AND branch_step = $3 "
               "AND status = 'queued' AND EXISTS (SELECT 1 FROM runs t WHERE t.id = $1 AND "
               "t.attempt = $2 AND t.worker = $5 AND t.status = 'running')",
               run_id, attempt, worker_id, step, path, cb, ud);
}

void store_runs_checkpoint(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                           const char *path, store_done_cb cb, void *ud) {
  attempt_step(d,
               "UPDATE runs SET checkpoint_step = $3::bigint, checkpoint_path = $4 "
               "WHERE id = $1 AND attempt = $2 AND worker = $5 AND status = 'running'",
               run_id, attempt, worker_id, step, path, cb, ud);
}

/* ---- results -------------------------------------------------------------------- */

typedef struct finished_row {
  const char *status;
  int64_t sweep_id;
  double retry_s; /* seconds until a failed run's next attempt may start; 0: at once */
} finished_row;

static void decode_finished(const PGresult *res, int row, void *elem) {
  int retry = PQnfields(res) > 2 && !PQgetisnull(res, row, 2);
  *(finished_row *)elem = (finished_row){PQgetvalue(res, row, 0), store__int(res, row, 1),
                                         retry ? strtod(PQgetvalue(res, row, 2), NULL) : 0};
}

static void deliver_finished(const store__call *c, int status, const void *rows, int n,
                             const char *errmsg) {
  const finished_row *r = n == 1 ? rows : NULL;
  ((store_finish_cb)c->cb)(c->ud, status, r ? r->status : NULL, r ? r->sweep_id : 0,
                           r ? r->retry_s : 0, errmsg);
}

static const store__rows_spec finished = {sizeof(finished_row), decode_finished, deliver_finished};

void store_runs_finish(db *d, const store_finish *f, store_finish_cb cb, void *ud) {
  char rid[24], att[24], wid[24], loss[32], tokens[32];
  int ok = !strcmp(f->outcome, "succeeded");
  snprintf(tokens, sizeof tokens, "%.0f", f->tokens);
  char retry[24];
  const char *p[9] = {store__itoa(rid, sizeof rid, f->run_id),
                      store__itoa(att, sizeof att, f->attempt),
                      store__itoa(wid, sizeof wid, f->worker_id),
                      f->outcome,
                      ok ? store__dtoa(loss, sizeof loss, f->final_val_loss) : NULL,
                      ok ? tokens : NULL,
                      f->error,
                      f->log_tail,
                      store__itoa(retry, sizeof retry, f->retry_after_s)};
  store__query_rows(d,
                    "UPDATE runs SET status = CASE WHEN $4 = 'failed' "
                    "AND attempt - interruptions < max_attempts "
                    "THEN 'queued'::run_status ELSE $4::run_status END, "
                    "worker = NULL, lease_until = NULL, "
                    "final_val_loss = coalesce($5::float8, final_val_loss), "
                    "tokens = coalesce($6::bigint, tokens), error = $7, log_tail = $8, "
                    "finished_at = CASE WHEN $4 = 'failed' "
                    "AND attempt - interruptions < max_attempts THEN NULL "
                    "ELSE now() END, "
                    /* the n-th failed attempt: retry_after_s * 2^(n-1), at most an hour */
                    "retry_after = CASE WHEN $4 = 'failed' AND $9::int > 0 "
                    "AND attempt - interruptions < max_attempts THEN now() + least($9::int * "
                    "power(2, least(attempt - interruptions - 1, 20)), 3600) * interval '1 second' "
                    "END "
                    "WHERE id = $1 AND attempt = $2 AND worker = $3 AND status = 'running' "
                    "RETURNING status, sweep_id, extract(epoch FROM retry_after - now())",
                    9, p, &finished, (void (*)(void))cb, ud);
}

/* ---- interruptions ------------------------------------------------------------ */

void store_runs_mark_stopping(db *d, int64_t worker_id, const int64_t *runs, const int *attempts,
                              int n, store_done_cb cb, void *ud) {
  char wid[24];
  char *refs = malloc((size_t)(n > 0 ? n : 1) * 48 + 2);
  if (!refs) {
    cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  size_t len = 0;
  refs[len++] = '[';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(refs + len, 48, "%s[%lld,%d]", i ? "," : "", (long long)runs[i],
                            attempts[i]);
  refs[len++] = ']';
  refs[len] = '\0';
  const char *p[2] = {store__itoa(wid, sizeof wid, worker_id), refs};
  store__exec(d,
              "UPDATE runs r SET stopping_attempt = r.attempt "
              "FROM jsonb_array_elements($2::jsonb) e "
              "WHERE r.id = (e->>0)::bigint AND r.attempt = (e->>1)::int "
              "AND r.worker = $1 AND r.status = 'running'",
              2, p, cb, ud);
  free(refs);
}

void store_runs_requeue_interrupted(db *d, int64_t run_id, int attempt, int64_t worker_id,
                                    const char *why, store_finish_cb cb, void *ud) {
  char rid[24], att[24], wid[24];
  const char *p[4] = {store__itoa(rid, sizeof rid, run_id), store__itoa(att, sizeof att, attempt),
                      store__itoa(wid, sizeof wid, worker_id), why};
  store__query_rows(d,
                    "UPDATE runs SET status = 'queued', interruptions = interruptions + 1, "
                    "worker = NULL, lease_until = NULL, stopping_attempt = NULL, error = $4, "
                    "finished_at = NULL "
                    "WHERE id = $1 AND attempt = $2 AND worker = $3 AND status = 'running' "
                    "RETURNING status, sweep_id",
                    4, p, &finished, (void (*)(void))cb, ud);
}

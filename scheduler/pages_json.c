/* The API's JSON of the store's rows (scheduler/pages_json.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/pages_json.h"

/* ---- values ------------------------------------------------------------------------------ */

static void j_int(sched__buf *b, int64_t v) {
  if (v == STORE_NULL_INT)
    sched__b_puts(b, "null");
  else
    sched__b_printf(b, "%" PRId64, v);
}

/* The shortest of %.15g, %.16g and %.17g that reads back as v, as
 * PostgreSQL writes a double (1e+15, 3.25, 0.1); null when not finite
 * (JSON has no NaN). */
static void j_num(sched__buf *b, double v) {
  if (!isfinite(v)) {
    sched__b_puts(b, "null");
    return;
  }
  char t[32];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(t, sizeof t, "%.*g", prec, v);
    if (prec == 17 || strtod(t, NULL) == v)
      break;
  }
  sched__b_puts(b, t);
}

/* A string as JSON, or null. */
static void j_str(sched__buf *b, const char *s) {
  if (!s) {
    sched__b_puts(b, "null");
    return;
  }
  sched__b_puts(b, "\"");
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c != '"' && c != '\\')
      continue;
    sched__b_add(b, run, (size_t)(s - run));
    if (c == '"' || c == '\\')
      sched__b_printf(b, "\\%c", c);
    else if (c == '\n')
      sched__b_puts(b, "\\n");
    else if (c == '\t')
      sched__b_puts(b, "\\t");
    else if (c == '\r')
      sched__b_puts(b, "\\r");
    else
      sched__b_printf(b, "\\u%04x", c);
    run = s + 1;
  }
  sched__b_add(b, run, (size_t)(s - run));
  sched__b_puts(b, "\"");
}

/* A document as PostgreSQL wrote it, or null. */
static void j_doc(sched__buf *b, const char *doc) { sched__b_puts(b, doc ? doc : "null"); }

/* "key": after "{" the first time, "," after */
static void j_key(sched__buf *b, const char **sep, const char *key) {
  sched__b_puts(b, *sep);
  *sep = ",";
  j_str(b, key);
  sched__b_puts(b, ":");
}

/* [each of the n elements at elems, size bytes apart, written by one] */
static void j_array(sched__buf *b, const void *elems, int n, size_t size,
                    void (*one)(sched__buf *b, const void *elem)) {
  sched__b_puts(b, "[");
  for (int i = 0; i < n; i++) {
    if (i)
      sched__b_puts(b, ",");
    one(b, (const char *)elems + (size_t)i * size);
  }
  sched__b_puts(b, "]");
}

/* Where a page of WHAT stands: "WHAT_total", "WHAT_offset", "WHAT_limit". */
static void j_window(sched__buf *b, const char **sep, const char *what, int64_t total,
                     int64_t offset, int64_t limit) {
  static const char *const names[3] = {"total", "offset", "limit"};
  const int64_t v[3] = {total, offset, limit};
  for (int k = 0; k < 3; k++) {
    char key[48];
    snprintf(key, sizeof key, "%s_%s", what, names[k]);
    j_key(b, sep, key);
    j_int(b, v[k]);
  }
}

/* ---- rows -------------------------------------------------------------------------------- */

/* The members of each object in the API's order: X(key, kind, value), kind
 * naming the writer (j_int, j_num, j_str, j_doc); r a store_run, sw a
 * store_sweep, c its counts. */
#define RUN_JSON(X)                                                                               \
  X(id, int, r->id)                                                                               \
  X(sweep_id, int, r->sweep_id)                                                                   \
  X(status, str, r->status) X(attempt, int, r->attempt) X(max_attempts, int, r->max_attempts)     \
      X(gpus, int, r->gpus) X(priority, int, r->priority) X(worker, int, r->worker)               \
          X(lease_until, str, r->lease_until) X(params, int, r->params)                           \
              X(nonembedding_params, int, r->nonembedding_params) X(tokens, int, r->tokens)       \
                  X(batch_size, int, r->batch_size) X(flops, num, r->flops)                       \
                      X(final_val_loss, num, r->final_val_loss) X(started_at, str, r->started_at) \
                          X(finished_at, str, r->finished_at) X(reproduces, int, r->reproduces)   \
                              X(code_version, str, r->code_version) X(error, str, r->error)       \
                                  X(checkpoint_step, int, r->checkpoint_step)                     \
                                      X(config_hash, str, r->config_hash) X(part, str, r->part)   \
                                          X(target_loss, doc, r->target_loss)                     \
                                              X(prediction, doc, r->prediction)                   \
                                                  X(designed, doc, r->designed) X(branch_of, int, \
                                                                                  r->branch_of)   \
                                                      X(branch_step, int, r->branch_step)         \
                                                          X(retry_after, str, r->retry_after)     \
                                                              X(environment, doc, r->environment) \
                                                                  X(on_worker, str, r->on_worker) \
                                                                      X(model, str, r->model)

/* The keys every sweep's object starts with. */
#define SWEEP_HEAD_JSON(X) \
  X(id, int, sw->id)       \
  X(name, str, sw->name)   \
  X(status, str, sw->status) X(priority, int, sw->priority) X(created_at, str, sw->created_at)

/* GET /api/sweeps's */
#define SWEEP_ROW_JSON(X)                                                                       \
  SWEEP_HEAD_JSON(X)                                                                            \
  X(spec_hash, str, sw->spec_hash) X(owner, str, sw->owner)                                     \
  X(runs, int, c->total) X(succeeded, int, c->succeeded) X(failed, int, c->failed)              \
      X(running, int, c->running) X(queued, int, c->queued) X(queued_gpus, int, c->queued_gpus) \
          X(queued_slots, int, c->queued_slots) X(queued_trainers, str, c->queued_trainers)     \
              X(flops_planned, num, c->flops_planned) X(flops_done, num, c->flops_done)

/* GET /api/sweeps/{id}'s, before "counts" and the page of runs. The spec,
 * the lr tune and the adaptive design are documents, passed through as
 * PostgreSQL wrote them: a spec of 10,000 runs is most of the answer, and
 * parsing it to write it again was half of its time. */
#define SWEEP_JSON(X)                                                                     \
  SWEEP_HEAD_JSON(X)                                                                      \
  X(spec, doc, sw->spec)                                                                  \
  X(spec_hash, str, sw->spec_hash) X(owner, str, sw->owner) X(models, str, c->models)     \
      X(lr_tune, doc, sw->lr_tune) X(adaptive, doc, sw->adaptive)

#define COUNTS_JSON(X)                                                                      \
  X(queued, int, c->queued)                                                                 \
  X(queued_gpus, int, c->queued_gpus)                                                       \
  X(queued_slots, int, c->queued_slots) X(queued_trainers, str, c->queued_trainers)         \
      X(running, int, c->running) X(succeeded, int, c->succeeded) X(failed, int, c->failed) \
          X(cancelled, int, c->cancelled) X(total, int, c->total)                           \
              X(flops_planned, num, c->flops_planned) X(flops_done, num, c->flops_done)     \
                  X(branched, int, c->branched) X(flops_trained, num, c->flops_trained)

#define MEMBER(key, kind, value) \
  j_key(b, &sep, #key);          \
  j_##kind(b, value);

static void j_run(sched__buf *b, const void *elem) {
  const store_run *r = elem;
  const char *sep = "{";
  RUN_JSON(MEMBER)
  sched__b_puts(b, "}");
}

/* The page's keys, inside an object whose keys come before (sep). */
static void j_runs_members(sched__buf *b, const char **sep, const store_runs *p) {
  j_window(b, sep, "runs", p->total, p->offset, p->limit);
  j_key(b, sep, "runs");
  j_array(b, p->runs, p->n, sizeof *p->runs, j_run);
}

void sched__json_runs(sched__buf *b, const store_runs *runs) {
  const char *sep = "{";
  j_runs_members(b, &sep, runs);
  sched__b_puts(b, "}");
}

/* "waiting": why the sweep's queued runs can start on no connected worker */
static void j_waiting(sched__buf *b, const char **sep, sched *s, const store_sweep *sw) {
  const store_sweep_counts *c = &sw->counts;
  char why[1024];
  if (c->queued > 0 && sched__place_why(s, sw->id, (int)c->queued_gpus, (int)c->queued_slots,
                                        c->queued_trainers, why, sizeof why)) {
    j_key(b, sep, "waiting");
    j_str(b, why);
  }
}

void sched__json_sweeps(sched__buf *b, sched *s, const store_sweep *sweeps, int n) {
  sched__b_puts(b, "[");
  for (int i = 0; i < n; i++) {
    const store_sweep *sw = &sweeps[i];
    const store_sweep_counts *c = &sw->counts;
    const char *sep = i ? ",{" : "{";
    SWEEP_ROW_JSON(MEMBER)
    j_waiting(b, &sep, s, sw);
    sched__b_puts(b, "}");
  }
  sched__b_puts(b, "]");
}

static void j_counts(sched__buf *b, const store_sweep_counts *c) {
  const char *sep = "{";
  COUNTS_JSON(MEMBER)
  sched__b_puts(b, "}");
}

void sched__json_sweep(sched__buf *b, sched *s, const store_sweep *sw, const store_runs *runs) {
  const store_sweep_counts *c = &sw->counts;
  const char *sep = "{";
  j_waiting(b, &sep, s, sw);
  SWEEP_JSON(MEMBER)
  j_key(b, &sep, "counts");
  j_counts(b, c);
  j_runs_members(b, &sep, runs);
  sched__b_puts(b, "}");
}

/* ---- a run ------------------------------------------------------------------------------- */

#define ATTEMPT_JSON(X)       \
  X(attempt, int, a->attempt) \
  X(worker, str, a->worker) X(started_at, str, a->started_at) X(environment, doc, a->environment)

static void j_attempts(sched__buf *b, const store_attempt *attempts, int n) {
  sched__b_puts(b, "[");
  for (int i = 0; i < n; i++) {
    const store_attempt *a = &attempts[i];
    const char *sep = i ? ",{" : "{";
    ATTEMPT_JSON(MEMBER)
    sched__b_puts(b, "}");
  }
  sched__b_puts(b, "]");
}

/* A metric row: its stored columns, keyed and ordered as SS_METRIC_COLS
 * (the integers as integers, null where absent). */
static void j_metric_row(sched__buf *b, const void *elem) {
  const ss_metric_row *m = elem;
  const char *sep = "{";
  for (int i = 0; i < SS_MCOL_N; i++) {
    if (!ss_metric_stored(i))
      continue;
    j_key(b, &sep, ss_metric_cols[i].name);
    if (ss_metric_cols[i].kind != SS_MK_REAL && isfinite(m->v[i]))
      j_int(b, (int64_t)m->v[i]);
    else
      j_num(b, m->v[i]);
  }
  sched__b_puts(b, "}");
}

static void j_metric_page(sched__buf *b, const char **sep, const store_metric_page *p) {
  j_key(b, sep, "metrics");
  j_array(b, p->rows, p->n, sizeof *p->rows, j_metric_row);
  j_window(b, sep, "metrics", p->total, p->offset, p->limit);
}

/* The run's row with its resolved config. */
static void j_run_config(sched__buf *b, const store_run *r, const char *config) {
  const char *sep = "{";
  RUN_JSON(MEMBER)
  MEMBER(config, doc, config)
  sched__b_puts(b, "}");
}

void sched__json_run_doc(sched__buf *b, const store_run_doc *doc, const char *waiting) {
  const char *sep = "{";
  j_key(b, &sep, "run");
  j_run_config(b, &doc->run, doc->config);
  j_metric_page(b, &sep, &doc->metrics);
  j_key(b, &sep, "attempts");
  j_attempts(b, doc->attempts, doc->nattempts);
  j_key(b, &sep, "reproduction");
  j_doc(b, doc->reproduction);
  if (waiting) {
    j_key(b, &sep, "waiting");
    j_str(b, waiting);
  }
  sched__b_puts(b, "}");
}

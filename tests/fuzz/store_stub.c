/* The store without PostgreSQL (store_stub.h): every function of store/ headers
 * that the scheduler calls, answering on a later loop turn. Each call is
 * kept as a record with the arguments its answer needs (copied: the
 * caller's may be gone by then) and the function that gives the answer. */
#include "tests/fuzz/store_stub.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/err.h"
#include "scheduler/internal.h"
#include "store/actions.h"
#include "store/audit.h"
#include "store/fits.h"
#include "store/metrics.h"
#include "store/pages.h"
#include "store/predictions.h"
#include "store/runs.h"
#include "store/store.h"
#include "store/sweeps.h"
#include "store/usage.h"
#include "store/users.h"
#include "store/workers.h"

/* A stub takes the real signatures and answers from few of their arguments. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

typedef struct call call;
/* status is 0 or the error to answer with; v the answer's variant */
typedef void answer_fn(call *c, int status, int v);

struct call {
  call *next;
  answer_fn *answer;
  void (*cb)(void);
  void *ud;
  int64_t a;    /* an id or a count the answer needs */
  int64_t *ids; /* (n), malloc'd */
  int n;
};

struct db {
  uv_loop_t *loop;
  uv_idle_t idle;
  call *head, *tail;
  void (*close_cb)(void *ud);
  void *close_ud;
};

static const uint8_t *script;
static size_t script_len, script_pos;
static int down, pending;
static int64_t last_worker = 1; /* the last worker registered: its runs */

void store_stub_script(const uint8_t *bytes, size_t n) {
  script = bytes;
  script_len = n;
  script_pos = 0;
  down = 0;
}

int store_stub_pending(void) { return pending; }

static const char *const errmsg = "stub: the statement failed";

static void answer_one(call *c, int closing) {
  uint8_t byte = script_pos < script_len ? script[script_pos++] : 0;
  int status = 0;
  if (closing || down || (byte & 7) == 2 || (byte & 7) == 3)
    status = SS_ECONN;
  else if ((byte & 7) == 1)
    status = SS_EQUERY;
  if ((byte & 7) == 3)
    down = 1;
  pending--;
  c->answer(c, status, byte >> 3);
  free(c->ids);
  free(c);
}

static void on_idle(uv_idle_t *h) {
  db *d = h->data;
  call *c = d->head;
  if (!c) {
    uv_idle_stop(h);
    return;
  }
  d->head = c->next;
  if (!d->head)
    d->tail = NULL;
  answer_one(c, 0);
}

static call *queue(db *d, answer_fn *fn, void (*cb)(void), void *ud) {
  call *c = calloc(1, sizeof *c);
  if (!c)
    abort();
  c->answer = fn;
  c->cb = cb;
  c->ud = ud;
  if (d->tail)
    d->tail->next = c;
  else
    d->head = c;
  d->tail = c;
  pending++;
  uv_idle_start(&d->idle, on_idle);
  return c;
}

#define QUEUE(d, fn, cb, ud) queue(d, fn, (void (*)(void))(cb), ud)

/* ---- the connection (store.h) ---------------------------------------------- */

db *db_open(uv_loop_t *loop, const char *url) {
  db *d = calloc(1, sizeof *d);
  if (!d)
    abort();
  d->loop = loop;
  uv_idle_init(loop, &d->idle);
  d->idle.data = d;
  return d;
}

db *db_open_opts(uv_loop_t *loop, const char *url, const db_options *o) {
  return db_open(loop, url);
}

int db_ready(const db *d) { return d && !down; }

size_t db_queue_length(const db *d) {
  size_t n = 0;
  for (const call *c = d ? d->head : NULL; c; c = c->next)
    n++;
  return n;
}

static void on_idle_closed(uv_handle_t *h) {
  db *d = h->data;
  if (d->close_cb)
    d->close_cb(d->close_ud);
  free(d);
}

void db_close(db *d, void (*cb)(void *ud), void *ud) {
  if (!d)
    return;
  while (d->head) {
    call *c = d->head;
    d->head = c->next;
    answer_one(c, 1);
  }
  d->tail = NULL;
  d->close_cb = cb;
  d->close_ud = ud;
  uv_close((uv_handle_t *)&d->idle, on_idle_closed);
}

/* the read pool: one stub connection stands for all of them */
struct db_pool {
  db *d;
};

db_pool *db_pool_open(uv_loop_t *loop, const char *url, int n, const db_options *o) {
  db_pool *p = calloc(1, sizeof *p);
  if (!p)
    abort();
  p->d = db_open(loop, url);
  return p;
}

db *db_pool_get(db_pool *p, int heavy) {
  return p->d;
}

int db_pool_ready(const db_pool *p) { return db_ready(p->d); }

size_t db_pool_queue_length(const db_pool *p) { return db_queue_length(p->d); }

void db_pool_close(db_pool *p, void (*cb)(void *ud), void *ud) {
  db *d = p->d;
  free(p);
  db_close(d, cb, ud);
}

/* ---- answers shared by several queries --------------------------------------- */

static void ans_done(call *c, int st, int v) {
  ((store_done_cb)c->cb)(c->ud, st, st ? 0 : c->a > 0 ? (v & 1 ? 0 : c->a) : 0, st ? errmsg : NULL);
}

static void done(db *d, int64_t rows, store_done_cb cb, void *ud) {
  QUEUE(d, ans_done, cb, ud)->a = rows;
}

/* an object (or, with a == 1, an array); v % 4 == 3: no such object */
static void ans_json(call *c, int st, int v) {
  const char *doc = v % 4 == 3 ? NULL : c->a ? "[]" : "{}";
  ((store_json_cb)c->cb)(c->ud, st, st ? NULL : doc, st ? errmsg : NULL);
}

static void json_doc(db *d, int array, store_json_cb cb, void *ud) {
  QUEUE(d, ans_json, cb, ud)->a = array;
}

/* ---- workers.h ------------------------------------------------------------------ */

static void ans_worker(call *c, int st, int v) {
  /* the decisions a registration can take, by the fuzzer's choice */
  static const char *const hows[] = {"new", "proven", "taken", "live", "leased"};
  const char *how = hows[v % 5];
  int refused = v % 5 >= 3;
  store_worker_reg r = {refused ? 0 : c->a, how, refused ? 1 + v % 3 : 0,
                        refused ? "2026-01-01 00:00:00 UTC" : NULL};
  if (!st && !refused)
    last_worker = c->a;
  ((store_worker_cb)c->cb)(c->ud, st, st ? NULL : &r, st ? errmsg : NULL);
}

void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, const char *given_hash, const char *new_hash, int live,
                            store_worker_cb cb, void *ud) {
  uint32_t h = 2166136261u; /* one id per name, as the table keeps it */
  for (const char *p = name ? name : ""; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  QUEUE(d, ans_worker, cb, ud)->a = 1 + h % 64;
}

/* ---- runs.h --------------------------------------------------------------------- */

static void ans_queue(call *c, int st, int v) {
  store_queued runs[3];
  int n = st || v % 4 == 3 ? 0 : 1 + v % 4;
  if (n > c->a)
    n = (int)c->a;
  for (int k = 0; k < n; k++)
    runs[k] = (store_queued){.id = 10 + k + 3 * (v >> 2),
                             .gpus = (k + v) % 3,
                             .trainer = "builtin",
                             /* two people, now and then one at a 1-GPU limit (fair share) */
                             .owner_id = 1 + k % 2,
                             .owner_usage = k % 2 ? v : 0,
                             .owner_max_gpus = k % 2 && v % 2 ? 1 : -1};
  ((store_queue_cb)c->cb)(c->ud, st, runs, n, st ? errmsg : NULL);
}

void store_runs_queue(db *d, int limit, const char *trainers, const char *workers,
                      store_queue_cb cb, void *ud) {
  QUEUE(d, ans_queue, cb, ud)->a = limit;
}

static void ans_claim(call *c, int st, int v) {
  int attempt = 1 + v % 3;
  store_claim cl = {.attempt = attempt,
                    .config = "{\"model\":{\"n_layer\":2,\"d_model\":64,\"n_head\":2},"
                              "\"train\":{\"tokens\":65536}}",
                    .sweep_id = 1,
                    .resume_max_step = attempt > 1 ? v % 5 : -1,
                    /* now and then a branch, or a trunk with branch points */
                    .branch_path = v % 7 == 1 ? "ck/run-1/branch-8/checkpoint.bin" : NULL,
                    .keep_steps = v % 7 == 2   ? "[8, 16, \"x\""
                                  : v % 7 == 3 ? "[4, 12]"
                                               : "[]"};
  ((store_claim_cb)c->cb)(c->ud, st, st || v % 4 == 3 ? NULL : &cl, st ? errmsg : NULL);
}

void store_runs_claim(db *d, int64_t run_id, int64_t worker_id, int lease_s, store_claim_cb cb,
                      void *ud) {
  QUEUE(d, ans_claim, cb, ud);
}

/* v % 3 == 1: one run changed (c->a: its id) */
static void ans_changes(call *c, int st, int v) {
  store_run_change ch = {
      .id = c->a, .status = v & 8 ? "failed" : "queued", .worker = last_worker, .sweep_id = 1};
  int n = !st && v % 3 == 1;
  ((store_changes_cb)c->cb)(c->ud, st, n ? &ch : NULL, n, st ? errmsg : NULL);
}

void store_runs_expire(db *d, store_changes_cb cb, void *ud) {
  QUEUE(d, ans_changes, cb, ud)->a = 10;
}

void store_runs_extend_leases(db *d, int lease_s, store_done_cb cb, void *ud) {
  done(d, 0, cb, ud);
}

void store_runs_reconcile(db *d, int64_t run_id, int attempt, int64_t worker_id, int lease_s,
                          store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

void store_runs_reconcile_part(db *d, int64_t run_id, int attempt, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

void store_runs_requeue_orphans(db *d, int64_t worker_id, const int64_t *kept, int nkept,
                                store_changes_cb cb, void *ud) {
  QUEUE(d, ans_changes, cb, ud)->a = 11;
}

/* the runs named, less those whose bit of v is set */
static void ans_renew(call *c, int st, int v) {
  int k = 0;
  for (int i = 0; !st && i < c->n; i++)
    if (!(i < 5 && (v >> i) & 1))
      c->ids[k++] = c->ids[i];
  ((store_ids_cb)c->cb)(c->ud, st, c->ids, k, st ? errmsg : NULL);
}

void store_runs_renew(db *d, int64_t worker_id, int lease_s, const int64_t *runs, int nruns,
                      store_ids_cb cb, void *ud) {
  call *c = QUEUE(d, ans_renew, cb, ud);
  c->n = nruns > 0 ? nruns : 0;
  c->ids = malloc(sizeof *c->ids * (size_t)(c->n ? c->n : 1));
  if (!c->ids)
    abort();
  if (c->n)
    memcpy(c->ids, runs, sizeof *c->ids * (size_t)c->n);
}

void store_runs_started(db *d, const store_started *st, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

/* rows stored, or with v % 4 == 3 STORE_FENCED (the attempt is no longer
 * the worker's running one) */
static void ans_fenced(call *c, int st, int v) {
  int64_t rows = v % 4 == 3 ? STORE_FENCED : c->a;
  ((store_done_cb)c->cb)(c->ud, st, st ? 0 : rows, st ? errmsg : NULL);
}

static void fenced_done(db *d, int64_t rows, store_done_cb cb, void *ud) {
  QUEUE(d, ans_fenced, cb, ud)->a = rows;
}

void store_runs_checkpoint(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                           const char *path, store_done_cb cb, void *ud) {
  fenced_done(d, 1, cb, ud);
}

void store_runs_branch_point(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                             const char *path, store_done_cb cb, void *ud) {
  fenced_done(d, 2, cb, ud);
}

/* the outcome's status (a failure may go back to the queue); v % 4 == 3: a
 * stale attempt (NULL) */
static void ans_finish(call *c, int st, int v) {
  static const char *const status[] = {"succeeded", "failed", "cancelled"};
  const char *s = status[c->a];
  if (c->a == 1 && !(v & 4))
    s = "queued";
  if (v % 4 == 3)
    s = NULL;
  ((store_finish_cb)c->cb)(c->ud, st, st ? NULL : s, st ? 0 : 1, 0, st ? errmsg : NULL);
}

void store_runs_finish(db *d, const store_finish *f, store_finish_cb cb, void *ud) {
  QUEUE(d, ans_finish, cb, ud)->a = !strcmp(f->outcome, "succeeded") ? 0
                                    : !strcmp(f->outcome, "failed")  ? 1
                                                                     : 2;
}

void store_runs_mark_stopping(db *d, int64_t worker_id, const int64_t *runs, const int *attempts,
                              int n, store_done_cb cb, void *ud) {
  for (int i = 0; i < n; i++)
    if (runs[i] < 0 || attempts[i] < 0)
      abort(); /* the protocol's validation refuses these */
  done(d, n, cb, ud);
}

/* back in the queue, or with v % 4 == 3 a stale attempt (NULL) */
static void ans_requeued(call *c, int st, int v) {
  const char *s = v % 4 == 3 ? NULL : "queued";
  ((store_finish_cb)c->cb)(c->ud, st, st ? NULL : s, st ? 0 : 1, 0, st ? errmsg : NULL);
}

void store_runs_requeue_interrupted(db *d, int64_t run_id, int attempt, int64_t worker_id,
                                    const char *why, store_finish_cb cb, void *ud) {
  if (!why)
    abort();
  QUEUE(d, ans_requeued, cb, ud);
}

/* ---- metrics.h -------------------------------------------------------------------- */

void store_metrics_insert(db *d, int64_t run_id, int attempt, int64_t worker_id,
                          const store_metric_row *rows, size_t n, store_done_cb cb, void *ud) {
  for (size_t i = 1; i < n; i++) /* the caller's promise: sorted, one row per step */
    if (rows[i].v[SS_MCOL_step] <= rows[i - 1].v[SS_MCOL_step])
      abort();
  fenced_done(d, (int64_t)n, cb, ud);
}

/* ---- sweeps.h --------------------------------------------------------------------- */

static void ans_inserted(call *c, int st, int v) {
  int dup = v % 4 == 3;
  ((store_sweeps_inserted_cb)c->cb)(c->ud, st, st || dup ? 0 : 1 + v, st || dup ? 0 : 1,
                                    st ? errmsg : NULL);
}

void store_sweeps_insert(db *d, const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  if (!sw->name || !sw->spec_json || !sw->spec_hash || !sw->runs_json)
    abort();
  QUEUE(d, ans_inserted, cb, ud);
}

static void ans_sweep_id(call *c, int st, int v) {
  ((store_sweeps_id_cb)c->cb)(c->ud, st, st || v & 1 ? 0 : 1, st ? errmsg : NULL);
}

void store_sweeps_find_by_hash(db *d, const char *spec_hash, store_sweeps_id_cb cb, void *ud) {
  QUEUE(d, ans_sweep_id, cb, ud);
}

void store_sweeps_extend(db *d, int64_t sweep_id, const store_sweep_new *sw,
                         store_sweeps_inserted_cb cb, void *ud) {
  if (!sw->runs_json)
    abort();
  QUEUE(d, ans_inserted, cb, ud);
}

static void ans_tune_runs(call *c, int st, int v) {
  /* no tune waiting, one still running, or every run ended (a decision) */
  static const char spec[] =
      "{\"name\":\"t\",\"method\":\"runs\",\"base\":{\"model\":{\"seq_len\":16,"
      "\"parametrization\":\"mup\",\"base_width\":16},\"train\":{\"tokens\":4096}},"
      "\"runs\":[{\"model\":{\"n_layer\":1,\"d_model\":16,\"n_head\":2}}],"
      "\"lr_tune\":{\"lr\":[0.001,0.01,0.1]},\"resources\":{\"cpus\":1}}";
  static const double lr[3] = {0.001, 0.01, 0.1};
  store_lr_tune_run runs[3];
  for (int i = 0; i < 3; i++)
    runs[i] = (store_lr_tune_run){.id = i + 1,
                                  .lr = lr[i],
                                  .status = v % 3 == 1 && i == 2 ? "running" : "succeeded",
                                  .loss = 3.0 - 0.1 * i,
                                  .n_layer = 1,
                                  .d_model = 16,
                                  .n_head = 2,
                                  .batch_size = 8,
                                  .nonembedding_params = 3312,
                                  .tokens = 4096};
  int none = st || v % 3 == 0;
  ((store_sweeps_lr_tune_cb)c->cb)(c->ud, st, none ? NULL : spec, none ? NULL : runs, none ? 0 : 3,
                                   st ? errmsg : NULL);
}

void store_sweeps_lr_tune_runs(db *d, int64_t sweep_id, store_sweeps_lr_tune_cb cb, void *ud) {
  QUEUE(d, ans_tune_runs, cb, ud);
}

void store_sweeps_lr_tuned(db *d, int64_t sweep_id, const char *decision_json,
                           const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  if (!decision_json || !sw->runs_json)
    abort();
  QUEUE(d, ans_inserted, cb, ud);
}

/* an adaptive sweep's runs: none (no design running), its first round
 * still training, or ended (then the scheduler reads its points and plans
 * the spec again, which its harness answers like any other read) */
static void ans_adaptive_runs(call *c, int st, int v) {
  static const char spec[] =
      "{\"name\":\"a\",\"method\":\"isoflop\",\"base\":{\"model\":{\"seq_len\":16},"
      "\"data\":{\"synthetic\":{\"words\":256}}},\"isoflop\":{\"flops\":{\"from\":1e12,"
      "\"to\":1.6e13,\"points\":5},\"params\":[2e4,5e4,1e5,2e5,4e5]},\"adaptive\":{\"flops\":"
      "6.4e13,\"compute\":1e14},\"resources\":{\"cpus\":1}}";
  store_adaptive_run runs[2] = {
      {.id = 1, .config_hash = "0", .status = v % 2 ? "running" : "succeeded", .kept = NULL},
      {.id = 2, .config_hash = "1", .status = "succeeded", .kept = "{\"10\": \"/x/branch-10/\"}"}};
  int none = st || v % 3 == 0;
  ((store_sweeps_adaptive_cb)c->cb)(c->ud, st, none ? NULL : spec, NULL, none ? NULL : runs,
                                    none ? 0 : 2, st ? errmsg : NULL);
}

void store_sweeps_adaptive_runs(db *d, int64_t sweep_id, store_sweeps_adaptive_cb cb, void *ud) {
  QUEUE(d, ans_adaptive_runs, cb, ud);
}

void store_sweeps_adaptive_round(db *d, int64_t sweep_id, int rounds, const char *adaptive_json,
                                 const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud) {
  if (rounds < 0 || !adaptive_json || !sw->runs_json)
    abort();
  QUEUE(d, ans_inserted, cb, ud);
}

static void ans_spec(call *c, int st, int v) {
  /* a sweep of 3 runs (too few for a fit), none, or a cancelled one */
  static const char spec[] =
      "{\"name\":\"s\",\"method\":\"runs\",\"base\":{\"model\":{\"n_layer\":1,"
      "\"d_model\":16,\"n_head\":2,\"seq_len\":16},\"train\":{\"tokens\":4096}},"
      "\"runs\":[{}],\"resources\":{\"cpus\":1}}";
  static const char *const status[] = {"running", "succeeded", "cancelled"};
  int none = st || v % 4 == 3;
  ((store_sweeps_spec_cb)c->cb)(c->ud, st, none ? NULL : spec, none ? NULL : status[v % 3],
                                st ? errmsg : NULL);
}

void store_sweeps_spec(db *d, int64_t sweep_id, store_sweeps_spec_cb cb, void *ud) {
  QUEUE(d, ans_spec, cb, ud);
}

static void ans_status(call *c, int st, int v) {
  static const char *const status[] = {NULL, "running", "succeeded", "failed"};
  ((store_sweeps_status_cb)c->cb)(c->ud, st, c->a, st ? NULL : status[v % 4], st ? errmsg : NULL);
}

void store_sweeps_update_status(db *d, int64_t sweep_id, store_sweeps_status_cb cb, void *ud) {
  QUEUE(d, ans_status, cb, ud)->a = sweep_id;
}

static void ans_unfinished(call *c, int st, int v) {
  static const int64_t ids[] = {1, 2};
  ((store_ids_cb)c->cb)(c->ud, st, st ? NULL : ids, st ? 0 : v % 3, st ? errmsg : NULL);
}

void store_sweeps_unfinished(db *d, store_ids_cb cb, void *ud) { QUEUE(d, ans_unfinished, cb, ud); }

/* ---- fits.h ----------------------------------------------------------------------- */

static void ans_points(call *c, int st, int v) {
  store_corpus corpus = {.entropy_rate = NAN, .window_floor = NAN};
  ((store_fits_points_cb)c->cb)(c->ud, st, NULL, 0, st ? NULL : &corpus, st ? errmsg : NULL);
}

void store_fits_points(db *d, int64_t sweep_id, store_fits_points_cb cb, void *ud) {
  QUEUE(d, ans_points, cb, ud);
}

static void ans_ladder(call *c, int st, int v) {
  ((store_fits_ladder_cb)c->cb)(c->ud, st, NULL, 0, st ? errmsg : NULL);
}

void store_fits_ladder(db *d, int64_t sweep_id, store_fits_ladder_cb cb, void *ud) {
  QUEUE(d, ans_ladder, cb, ud);
}

static void ans_bcrit(call *c, int st, int v) {
  ((store_fits_bcrit_cb)c->cb)(c->ud, st, NULL, 0, st ? errmsg : NULL);
}

void store_fits_bcrit(db *d, int64_t sweep_id, store_fits_bcrit_cb cb, void *ud) {
  QUEUE(d, ans_bcrit, cb, ud);
}

void store_fits_insert(db *d, int64_t sweep_id, const char *law, const char *fit_json, int n_points,
                       store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

void store_fits_latest(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  json_doc(d, 0, cb, ud);
}

/* ---- pages.h ---------------------------------------------------------------------- */

const char *store_pages_sort_column(const char *name) {
  static const char *const columns[] = {
      "id",          "status",     "attempt", "params",         "nonembedding_params",
      "tokens",      "batch_size", "flops",   "final_val_loss", "started_at",
      "finished_at", "worker",     NULL};
  for (int i = 0; name && columns[i]; i++)
    if (!strcmp(name, columns[i]))
      return columns[i];
  return NULL;
}

/* A sweep with v % 3 queued runs (the "waiting" line), needing up to v % 2
 * GPUs, and one page of v % 2 runs of every kind of value. */
static store_sweep stub_sweep(int v) {
  return (store_sweep){.id = 1,
                       .name = "a \"name\"\n",
                       .status = "running",
                       .spec_hash = "h",
                       .created_at = "2026-01-01T00:00:00+00:00",
                       .created_utc = "2026-01-01 00:00:00",
                       .spec = v % 5 == 4 ? "{ }" : "{\"method\" : \"runs\"}",
                       .counts = {.total = 3,
                                  .queued = v % 3,
                                  .queued_gpus = v % 2,
                                  .queued_slots = 1,
                                  .queued_trainers = v % 7 == 6 ? "torch" : "builtin",
                                  .flops_planned = 1e19,
                                  .flops_spent = NAN}};
}

static const store_run stub_run = {.id = 2,
                                   .status = "queued",
                                   .worker = STORE_NULL_INT,
                                   .flops = NAN,
                                   .final_val_loss = 3.25,
                                   .error = "\x01<&>",
                                   .config_hash = "c",
                                   .model = "gpt2, SP",
                                   .environment = "{\"host\": \"a\"}"};

static void ans_sweeps(call *c, int st, int v) {
  store_sweep sw[2] = {stub_sweep(v), stub_sweep(v + 1)};
  ((store_sweep_list_cb)c->cb)(c->ud, st, st ? NULL : sw, st ? 0 : v % 3, st ? errmsg : NULL);
}

void store_pages_sweeps(db *d, store_sweep_list_cb cb, void *ud) { QUEUE(d, ans_sweeps, cb, ud); }

static void check_page(const store_runs_page *pg) {
  if (pg->limit < 0 || pg->offset < 0 || !store_pages_sort_column(pg->sort))
    abort(); /* the API checks these before they reach SQL */
}

/* v % 4 == 3: no such sweep */
static void ans_sweep_doc(call *c, int st, int v) {
  store_sweep sw = stub_sweep(v);
  store_runs page = {3, 0, 500, &stub_run, v % 2};
  int none = st || v % 4 == 3;
  ((store_sweep_doc_cb)c->cb)(c->ud, st, none ? NULL : &sw, none ? NULL : &page,
                              st ? errmsg : NULL);
}

void store_pages_sweep_doc(db *d, int64_t sweep_id, const store_runs_page *pg,
                           store_sweep_doc_cb cb, void *ud) {
  check_page(pg);
  QUEUE(d, ans_sweep_doc, cb, ud);
}

static void ans_runs(call *c, int st, int v) {
  store_runs page = {3, 0, 500, &stub_run, v % 2};
  int none = st || v % 4 == 3;
  ((store_runs_cb)c->cb)(c->ud, st, none ? NULL : &page, st ? errmsg : NULL);
}

void store_pages_sweep_runs(db *d, int64_t sweep_id, const store_runs_page *pg, store_runs_cb cb,
                            void *ud) {
  check_page(pg);
  QUEUE(d, ans_runs, cb, ud);
}

static void ans_run(call *c, int st, int v) {
  ss_metric_row m;
  ss_metric_row_clear(&m);
  m.v[SS_MCOL_step] = v;
  store_attempt a = {.attempt = 1, .worker = "w\"", .started_at = NULL, .environment = "{}"};
  store_run_doc doc = {.run = stub_run,
                       .config = "{}",
                       .attempts = &a,
                       .nattempts = v % 2,
                       .metrics = {1, 0, 10, &m, 1},
                       .reproduction = NULL};
  int none = st || v % 4 == 3;
  ((store_run_doc_cb)c->cb)(c->ud, st, none ? NULL : &doc, st ? errmsg : NULL);
}

void store_pages_run(db *d, int64_t run_id, int64_t limit, int64_t offset, store_run_doc_cb cb,
                     void *ud) {
  if (limit < 0 || offset < 0)
    abort(); /* the API checks these before they reach SQL */
  QUEUE(d, ans_run, cb, ud);
}

static void ans_overview(call *c, int st, int v) {
  store_overview_sweep sw = {.id = 1, .name = "<b>", .status = "failed", .total = v % 3};
  store_overview_run r = {.id = 2,
                          .sweep_id = 1,
                          .sweep = "<b>",
                          .nonembedding_params = NAN,
                          .flops = 1e19,
                          .error = "x"};
  store_overview o = {&sw, v % 2, 1, v % 3, 0, 0, &r, v % 2, &r, v % 3 ? 1 : 0};
  ((store_overview_cb)c->cb)(c->ud, st, st ? NULL : &o, st ? errmsg : NULL);
}

void store_pages_overview(db *d, store_overview_cb cb, void *ud) { QUEUE(d, ans_overview, cb, ud); }

static void ans_sweep_page(call *c, int st, int v) {
  store_page_run r = {.id = 2,
                      .status = "succeeded",
                      .final_val_loss = 3.0,
                      .duration_s = NAN,
                      .tokens = 1e9,
                      .designed = "{\"ci95\": [2.5, 3.5], \"loss\": 3}"};
  store_sweep_page p = {stub_sweep(v), &r, v % 2, 3, &r, v % 3 ? 1 : 0,
                        v % 2 ? "{\"attempts\": 3, \"flops_lost\": 1e18}" : NULL};
  int none = st || v % 4 == 3;
  ((store_sweep_page_cb)c->cb)(c->ud, st, none ? NULL : &p, st ? errmsg : NULL);
}

void store_pages_sweep_page(db *d, int64_t sweep_id, const char *status, int64_t offset, int limit,
                            store_sweep_page_cb cb, void *ud) {
  QUEUE(d, ans_sweep_page, cb, ud);
}

static void ans_run_page(call *c, int st, int v) {
  store_attempt a = {
      .attempt = 1, .worker = "<w>", .environment = v % 3 ? "{\"threads\": 2}" : NULL};
  store_run_ref by = {3, "queued"};
  store_run_page p = {.run = stub_run,
                      .sweep = "<s>",
                      .duration_s = NAN,
                      .log_tail = "\x01<&>",
                      .config = v % 7 ? "{\"train\": {\"schedule\": \"constant\"}}" : "[",
                      .attempts = &a,
                      .nattempts = v % 2,
                      .reproduced_by = &by,
                      .nreproduced_by = v % 2};
  int none = st || v % 4 == 3;
  ((store_run_page_cb)c->cb)(c->ud, st, none ? NULL : &p, st ? errmsg : NULL);
}

void store_pages_run_page(db *d, int64_t run_id, store_run_page_cb cb, void *ud) {
  QUEUE(d, ans_run_page, cb, ud);
}

void store_pages_curves(db *d, int64_t sweep_id, const char *run_ids, int64_t points, int64_t limit,
                        int64_t offset, store_json_cb cb, void *ud) {
  json_doc(d, 0, cb, ud);
}

void store_pages_points(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  json_doc(d, 0, cb, ud);
}

static void ans_counts(call *c, int st, int v) {
  store_run_counts rc = {.queued = v, .running = 1, .succeeded = 2, .failed = 3};
  ((store_run_counts_cb)c->cb)(c->ud, st, st ? NULL : &rc, st ? errmsg : NULL);
}

void store_pages_run_counts(db *d, store_run_counts_cb cb, void *ud) {
  QUEUE(d, ans_counts, cb, ud);
}

/* ---- actions.h -------------------------------------------------------------------- */

/* v % 3 == 2: not found; else v & 1: one run touched, v & 2: running */
static void ans_cancel(call *c, int st, int v) {
  store_cancelled run = {.run_id = c->a, .running = (v & 2) != 0};
  int found = !st && v % 3 != 2, n = found && (v & 1);
  ((store_cancel_cb)c->cb)(c->ud, st, found, n ? &run : NULL, n, st ? errmsg : NULL);
}

void store_actions_cancel_sweep(db *d, int64_t sweep_id, store_cancel_cb cb, void *ud) {
  QUEUE(d, ans_cancel, cb, ud)->a = 10 + sweep_id % 8;
}

void store_actions_cancel_run(db *d, int64_t run_id, store_cancel_cb cb, void *ud) {
  QUEUE(d, ans_cancel, cb, ud)->a = run_id;
}

static void ans_reproduce(call *c, int st, int v) {
  const char *orig = v % 3 == 0 ? "succeeded" : v % 3 == 1 ? "running" : NULL;
  const char *json = v % 3 == 0 ? "{\"id\":2,\"reproduces\":1}" : NULL;
  ((store_reproduce_cb)c->cb)(c->ud, st, st ? NULL : orig, st ? NULL : json, v % 5 != 4,
                              st ? errmsg : NULL);
}

void store_actions_reproduce(db *d, int64_t run_id, const char *on, store_reproduce_cb cb,
                             void *ud) {
  QUEUE(d, ans_reproduce, cb, ud);
}

/* ---- predictions.h ---------------------------------------------------------------- */

static void ans_curves(call *c, int st, int v) {
  ((store_curves_cb)c->cb)(c->ud, st, NULL, 0, st ? errmsg : NULL);
}

void store_predictions_curves(db *d, store_curves_cb cb, void *ud) { QUEUE(d, ans_curves, cb, ud); }

void store_predictions_set(db *d, int64_t run_id, const char *json, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

/* ---- the scheduler's connections -------------------------------------------------- */

static void on_stub_closed(void *ud) { (void)ud; }

sched *store_stub_sched_new(uv_loop_t *loop, const uint8_t *script, size_t nscript,
                            const char *token, int open_reads) {
  store_stub_script(script, nscript);
  sched *s = calloc(1, sizeof *s);
  if (!s || uv_loop_init(loop) != 0)
    abort();
  s->loop = loop;
  s->o.lease_s = 30;
  s->o.heartbeat_s = 5;
  s->o.open_reads = open_reads;
  s->o.checkpoint_root = "/nonexistent/checkpoints";
  snprintf(s->token, sizeof s->token, "%s", token);
  snprintf(s->api_token, sizeof s->api_token, "%s", token);
  s->db = db_open(loop, "stub");
  s->db_submit = db_open(loop, "stub");
  s->reads = db_pool_open(loop, "stub", 2, NULL);
  s->wp.db = s->db;
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    s->wp.db_metrics[i] = db_open(loop, "stub");
  s->wp.loop = loop;
  s->wp.token = s->token;
  s->wp.auth_block_s = 60;
  s->wp.ev = &s->ev;
  s->wp.n = &s->n;
  return s;
}

void store_stub_sched_close(struct sched *s) {
  db_close(s->db, on_stub_closed, NULL);
  db_close(s->db_submit, on_stub_closed, NULL);
  db_pool_close(s->reads, on_stub_closed, NULL);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    db_close(s->wp.db_metrics[i], on_stub_closed, NULL);
}

/* ---- users.h ---------------------------------------------------------------- */

/* the admin, and a member whose token is STORE_STUB_MEMBER_TOKEN */
int store_users_load(const char *url, void (*on_user)(void *ud, const store_user *u),
                     void (*on_token)(void *ud, const store_user_token *t), void *ud, char *err,
                     size_t errlen) {
  on_user(ud, &(store_user){1, "admin", "admin", -1000000, 1000000, 0});
  on_user(ud, &(store_user){2, "ann", "member", -10, 0, 0});
  on_token(ud, &(store_user_token){STORE_STUB_MEMBER_HASH, 2});
  return 0;
}

/* v % 5 == 4: no such user; else the member, revoked when v % 7 == 6 */
static void ans_user(call *c, int st, int v) {
  store_user u = {2, "ann", v % 3 ? "member" : "viewer", -10, 0, v % 7 == 6};
  ((store_users_cb)c->cb)(c->ud, st, st || v % 5 == 4 ? NULL : &u, st ? errmsg : NULL);
}

void store_users_add(db *d, const char *name, const char *role, const char *hash_hex,
                     store_users_cb cb, void *ud) {
  QUEUE(d, ans_user, cb, ud);
}

void store_users_revoke(db *d, const char *name, store_users_cb cb, void *ud) {
  QUEUE(d, ans_user, cb, ud);
}

void store_users_new_token(db *d, const char *name, const char *hash_hex, store_users_cb cb,
                           void *ud) {
  QUEUE(d, ans_user, cb, ud);
}

void store_users_set_priority(db *d, const char *name, int min, int max, store_users_cb cb,
                              void *ud) {
  QUEUE(d, ans_user, cb, ud);
}

void store_users_list(db *d, store_json_cb cb, void *ud) { json_doc(d, 1, cb, ud); }

/* the owner: none (v % 3 == 0), the admin or the member */
static void ans_owner(call *c, int st, int v) {
  ((store_users_owner_cb)c->cb)(c->ud, st, st ? 0 : v % 3, st ? errmsg : NULL);
}

void store_users_owner_of(db *d, int run, int64_t id, store_users_owner_cb cb, void *ud) {
  QUEUE(d, ans_owner, cb, ud);
}

void store_actions_set_priority(db *d, int64_t sweep_id, int priority, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

/* ---- audit.h ------------------------------------------------------------------ */

void store_audit_add(db *d, const store_audit_row *row, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

void store_audit_list(db *d, const char *since, const char *user, int limit, store_json_cb cb,
                      void *ud) {
  json_doc(d, 1, cb, ud);
}

/* ---- usage.h ------------------------------------------------------------------------ */

void store_usage_start(db *d, int half_life_s, store_done_cb cb, void *ud) {
  done(d, 1, cb, ud);
}

void store_usage_json(db *d, const char *since, const char *by, int64_t only, store_json_cb cb,
                      void *ud) {
  json_doc(d, 0, cb, ud);
}

void store_usage_sweep(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  json_doc(d, 0, cb, ud);
}

void store_usage_set_limits(db *d, const char *name, const store_limits *l, store_done_cb cb,
                            void *ud) {
  done(d, 1, cb, ud);
}

void store_usage_check_submit(db *d, int64_t owner, int64_t sweep_id, const char *runs_json,
                              store_json_cb cb, void *ud) {
  json_doc(d, 0, cb, ud);
}

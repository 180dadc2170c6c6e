/* A sweep's adaptive design, its next round decided when its runs have
 * ended (sweeps/adaptive.h; docs/sweeps.md, "An adaptive design").
 *
 * As an lr tune (lr_tune.c): every sweep touched by a run's start or end,
 * and at start-up every unfinished one, is checked, one at a time. One read
 * returns the sweep's isoflop runs only while its design is running; once
 * none is queued or running, its points are read, and a job on libuv's
 * thread pool plans the spec again, fits and decides (adaptive_conclude).
 * One statement on the control connection stores the round and adds its
 * runs (store_sweeps_adaptive_round), only while the sweep holds as many
 * rounds as the job saw: a scheduler that stops before it commits leaves
 * neither, and the next one decides the same round again (the same
 * points, spec and seed: the same runs); one that stops after finds the
 * round stored and adds nothing. A round whose runs all failed is followed
 * by another (the failed candidates are not chosen again), until the
 * design stops. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "scheduler/internal.h"
#include "scheduler/fit_points.h"
#include "store/fits.h"
#include "store/sweeps.h"
#include "sweeps/adaptive.h"

typedef struct adapt_job {
  sched__sweepq_job c; /* first: the check's head */
  /* in */
  char *doc;
  adaptive_run_obs *runs;
  char *hashes; /* the runs' config hashes, 65 bytes each */
  char **kept;  /* their runs.kept (each owned, may be NULL) */
  size_t nruns;
  fit_point *pts;
  int npts;
  /* out */
  adaptive_outcome out;
} adapt_job;

static void release(sched__sweepq_job *c) {
  adapt_job *j = (adapt_job *)c;
  free(j->doc);
  free(j->runs);
  free(j->hashes);
  for (size_t i = 0; j->kept && i < j->nruns; i++)
    free(j->kept[i]);
  free(j->kept);
  free(j->pts);
  adaptive_outcome_free(&j->out);
}

static const char *stop_words(adaptive_status st) {
  return st == ADAPT_REACHED ? "precision reached"
         : st == ADAPT_SPENT ? "compute spent"
                             : "candidates exhausted";
}

static void on_stored(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  adapt_job *j = ud;
  if (sched__sweepq_job_failed(&j->c, status, "storing its adaptive round", errmsg))
    return;
  if (sweep_id == 0) /* cancelled meanwhile, or the round is stored already */
    return sched__sweepq_done(&j->c);
  const adaptive_outcome *o = &j->out;
  int round = o->rounds ? o->rounds : 1;
  if (o->failed)
    sched__logf("sweep %" PRId64 ": adaptive design failed: %s", sweep_id, o->reason);
  else if (o->r.status == ADAPT_ROUND)
    sched__logf("sweep %" PRId64 ": adaptive round %d: %" PRId64 " run(s), %.3g FLOPs; %s",
                sweep_id, round, added, o->r.cost, o->r.reason);
  else
    sched__logf("sweep %" PRId64 ": adaptive design stopped (%s): %s", sweep_id,
                stop_words(o->r.status), o->r.reason);
  json_t *ev = json_pack("{s:I,s:s,s:i,s:I}", "id", (json_int_t)sweep_id, "change", "adaptive",
                         "round", round, "added", (json_int_t)added);
  sched__sweepq_stored(&j->c, sweep_id, ev, added);
}

static void work(uv_work_t *w) {
  adapt_job *j = w->data;
  j->c.rc = adaptive_conclude(j->c.spec, j->doc, j->runs, j->nruns, j->pts, j->npts, 0, &j->out);
}

static void after_work(uv_work_t *w, int status) {
  adapt_job *j = w->data;
  if (sched__sweepq_job_ended(&j->c, status, "adaptive round cannot be designed", j->out.reason))
    return;
  if (!j->out.doc_json) /* a run is active again */
    return sched__sweepq_done(&j->c);
  store_sweep_new sw =
      sched__sweepq_new_runs(j->out.priority, j->out.gpus, j->out.max_attempts, j->out.runs_json);
  store_sweeps_adaptive_round(j->c.s->db, j->c.sweep_id, j->out.rounds, j->out.doc_json, &sw,
                              on_stored, j);
}

static void on_points(void *ud, int status, const store_fit_point *pts, int n,
                      const store_corpus *corpus, const char *errmsg) {
  adapt_job *j = ud;
  (void)corpus;
  if (sched__sweepq_job_failed(&j->c, status, "reading its points", errmsg))
    return;
  if (j->c.s->stopping)
    return sched__sweepq_done(&j->c);
  j->pts = calloc(n > 0 ? (size_t)n : 1, sizeof *j->pts);
  if (!j->pts) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its points\n", j->c.sweep_id);
    return sched__sweepq_done(&j->c);
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (pts[i].isoflop) /* the candidates' points (a batch ladder's are not) */
      j->pts[k++] = sched__fit_point(&pts[i], -1);
  j->npts = k;
  sched__sweepq_job_queue(&j->c, work, after_work, "adaptive round");
}

static adaptive_cand_state run_state(const char *status) {
  if (!strcmp(status, "succeeded"))
    return ADAPT_DONE;
  if (!strcmp(status, "failed") || !strcmp(status, "cancelled"))
    return ADAPT_FAILED;
  return ADAPT_ACTIVE;
}

static void on_runs(void *ud, int status, const char *spec_json, const char *adaptive_json,
                    const store_adaptive_run *runs, int n, const char *errmsg) {
  adapt_job *j = ud;
  if (sched__sweepq_job_failed(&j->c, status, "reading its adaptive design", errmsg))
    return;
  if (j->c.s->stopping || !spec_json || n == 0)
    return sched__sweepq_done(&j->c); /* no design running */
  for (int i = 0; i < n; i++)
    if (run_state(runs[i].status) == ADAPT_ACTIVE)
      return sched__sweepq_done(&j->c); /* the round is still training */
  j->c.spec = strdup(spec_json);
  j->doc = adaptive_json ? strdup(adaptive_json) : NULL;
  j->runs = calloc((size_t)n, sizeof *j->runs);
  j->hashes = calloc((size_t)n, 65);
  j->kept = calloc((size_t)n, sizeof *j->kept);
  j->nruns = (size_t)n;
  if (!j->c.spec || (adaptive_json && !j->doc) || !j->runs || !j->hashes || !j->kept) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its adaptive design\n",
            j->c.sweep_id);
    return sched__sweepq_done(&j->c);
  }
  for (int i = 0; i < n; i++) {
    snprintf(j->hashes + (size_t)i * 65, 65, "%s", runs[i].config_hash);
    j->kept[i] = runs[i].kept ? strdup(runs[i].kept) : NULL;
    j->runs[i] = (adaptive_run_obs){.id = runs[i].id,
                                    .config_hash = j->hashes + (size_t)i * 65,
                                    .state = run_state(runs[i].status),
                                    .kept = j->kept[i]};
  }
  store_fits_points(db_pool_get(j->c.s->reads, 0), j->c.sweep_id, on_points, j);
}

void sched__adaptive_due(sched *s) {
  adapt_job *j = sched__sweepq_job_new(s, &s->adapt, sizeof *j, release, sched__adaptive_due);
  if (j)
    store_sweeps_adaptive_runs(db_pool_get(s->reads, 0), j->c.sweep_id, on_runs, j);
}

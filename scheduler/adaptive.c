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
  uv_work_t work;
  sched *s;
  int64_t sweep_id;
  /* in */
  char *spec, *doc;
  adaptive_run_obs *runs;
  char *hashes; /* the runs' config hashes, 65 bytes each */
  char **kept;  /* their runs.kept (each owned, may be NULL) */
  size_t nruns;
  fit_point *pts;
  int npts;
  /* out */
  int rc;
  adaptive_outcome out;
} adapt_job;

void sched__adaptive_free(sched__adaptive *a) { sched__sweepq_free(a); }

static void job_free(adapt_job *j) {
  free(j->spec);
  free(j->doc);
  free(j->runs);
  free(j->hashes);
  for (size_t i = 0; j->kept && i < j->nruns; i++)
    free(j->kept[i]);
  free(j->kept);
  free(j->pts);
  adaptive_outcome_free(&j->out);
  free(j);
}

static void done(sched *s, adapt_job *j) {
  if (j)
    job_free(j);
  s->adapt.busy = 0;
  sched__adaptive_due(s);
}

void sched__adaptive_touch(sched *s, int64_t sweep_id) {
  s->adapt.what = "adaptive design";
  sched__sweepq_add(&s->adapt, sweep_id);
}

static const char *stop_words(adaptive_status st) {
  return st == ADAPT_REACHED ? "precision reached"
         : st == ADAPT_SPENT ? "compute spent"
                             : "candidates exhausted";
}

static void on_stored(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  adapt_job *j = ud;
  sched *s = j->s;
  if (status != 0) {
    sched__sweepq_failed(&s->adapt, j->sweep_id, status, "storing its adaptive round", errmsg);
    return done(s, j);
  }
  if (sweep_id == 0) /* cancelled meanwhile, or the round is stored already */
    return done(s, j);
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
  sched__sweepq_stored(s, sweep_id, ev, added);
  done(s, j);
}

static void work(uv_work_t *w) {
  adapt_job *j = w->data;
  j->rc = adaptive_conclude(j->spec, j->doc, j->runs, j->nruns, j->pts, j->npts, 0, &j->out);
}

static void after_work(uv_work_t *w, int status) {
  adapt_job *j = w->data;
  sched *s = j->s;
  if (status != 0 || s->stopping)
    return done(s, j);
  if (j->rc) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": its adaptive round cannot be designed: %s\n",
            j->sweep_id, j->rc == SS_ENOMEM ? "out of memory" : j->out.reason);
    return done(s, j);
  }
  if (!j->out.doc_json) /* a run is active again */
    return done(s, j);
  store_sweep_new sw =
      sched__sweepq_new_runs(j->out.priority, j->out.gpus, j->out.max_attempts, j->out.runs_json);
  store_sweeps_adaptive_round(s->db, j->sweep_id, j->out.rounds, j->out.doc_json, &sw, on_stored,
                              j);
}

static void on_points(void *ud, int status, const store_fit_point *pts, int n,
                      const store_corpus *corpus, const char *errmsg) {
  adapt_job *j = ud;
  sched *s = j->s;
  (void)corpus;
  if (status != 0) {
    sched__sweepq_failed(&s->adapt, j->sweep_id, status, "reading its points", errmsg);
    return done(s, j);
  }
  if (s->stopping)
    return done(s, j);
  j->pts = calloc(n > 0 ? (size_t)n : 1, sizeof *j->pts);
  if (!j->pts) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its points\n", j->sweep_id);
    return done(s, j);
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (pts[i].isoflop) /* the candidates' points (a batch ladder's are not) */
      j->pts[k++] = sched__fit_point(&pts[i], -1);
  j->npts = k;
  j->work.data = j;
  if (sched__sweepq_queue(s, &j->work, work, after_work, j->sweep_id, "adaptive round"))
    done(s, j);
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
  sched *s = j->s;
  if (status != 0) {
    sched__sweepq_failed(&s->adapt, j->sweep_id, status, "reading its adaptive design", errmsg);
    return done(s, j);
  }
  if (s->stopping || !spec_json || n == 0)
    return done(s, j); /* no design running */
  for (int i = 0; i < n; i++)
    if (run_state(runs[i].status) == ADAPT_ACTIVE)
      return done(s, j); /* the round is still training */
  j->spec = strdup(spec_json);
  j->doc = adaptive_json ? strdup(adaptive_json) : NULL;
  j->runs = calloc((size_t)n, sizeof *j->runs);
  j->hashes = calloc((size_t)n, 65);
  j->kept = calloc((size_t)n, sizeof *j->kept);
  j->nruns = (size_t)n;
  if (!j->spec || (adaptive_json && !j->doc) || !j->runs || !j->hashes || !j->kept) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its adaptive design\n",
            j->sweep_id);
    return done(s, j);
  }
  for (int i = 0; i < n; i++) {
    snprintf(j->hashes + (size_t)i * 65, 65, "%s", runs[i].config_hash);
    j->kept[i] = runs[i].kept ? strdup(runs[i].kept) : NULL;
    j->runs[i] = (adaptive_run_obs){.id = runs[i].id,
                                    .config_hash = j->hashes + (size_t)i * 65,
                                    .state = run_state(runs[i].status),
                                    .kept = j->kept[i]};
  }
  store_fits_points(db_pool_get(s->reads, 0), j->sweep_id, on_points, j);
}

void sched__adaptive_due(sched *s) {
  int64_t sweep_id = s->stopping ? 0 : sched__sweepq_take(&s->adapt);
  if (!sweep_id)
    return;
  adapt_job *j = calloc(1, sizeof *j);
  if (!j)
    return sched__sweepq_put_back(&s->adapt, sweep_id);
  j->s = s;
  j->sweep_id = sweep_id;
  store_sweeps_adaptive_runs(db_pool_get(s->reads, 0), sweep_id, on_runs, j);
}

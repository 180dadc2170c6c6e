/* A sweep's lr tune, decided when its runs have ended (sweeps/lr_tune.h;
 * docs/sweeps.md, "Tuning the learning rate on a muP proxy").
 *
 * Every sweep touched by a run's start or end (sched__sweep_flush), and at
 * start-up every unfinished one (a sweep whose tune runs have all ended
 * but whose tune has not decided stays "running": store/sweeps.h), is
 * checked: one read on a read connection returns the sweep's tune runs
 * only while its tune waits for a decision (no rows for any other sweep).
 * Once none of them is queued or running, a job on libuv's thread pool
 * decides and plans the study at the chosen rate (lr_tune_conclude), and
 * one statement on the control connection, where cancels also go, stores
 * the decision and adds the study's runs (store_sweeps_lr_tuned): a
 * scheduler that stops before that statement commits leaves neither, and
 * the next one decides again, to the same rate (the same runs, the same
 * planner); one that stops after it finds the decision made and adds
 * nothing. Checks run one at a time: decisions are rare, and a study of
 * 10,000 runs takes its job a second or two to plan. */
#include "scheduler/lr_tune.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "scheduler/internal.h"
#include "store/sweeps.h"
#include "sweeps/lr_tune.h"

typedef struct tune_job {
  uv_work_t work;
  sched *s;
  int64_t sweep_id;
  /* in */
  char *spec;
  lr_tune_obs *obs;
  size_t nobs;
  json_t *proxy;
  /* out */
  int rc;
  lr_tune_outcome out;
} tune_job;

void sched__tunes_free(sched__tunes *t) { sched__sweepq_free(t); }

static void job_free(tune_job *j) {
  free(j->spec);
  free(j->obs);
  json_decref(j->proxy);
  lr_tune_outcome_free(&j->out);
  free(j);
}

/* The check is over (whatever came of it): the next one, if any. */
static void done(sched *s, tune_job *j) {
  if (j)
    job_free(j);
  s->tunes.busy = 0;
  sched__lr_tune_due(s);
}

void sched__lr_tune_touch(sched *s, int64_t sweep_id) {
  s->tunes.what = "lr tune check";
  sched__sweepq_add(&s->tunes, sweep_id);
}

static void on_tuned(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  tune_job *j = ud;
  sched *s = j->s;
  if (status != 0) {
    sched__sweepq_failed(&s->tunes, j->sweep_id, status, "storing its lr tune's decision", errmsg);
    return done(s, j);
  }
  if (sweep_id == 0) /* cancelled meanwhile, or decided already */
    return done(s, j);
  const lr_tune_outcome *o = &j->out;
  if (o->d.state == LR_TUNE_DECIDED && !o->failed) {
    sched__logf("sweep %" PRId64 ": lr tune chose %.6g (%d of %zu rates finished%s); %" PRId64
                " study run(s) added",
                sweep_id, o->d.lr, o->d.with_loss, o->d.nrates,
                o->d.edge ? ", at the grid's edge: widen it" : "", added);
  } else {
    sched__logf("sweep %" PRId64 ": lr tune %s: %s", sweep_id,
                o->failed ? "decided, but the study could not be planned" : "could not decide",
                o->failed ? o->reason : o->d.reason);
  }
  json_t *ev = json_pack("{s:I,s:s,s:I}", "id", (json_int_t)sweep_id, "change", "lr_tuned", "added",
                         (json_int_t)added);
  if (ev && o->d.state == LR_TUNE_DECIDED)
    json_object_set_new(ev, "lr", json_real(o->d.lr));
  sched__sweepq_stored(s, sweep_id, ev, added);
  done(s, j);
}

static void work(uv_work_t *w) {
  tune_job *j = w->data;
  j->rc = lr_tune_conclude(j->spec, j->obs, j->nobs, j->proxy, &j->out);
}

static void after_work(uv_work_t *w, int status) {
  tune_job *j = w->data;
  sched *s = j->s;
  if (status != 0 || s->stopping)
    return done(s, j);
  if (j->rc) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": its lr tune cannot be decided: %s\n",
            j->sweep_id, j->rc == SS_ENOMEM ? "out of memory" : j->out.reason);
    return done(s, j);
  }
  if (j->out.d.state == LR_TUNE_WAITING)
    return done(s, j);
  store_sweep_new sw =
      sched__sweepq_new_runs(j->out.priority, j->out.gpus, j->out.max_attempts, j->out.runs_json);
  store_sweeps_lr_tuned(s->db, j->sweep_id, j->out.decision_json, &sw, on_tuned, j);
}

static lr_tune_run_state run_state(const char *status) {
  if (!strcmp(status, "succeeded"))
    return LR_TUNE_SUCCEEDED;
  if (!strcmp(status, "failed"))
    return LR_TUNE_FAILED;
  if (!strcmp(status, "cancelled"))
    return LR_TUNE_CANCELLED;
  return LR_TUNE_ACTIVE;
}

static void on_runs(void *ud, int status, const char *spec_json, const store_lr_tune_run *runs,
                    int n, const char *errmsg) {
  tune_job *j = ud;
  sched *s = j->s;
  if (status != 0) {
    sched__sweepq_failed(&s->tunes, j->sweep_id, status, "reading its lr tune", errmsg);
    return done(s, j);
  }
  if (s->stopping || !spec_json || n == 0)
    return done(s, j); /* no tune waiting for a decision */
  for (int i = 0; i < n; i++)
    if (run_state(runs[i].status) == LR_TUNE_ACTIVE)
      return done(s, j); /* still tuning */
  j->spec = strdup(spec_json);
  j->obs = calloc(n > 0 ? (size_t)n : 1, sizeof *j->obs);
  if (!j->spec || !j->obs) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its lr tune\n", j->sweep_id);
    return done(s, j);
  }
  for (int i = 0; i < n; i++)
    j->obs[i] = (lr_tune_obs){runs[i].lr, run_state(runs[i].status), runs[i].loss};
  j->nobs = (size_t)n;
  const store_lr_tune_run *r = &runs[0];
  j->proxy =
      json_pack("{s:i,s:i,s:i,s:I,s:I,s:i}", "n_layer", r->n_layer, "d_model", r->d_model, "n_head",
                r->n_head, "nonembedding_params", (json_int_t)r->nonembedding_params, "tokens",
                (json_int_t)r->tokens, "batch_size", r->batch_size);
  j->work.data = j;
  if (sched__sweepq_queue(s, &j->work, work, after_work, j->sweep_id, "lr tune"))
    done(s, j);
}

void sched__lr_tune_due(sched *s) {
  int64_t sweep_id = s->stopping ? 0 : sched__sweepq_take(&s->tunes);
  if (!sweep_id)
    return;
  tune_job *j = calloc(1, sizeof *j);
  if (!j)
    return sched__sweepq_put_back(&s->tunes, sweep_id);
  j->s = s;
  j->sweep_id = sweep_id;
  store_sweeps_lr_tune_runs(db_pool_get(s->reads, 0), sweep_id, on_runs, j);
}

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
  sched__sweepq_job c; /* first: the check's head */
  /* in */
  lr_tune_obs *obs;
  size_t nobs;
  store_lr_tune_run proxy; /* the first tune run: the proxy's shape (its status not kept) */
  /* out */
  lr_tune_outcome out;
} tune_job;

static void release(sched__sweepq_job *c) {
  tune_job *j = (tune_job *)c;
  free(j->obs);
  lr_tune_outcome_free(&j->out);
}

static void on_tuned(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  tune_job *j = ud;
  if (sched__sweepq_job_failed(&j->c, status, "storing its lr tune's decision", errmsg))
    return;
  if (sweep_id == 0) /* cancelled meanwhile, or decided already */
    return sched__sweepq_done(&j->c);
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
  sched__sweepq_stored(&j->c, sweep_id, ev, added);
}

static void work(uv_work_t *w) {
  tune_job *j = w->data;
  const store_lr_tune_run *r = &j->proxy;
  json_t *proxy =
      json_pack("{s:i,s:i,s:i,s:I,s:I,s:i}", "n_layer", r->n_layer, "d_model", r->d_model, "n_head",
                r->n_head, "nonembedding_params", (json_int_t)r->nonembedding_params, "tokens",
                (json_int_t)r->tokens, "batch_size", r->batch_size);
  j->c.rc = lr_tune_conclude(j->c.spec, j->obs, j->nobs, proxy, &j->out);
  json_decref(proxy);
}

static void after_work(uv_work_t *w, int status) {
  tune_job *j = w->data;
  if (sched__sweepq_job_ended(&j->c, status, "lr tune cannot be decided", j->out.reason))
    return;
  if (j->out.d.state == LR_TUNE_WAITING)
    return sched__sweepq_done(&j->c);
  store_sweep_new sw =
      sched__sweepq_new_runs(j->out.priority, j->out.gpus, j->out.max_attempts, j->out.runs_json);
  store_sweeps_lr_tuned(j->c.s->db, j->c.sweep_id, j->out.decision_json, &sw, on_tuned, j);
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
  if (sched__sweepq_job_failed(&j->c, status, "reading its lr tune", errmsg))
    return;
  if (j->c.s->stopping || !spec_json || n == 0)
    return sched__sweepq_done(&j->c); /* no tune waiting for a decision */
  for (int i = 0; i < n; i++)
    if (run_state(runs[i].status) == LR_TUNE_ACTIVE)
      return sched__sweepq_done(&j->c); /* still tuning */
  j->c.spec = strdup(spec_json);
  j->obs = calloc(n > 0 ? (size_t)n : 1, sizeof *j->obs);
  if (!j->c.spec || !j->obs) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its lr tune\n", j->c.sweep_id);
    return sched__sweepq_done(&j->c);
  }
  for (int i = 0; i < n; i++)
    j->obs[i] = (lr_tune_obs){runs[i].lr, run_state(runs[i].status), runs[i].loss};
  j->nobs = (size_t)n;
  j->proxy = runs[0];
  j->proxy.status = NULL; /* valid during this callback only */
  sched__sweepq_job_queue(&j->c, work, after_work, "lr tune");
}

void sched__lr_tune_due(sched *s) {
  tune_job *j = sched__sweepq_job_new(s, &s->tunes, sizeof *j, release, sched__lr_tune_due);
  if (j)
    store_sweeps_lr_tune_runs(db_pool_get(s->reads, 0), j->c.sweep_id, on_runs, j);
}

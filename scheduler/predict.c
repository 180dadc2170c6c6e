/* Predicting running runs' final losses (issue "Sweeps and the science",
 * learning-curve extrapolation): every --predict-seconds the scheduler reads
 * the evaluations of every running run (batch-ladder runs aside: they are
 * measured by the steps they take, not by their loss, and wsd runs aside:
 * their loss drops in the decay, which no power law in steps foresees), fits Kaplan's
 * L(S) = L_inf + (S_c / S)^alpha_S to those after warmup (fit_curve, on
 * libuv's thread pool), predicts the loss at the run's last step with a 95%
 * interval, and compares it with the sweep's fitted Chinchilla surface at
 * the run's N and D (fit_curve_flag). The result goes to runs.prediction and
 * the event stream; a run flagged far off the surface is logged, so a bad
 * run can be looked at before it spends its budget.
 *
 * The surface's standard deviation is that of the runs around it: the RMS
 * of the stored fit's log-loss residuals, times the surface's loss. One pass
 * at a time; a pass that finds nothing to do costs one query. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/fit_points.h"
#include "scheduler/predict.h"
#include "store/predictions.h"
#include "sweeps/fit.h"

#define PREDICT_BOOTSTRAP 200
#define PREDICT_MIN_EVALS 5 /* fit_curve's 3 parameters plus 2 */

typedef struct pred_run {
  int64_t id;
  double n, d, steps, warmup_steps;
  fit_point *pts;
  int npts;
  double chin[5]; /* E, A, B, alpha, beta (NAN: no surface yet) */
  double resid_rms;
  char *json; /* the result for runs.prediction (NULL: too few evaluations) */
  int flagged;
} pred_run;

typedef struct pred_pass {
  uv_work_t work;
  sched__predictor *pr;
  pred_run *runs;
  int n;
} pred_pass;

static void pass_free(pred_pass *p) {
  for (int i = 0; i < p->n; i++) {
    free(p->runs[i].pts);
    free(p->runs[i].json);
  }
  free(p->runs);
  free(p);
}

static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void predict_one(pred_run *r) {
  if (r->npts < PREDICT_MIN_EVALS)
    return;
  fit_options o = {.bootstrap = PREDICT_BOOTSTRAP,
                   .seed = (uint64_t)r->id,
                   .threads = 1,
                   .target_steps = r->steps};
  fit_result res;
  char err[256];
  if (fit_curve(r->pts, r->npts, &o, &res, err, sizeof err) != 0)
    return;
  const fit_param *at = fit_result_get(&res, "loss_at_target");
  double pred = at ? at->value : NAN, lo = at ? at->ci_lo : NAN, hi = at ? at->ci_hi : NAN;
  double surface = NAN, sd = NAN, z = NAN;
  if (isfinite(r->chin[0])) {
    surface = r->chin[0] + r->chin[1] / pow(r->n, r->chin[3]) + r->chin[2] / pow(r->d, r->chin[4]);
    sd = surface * r->resid_rms;
    r->flagged = fit_curve_flag(pred, lo, hi, surface, sd, &z);
  }
  json_t *w = json_array();
  for (int i = 0; i < res.nwarnings; i++)
    json_array_append_new(w, json_string(res.warnings[i]));
  json_t *j = json_pack("{s:I,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b,s:b,s:o}", "at_step",
                        (json_int_t)r->pts[r->npts - 1].steps, "evals", r->npts, "target_steps",
                        json_real(r->steps), "predicted", num_or_null(pred), "lo", num_or_null(lo),
                        "hi", num_or_null(hi), "surface", num_or_null(surface), "surface_sd",
                        num_or_null(sd), "z", num_or_null(z), "flagged", r->flagged, "converged",
                        res.converged, "warnings", w);
  r->json = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  fit_result_free(&res);
}

static void work(uv_work_t *w) {
  pred_pass *p = w->data;
  for (int i = 0; i < p->n; i++)
    predict_one(&p->runs[i]);
}

static void on_stored(void *ud, int status, int64_t rows, const char *errmsg) {
  (void)ud;
  (void)rows;
  if (status != 0)
    fprintf(stderr, "scheduler: storing a run's prediction failed: %s\n", errmsg);
}

static void after_work(uv_work_t *w, int status) {
  pred_pass *p = w->data;
  sched__predictor *pr = p->pr;
  for (int i = 0; i < p->n && status == 0 && !pr->stopping; i++) {
    pred_run *r = &p->runs[i];
    if (!r->json)
      continue;
    store_predictions_set(pr->db, r->id, r->json, on_stored, NULL);
    json_t *j = json_loads(r->json, 0, NULL);
    if (r->flagged)
      fprintf(stderr,
              "scheduler: run %" PRId64 " is predicted to end at loss %.4g, far off the "
              "sweep's fitted surface (%.4g; z = %.1f): look at it before it spends its "
              "budget\n",
              r->id, json_number_value(json_object_get(j, "predicted")),
              json_number_value(json_object_get(j, "surface")),
              json_number_value(json_object_get(j, "z")));
    sched__events_emit(
        pr->ev, "prediction",
        json_pack("{s:I,s:o}", "run_id", (json_int_t)r->id, "prediction", j ? j : json_null()));
  }
  pass_free(p);
  pr->busy = 0;
}

static void on_runs(void *ud, int status, const store_curve *runs, int n, const char *errmsg) {
  sched__predictor *pr = ud;
  if (status != 0 || pr->stopping || n == 0) {
    if (status != 0)
      fprintf(stderr, "scheduler: reading running runs' curves failed: %s\n", errmsg);
    pr->busy = 0;
    return;
  }
  pred_pass *p = calloc(1, sizeof *p);
  p->pr = pr;
  p->n = n;
  p->runs = calloc((size_t)p->n, sizeof *p->runs);
  if (!p->runs) {
    free(p);
    pr->busy = 0;
    return;
  }
  for (int k = 0; k < p->n; k++) {
    pred_run *r = &p->runs[k];
    r->id = runs[k].id;
    r->n = runs[k].n;
    r->d = runs[k].d;
    r->steps = runs[k].steps;
    r->warmup_steps = runs[k].warmup_steps;
    json_t *ev = json_loads(runs[k].evals, 0, NULL);
    r->pts = calloc(json_array_size(ev) + 1, sizeof *r->pts);
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
      double st = json_number_value(json_array_get(e, 0));
      double l = json_number_value(json_array_get(e, 1));
      if (!r->pts || !(st > r->warmup_steps) || !(l > 0))
        continue; /* the warmup bends the curve the law does not model */
      r->pts[r->npts++] = sched__steps_point(st, NAN, l, NAN, -1);
    }
    json_decref(ev);
    for (int q = 0; q < 5; q++)
      r->chin[q] = NAN;
    json_t *fit = runs[k].fit ? json_loads(runs[k].fit, 0, NULL) : NULL;
    json_t *pr = json_object_get(fit, "params");
    static const char *const names[5] = {"E", "A", "B", "alpha", "beta"};
    int ok = json_is_object(pr);
    for (int q = 0; q < 5 && ok; q++) {
      r->chin[q] = json_number_value(json_object_get(pr, names[q]));
      ok = r->chin[q] > 0 || (q == 0 && r->chin[q] >= 0);
    }
    double ss = 0;
    size_t m = json_array_size(json_object_get(fit, "residuals"));
    json_array_foreach(json_object_get(fit, "residuals"), i, e) {
      ss += pow(json_number_value(e), 2);
    }
    r->resid_rms = m ? sqrt(ss / (double)m) : NAN;
    if (!ok || !(r->n > 0) || !(r->d > 0) || !isfinite(r->resid_rms))
      r->chin[0] = NAN; /* no usable surface: predict, do not judge */
    json_decref(fit);
  }
  p->work.data = p;
  uv_queue_work(pr->loop, &p->work, work, after_work);
}

void sched__predict(sched__predictor *pr) {
  if (pr->busy || pr->stopping || !db_ready(pr->db) || !db_pool_ready(pr->reads))
    return;
  pr->busy = 1;
  store_predictions_curves(db_pool_get(pr->reads, 1), on_runs, pr);
}

/* Tuning the learning rate on a muP proxy (lr_tune.h). */
#include "sweeps/lr_tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/internal.h"
#include "sweeps/spec_json.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double lr_tune_placeholder(const spec_values *lr) {
  if (!lr->n)
    return NAN;
  double *v = malloc(lr->n * sizeof *v);
  if (!v)
    return NAN; /* plan_spec says out of memory */
  memcpy(v, lr->v, lr->n * sizeof *v);
  qsort(v, lr->n, sizeof *v, cmp_double);
  double mid = v[(lr->n - 1) / 2];
  free(v);
  return mid;
}

json_t *lr_tune_study_root(const json_t *root, double lr, int drop_max_hours) {
  json_t *r = json_deep_copy(root);
  if (!r)
    return NULL;
  sweeps__integral(r);
  json_object_del(r, "lr_tune");
  if (drop_max_hours)
    json_object_del(r, "max_hours");
  json_t *base = json_object_get(r, "base");
  if (!json_is_object(base)) {
    base = json_object();
    json_object_set_new(r, "base", base);
  }
  json_t *train = json_object_get(base, "train");
  if (!json_is_object(train)) {
    train = json_object();
    json_object_set_new(base, "train", train);
  }
  if (json_object_set_new(train, "lr", json_real(lr)) != 0) {
    json_decref(r);
    return NULL;
  }
  return r;
}

int lr_tune_plan_study(const json_t *root, double lr, int drop_max_hours, spec **sp, plan **out,
                       spec_problems *pr) {
  *sp = NULL;
  *out = NULL;
  json_t *r = lr_tune_study_root(root, lr, drop_max_hours);
  char *text = r ? json_dumps(r, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(r);
  if (!text) {
    spec_problem_add(pr, "$", "out of memory planning the study");
    return SS_ENOMEM;
  }
  int rc = spec_parse(text, "the study's spec", sp, pr);
  free(text);
  if (rc == 0)
    rc = plan_spec(*sp, out, pr);
  if (rc) {
    spec_free(*sp);
    *sp = NULL;
  }
  return rc;
}

/* ---- the decision ------------------------------------------------------ */

void lr_tune_decision_free(lr_tune_decision *d) {
  free(d->rates);
  d->rates = NULL;
  d->nrates = 0;
}

/* The rate of the grid (ascending) that x is, within 1e-9 relative; -1 */
static int rate_of(const lr_tune_rate *rates, size_t n, double x) {
  for (size_t i = 0; i < n; i++)
    if (fabs(rates[i].lr - x) <= 1e-9 * fabs(rates[i].lr))
      return (int)i;
  return -1;
}

/* Each observation counted at its rate of out->rates (its succeeded
 * losses summed into sum); returns how many are still active, *ended the
 * others */
static int tally(lr_tune_decision *out, const lr_tune_obs *obs, size_t nobs, double *sum,
                 int *ended) {
  int active = 0;
  *ended = 0;
  for (size_t k = 0; k < nobs; k++) {
    int i = rate_of(out->rates, out->nrates, obs[k].lr);
    if (i < 0) {
      out->unmatched++;
      continue;
    }
    lr_tune_rate *r = &out->rates[i];
    r->runs++;
    switch (obs[k].state) {
    case LR_TUNE_ACTIVE:
      r->active++;
      active++;
      break;
    case LR_TUNE_SUCCEEDED:
      /* a loss the trainer could not have reported counts as no loss */
      if (isfinite(obs[k].loss) && obs[k].loss > 0) {
        r->succeeded++;
        sum[i] += obs[k].loss;
      } else {
        r->failed++;
      }
      (*ended)++;
      break;
    case LR_TUNE_FAILED:
      r->failed++;
      (*ended)++;
      break;
    default:
      r->cancelled++;
      (*ended)++;
      break;
    }
  }
  return active;
}

/* Too few rates have a loss: UNDECIDED, and why */
static void undecided(lr_tune_decision *out) {
  int failed = 0, cancelled = 0, none = 0;
  for (size_t i = 0; i < out->nrates; i++) {
    failed += out->rates[i].failed;
    cancelled += out->rates[i].cancelled;
    none += out->rates[i].runs == 0;
  }
  out->state = LR_TUNE_UNDECIDED;
  snprintf(out->reason, sizeof out->reason,
           "only %d of the grid's %zu rates have a finished tune run (%d run%s failed, %d "
           "cancelled%s); at least %d are needed to choose one, so the study was not planned: "
           "reproduce the failed runs (scalesweep reproduce RUN), or submit the spec again with "
           "other rates",
           out->with_loss, out->nrates, failed, failed == 1 ? "" : "s", cancelled,
           none ? ", some rates have no run" : "", SPEC_LR_TUNE_MIN_RATES);
}

int lr_tune_decide(const double *grid, size_t n, const lr_tune_obs *obs, size_t nobs,
                   lr_tune_decision *out) {
  memset(out, 0, sizeof *out);
  out->lr = NAN;
  out->chosen = -1;
  if (n == 0)
    return SS_EINVAL;
  double *sorted = malloc(n * sizeof *sorted);
  out->rates = calloc(n, sizeof *out->rates);
  double *sum = calloc(n, sizeof *sum);
  if (!sorted || !out->rates || !sum) {
    free(sorted);
    free(sum);
    lr_tune_decision_free(out);
    return SS_ENOMEM;
  }
  memcpy(sorted, grid, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  out->nrates = n;
  for (size_t i = 0; i < n; i++)
    out->rates[i] = (lr_tune_rate){.lr = sorted[i], .loss = NAN};
  free(sorted);
  int ended, active = tally(out, obs, nobs, sum, &ended);
  for (size_t i = 0; i < n; i++) {
    lr_tune_rate *r = &out->rates[i];
    if (r->succeeded) {
      r->loss = sum[i] / r->succeeded;
      out->with_loss++;
    }
  }
  free(sum);
  if (active) {
    out->state = LR_TUNE_WAITING;
    snprintf(out->reason, sizeof out->reason, "%d of %d tune run%s still queued or running", active,
             active + ended, active + ended == 1 ? "" : "s");
    return 0;
  }
  if (out->with_loss < SPEC_LR_TUNE_MIN_RATES) {
    undecided(out);
    return 0;
  }
  /* ascending: on a tie the smaller rate, seen first, stays */
  for (size_t i = 0; i < n; i++) {
    const lr_tune_rate *r = &out->rates[i];
    if (r->succeeded && (out->chosen < 0 || r->loss < out->rates[out->chosen].loss))
      out->chosen = (int)i;
  }
  out->state = LR_TUNE_DECIDED;
  out->lr = out->rates[out->chosen].lr;
  out->edge = out->chosen == 0 ? -1 : (size_t)out->chosen == n - 1 ? 1 : 0;
  return 0;
}

json_t *lr_tune_decision_json(const lr_tune_decision *d) {
  static const char *const states[] = {"waiting", "decided", "undecided"};
  json_t *rates = json_array(), *warnings = json_array();
  for (size_t i = 0; rates && i < d->nrates; i++) {
    const lr_tune_rate *r = &d->rates[i];
    json_array_append_new(rates,
                          json_pack("{s:f,s:o,s:i,s:i,s:i,s:i,s:b}", "lr", r->lr, "loss",
                                    isfinite(r->loss) ? json_real(r->loss) : json_null(), "runs",
                                    r->runs, "succeeded", r->succeeded, "failed", r->failed,
                                    "cancelled", r->cancelled, "chosen", (int)i == d->chosen));
  }
  if (d->state == LR_TUNE_DECIDED && d->edge && warnings) {
    char w[256];
    snprintf(w, sizeof w, LR_TUNE_EDGE_WARNING " (%.6g is its %s rate: a %s one may train better)",
             d->lr, d->edge < 0 ? "smallest" : "largest", d->edge < 0 ? "smaller" : "larger");
    json_array_append_new(warnings, json_string(w));
  }
  if (d->unmatched && warnings) {
    char w[160];
    snprintf(w, sizeof w, "%zu tune run%s at a rate outside the grid, left out", d->unmatched,
             d->unmatched == 1 ? "" : "s");
    json_array_append_new(warnings, json_string(w));
  }
  return json_pack(
      "{s:s,s:o,s:o,s:o,s:o,s:o}", "status", states[d->state], "lr",
      d->state == LR_TUNE_DECIDED ? json_real(d->lr) : json_null(), "at_edge",
      d->state == LR_TUNE_DECIDED && d->edge ? json_string(d->edge < 0 ? "low" : "high")
                                             : json_null(),
      "warnings", warnings ? warnings : json_null(), "rates", rates ? rates : json_null(), "reason",
      d->reason[0] ? json_string(d->reason) : json_null());
}

/* ---- the scheduler's step ---------------------------------------------- */

void lr_tune_outcome_free(lr_tune_outcome *o) {
  lr_tune_decision_free(&o->d);
  free(o->decision_json);
  free(o->runs_json);
  o->decision_json = o->runs_json = NULL;
}

/* "the first problem (and K more)" into out */
static void problems_reason(const spec_problems *pr, const char *lead, char *out, size_t n) {
  if (!pr->n) {
    snprintf(out, n, "%s", lead);
    return;
  }
  snprintf(out, n, "%s: %s: %s%s", lead, pr->items[0].path, pr->items[0].message,
           pr->n > 1 ? " (and more problems)" : "");
}

int lr_tune_conclude(const char *spec_json, const lr_tune_obs *obs, size_t nobs,
                     const json_t *proxy, lr_tune_outcome *out) {
  memset(out, 0, sizeof *out);
  out->d.lr = NAN;
  out->d.chosen = -1;
  json_t *root = json_loads(spec_json, 0, NULL);
  if (!json_is_object(root) || !json_object_get(root, "lr_tune")) {
    json_decref(root);
    snprintf(out->reason, sizeof out->reason, "the sweep's spec has no lr_tune");
    return SS_EINVAL;
  }
  sweeps__integral(root);
  char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  spec_problems pr = {0};
  spec *sp = NULL;
  int rc = text ? spec_parse(text, "the sweep's spec", &sp, &pr) : SS_ENOMEM;
  free(text);
  if (rc) {
    problems_reason(&pr, "the sweep's spec does not parse", out->reason, sizeof out->reason);
    spec_problems_free(&pr);
    json_decref(root);
    return rc;
  }
  rc = lr_tune_decide(sp->lr_tune.lr.v, sp->lr_tune.lr.n, obs, nobs, &out->d);
  if (rc || out->d.state == LR_TUNE_WAITING) {
    spec_free(sp);
    json_decref(root);
    return rc;
  }
  plan *study = NULL;
  if (out->d.state == LR_TUNE_DECIDED) {
    spec *ss = NULL;
    rc = lr_tune_plan_study(root, out->d.lr, 1, &ss, &study, &pr);
    if (rc == SS_ENOMEM) {
      spec_free(sp);
      json_decref(root);
      spec_problems_free(&pr);
      lr_tune_outcome_free(out);
      return rc;
    }
    if (rc == 0) {
      out->runs_json = plan_runs_json(study);
      out->study_runs = study->n;
      out->gpus = ss->gpus;
      out->priority = ss->priority;
      out->max_attempts = ss->max_attempts > 0 ? ss->max_attempts : 3;
    } else {
      out->failed = 1;
      problems_reason(&pr, "the study could not be planned at the chosen rate", out->reason,
                      sizeof out->reason);
    }
    spec_free(ss);
    plan_free(study);
  }
  spec_free(sp);
  json_decref(root);
  spec_problems_free(&pr);
  if (!out->runs_json) {
    out->runs_json = malloc(3);
    if (out->runs_json)
      memcpy(out->runs_json, "[]", 3);
  }
  json_t *j = lr_tune_decision_json(&out->d);
  if (j && proxy)
    json_object_set(j, "proxy", (json_t *)proxy);
  if (j)
    json_object_set_new(j, "study_runs", json_integer((json_int_t)out->study_runs));
  if (j && out->failed) {
    json_object_set_new(j, "status", json_string("failed"));
    json_object_set_new(j, "reason", json_string(out->reason));
  }
  out->decision_json = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(j);
  if (!out->decision_json || !out->runs_json) {
    lr_tune_outcome_free(out);
    return SS_ENOMEM;
  }
  return 0;
}

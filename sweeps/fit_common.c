/* fit_result: construction, warnings, JSON rendering (Jansson). */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweeps/fit.h"
#include "sweeps/internal.h"

void fit_result_init(fit_result *r, const char *law) {
  memset(r, 0, sizeof *r);
  snprintf(r->law, sizeof r->law, "%s", law);
  r->objective = NAN;
  r->seeds = (fit_seeds){.sd = NAN, .lo = NAN, .hi = NAN};
}

void fit_result_free(fit_result *r) {
  free(r->residuals);
  r->residuals = NULL;
  free(r->draws);
  r->draws = NULL;
  r->ndraws = 0;
}

static fit_param *add(fit_param *arr, int *n, const char *name, double value) {
  if (*n >= FIT_MAX_PARAMS)
    return NULL;
  fit_param *p = &arr[(*n)++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->value = value;
  p->stderr_ = p->ci_lo = p->ci_hi = NAN;
  return p;
}

fit_param *fit_result_add_param(fit_result *r, const char *name, double value) {
  return add(r->params, &r->nparams, name, value);
}

const fit_param *fit_result_get(const fit_result *r, const char *name) {
  for (int i = 0; i < r->nparams; i++)
    if (!strcmp(r->params[i].name, name))
      return &r->params[i];
  for (int i = 0; i < r->nderived; i++)
    if (!strcmp(r->derived[i].name, name))
      return &r->derived[i];
  return NULL;
}

fit_param *fit_result_add_derived(fit_result *r, const char *name, double value) {
  return add(r->derived, &r->nderived, name, value);
}

void fit__vwarn(char (*warnings)[FIT__WARNING_LEN], int *n, int max, const char *fmt, va_list ap) {
  if (*n < max)
    vsnprintf(warnings[(*n)++], FIT__WARNING_LEN, fmt, ap);
}

void fit_result_warn(fit_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fit__vwarn(r->warnings, &r->nwarnings, FIT_MAX_WARNINGS, fmt, ap);
  va_end(ap);
}

/* JSON has no NaN: unknown values are null */
static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

json_t *sweeps__json_reals(const double *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(a, num(v[i]));
  return a;
}

static void put_params(json_t *root, const char *key, const fit_param *p, int n, json_t *stderr_obj,
                       json_t *ci_obj) {
  json_t *o = json_object();
  for (int i = 0; i < n; i++) {
    json_object_set_new(o, p[i].name, num(p[i].value));
    if (isfinite(p[i].stderr_))
      json_object_set_new(stderr_obj, p[i].name, num(p[i].stderr_));
    if (isfinite(p[i].ci_lo) && isfinite(p[i].ci_hi))
      json_object_set_new(ci_obj, p[i].name, json_pack("[ff]", p[i].ci_lo, p[i].ci_hi));
  }
  json_object_set_new(root, key, o);
}

json_t *fit_json_get(json_t *fit, const char *name) {
  json_t *v = json_object_get(json_object_get(fit, "params"), name);
  return v ? v : json_object_get(json_object_get(fit, "derived"), name);
}

int fit_json_budgets(json_t *fit, int *usable) {
  json_t *budgets = json_object_get(fit, "budgets"), *b;
  size_t i;
  *usable = 0;
  json_array_foreach(budgets, i, b) *usable += json_is_true(json_object_get(b, "usable"));
  return (int)json_array_size(budgets);
}

char *fit_result_to_json(const fit_result *r) {
  json_t *root = json_object();
  json_object_set_new(root, "law", json_string(r->law));
  json_object_set_new(root, "n_points", json_integer(r->n_points));
  json_t *se = json_object(), *ci = json_object();
  put_params(root, "params", r->params, r->nparams, se, ci);
  put_params(root, "derived", r->derived, r->nderived, se, ci);
  json_object_set_new(root, "stderr", se);
  json_object_set_new(root, "ci95", ci);
  json_object_set_new(root, "objective", num(r->objective));
  json_object_set_new(root, "converged", json_boolean(r->converged));
  json_t *w = json_array();
  for (int i = 0; i < r->nwarnings; i++)
    json_array_append_new(w, json_string(r->warnings[i]));
  json_object_set_new(root, "warnings", w);
  if (r->seeds.cells > 0) {
    const fit_seeds *sd = &r->seeds;
    json_t *o = json_pack("{s:i,s:i,s:i,s:o}", "cells", sd->cells, "runs", sd->runs, "df", sd->df,
                          "sd_ln_loss", num(sd->sd));
    if (isfinite(sd->lo) && isfinite(sd->hi))
      json_object_set_new(o, "ci95", json_pack("[ff]", sd->lo, sd->hi));
    json_object_set_new(root, "seeds", o);
  }
  if (r->nbudgets) {
    json_t *b = json_array();
    for (int i = 0; i < r->nbudgets; i++) {
      const fit_budget *x = &r->budgets[i];
      if (!strcmp(r->law, "bopt"))
        json_array_append_new(b,
                              json_pack("{s:o,s:o,s:o,s:o,s:o,s:i,s:i,s:b}", "flops", num(x->flops),
                                        "b_opt", num(x->b_opt), "lr_opt", num(x->lr_opt), "d_opt",
                                        num(x->d_opt), "loss", num(x->loss), "n_points",
                                        x->n_points, "n_near", x->n_near, "usable", x->usable));
      else {
        json_t *o = json_pack("{s:o,s:o,s:o,s:o,s:i,s:b}", "flops", num(x->flops), "n_opt",
                              num(x->n_opt), "d_opt", num(x->d_opt), "loss", num(x->loss),
                              "n_points", x->n_points, "usable", x->usable);
        if (isfinite(x->n_opt_lo) && isfinite(x->n_opt_hi))
          json_object_set_new(o, "n_opt_ci95", json_pack("[ff]", x->n_opt_lo, x->n_opt_hi));
        if (x->n_cells > 0 && x->n_cells < x->n_points) {
          json_object_set_new(o, "n_cells", json_integer(x->n_cells));
          json_object_set_new(o, "seed_sd", num(x->seed_sd));
        }
        json_array_append_new(b, o);
      }
    }
    json_object_set_new(root, "budgets", b);
  }
  if (r->nfrontier) {
    json_t *f = json_array();
    for (int i = 0; i < r->nfrontier; i++) {
      const fit_frontier *x = &r->frontier[i];
      json_array_append_new(f, json_pack("{s:o,s:o,s:o,s:o}", "flops", num(x->flops), "loss",
                                         num(x->loss), "lo", num(x->lo), "hi", num(x->hi)));
    }
    json_object_set_new(root, "frontier", f);
  }
  if (r->residuals)
    json_object_set_new(root, "residuals", sweeps__json_reals(r->residuals, (size_t)r->n_points));
  char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(root);
  return s;
}

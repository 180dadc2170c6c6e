/* The next compute budget, designed from a sweep's fits (next.h). */
#include "sweeps/next.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/internal.h"
#include "sweeps/spec_json.h"

static void warn(next_design *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(next_design *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fit__vwarn(d->warnings, &d->nwarnings, NEXT_MAX_WARNINGS, fmt, ap);
  va_end(ap);
}

/* x to sig significant digits (the spec's constants stay readable) */
static double round_sig(double x, int sig) {
  char b[40];
  snprintf(b, sizeof b, "%.*g", sig, x);
  return strtod(b, NULL);
}

/* ln L of the surface th (ln A, ln B, ln E, alpha, beta) at (N, D), in logs
 * throughout: a resample may wander far */
static double ln_loss(const double *th, double n, double d) {
  double u1 = th[0] - th[3] * log(n), u2 = th[1] - th[4] * log(d), u3 = th[2];
  double mx = fmax(fmax(u1, u2), u3);
  return mx + log(exp(u1 - mx) + exp(u2 - mx) + exp(u3 - mx));
}

/* The prediction at (N, D): the point fit's surface, the bootstrap's 2.5 and
 * 97.5 percentiles of ln L there, each side widened by the run scatter in
 * quadrature (next.h). tmp holds ndraws values. */
static next_prediction predict(const next_design *d, const double *th, double n, double dd,
                               double *tmp) {
  double c = ln_loss(th, n, dd), z = 1.959964 * d->noise_sd;
  double below = 0, above = 0;
  if (d->fit.ndraws > 0) {
    for (int k = 0; k < d->fit.ndraws; k++)
      tmp[k] = ln_loss(&d->fit.draws[(size_t)k * FIT_CHIN_DRAW], n, dd);
    fit_param p = {.ci_lo = NAN, .ci_hi = NAN};
    if (fit__boot_column(tmp, d->fit.ndraws, 1, 0, &p) >= 2 && isfinite(p.ci_lo) &&
        isfinite(p.ci_hi)) {
      below = fmax(0, c - p.ci_lo);
      above = fmax(0, p.ci_hi - c);
    }
  }
  below = sqrt(below * below + z * z);
  above = sqrt(above * above + z * z);
  return (next_prediction){exp(c), exp(c - below), exp(c + above)};
}

static double param(const fit_result *r, const char *name) {
  const fit_param *p = fit_result_get(r, name);
  return p ? p->value : NAN;
}

/* Whether the sweep's points tried 2 or more values of a field (a rule
 * fitted over one value says nothing about how it should change). */
static int varied(const fit_point *pts, int n, int lr) {
  double first = NAN;
  for (int i = 0; i < n; i++) {
    double v = lr ? pts[i].lr : pts[i].batch_size;
    if (!isfinite(v))
      continue;
    if (!isfinite(first))
      first = v;
    else if (fabs(v - first) > 1e-9 * fabs(first))
      return 1;
  }
  return 0;
}

/* The two rules a bopt fit gives: the key of the spec's base that fixes the
 * value instead, the law's constants, and the largest coefficient a spec
 * takes (the exponent's bounds are ±2 for both). */
typedef struct {
  const char *key, *what, *kname, *ename;
  double kmax;
  int lr;
} fitted_rule;

static const fitted_rule BATCH_RULE = {"batch_size", "batch", "k_B", "beta_B", 1e12, 0};
static const fitted_rule LR_RULE = {"lr", "learning-rate", "k_eta", "beta_eta", 1e6, 1};

/* bopt's constants for rule f into *k and *e, rounded, where they apply
 * (fitted_rules); whether they were taken. */
static int take_rule(const fitted_rule *f, json_t *bopt, json_t *train, const fit_point *pts, int n,
                     double *k, double *e, next_design *d) {
  json_t *kj = fit_json_get(bopt, f->kname), *ej = fit_json_get(bopt, f->ename);
  double kv = json_number_value(kj), ev = json_number_value(ej);
  if (!kj || !ej || json_object_get(train, f->key) || !varied(pts, n, f->lr))
    return 0;
  if (!(kv >= 1e-12 && kv <= f->kmax && ev >= -2 && ev <= 2)) {
    warn(d,
         "the sweep's fitted %s rule (%s %.3g, %s %.3g) is outside what a spec takes; the "
         "spec's own rule is used",
         f->what, f->kname, kv, f->ename, ev);
    return 0;
  }
  *k = round_sig(kv, 4);
  *e = round_sig(ev, 4);
  return 1;
}

/* The sweep's bopt law as rules a spec accepts (next.h): sets batch_fitted
 * and lr_fitted with their constants. A rule is not taken where the spec's
 * base fixes that value (the rule would not apply), where the sweep's runs
 * all used one value, or where the law used fewer than 3 budgets. */
static void fitted_rules(json_t *bopt, json_t *spec_root, const fit_point *pts, int n,
                         next_design *d) {
  d->k_b = d->beta_b = d->k_eta = d->beta_eta = NAN;
  int usable = 0;
  if (!bopt || fit_json_budgets(bopt, &usable) < 3 || usable < 3)
    return;
  json_t *train = json_object_get(json_object_get(spec_root, "base"), "train");
  /* WSD branches: a size's runs share its smallest run's batch size and
   * learning rate (docs/sweeps.md, "WSD branches"), so across budgets they
   * follow the size, not an optimum, and a law fitted to them says nothing
   * about the best batch at a new budget */
  const char *sched = json_string_value(json_object_get(train, "schedule"));
  if (sched && !strcmp(sched, "wsd") && !json_is_false(json_object_get(spec_root, "branches"))) {
    warn(d, "the sweep's runs branch (wsd): a size's runs share one batch size and learning "
            "rate, so its bopt fit is not an optimum; the spec's own rules are used");
    return;
  }
  if (take_rule(&BATCH_RULE, bopt, train, pts, n, &d->k_b, &d->beta_b, d))
    d->batch_fitted = 1;
  if (take_rule(&LR_RULE, bopt, train, pts, n, &d->k_eta, &d->beta_eta, d))
    d->lr_fitted = 1;
}

/* rule (an object, or absent) with coef and exponent set */
static void set_rule(json_t *root, const char *key, double coef, double exponent) {
  json_t *r = json_object_get(root, key);
  r = json_is_object(r) ? json_deep_copy(r) : json_object();
  json_object_set_new(r, "coef", json_real(coef));
  json_object_set_new(r, "exponent", json_real(exponent));
  json_object_set_new(root, key, r);
}

/* The budget's spec text (the sweep's with method isoflop at C), or NULL. */
static char *budget_spec(const char *spec_json, const next_design *d, int points,
                         const double *sizes, int nsizes, spec_problems *pr) {
  json_error_t e;
  json_t *root = json_loads(spec_json, 0, &e);
  if (!json_is_object(root)) {
    json_decref(root);
    spec_problem_add(pr, "$", "the sweep's stored spec could not be read: %s", e.text);
    return NULL;
  }
  sweeps__integral(root);
  json_t *old = json_object_get(root, "isoflop"), *iso = json_object();
  if (sizes) { /* the sizes at the sweep's smallest budget too (a WSD grid) */
    json_object_set_new(iso, "flops", json_pack("[f,f]", d->grid_flops, d->flops));
    json_object_set_new(iso, "params", sweeps__json_reals(sizes, (size_t)nsizes));
  } else {
    json_object_set_new(iso, "flops", json_pack("[f]", d->flops));
    json_object_set_new(iso, "centre",
                        json_pack("{s:f,s:f,s:f,s:i}", "coef", d->centre_coef, "exponent",
                                  d->centre_exponent, "span", d->span, "points", points));
  }
  if (json_is_object(old)) {
    json_t *v;
    if ((v = json_object_get(old, "flops_count")) != NULL)
      json_object_set(iso, "flops_count", v);
    if ((v = json_object_get(old, "seeds")) != NULL)
      json_object_set(iso, "seeds", v);
  }
  json_object_set_new(root, "isoflop", iso);
  json_object_set_new(root, "method", json_string("isoflop"));
  json_object_del(root, "grid");
  json_object_del(root, "runs");
  json_object_del(root, "batch");
  json_object_del(root, "adaptive"); /* the budget's runs are all trained, not a first round */
  /* the sweep's name and the budget, within the 128 bytes a spec's name
   * may have: the name cut where it must be, on a character's boundary */
  char name[160], suffix[48];
  const char *was = json_string_value(json_object_get(root, "name"));
  int ns = snprintf(suffix, sizeof suffix, ": next budget %.3g FLOPs", d->flops);
  size_t keep = was ? strlen(was) : 0, room = 128 - (size_t)ns;
  if (keep > room) {
    keep = room;
    while (keep > 0 && ((unsigned char)was[keep] & 0xC0) == 0x80)
      keep--;
  }
  snprintf(name, sizeof name, "%.*s%s", (int)keep, was ? was : "", suffix);
  json_object_set_new(root, "name", json_string(name));
  if (d->batch_fitted)
    set_rule(root, "batch_rule", d->k_b, d->beta_b);
  if (d->lr_fitted)
    set_rule(root, "lr_rule", d->k_eta, d->beta_eta);
  char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!text)
    spec_problem_add(pr, "$", "out of memory");
  return text;
}

static void plan_budget_clear(next_design *out) {
  plan_free(out->plan);
  free(out->spec_json);
  out->plan = NULL;
  out->spec_json = NULL;
}

/* Plans budget_spec's text into out->plan and out->spec_json (with the
 * spec's gpus, priority and max_attempts), replacing what they held; on
 * failure both are left NULL, the reasons in pr. */
static void plan_budget(const char *spec_json, next_design *out, int points, const double *sizes,
                        int nsizes, spec_problems *pr) {
  char *text = budget_spec(spec_json, out, points, sizes, nsizes, pr);
  spec *sp = NULL;
  plan *pl = NULL;
  plan_budget_clear(out);
  if (text && spec_parse(text, "the next budget's spec", &sp, pr) == 0 &&
      plan_spec(sp, &pl, pr) == 0) {
    out->plan = pl;
    out->spec_json = spec_canonical(sp);
    out->gpus = sp->gpus;
    out->priority = sp->priority;
    out->max_attempts = sp->max_attempts > 0 ? sp->max_attempts : 3;
  } else {
    plan_free(pl);
  }
  free(text);
  spec_free(sp);
}

/* A sweep that is a grid of WSD branches (schedule wsd, branches not off,
 * an isoflop over listed sizes): its smallest budget, else 0. There every
 * size trains at the batch size and learning rate its rules give at that
 * budget (its group's smallest run; plan_branch.c), whatever the budget. */
static double grid_smallest(json_t *root) {
  json_t *train = json_object_get(json_object_get(root, "base"), "train");
  const char *sched = json_string_value(json_object_get(train, "schedule"));
  json_t *iso = json_object_get(root, "isoflop");
  if (!sched || strcmp(sched, "wsd") || json_is_false(json_object_get(root, "branches")) ||
      !json_is_array(json_object_get(iso, "params")))
    return 0;
  json_t *f = json_object_get(iso, "flops");
  double least = INFINITY;
  if (json_is_array(f)) {
    for (size_t i = 0; i < json_array_size(f); i++)
      least = fmin(least, json_number_value(json_array_get(f, i)));
  } else if (json_is_object(f)) {
    least = fmin(json_number_value(json_object_get(f, "from")),
                 json_number_value(json_object_get(f, "to")));
  } else if (json_is_number(f)) {
    least = json_number_value(f);
  }
  return isfinite(least) && least > 0 ? least : 0;
}

/* The distinct non-embedding sizes of a plan's runs, in plan order, into
 * sizes (room for plan->n); how many. */
static int plan_sizes(const plan *pl, double *sizes) {
  int k = 0;
  for (size_t i = 0; i < pl->n; i++) {
    double v = (double)pl->runs[i].nonembedding_params;
    int seen = 0;
    for (int j = 0; j < k && !seen; j++)
      seen = sizes[j] == v;
    if (!seen)
      sizes[k++] = v;
  }
  return k;
}

/* o's budget and number of sizes, checked and kept in out. */
static int design_options(const next_options *o, next_design *out, spec_problems *pr) {
  int points = o->points ? o->points : NEXT_POINTS;
  if (!(isfinite(o->flops) && o->flops > 0 && o->flops <= 1e30))
    spec_problem_add(pr, "$.flops", "found %g, expected a compute budget in FLOPs above 0",
                     o->flops);
  if (points < 3 || points > NEXT_MAX_POINTS)
    spec_problem_add(pr, "$.points", "found %d, expected 3 to %d model sizes", points,
                     NEXT_MAX_POINTS);
  if (pr->n)
    return SS_EINVAL;
  out->flops = o->flops;
  out->points = points;
  return 0;
}

/* The surface, its bootstrap at C (every resample kept), and the
 * compute-optimal size there with its interval. */
static int design_fit(const fit_point *pts, int n, const next_options *o, next_design *out,
                      spec_problems *pr) {
  fit_options fo = {.bootstrap = o->bootstrap > 0 ? o->bootstrap : NEXT_BOOTSTRAP,
                    .seed = o->seed,
                    .threads = o->threads,
                    .target_flops = o->flops,
                    .keep_draws = 1};
  char err[256];
  if (fit_chinchilla(pts, n, &fo, &out->fit, err, sizeof err) != 0) {
    spec_problem_add(pr, "$", "the sweep's Chinchilla law cannot be fitted yet (%d points): %s", n,
                     err);
    return SS_EINVAL;
  }
  double alpha = param(&out->fit, "alpha"), beta = param(&out->fit, "beta");
  const fit_param *nopt = fit_result_get(&out->fit, "N_opt");
  out->n_opt = nopt ? nopt->value : NAN;
  out->d_opt = param(&out->fit, "D_opt");
  if (!(alpha > 0 && beta > 0 && isfinite(out->n_opt) && out->n_opt > 0 && isfinite(out->d_opt))) {
    spec_problem_add(pr, "$",
                     "the sweep's fitted surface has no compute-optimal size (alpha %.3g, "
                     "beta %.3g): both exponents must be above 0",
                     alpha, beta);
    return SS_EINVAL;
  }
  out->n_lo = nopt->ci_lo;
  out->n_hi = nopt->ci_hi;
  return 0;
}

/* The sizes around N_opt: their span from N_opt's interval, their centre
 * rule, and a warning where C is far beyond the sweep's budgets. */
static void design_sizes(const fit_point *pts, int n, next_design *out) {
  double reach = 1;
  if (isfinite(out->n_lo) && isfinite(out->n_hi) && out->n_lo > 0)
    reach = fmax(out->n_hi / out->n_opt, out->n_opt / out->n_lo);
  else
    warn(out, "N_opt has no bootstrap interval; the sizes span the least (x%.3g)", NEXT_SPAN_MIN);
  out->span = round_sig(fmin(NEXT_SPAN_MAX, fmax(NEXT_SPAN_MIN, NEXT_SPAN_REACH * reach)), 3);
  if (NEXT_SPAN_REACH * reach > NEXT_SPAN_MAX)
    warn(out,
         "N_opt's 95%% interval reaches %.3gx either side; the sizes span at most x%.3g, so the "
         "budget's minimum may fall outside them",
         reach, NEXT_SPAN_MAX);
  out->centre_exponent = round_sig(param(&out->fit, "a"), 4);
  out->centre_coef = round_sig(out->n_opt / pow(out->flops, out->centre_exponent), 4);

  for (int i = 0; i < n; i++)
    out->largest_budget = fmax(out->largest_budget, 6 * pts[i].params * pts[i].tokens);
  if (out->flops > NEXT_FAR * out->largest_budget)
    warn(out,
         "%.3g FLOPs is %.0fx the sweep's largest budget (%.3g): the prediction is a long "
         "extrapolation",
         out->flops, out->flops / out->largest_budget, out->largest_budget);
}

/* A run's scatter about the law: the seeds' where the sweep repeated
 * seeds, else the fit's residuals'. */
static void design_noise(int n, next_design *out) {
  if (out->fit.seeds.cells > 0 && isfinite(out->fit.seeds.sd)) {
    out->noise_sd = out->fit.seeds.sd;
    out->noise_from = "seeds";
    return;
  }
  double ss = 0;
  for (int i = 0; i < n && out->fit.residuals; i++)
    ss += out->fit.residuals[i] * out->fit.residuals[i];
  out->noise_sd = sqrt(ss / n);
  if (!out->fit.residuals)
    warn(out, "the fit's residuals are missing (out of memory): a run's scatter is left out");
  out->noise_from = "residuals";
}

/* The budget's runs, planned like any submitted spec, with the rules the
 * sweep's bopt fit gives. */
static int design_plan(const char *spec_json, const fit_point *pts, int n, json_t *bopt,
                       next_design *out, spec_problems *pr) {
  json_t *root = json_loads(spec_json, 0, NULL);
  sweeps__integral(root);
  fitted_rules(bopt, root, pts, n, out);
  double smallest = grid_smallest(root);
  json_decref(root);

  plan_budget(spec_json, out, out->points, NULL, 0, pr);
  /* a grid of WSD branches: the law holds for its sizes trained at their
   * smallest budget's batch size and learning rate, so the budget's sizes
   * join the grid: each also at the sweep's smallest budget, a branch of
   * its run at C, which then trains at the batch and rate the grid gives
   * that size (planned at C alone, it would take the rules at C: on the
   * quick start 64 sequences instead of 4 to 8, and losses 4% below the
   * law's) */
  if (out->plan && smallest > 0 && smallest < out->flops) {
    double *sizes = malloc(out->plan->n * sizeof *sizes);
    int k = sizes ? plan_sizes(out->plan, sizes) : 0;
    out->grid_flops = smallest;
    if (sizes)
      plan_budget(spec_json, out, out->points, sizes, k, pr);
    else
      plan_budget_clear(out);
    free(sizes);
  }
  if (!out->plan || !out->spec_json) {
    if (!pr->n)
      spec_problem_add(pr, "$", "the next budget could not be planned");
    return pr->n && strstr(pr->items[0].message, "out of memory") ? SS_ENOMEM : SS_EINVAL;
  }
  return 0;
}

/* The law's prediction for each planned run and at the optimum; the
 * plan's warnings join the design's. */
static int design_predict(next_design *out, spec_problems *pr) {
  out->runs = calloc(out->plan->n ? out->plan->n : 1, sizeof *out->runs);
  double *tmp = malloc((size_t)(out->fit.ndraws > 0 ? out->fit.ndraws : 1) * sizeof *tmp);
  if (!out->runs || !tmp) {
    free(tmp);
    spec_problem_add(pr, "$", "out of memory");
    return SS_ENOMEM;
  }
  double th[FIT_CHIN_DRAW] = {log(param(&out->fit, "A")), log(param(&out->fit, "B")),
                              log(param(&out->fit, "E")), param(&out->fit, "alpha"),
                              param(&out->fit, "beta")};
  for (size_t i = 0; i < out->plan->n; i++) {
    const plan_run *r = &out->plan->runs[i];
    out->runs[i] = predict(out, th, (double)r->nonembedding_params, (double)r->tokens, tmp);
  }
  out->opt = predict(out, th, out->n_opt, out->d_opt, tmp);
  free(tmp);
  for (size_t i = 0; i < out->plan->n_warnings; i++)
    warn(out, "%s", out->plan->warnings[i]);
  return 0;
}

int next_design_make(const char *spec_json, const fit_point *pts, int n, json_t *bopt,
                     const next_options *o, next_design *out, spec_problems *pr) {
  memset(out, 0, sizeof *out);
  fit_result_init(&out->fit, "chinchilla");
  if (design_options(o, out, pr) != 0)
    return SS_EINVAL;
  int rc = design_fit(pts, n, o, out, pr);
  if (rc == 0) {
    design_sizes(pts, n, out);
    design_noise(n, out);
    rc = design_plan(spec_json, pts, n, bopt, out, pr);
  }
  if (rc == 0)
    rc = design_predict(out, pr);
  if (rc != 0)
    next_design_free(out);
  return rc;
}

static json_t *interval(double lo, double hi) {
  return isfinite(lo) && isfinite(hi) ? json_pack("[f,f]", lo, hi) : json_null();
}

/* Where a rule came from, for the design's "rules": the sweep's bopt fit
 * (with its constants), the spec's rules at the grid's smallest budget, or
 * the spec. */
static json_t *rule_source(int fitted, const char *kname, double k, const char *ename, double e,
                           const next_design *d) {
  if (fitted)
    return json_pack("{s:s,s:f,s:f}", "from", "the sweep's bopt fit", kname, k, ename, e);
  if (d->grid_flops > 0)
    return json_pack("{s:s,s:f}", "from", "the spec's rules at the grid's smallest budget",
                     "at_flops", d->grid_flops);
  return json_pack("{s:s}", "from", "the spec");
}

char *next_design_json(const next_design *d) {
  json_t *runs = json_array();
  for (size_t i = 0; d->plan && i < d->plan->n; i++) {
    const plan_run *r = &d->plan->runs[i];
    json_array_append_new(
        runs, json_pack("{s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:i,s:f,s:I,s:f,s:s,s:f,s:o}", "index",
                        r->index, "n_layer", r->n_layer, "d_model", r->d_model, "n_head", r->n_head,
                        "params", (json_int_t)r->params, "nonembedding_params",
                        (json_int_t)r->nonembedding_params, "tokens", (json_int_t)r->tokens,
                        "batch_size", r->batch_size, "lr", r->lr, "steps", (json_int_t)r->steps,
                        "flops", r->flops, "config_hash", r->config_hash, "predicted_loss",
                        d->runs[i].loss, "ci95", interval(d->runs[i].lo, d->runs[i].hi)));
  }
  json_t *warnings = json_array();
  for (int i = 0; i < d->nwarnings; i++)
    json_array_append_new(warnings, json_string(d->warnings[i]));
  json_t *rules = json_pack(
      "{s:o,s:o}", "batch", rule_source(d->batch_fitted, "k_B", d->k_b, "beta_B", d->beta_b, d),
      "lr", rule_source(d->lr_fitted, "k_eta", d->k_eta, "beta_eta", d->beta_eta, d));
  json_t *spec = d->spec_json ? json_loads(d->spec_json, 0, NULL) : NULL;
  json_t *o = json_pack(
      "{s:f,s:{s:f,s:o},s:f,s:{s:f,s:o},s:{s:f,s:f,s:f,s:i},s:{s:f,s:s},s:o,"
      "s:{s:i,s:f,s:f,s:f,s:i},s:f,s:o,s:o,s:o}",
      "flops", d->flops, "n_opt", "value", d->n_opt, "ci95", interval(d->n_lo, d->n_hi), "d_opt",
      d->d_opt, "loss_at_n_opt", "value", d->opt.loss, "ci95", interval(d->opt.lo, d->opt.hi),
      "centre", "coef", d->centre_coef, "exponent", d->centre_exponent, "span", d->span, "points",
      d->points, "noise", "sd", d->noise_sd, "from", d->noise_from ? d->noise_from : "residuals",
      "rules", rules, "fit", "n_points", d->fit.n_points, "alpha", param(&d->fit, "alpha"), "beta",
      param(&d->fit, "beta"), "E", param(&d->fit, "E"), "bootstrap", d->fit.ndraws,
      "largest_budget", d->largest_budget, "runs", runs, "spec", spec ? spec : json_null(),
      "warnings", warnings);
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8)) : NULL;
  json_decref(o);
  return text;
}

char *next_runs_json(const next_design *d) {
  size_t cap = 2, len = 1;
  char *buf = malloc(cap + 1);
  if (!buf)
    return NULL;
  buf[0] = '[';
  for (size_t i = 0; i < d->plan->n; i++) {
    char *run = plan_run_json(&d->plan->runs[i], d->plan);
    json_t *des = json_pack("{s:f,s:f,s:o,s:f,s:f,s:i}", "flops", d->flops, "loss", d->runs[i].loss,
                            "ci95", interval(d->runs[i].lo, d->runs[i].hi), "noise_sd", d->noise_sd,
                            "n_opt", d->n_opt, "fit_points", d->fit.n_points);
    char *dt = des ? json_dumps(des, JSON_COMPACT | JSON_REAL_PRECISION(8)) : NULL;
    json_decref(des);
    size_t rl = run ? strlen(run) : 0;
    if (!run || !dt || rl < 2 || run[rl - 1] != '}') {
      free(run), free(dt), free(buf);
      return NULL;
    }
    /* the run's object, its closing brace replaced by ,"designed":{...}} */
    size_t need = len + 1 + (rl - 1) + strlen(",\"designed\":") + strlen(dt) + 2;
    if (need > cap) {
      cap = need * 2;
      char *b = realloc(buf, cap + 1);
      if (!b) {
        free(run), free(dt), free(buf);
        return NULL;
      }
      buf = b;
    }
    len +=
        (size_t)sprintf(buf + len, "%s%.*s,\"designed\":%s}", i ? "," : "", (int)(rl - 1), run, dt);
    free(run);
    free(dt);
  }
  buf[len++] = ']';
  buf[len] = 0;
  return buf;
}

void next_design_free(next_design *d) {
  free(d->spec_json);
  plan_free(d->plan);
  free(d->runs);
  fit_result_free(&d->fit);
  d->spec_json = NULL;
  d->plan = NULL;
  d->runs = NULL;
}

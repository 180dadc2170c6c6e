/* Extrapolation check (SCIENCE.md section 2): refit the Chinchilla law
 * without the largest compute budget and predict that budget's losses. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/fit.h"

/* Budgets as in fit_isoflop: a point belongs to the largest budget when its
 * ln C is within this of the largest ln C (5% in C). */
#define BUDGET_LN_TOL 0.05

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return SS_EINVAL;
}

static double param(const fit_result *r, const char *name) {
  const fit_param *p = fit_result_get(r, name);
  return p ? p->value : NAN;
}

/* Counts budgets among the ln C values sorted ascending, grouped as in
 * fit_isoflop (a new budget where ln C exceeds the current one's smallest
 * by more than BUDGET_LN_TOL); *last gets the smallest ln C of the last. */
static int count_budgets(const double *lc, int m, double *last) {
  int nb = 0;
  double first = 0;
  for (int i = 0; i < m; i++)
    if (i == 0 || lc[i] - first > BUDGET_LN_TOL) {
      nb++;
      first = lc[i];
    }
  *last = first;
  return nb;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* flops on every point, positive; their largest into *cmax */
static int check_flops(const fit_point *pts, int n, double *cmax, char *err, size_t errlen) {
  *cmax = 0;
  for (int i = 0; i < n; i++) {
    double c = pts[i].flops;
    if (isnan(c))
      return fail(err, errlen,
                  "extrapolation check: flops missing at point %d (the budgets are found from "
                  "column flops)",
                  i + 1);
    if (!(c > 0) || !isfinite(c))
      return fail(err, errlen,
                  "extrapolation check: point %d: flops = %g, expected a positive number", i + 1,
                  c);
    *cmax = fmax(*cmax, c);
  }
  return 0;
}

/* How many budgets the points' C make; *lcut: the smallest ln C of the
 * largest */
static int budgets_of(const fit_point *pts, int n, double *lcut) {
  double *lc = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++)
    lc[i] = log(pts[i].flops);
  qsort(lc, n, sizeof(double), cmp_double);
  int nbud = count_budgets(lc, n, lcut);
  free(lc);
  return nbud;
}

/* The points below lcut into rest (*nrest), the others held out (*nhold,
 * their mean ln C into *hold_lc), each with params, tokens and loss */
static int hold_out(const fit_point *pts, int n, double lcut, fit_point *rest, int *nrest,
                    int *nhold, double *hold_lc, char *err, size_t errlen) {
  *nrest = *nhold = 0;
  *hold_lc = 0;
  for (int i = 0; i < n; i++) {
    if (log(pts[i].flops) >= lcut) {
      const fit_point *p = &pts[i];
      const char *name[3] = {"params", "tokens", "loss"};
      double v[3] = {p->params, p->tokens, p->loss};
      for (int k = 0; k < 3; k++)
        if (!(v[k] > 0) || !isfinite(v[k]))
          return fail(err, errlen,
                      "extrapolation check: held-out point %d: %s = %g, expected a positive number",
                      i + 1, name[k], v[k]);
      *hold_lc += log(p->flops);
      (*nhold)++;
    } else {
      rest[(*nrest)++] = pts[i];
    }
  }
  *hold_lc /= *nhold;
  return 0;
}

/* The fitted law's predictions of the held-out points, as derived values */
static void predict(const fit_point *pts, int n, double lcut, int nhold, double hold_lc,
                    fit_result *out) {
  double E = param(out, "E"), A = param(out, "A"), B = param(out, "B");
  double alpha = param(out, "alpha"), beta = param(out, "beta");
  double pred = 0, meas = 0, rel = 0;
  for (int i = 0; i < n; i++) {
    if (log(pts[i].flops) < lcut)
      continue;
    double l = E + A / pow(pts[i].params, alpha) + B / pow(pts[i].tokens, beta);
    pred += l;
    meas += pts[i].loss;
    rel += fabs(l - pts[i].loss) / pts[i].loss;
  }
  fit_result_add_derived(out, "holdout_flops", exp(hold_lc));
  fit_result_add_derived(out, "holdout_pred_loss", pred / nhold);
  fit_result_add_derived(out, "holdout_loss", meas / nhold);
  fit_result_add_derived(out, "holdout_rel_err", rel / nhold);
}

/* Holds out the largest compute budget (budgets grouped by C as in
 * fit_isoflop, within 5%), fits fit_chinchilla on the rest with the same
 * options, and predicts each held-out point's loss from its params and
 * tokens. out is the Chinchilla fit of the remaining points (law
 * "chinchilla", n_points = the remaining count) plus derived values:
 * holdout_flops (geometric mean C of the held-out budget), holdout_pred_loss
 * and holdout_loss (means over the held-out points of the predicted and the
 * measured loss) and holdout_rel_err (mean of |predicted - measured| /
 * measured; the sign is in the two means). A warning when fewer than 2
 * budgets remain, since a single budget hardly constrains the law.
 * SS_EINVAL when flops (or, on a held-out point, params, tokens or loss)
 * is missing or not positive, or when every point is at one budget; the
 * refit's own errors are passed on with the held-out budget named. */
int fit_extrapolation_check(const fit_point *pts, int n, const fit_options *opt, fit_result *out,
                            char *err, size_t errlen) {
  fit_result_init(out, "chinchilla");
  if (!pts || n < 1)
    return fail(err, errlen, "extrapolation check: no points");
  double cmax, lcut;
  int rc = check_flops(pts, n, &cmax, err, errlen);
  if (rc)
    return rc;
  int nbud = budgets_of(pts, n, &lcut);
  if (nbud < 2)
    return fail(
        err, errlen,
        "extrapolation check: all %d points at one compute budget (C = %g); nothing to hold out", n,
        cmax);
  fit_point *rest = malloc(sizeof(fit_point) * n);
  int nrest, nhold;
  double hold_lc;
  rc = hold_out(pts, n, lcut, rest, &nrest, &nhold, &hold_lc, err, errlen);
  if (rc) {
    free(rest);
    return rc;
  }
  rc = fit_chinchilla(rest, nrest, opt, out, err, errlen);
  free(rest);
  if (rc) {
    size_t used = strlen(err);
    if (used + 1 < errlen)
      snprintf(err + used, errlen - used, " (refitting without the largest budget, C = %.3g)",
               exp(hold_lc));
    return rc;
  }
  if (nbud - 1 < 2)
    fit_result_warn(out, "extrapolation check: only 1 compute budget left after holding out the "
                         "largest; the prediction is weakly constrained");
  predict(pts, n, lcut, nhold, hold_lc, out);
  return 0;
}

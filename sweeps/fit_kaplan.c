/* Kaplan single-variable laws L(X) = E + (X_c / X)^alpha_X, X in {N, D, C}
 * (SCIENCE.md section 2), fitted by least squares on ln L. */
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

#define NVARS 3
#define PER_VAR 3 /* X_c, alpha_X, E_X in the flat vector of fitted values */

static const char *const var_name[NVARS] = {"N", "D", "C"};
static const char *const var_column[NVARS] = {"params", "tokens", "flops"};

static double var_value(const fit_point *p, int v) {
  return v == 0 ? p->params : v == 1 ? p->tokens : p->flops;
}

/* One variable's data: t = ln X - mean ln X (centred so that the intercept
 * and the exponent are nearly uncorrelated), y = ln L. In these
 * coordinates ln L = ln(E + exp(k - alpha t)) and ln X_c = xm + k / alpha. */
typedef struct series {
  int m;
  const double *t, *y;
} series;

/* theta = (s, k, alpha) with E = s^2, so that E >= 0 needs no bound.
 * ln L = LSE(ln E, z), z = k - alpha t; w_pow and w_e are the softmax
 * weights' building blocks: d lnL/dz = exp(z - lse), d lnL/dE = exp(-lse). */
static double log_e(const double *th) { return th[0] == 0 ? -INFINITY : log(th[0] * th[0]); }

static void model(const double *th, double le, double t, double *lse, double *w_pow, double *w_e) {
  double z = th[1] - th[2] * t;
  *lse = fmax(le, z) + log1p(exp(-fabs(le - z)));
  *w_pow = exp(z - *lse);
  *w_e = exp(-*lse);
}

static int resid_f(const gsl_vector *x, void *data, gsl_vector *f) {
  const series *s = data;
  const double th[3] = {gsl_vector_get(x, 0), gsl_vector_get(x, 1), gsl_vector_get(x, 2)};
  double le = log_e(th);
  for (int i = 0; i < s->m; i++) {
    double z = th[1] - th[2] * s->t[i];
    gsl_vector_set(f, i, fmax(le, z) + log1p(exp(-fabs(le - z))) - s->y[i]);
  }
  return GSL_SUCCESS;
}

static int resid_df(const gsl_vector *x, void *data, gsl_matrix *J) {
  const series *s = data;
  const double th[3] = {gsl_vector_get(x, 0), gsl_vector_get(x, 1), gsl_vector_get(x, 2)};
  double le = log_e(th);
  for (int i = 0; i < s->m; i++) {
    double lse, wp, we;
    model(th, le, s->t[i], &lse, &wp, &we);
    gsl_matrix_set(J, i, 0, 2 * th[0] * we);
    gsl_matrix_set(J, i, 1, wp);
    gsl_matrix_set(J, i, 2, -s->t[i] * wp);
  }
  return GSL_SUCCESS;
}

static double sse(const series *s, const double *th) {
  double acc = 0, le = log_e(th);
  for (int i = 0; i < s->m; i++) {
    double lse, wp, we;
    model(th, le, s->t[i], &lse, &wp, &we);
    acc += (lse - s->y[i]) * (lse - s->y[i]);
  }
  return acc;
}

typedef struct law_fit {
  double th[3]; /* s, k, alpha */
  double sse;
  double lnxc;
  int converged;
  int e_at_bound;
} law_fit;

/* E = 0 is a straight line in (t, y): ordinary least squares. */
static void fit_e0(const series *s, law_fit *lf) {
  double c0, c1, cov00, cov01, cov11, sumsq;
  gsl_fit_linear(s->t, 1, s->y, 1, s->m, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
  lf->th[0] = 0;
  lf->th[1] = c0;
  lf->th[2] = -c1;
  lf->sse = sse(s, lf->th);
  lf->converged = isfinite(lf->sse);
  lf->e_at_bound = 1;
}

/* Levenberg-Marquardt from th0; replaces *best when it finds a lower
 * objective. Converged: LM stopped on its tolerances, or the gradient
 * vanishes at the end, or a converged candidate it replaces had the same
 * objective to 1e-10 (the same optimum, reached from another side). */
static void lm_from(const series *s, gsl_multifit_nlinear_workspace *w,
                    gsl_multifit_nlinear_fdf *fdf, const double *th0, double lmin, law_fit *best) {
  if (!isfinite(th0[0]) || !isfinite(th0[1]) || !isfinite(th0[2]))
    return;
  gsl_vector_const_view x0 = gsl_vector_const_view_array(th0, 3);
  gsl_multifit_nlinear_init(&x0.vector, fdf, w);
  int info;
  int status = gsl_multifit_nlinear_driver(300, 1e-12, 1e-12, 0, NULL, NULL, &info, w);
  gsl_vector *x = gsl_multifit_nlinear_position(w);
  double th[3] = {fabs(gsl_vector_get(x, 0)), gsl_vector_get(x, 1), gsl_vector_get(x, 2)};
  double obj = sse(s, th);
  if (!(obj < best->sse))
    return;
  double gmax = 0;
  for (int p = 0; p < 3; p++)
    gmax = fmax(gmax, fabs(gsl_vector_get(w->g, p)));
  int same = best->converged && best->sse - obj <= 1e-10 * best->sse;
  best->sse = obj;
  memcpy(best->th, th, sizeof th);
  best->converged = status == GSL_SUCCESS || gmax <= 1e-9 * (1 + obj) || same;
  best->e_at_bound = th[0] * th[0] <= 1e-8 * lmin;
}

/* With E. Candidates: the E = 0 line (the optimum may sit on the bound,
 * where d/ds = 0 keeps LM from reaching it exactly), then LM from `start`
 * (a previous optimum, for bootstrap refits) when given, and, when that
 * is absent or does not converge, from several starts: E at fractions of
 * the smallest loss with (k, alpha) from the straight line through
 * ln(L - E). The lowest objective wins. The E = 0 candidate counts as
 * converged when raising E from 0 does not lower the objective (the KKT
 * condition at the bound). */
static void fit_e(const series *s, const double *start, law_fit *best) {
  fit_e0(s, best);
  double ymin = INFINITY;
  for (int i = 0; i < s->m; i++)
    ymin = fmin(ymin, s->y[i]);
  double lmin = exp(ymin);
  /* d SSE / dE at E = 0 is sum 2 r_i / L_fit_i */
  double dE = 0;
  for (int i = 0; i < s->m; i++) {
    double lse, wp, we;
    model(best->th, -INFINITY, s->t[i], &lse, &wp, &we);
    dE += 2 * (lse - s->y[i]) * we;
  }
  best->converged = dE >= -1e-9 * (1 + best->sse);

  gsl_multifit_nlinear_parameters par = gsl_multifit_nlinear_default_parameters();
  gsl_multifit_nlinear_workspace *w =
      gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &par, s->m, 3);
  gsl_multifit_nlinear_fdf fdf = {
      .f = resid_f, .df = resid_df, .fvv = NULL, .n = s->m, .p = 3, .params = (void *)s};
  if (start) {
    double th0[3] = {start[0], start[1], start[2]};
    if (th0[0] * th0[0] < 0.01 * lmin)
      th0[0] = sqrt(0.01 * lmin);
    lm_from(s, w, &fdf, th0, lmin, best);
  }
  if (!start || !best->converged) {
    static const double frac[] = {0.1, 0.3, 0.5, 0.7, 0.9, 0.97};
    double *ly = malloc(sizeof(double) * s->m);
    for (size_t j = 0; j < sizeof frac / sizeof frac[0]; j++) {
      double e = frac[j] * lmin;
      for (int i = 0; i < s->m; i++)
        ly[i] = log(exp(s->y[i]) - e);
      double c0, c1, cov00, cov01, cov11, sumsq;
      gsl_fit_linear(s->t, 1, ly, 1, s->m, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
      double th0[3] = {sqrt(e), c0, -c1};
      lm_from(s, w, &fdf, th0, lmin, best);
    }
    free(ly);
  }
  gsl_multifit_nlinear_free(w);
}

static int count_distinct(const double *t, int m, int cap) {
  double seen[4];
  int k = 0;
  for (int i = 0; i < m && k < cap; i++) {
    int j = 0;
    while (j < k && seen[j] != t[i])
      j++;
    if (j == k)
      seen[k++] = t[i];
  }
  return k;
}

/* Fits variable v on the points idx[0..m): q gets X_c, alpha, E (E = NAN
 * when not fitted, all NAN when the points have too few distinct X). start
 * (s, ln X_c, alpha; may be NULL) is an extra starting point; lf and resid
 * (m entries, ln L residuals) may be NULL. */
static void fit_var(const fit_point *pts, const int *idx, int m, int v, int with_e,
                    const double *start, double *q, law_fit *out_lf, double *resid) {
  double *t = malloc(sizeof(double) * m), *y = malloc(sizeof(double) * m);
  double xm = 0;
  for (int i = 0; i < m; i++) {
    t[i] = log(var_value(&pts[idx[i]], v));
    y[i] = log(pts[idx[i]].loss);
    xm += t[i];
  }
  xm /= m;
  for (int i = 0; i < m; i++)
    t[i] -= xm;
  law_fit lf = {{NAN, NAN, NAN}, NAN, NAN, 0, 0};
  series s = {m, t, y};
  if (count_distinct(t, m, 3) >= (with_e ? 3 : 2)) {
    if (with_e) {
      double th0[3];
      if (start) {
        th0[0] = start[0];
        th0[1] = start[2] * (start[1] - xm);
        th0[2] = start[2];
      }
      fit_e(&s, start ? th0 : NULL, &lf);
    } else {
      fit_e0(&s, &lf);
    }
  }
  lf.lnxc = xm + lf.th[1] / lf.th[2];
  q[0] = exp(lf.lnxc);
  q[1] = lf.th[2];
  q[2] = with_e ? lf.th[0] * lf.th[0] : NAN;
  if (resid)
    for (int i = 0; i < m; i++) {
      double lse, wp, we;
      model(lf.th, log_e(lf.th), t[i], &lse, &wp, &we);
      resid[i] = lse - y[i];
    }
  if (out_lf)
    *out_lf = lf;
  free(t);
  free(y);
}

/* Fits L(X) = E + (X_c / X)^alpha_X for each X among N (params), D (tokens)
 * and C (flops) that every point carries, by least squares on ln L (the
 * losses' noise is roughly relative, and this matches the Chinchilla fit's
 * log-loss objective). E = 0 (Kaplan's form): ordinary least squares of
 * ln L on ln X, exact. opt->fit_irreducible: E >= 0 fitted as well,
 * Levenberg-Marquardt (GSL) from several starts, the E = 0 line included;
 * a warning says when E ends on its bound 0.
 *
 * params per variable, in the order N, D, C: X_c, alpha_X, and E_X when
 * fitted (N_c, alpha_N, E_N, D_c, ...). A variable present at only some
 * points, or with too few distinct values (2, or 3 with E), is skipped with
 * a warning; SS_EINVAL when loss is missing or not positive at any point,
 * when fewer than (parameters + 2) points are given, or when no variable
 * can be fitted.
 *
 * objective: the sum over fitted variables of the squared ln L residuals.
 * residuals: ln L_fit - ln L of the first fitted variable (N, else D, else
 * C). converged: every fit converged (see fit_e). opt->bootstrap > 0:
 * stderr and 95% percentile intervals over resamples of whole runs. */
/* One bootstrap resample: every variable refitted from the full-data fit. */
typedef struct boot_ctx {
  const fit_point *pts;
  const int *use;
  int need, with_e;
  double (*start)[3];
} boot_ctx;

static void boot_one(void *ctx, const int *idx, int m, double *row) {
  const boot_ctx *c = ctx;
  for (int v = 0; v < NVARS; v++)
    if (c->use[v] && m >= c->need)
      fit_var(c->pts, idx, m, v, c->with_e, c->start[v], row + PER_VAR * v, NULL, NULL);
}

/* Whether variable v can be fitted: 1, or 0 with the reason in why (and a
 * warning when the variable is there but unusable), or SS_EINVAL at a value
 * that is not positive */
static int usable_var(const fit_point *pts, int n, int v, int with_e, char why[96], fit_result *out,
                      char *err, size_t errlen) {
  int present = 0, distinct = 0;
  double first = NAN;
  why[0] = 0;
  for (int i = 0; i < n; i++) {
    double x = var_value(&pts[i], v);
    if (isnan(x))
      continue;
    if (!(x > 0) || !isfinite(x))
      return fit__fail(err, errlen, "kaplan: point %d: %s = %g, expected a positive number", i + 1,
                       var_column[v], x);
    if (present++ == 0)
      first = x;
    else if (x != first && distinct < 3)
      distinct++;
  }
  distinct += present > 0;
  if (present == 0) {
    snprintf(why, 96, "no %s", var_column[v]);
    return 0;
  }
  if (present < n)
    snprintf(why, 96, "%s missing at %d of %d points", var_column[v], n - present, n);
  else if (distinct < (with_e ? 3 : 2) && distinct == 1)
    snprintf(why, 96, "all points at one %s (%g)", var_name[v], first);
  else if (distinct < (with_e ? 3 : 2))
    snprintf(why, 96, "only 2 distinct values of %s, E needs 3", var_name[v]);
  else
    return 1;
  fit_result_warn(out, "L(%s) not fitted: %s", var_name[v], why);
  return 0;
}

/* Variable v fitted on all the points: its parameters (into q and slot),
 * objective, residuals (the first variable fitted) and warnings */
static void fit_one(const fit_point *pts, const int *all, int n, int v, int with_e, double *q,
                    law_fit *lf, fit_param **slot, fit_result *out) {
  double *resid = NULL;
  if (!out->residuals)
    resid = out->residuals = malloc(sizeof(double) * n);
  fit_var(pts, all, n, v, with_e, NULL, q, lf, resid);
  char name[24];
  snprintf(name, sizeof name, "%s_c", var_name[v]);
  slot[0] = fit_result_add_param(out, name, q[0]);
  snprintf(name, sizeof name, "alpha_%s", var_name[v]);
  slot[1] = fit_result_add_param(out, name, q[1]);
  if (with_e) {
    snprintf(name, sizeof name, "E_%s", var_name[v]);
    slot[2] = fit_result_add_param(out, name, q[2]);
    if (lf->e_at_bound)
      fit_result_warn(out, "E_%s is at its bound 0: the data show no irreducible loss",
                      var_name[v]);
  }
  out->objective += lf->sse;
  if (!lf->converged) {
    out->converged = 0;
    fit_result_warn(out, "L(%s): the optimiser did not converge; the best point found is reported",
                    var_name[v]);
  }
  if (!(lf->th[2] > 0))
    fit_result_warn(out, "alpha_%s = %g: loss does not fall with %s", var_name[v], lf->th[2],
                    var_name[v]);
}

int fit_kaplan(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
               size_t errlen) {
  fit_result_init(out, "kaplan");
  int with_e = opt && opt->fit_irreducible;
  int need = (with_e ? 3 : 2) + 2;
  if (!pts || n < need)
    return fit__fail(err, errlen, "kaplan: %d point%s; L(X) = %s(X_c/X)^alpha needs at least %d", n,
                     n == 1 ? "" : "s", with_e ? "E + " : "", need);
  for (int i = 0; i < n; i++) {
    if (isnan(pts[i].loss))
      return fit__fail(err, errlen, "kaplan: loss missing at point %d (the law needs column loss)",
                       i + 1);
    if (!(pts[i].loss > 0) || !isfinite(pts[i].loss))
      return fit__fail(err, errlen, "kaplan: point %d: loss = %g, expected a positive number",
                       i + 1, pts[i].loss);
  }
  int use[NVARS] = {0};
  int nuse = 0;
  char why[NVARS][96];
  for (int v = 0; v < NVARS; v++) {
    use[v] = usable_var(pts, n, v, with_e, why[v], out, err, errlen);
    if (use[v] < 0)
      return use[v];
    nuse += use[v];
  }
  if (!nuse) {
    out->nwarnings = 0;
    return fit__fail(err, errlen, "kaplan: nothing to fit: %s; %s; %s", why[0], why[1], why[2]);
  }

  int *all = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  int nq = PER_VAR * NVARS;
  double q[PER_VAR * NVARS];
  law_fit lf[NVARS];
  fit_param *slot[PER_VAR * NVARS] = {0};
  out->n_points = n;
  out->converged = 1;
  out->objective = 0;
  for (int v = 0; v < NVARS; v++)
    if (use[v])
      fit_one(pts, all, n, v, with_e, q + PER_VAR * v, &lf[v], slot + PER_VAR * v, out);

  int nb = opt ? opt->bootstrap : 0;
  if (nb > 0) {
    double start[NVARS][3];
    for (int v = 0; v < NVARS; v++)
      if (use[v]) {
        start[v][0] = lf[v].th[0];
        start[v][1] = lf[v].lnxc;
        start[v][2] = lf[v].th[2];
      }
    boot_ctx bc = {pts, use, need, with_e, start};
    fit__boot_finish(out, fit__bootstrap(pts, n, opt, nq, boot_one, &bc), nb, nq, slot, "");
  }
  free(all);
  return 0;
}

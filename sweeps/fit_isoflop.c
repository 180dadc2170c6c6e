/* Chinchilla Approach 2, IsoFLOP profiles (SCIENCE.md section 2): a
 * parabola in ln N per compute budget, then power laws in C for the
 * vertices. */
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_rng.h>
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

/* Points whose ln C lie within this of the smallest ln C of their budget
 * share the budget (5% in C): a planner that rounds D to whole batches, or
 * counts FLOPs exactly rather than as 6ND, moves a run's C by a fraction of
 * that, while budgets closer than 5% could not be told apart by the fit. */
#define BUDGET_LN_TOL 0.05
#define MIN_PER_BUDGET 3 /* a parabola has 3 coefficients */
#define NPARAMS 4        /* a, b, n_coef, d_coef */
/* A vertex within this fraction of either end of its budget's sampled ln N
 * range is "off-centre". */
#define OUTER 0.25
/* Drift: the vertex's offset from the centre of the sampled range, in units
 * of the half-range, changing by more than this between the smallest and
 * the largest usable budget (from the least-squares slope of offset on
 * ln C, so one noisy budget weighs less than the trend). */
#define DRIFT_TOL 0.25
/* Narrow sampling: the parabola rising less than this fraction of the loss
 * at its vertex over the sampled half-range (c2 half^2 < NARROW_RISE lv).
 * With k sizes evenly over +-w in ln N and independent noise of SD sigma on
 * L, the vertex's standard error is about sigma / (3.5 rise) of the
 * half-range (7 sizes), so under run-to-run noise of ~0.3% of the loss a
 * 1% rise already leaves N* uncertain by a tenth of the half-range; noise-
 * free data say nothing about sigma, hence a threshold on the design. */
#define NARROW_RISE 0.01
/* Poorly determined vertex: with 2 or more residual degrees of freedom, its
 * standard error (delta method on the regression's covariance) above this
 * fraction of the sampled half-range in ln N. */
#define VERTEX_SE 0.25

typedef struct profile {
  double c2, c1, c0; /* L = c2 x^2 + c1 x + c0, x = ln N */
  double xv, lv;     /* vertex */
  double xv_se;      /* its standard error (NAN with fewer than 2 residual dof) */
  double xmin, xmax; /* sampled range */
  double sse;
  int fitted, usable;
  int curved; /* c2 > 0 beyond rounding */
} profile;

/* Ordinary least squares of y on (1, t, t^2), t = x - mean x for
 * conditioning; coefficients then expressed in x. Needs 3 distinct x. */
static void fit_profile(const double *x, const double *y, int m, profile *pr) {
  memset(pr, 0, sizeof *pr);
  pr->c2 = pr->c1 = pr->c0 = pr->xv = pr->lv = pr->sse = pr->xv_se = NAN;
  pr->xmin = INFINITY;
  pr->xmax = -INFINITY;
  double xm = 0;
  for (int i = 0; i < m; i++) {
    xm += x[i];
    pr->xmin = fmin(pr->xmin, x[i]);
    pr->xmax = fmax(pr->xmax, x[i]);
  }
  xm /= m;
  double seen[3];
  int distinct = 0;
  for (int i = 0; i < m && distinct < 3; i++) {
    int j = 0;
    while (j < distinct && seen[j] != x[i])
      j++;
    if (j == distinct)
      seen[distinct++] = x[i];
  }
  if (m < MIN_PER_BUDGET || distinct < 3)
    return;
  gsl_matrix *X = gsl_matrix_alloc(m, 3);
  gsl_vector_const_view yv = gsl_vector_const_view_array(y, m);
  gsl_vector *c = gsl_vector_alloc(3);
  gsl_matrix *cov = gsl_matrix_alloc(3, 3);
  for (int i = 0; i < m; i++) {
    double t = x[i] - xm;
    gsl_matrix_set(X, i, 0, 1);
    gsl_matrix_set(X, i, 1, t);
    gsl_matrix_set(X, i, 2, t * t);
  }
  double chisq;
  gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc(m, 3);
  gsl_multifit_linear(X, &yv.vector, c, cov, &chisq, ws);
  gsl_multifit_linear_free(ws);
  double a0 = gsl_vector_get(c, 0), a1 = gsl_vector_get(c, 1), a2 = gsl_vector_get(c, 2);
  /* xv = xm - a1 / (2 a2): gradient (-1 / (2 a2), a1 / (2 a2^2)) in (a1, a2) */
  double v11 = gsl_matrix_get(cov, 1, 1), v12 = gsl_matrix_get(cov, 1, 2),
         v22 = gsl_matrix_get(cov, 2, 2), ratio = a1 / a2;
  double var_xv = (v11 - 2 * ratio * v12 + ratio * ratio * v22) / (4 * a2 * a2);
  gsl_matrix_free(X);
  gsl_vector_free(c);
  gsl_matrix_free(cov);
  pr->fitted = 1;
  pr->sse = chisq;
  pr->c2 = a2;
  pr->c1 = a1 - 2 * a2 * xm;
  pr->c0 = a0 - a1 * xm + a2 * xm * xm;
  /* A curvature that changes the loss by less than 1e-12 of its size over
   * the sampled range is rounding, not a minimum. */
  double half = (pr->xmax - pr->xmin) / 2;
  pr->curved = a2 * half * half > 1e-12 * fabs(a0);
  if (pr->curved) {
    pr->xv = xm - a1 / (2 * a2);
    pr->lv = a0 - a1 * a1 / (4 * a2);
    pr->usable = pr->xv >= pr->xmin && pr->xv <= pr->xmax;
    if (m - 3 >= 2 && var_xv >= 0)
      pr->xv_se = sqrt(var_xv);
  }
}

/* Contract in fit.h. The profile's shape up to a constant and a positive
 * factor, which move neither the least-squares parabola's vertex nor
 * anything else that fit_profile decides. */
double fit_isoflop_vertex_offset(double alpha, double beta, const double *z, int k) {
  double y[64], x[64];
  if (k < 3 || k > 64 || !(alpha > 0) || !(beta > 0))
    return NAN;
  for (int i = 0; i < k; i++) {
    x[i] = z[i];
    y[i] = beta * exp(-alpha * z[i]) + alpha * exp(beta * z[i]);
  }
  profile pr;
  fit_profile(x, y, k, &pr);
  return pr.curved ? pr.xv : NAN;
}

typedef struct budgets {
  int nb;
  double lnc[FIT_MAX_BUDGETS]; /* mean ln C */
  int start[FIT_MAX_BUDGETS + 1];
  int *idx; /* point indices ordered by budget */
} budgets;

typedef struct line {
  double c0, c1, var0, var1, sumsq;
  int n;
} line;

/* Profiles every budget from x = ln N, y = L (per budget, budget order) and
 * regresses ln N*, ln D* on ln C over the usable ones; q gets a, b, n_coef,
 * d_coef (NAN with fewer than 2 usable budgets). pr (nb entries) and the
 * two lines may be NULL. */
static void fit_all(const budgets *bs, const double *x, const double *y, double *q, profile *pr_out,
                    line *ln_n, line *ln_d) {
  double lc[FIT_MAX_BUDGETS], yn[FIT_MAX_BUDGETS], yd[FIT_MAX_BUDGETS];
  int nu = 0;
  for (int j = 0; j < bs->nb; j++) {
    profile pr;
    int s = bs->start[j], m = bs->start[j + 1] - s;
    fit_profile(x + s, y + s, m, &pr);
    if (pr_out)
      pr_out[j] = pr;
    if (pr.usable) {
      lc[nu] = bs->lnc[j];
      yn[nu] = pr.xv;
      yd[nu] = bs->lnc[j] - log(6.0) - pr.xv;
      nu++;
    }
  }
  for (int k = 0; k < NPARAMS; k++)
    q[k] = NAN;
  line l[2] = {{NAN, NAN, NAN, NAN, NAN, nu}, {NAN, NAN, NAN, NAN, NAN, nu}};
  if (nu >= 2) {
    for (int w = 0; w < 2; w++) {
      double cov01;
      gsl_fit_linear(lc, 1, w ? yd : yn, 1, nu, &l[w].c0, &l[w].c1, &l[w].var0, &cov01, &l[w].var1,
                     &l[w].sumsq);
    }
    q[0] = l[0].c1;
    q[1] = l[1].c1;
    q[2] = exp(l[0].c0);
    q[3] = exp(l[1].c0);
  }
  if (ln_n)
    *ln_n = l[0];
  if (ln_d)
    *ln_d = l[1];
}

static void set_interval(fit_param *p, double se, double dof, int lognormal) {
  if (!(se >= 0) || dof < 1)
    return;
  double t = gsl_cdf_tdist_Pinv(0.975, dof);
  p->stderr_ = lognormal ? se * p->value : se;
  p->ci_lo = lognormal ? p->value * exp(-t * se) : p->value - t * se;
  p->ci_hi = lognormal ? p->value * exp(t * se) : p->value + t * se;
}

static int cmp_lnc(const void *a, const void *b, void *ctx) {
  const fit_point *p = ctx;
  double x = p[*(const int *)a].flops, y = p[*(const int *)b].flops;
  return (x > y) - (x < y);
}

/* Groups points into compute budgets: sorted by C, a new budget starts
 * where ln C exceeds the current budget's smallest by more than
 * BUDGET_LN_TOL. Returns the number of budgets, or -1 when there are more
 * than FIT_MAX_BUDGETS. */
static int group_budgets(const fit_point *pts, int n, budgets *bs) {
  bs->idx = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++)
    bs->idx[i] = i;
  qsort_r(bs->idx, n, sizeof(int), cmp_lnc, (void *)pts);
  bs->nb = 0;
  double first = 0;
  for (int i = 0; i < n; i++) {
    double l = log(pts[bs->idx[i]].flops);
    if (i == 0 || l - first > BUDGET_LN_TOL) {
      if (bs->nb == FIT_MAX_BUDGETS)
        return -1;
      bs->start[bs->nb++] = i;
      first = l;
    }
  }
  bs->start[bs->nb] = n;
  for (int j = 0; j < bs->nb; j++) {
    double s = 0;
    for (int i = bs->start[j]; i < bs->start[j + 1]; i++)
      s += log(pts[bs->idx[i]].flops);
    bs->lnc[j] = s / (bs->start[j + 1] - bs->start[j]);
  }
  return bs->nb;
}

/* Replicates: points of one budget at the same N (1e-9 relative, a round
 * trip through decimal text), batch size and learning rate (NAN: not
 * known, equal to another unknown) differ only by seed. */
static int same_n(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

static int same_key(double a, double b) {
  return isnan(a) || isnan(b) ? isnan(a) && isnan(b) : same_n(a, b);
}

static int same_cell(const fit_point *a, const fit_point *b) {
  return same_n(a->params, b->params) && same_key(a->batch_size, b->batch_size) &&
         same_key(a->lr, b->lr);
}

typedef struct cells {
  budgets cb;  /* budgets over cells: cb.start indexes cells */
  double *x;   /* per cell: ln N */
  double *y;   /* per cell: mean L */
  int *start;  /* per cell: first of its members in mem (ncells + 1) */
  double *mem; /* members' L, cell by cell */
  int ncells;
} cells;

typedef struct order_ctx {
  const double *x;      /* ln N, in budget order */
  const fit_point *pts; /* the points */
  const int *idx;       /* budget order -> point */
} order_ctx;

static int key_order(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b) ? 0 : isnan(a) ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* By ln N, then batch size and learning rate (so that one cell's points
 * are contiguous), then index. */
static int by_x(const void *a, const void *b, void *ctx) {
  const order_ctx *o = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (o->x[i] != o->x[j])
    return o->x[i] < o->x[j] ? -1 : 1;
  const fit_point *p = &o->pts[o->idx[i]], *q = &o->pts[o->idx[j]];
  int c = key_order(p->batch_size, q->batch_size);
  if (!c)
    c = key_order(p->lr, q->lr);
  return c ? c : (i > j) - (i < j);
}

static void cells_free(cells *c) {
  free(c->x), free(c->y), free(c->start), free(c->mem);
  memset(c, 0, sizeof *c);
}

/* Collapses each budget's points (x = ln N, y = L, in budget order) into
 * cells of equal N. Returns 1 when some cell has 2 or more points (c
 * filled, the caller frees with cells_free), 0 when none has (c empty), or
 * SS_ENOMEM. n_cells and seed_sd per budget into out's budgets (seed_sd
 * NAN where no size is replicated). */
static int cells_build(const budgets *bs, const fit_point *pts, const double *x, const double *y,
                       int n, cells *c, fit_result *out) {
  memset(c, 0, sizeof *c);
  int *ord = malloc(sizeof(int) * (size_t)n);
  c->x = malloc(sizeof(double) * (size_t)n);
  c->y = malloc(sizeof(double) * (size_t)n);
  c->start = malloc(sizeof(int) * (size_t)(n + 1));
  c->mem = malloc(sizeof(double) * (size_t)n);
  if (!ord || !c->x || !c->y || !c->start || !c->mem) {
    free(ord);
    cells_free(c);
    return SS_ENOMEM;
  }
  int replicated = 0, m = 0;
  c->cb.nb = bs->nb;
  c->cb.idx = NULL;
  for (int j = 0; j < bs->nb; j++) {
    int s = bs->start[j], e = bs->start[j + 1];
    c->cb.lnc[j] = bs->lnc[j];
    c->cb.start[j] = c->ncells;
    for (int i = s; i < e; i++)
      ord[i] = i;
    order_ctx oc = {x, pts, bs->idx};
    qsort_r(ord + s, (size_t)(e - s), sizeof(int), by_x, &oc);
    double ss = 0;
    int df = 0;
    for (int a = s, b; a < e; a = b) {
      b = a + 1;
      while (b < e && same_cell(&pts[bs->idx[ord[b]]], &pts[bs->idx[ord[a]]]))
        b++;
      int k = c->ncells++;
      double mean = 0;
      c->start[k] = m;
      for (int i = a; i < b; i++) {
        c->mem[m++] = y[ord[i]];
        mean += y[ord[i]];
      }
      mean /= b - a;
      c->x[k] = x[ord[a]];
      c->y[k] = mean;
      for (int i = a; i < b; i++)
        ss += (y[ord[i]] - mean) * (y[ord[i]] - mean);
      df += b - a - 1;
    }
    out->budgets[j].n_cells = c->ncells - c->cb.start[j];
    out->budgets[j].seed_sd = df > 0 ? sqrt(ss / df) : NAN;
    replicated |= df > 0;
  }
  c->cb.start[bs->nb] = c->ncells;
  c->start[c->ncells] = m;
  free(ord);
  if (!replicated)
    cells_free(c);
  return replicated;
}

/* The state of one fit: the points in budget order, their cells, each
 * budget's profile and the two regressions. */
typedef struct isofit {
  budgets bs;
  double *x, *y; /* per point, budget order: ln N, L */
  cells cl;
  int rep; /* cl holds cells (some N is replicated): the parabolas fit their means */
  double q[NPARAMS];
  profile pr[FIT_MAX_BUDGETS];
  line ln_n, ln_d;
  int nu; /* usable budgets */
} isofit;

static void isofit_free(isofit *f) {
  cells_free(&f->cl);
  free(f->x);
  free(f->y);
  free(f->bs.idx);
}

/* params, flops and loss on every point, positive, at more than one N */
static int check_points(const fit_point *pts, int n, char *err, size_t errlen) {
  static const char *const cols = "params, flops and loss";
  for (int i = 0; i < n; i++) {
    const fit_point *p = &pts[i];
    const char *name[3] = {"params", "flops", "loss"};
    double v[3] = {p->params, p->flops, p->loss};
    for (int k = 0; k < 3; k++) {
      if (isnan(v[k]))
        return fit__fail(err, errlen, "isoflop: %s missing at point %d (the law needs %s)", name[k],
                         i + 1, cols);
      if (!(v[k] > 0) || !isfinite(v[k]))
        return fit__fail(err, errlen, "isoflop: point %d: %s = %g, expected a positive number",
                         i + 1, name[k], v[k]);
    }
  }
  int one_n = 1;
  for (int i = 1; i < n; i++)
    if (pts[i].params != pts[0].params)
      one_n = 0;
  if (one_n)
    return fit__fail(
        err, errlen,
        "isoflop: all %d points at one N (%g); each budget needs 3 or more model sizes", n,
        pts[0].params);
  return 0;
}

/* group_budgets, with the law's 2 budgets at least; bs->idx freed on an
 * error */
static int find_budgets(const fit_point *pts, int n, budgets *bs, char *err, size_t errlen) {
  int nb = group_budgets(pts, n, bs);
  if (nb < 0) {
    free(bs->idx);
    return fit__fail(
        err, errlen,
        "isoflop: more than %d compute budgets (points whose flops differ by more than 5%% "
        "are different budgets)",
        FIT_MAX_BUDGETS);
  }
  if (nb < 2) {
    free(bs->idx);
    return fit__fail(
        err, errlen,
        "isoflop: all %d points at one compute budget (C = %g); the law needs 2 or more", n,
        pts[0].flops);
  }
  return 0;
}

/* The pooled seed noise of ln L into s, a cell being one budget, one N,
 * one batch size and learning rate. 0 or SS_ENOMEM. */
static int pool_seeds(const budgets *bs, const fit_point *pts, const double *y, int n,
                      fit_seeds *s) {
  double *lny = malloc(sizeof(double) * n), *kk = malloc(sizeof(double) * 4 * n);
  if (!lny || !kk) {
    free(lny), free(kk);
    return SS_ENOMEM;
  }
  const double *keys[4] = {kk, kk + n, kk + 2 * n, kk + 3 * n};
  for (int j = 0; j < bs->nb; j++)
    for (int i = bs->start[j]; i < bs->start[j + 1]; i++) {
      const fit_point *p = &pts[bs->idx[i]];
      lny[i] = log(y[i]);
      kk[i] = j + 1;
      kk[n + i] = p->params;
      kk[2 * n + i] = p->batch_size;
      kk[3 * n + i] = p->lr;
    }
  int rc = fit__seed_pool(keys, 4, lny, n, s);
  free(lny), free(kk);
  return rc ? SS_ENOMEM : 0;
}

/* x, y in budget order, the cells, the seed noise (out's budgets and
 * seeds); 0 or SS_ENOMEM */
static int load_points(isofit *f, const fit_point *pts, int n, fit_result *out) {
  const budgets *bs = &f->bs;
  f->x = malloc(sizeof(double) * n);
  f->y = malloc(sizeof(double) * n);
  if (!f->x || !f->y)
    return SS_ENOMEM;
  for (int i = 0; i < n; i++) {
    f->x[i] = log(pts[bs->idx[i]].params);
    f->y[i] = pts[bs->idx[i]].loss;
  }
  for (int j = 0; j < bs->nb; j++) {
    out->budgets[j].n_opt_lo = out->budgets[j].n_opt_hi = out->budgets[j].seed_sd = NAN;
    out->budgets[j].n_cells = 0;
  }
  f->rep = cells_build(bs, pts, f->x, f->y, n, &f->cl, out);
  if (f->rep < 0)
    return SS_ENOMEM;
  return pool_seeds(bs, pts, f->y, n, &out->seeds);
}

/* A usable budget's warnings: off-centre, narrow sampling, or a poorly
 * determined vertex. */
static void warn_sampling(fit_result *out, double c, double n_opt, const profile *p) {
  double pos = (p->xv - p->xmin) / (p->xmax - p->xmin);
  if (pos < OUTER || pos > 1 - OUTER)
    fit_result_warn(out,
                    "budget C = %.3g: the optimum N* = %.3g sits at %.0f%% of the sampled ln N "
                    "range [%.3g, %.3g]: sampling off-centre, centre this budget's sizes on N*",
                    c, n_opt, 100 * pos, exp(p->xmin), exp(p->xmax));
  double half = (p->xmax - p->xmin) / 2, rise = p->c2 * half * half / p->lv;
  if (rise < NARROW_RISE)
    fit_result_warn(out,
                    "budget C = %.3g: narrow sampling: over N in [%.3g, %.3g] (%.3gx) the "
                    "parabola rises only %.3g%% of the loss across the half-range, too "
                    "little curvature to locate N* under run-to-run noise; widen this "
                    "budget's sizes",
                    c, exp(p->xmin), exp(p->xmax), exp(p->xmax - p->xmin), 100 * rise);
  else if (p->xv_se > VERTEX_SE * half)
    fit_result_warn(out,
                    "budget C = %.3g: N* poorly determined: the vertex's standard error is "
                    "%.2f of the sampled half-range in ln N (noise against too little "
                    "curvature); widen this budget's sizes or add runs",
                    c, p->xv_se / half);
}

/* Why an unusable budget is */
static void warn_unusable(fit_result *out, double c, int n_points, const profile *p) {
  if (!p->fitted)
    fit_result_warn(out, "budget C = %.3g unusable: %d point%s at fewer than 3 distinct N", c,
                    n_points, n_points == 1 ? "" : "s");
  else if (!p->curved)
    fit_result_warn(out,
                    "budget C = %.3g unusable: the loss profile has no minimum (c2 = %.3g, not "
                    "positive beyond rounding)",
                    c, p->c2);
  else
    fit_result_warn(out,
                    "budget C = %.3g unusable: the parabola's minimum N = %.3g lies outside the "
                    "sampled [%.3g, %.3g]; not extrapolated",
                    c, exp(p->xv), exp(p->xmin), exp(p->xmax));
}

/* out's budgets from the profiles, with their warnings; returns how many
 * are usable */
static int report_budgets(const isofit *f, fit_result *out) {
  int nu = 0;
  for (int j = 0; j < f->bs.nb; j++) {
    fit_budget *b = &out->budgets[j];
    const profile *p = &f->pr[j];
    double c = exp(f->bs.lnc[j]);
    b->flops = c;
    b->n_points = f->bs.start[j + 1] - f->bs.start[j];
    b->usable = p->usable;
    b->c2 = p->c2;
    b->c1 = p->c1;
    b->c0 = p->c0;
    b->n_opt = b->d_opt = b->loss = NAN;
    if (p->usable) {
      nu++;
      b->n_opt = exp(p->xv);
      b->d_opt = c / (6 * b->n_opt);
      b->loss = p->lv;
      warn_sampling(out, c, b->n_opt, p);
    } else {
      warn_unusable(out, c, b->n_points, p);
    }
  }
  return nu;
}

/* Drift (DRIFT_TOL): the usable vertices' offsets from their sampled
 * centres, regressed on ln C */
static void warn_drift(const isofit *f, fit_result *out) {
  double lc[FIT_MAX_BUDGETS], off[FIT_MAX_BUDGETS];
  int k = 0;
  for (int j = 0; j < f->bs.nb; j++)
    if (f->pr[j].usable) {
      const profile *p = &f->pr[j];
      double mid = (p->xmin + p->xmax) / 2, half = (p->xmax - p->xmin) / 2;
      lc[k] = f->bs.lnc[j];
      off[k] = (p->xv - mid) / half;
      k++;
    }
  double c0, c1, cov00, cov01, cov11, sumsq;
  gsl_fit_linear(lc, 1, off, 1, k, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
  double drift = c1 * (lc[k - 1] - lc[0]);
  if (fabs(drift) > DRIFT_TOL)
    fit_result_warn(out,
                    "sampling drifts off-centre across budgets: the optimum moves by %.2f of the "
                    "sampled half-range relative to the centre from C = %.3g to C = %.3g, which "
                    "biases a; centre each budget on the current N_opt(C)",
                    drift, exp(lc[0]), exp(lc[k - 1]));
}

/* L - parabola per point (NAN where its budget had no parabola) */
static double *residuals(const isofit *f, int n) {
  double *r = malloc(sizeof(double) * n);
  for (int j = 0; r && j < f->bs.nb; j++)
    for (int i = f->bs.start[j]; i < f->bs.start[j + 1]; i++) {
      const profile *p = &f->pr[j];
      double lx = f->x[i];
      r[f->bs.idx[i]] = p->fitted ? f->y[i] - (p->c2 * lx * lx + p->c1 * lx + p->c0) : NAN;
    }
  return r;
}

/* One resample by cell: a budget's cells with replacement, each drawn cell
 * whole, by the mean of its points */
static void draw_cells(const cells *cl, gsl_rng *rng, double *bx, double *by) {
  for (int j = 0; j < cl->cb.nb; j++) {
    int s = cl->cb.start[j], m = cl->cb.start[j + 1] - s;
    for (int i = 0; i < m; i++) {
      int c = s + (int)gsl_rng_uniform_int(rng, m);
      int first = cl->start[c], size = cl->start[c + 1] - first;
      double sum = 0;
      for (int k = 0; k < size; k++)
        sum += cl->mem[first + k];
      bx[s + i] = cl->x[c];
      by[s + i] = sum / size;
    }
  }
}

/* One resample by point: a budget's points with replacement */
static void draw_points(const budgets *bs, const double *x, const double *y, gsl_rng *rng,
                        double *bx, double *by) {
  for (int j = 0; j < bs->nb; j++) {
    int s = bs->start[j], m = bs->start[j + 1] - s;
    for (int i = 0; i < m; i++) {
      int r = s + (int)gsl_rng_uniform_int(rng, m);
      bx[s + i] = x[r];
      by[s + i] = y[r];
    }
  }
}

typedef struct boot_ctx {
  const isofit *f;
  int n, by_cell;
} boot_ctx;

/* One resample refitted: the parameters, then each budget's N* */
static void boot_one(void *ctx, gsl_rng *rng, double *row) {
  const boot_ctx *bc = ctx;
  const isofit *f = bc->f;
  double *bx = malloc(sizeof(double) * bc->n), *by = malloc(sizeof(double) * bc->n);
  profile bp[FIT_MAX_BUDGETS];
  if (!bx || !by) {
    free(bx), free(by);
    return;
  }
  if (bc->by_cell) {
    draw_cells(&f->cl, rng, bx, by);
    fit_all(&f->cl.cb, bx, by, row, bp, NULL, NULL);
  } else {
    draw_points(&f->bs, f->x, f->y, rng, bx, by);
    fit_all(&f->bs, bx, by, row, bp, NULL, NULL);
  }
  for (int j = 0; j < f->bs.nb; j++)
    row[NPARAMS + j] = bp[j].usable ? exp(bp[j].xv) : NAN;
  free(bx), free(by);
}

/* The bootstrap's percentiles: the parameters into slot, each usable
 * budget's N* into its n_opt_lo, n_opt_hi */
static void bootstrap(const isofit *f, int n, const fit_options *opt, fit_param *const *slot,
                      fit_result *out) {
  int nboot = opt->bootstrap, nb = f->bs.nb;
  int W = NPARAMS + nb; /* the parameters, then each budget's N* */
  boot_ctx bc = {f, n, f->rep && !opt->boot_by_run};
  double *boot = fit__bootstrap_rng(nboot, W, opt->seed, opt->threads, boot_one, &bc);
  if (!boot) {
    fit_result_warn(out, "bootstrap: out of memory for %d resamples; no intervals", nboot);
    return;
  }
  fit_param *wslot[NPARAMS + FIT_MAX_BUDGETS] = {0};
  for (int k = 0; k < NPARAMS; k++)
    wslot[k] = slot[k];
  int fewest = fit__boot_columns(boot, nboot, W, wslot);
  if (fewest < nboot)
    fit_result_warn(out, "bootstrap: %d of %d resamples left fewer than 2 usable budgets",
                    nboot - fewest, nboot);
  for (int j = 0; j < nb; j++)
    if (f->pr[j].usable) {
      fit_param v = {.ci_lo = NAN, .ci_hi = NAN};
      fit__boot_column(boot, nboot, W, NPARAMS + j, &v);
      out->budgets[j].n_opt_lo = v.ci_lo;
      out->budgets[j].n_opt_hi = v.ci_hi;
    }
  free(boot);
}

/* The parameters a, b, n_coef, d_coef (into slot), whether they could be
 * fitted, and the objective */
static void add_params(const isofit *f, const fit_options *opt, fit_result *out, fit_param **slot) {
  int nu = f->nu;
  slot[0] = fit_result_add_param(out, "a", f->q[0]);
  slot[1] = fit_result_add_param(out, "b", f->q[1]);
  slot[2] = fit_result_add_param(out, "n_coef", f->q[2]);
  slot[3] = fit_result_add_param(out, "d_coef", f->q[3]);
  out->converged = nu >= 2;
  out->objective = nu >= 2 ? f->ln_n.sumsq : NAN;
  if (nu < 2)
    fit_result_warn(out, "only %d usable budget%s: N_opt(C) needs 2 or more", nu,
                    nu == 1 ? "" : "s");
  else if (nu == 2 && !(opt->bootstrap > 0))
    fit_result_warn(out, "only 2 usable budgets: a and b come from two points and have no error "
                         "estimate from the regression");
}

/* Fits IsoFLOP profiles (Chinchilla Approach 2). Needs params (N), flops
 * (C) and loss on every point, at least 6 points (4 parameters + 2) and
 * two compute budgets. Budgets: see group_budgets (a 5% tolerance on C).
 *
 * Per budget, ordinary least squares of L on x = ln N, x^2 (3 distinct N
 * or more); the budget is usable only when c2 > 0 and the vertex lies in
 * its sampled x range; otherwise it is listed unusable with a warning and
 * never extrapolated. N* = exp(vertex), D* = C / (6 N*), loss = the
 * parabola at its vertex. Then ordinary least squares over usable budgets:
 * ln N* = ln n_coef + a ln C, ln D* = ln d_coef + b ln C (so b = 1 - a
 * and d_coef = 1 / (6 n_coef) up to rounding, C = 6 N D being how D* is
 * defined). params: a, b, n_coef, d_coef; with fewer than 2 usable
 * budgets they are NAN and converged is 0 (return value still 0: the
 * budgets are reported).
 *
 * Warnings for off-centre sampling: a usable budget whose vertex lies in
 * the outer quarter of its sampled ln N range; and drift (DRIFT_TOL), the
 * vertex moving relative to the sampled centres across budgets, which is
 * what biases a (a constant offset only shifts n_coef; see
 * fit_isoflop_vertex_offset). For narrow sampling: a usable budget whose
 * parabola rises less than NARROW_RISE of the loss over its half-range, or
 * (otherwise) whose vertex has a standard error above VERTEX_SE of the
 * half-range.
 *
 * Replicates: where a budget has several points at one N (seeds), every
 * budget's parabola is fitted to its per-N mean losses (cells), and the
 * budget reports n_cells and seed_sd (the pooled within-N SD of L);
 * out->seeds pools the SD of ln L over all replicated cells.
 *
 * Intervals: opt->bootstrap > 0, percentiles over resamples of the points
 * within each budget (the budgets themselves are the design, not a
 * sample); with replicates (unless opt->boot_by_run) by cell: a budget's
 * cells with replacement, each drawn cell by the mean of all its points,
 * so the run-to-run noise enters every vertex; each usable
 * budget also gets the percentiles of its N* (n_opt_lo, n_opt_hi).
 * Otherwise t-intervals from the regression (3 usable budgets or more).
 * objective: residual sum of squares of the ln N* regression. residuals:
 * L - parabola per point (NAN where its budget had no parabola). */
int fit_isoflop(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
                size_t errlen) {
  fit_result_init(out, "isoflop");
  opt = fit__options(opt);
  if (!pts || n < NPARAMS + 2)
    return fit__fail(err, errlen,
                     "isoflop: %d point%s; the law (a, b, n_coef, d_coef) needs at least %d", n,
                     n == 1 ? "" : "s", NPARAMS + 2);
  int rc = check_points(pts, n, err, errlen);
  isofit f = {0};
  if (rc || (rc = find_budgets(pts, n, &f.bs, err, errlen)))
    return rc;
  if (load_points(&f, pts, n, out)) {
    isofit_free(&f);
    fit__fail(err, errlen, "isoflop: out of memory for %d points", n);
    return SS_ENOMEM;
  }
  if (f.rep)
    fit_all(&f.cl.cb, f.cl.x, f.cl.y, f.q, f.pr, &f.ln_n, &f.ln_d);
  else
    fit_all(&f.bs, f.x, f.y, f.q, f.pr, &f.ln_n, &f.ln_d);
  out->n_points = n;
  out->nbudgets = f.bs.nb;
  f.nu = report_budgets(&f, out);
  if (f.nu >= 2)
    warn_drift(&f, out);
  fit_param *slot[NPARAMS];
  add_params(&f, opt, out, slot);
  out->residuals = residuals(&f, n);
  if (opt->bootstrap > 0 && f.nu >= 2) {
    bootstrap(&f, n, opt, slot, out);
  } else if (f.nu >= 3) {
    set_interval(slot[0], sqrt(f.ln_n.var1), f.nu - 2, 0);
    set_interval(slot[1], sqrt(f.ln_d.var1), f.nu - 2, 0);
    set_interval(slot[2], sqrt(f.ln_n.var0), f.nu - 2, 1);
    set_interval(slot[3], sqrt(f.ln_d.var0), f.nu - 2, 1);
  }
  isofit_free(&f);
  return 0;
}

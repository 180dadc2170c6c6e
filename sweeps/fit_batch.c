/* Critical batch size from batch ladders (SCIENCE.md section 3): the
 * empirical model S = S_min + E_min / B per target loss, and across target
 * losses B_crit(L) = B* / L^(1/alpha_B). */
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_fit.h>
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

/* Points whose losses agree to this relative tolerance share a target: the
 * losses of one ladder are one number set in the spec, and targets a
 * fraction of a percent apart could not be told apart by a fit anyway. */
#define TARGET_RTOL 1e-3
/* Two parameters (S_min, E_min) plus two. */
#define MIN_LADDER 4
/* Quantities per target in the flat vector of fitted values. */
#define PER_TARGET 3

/* Per-target least squares of S on 1/B with weights 1/S^2 (the noise on S is
 * relative). The covariance from gsl_fit_wlinear assumes the weights are
 * absolute inverse variances; it is rescaled by chisq / (m - 2) because
 * only relative weights are known. Returns 0 when the ladder is unusable. */
typedef struct ladder {
  double s_min, e_min, b_crit;
  double var_s, var_e, cov_se; /* of S_min, E_min */
  int m;                       /* points */
  int dof;
} ladder;

static int fit_ladder(const double *b, const double *s, int m, ladder *lf) {
  memset(lf, 0, sizeof *lf);
  lf->s_min = lf->e_min = lf->b_crit = NAN;
  lf->m = m;
  if (m < MIN_LADDER)
    return 0;
  int distinct = 0;
  for (int i = 1; i < m; i++)
    if (b[i] != b[0])
      distinct = 1;
  if (!distinct)
    return 0;
  double *x = malloc(sizeof(double) * m), *w = malloc(sizeof(double) * m);
  for (int i = 0; i < m; i++) {
    x[i] = 1.0 / b[i];
    w[i] = 1.0 / (s[i] * s[i]);
  }
  double c0, c1, cov00, cov01, cov11, chisq;
  gsl_fit_wlinear(x, 1, w, 1, s, 1, m, &c0, &c1, &cov00, &cov01, &cov11, &chisq);
  free(x);
  free(w);
  double scale = chisq / (m - 2);
  lf->s_min = c0;
  lf->e_min = c1;
  lf->b_crit = c1 / c0;
  lf->var_s = cov00 * scale;
  lf->var_e = cov11 * scale;
  lf->cov_se = cov01 * scale;
  lf->dof = m - 2;
  return isfinite(c0) && isfinite(c1);
}

/* The flat vector of everything the fit reports: q[0] = B*, q[1] = alpha_B,
 * then per target k: S_min, E_min, B_crit at q[2 + PER_TARGET k ...]. */
typedef struct problem {
  const fit_point *pts;
  const int *target; /* target index of each point */
  int ntargets;
  const double *target_loss;
} problem;

typedef struct powerlaw {
  double c0, c1, var0, var1, cov01;
  int n;
} powerlaw;

/* Fits every target's ladder on the points idx[0..m) and, with two or more
 * usable targets, ln B_crit = ln B* - (1/alpha_B) ln L by ordinary least
 * squares. lad (ntargets entries) and pl may be NULL. */
static void fit_all(const problem *pb, const int *idx, int m, double *q, ladder *lad,
                    powerlaw *pl) {
  int nq = 2 + PER_TARGET * pb->ntargets;
  for (int k = 0; k < nq; k++)
    q[k] = NAN;
  double *b = malloc(sizeof(double) * (m + 1)), *s = malloc(sizeof(double) * (m + 1));
  double *lx = malloc(sizeof(double) * pb->ntargets), *ly = malloc(sizeof(double) * pb->ntargets);
  int nl = 0;
  for (int t = 0; t < pb->ntargets; t++) {
    int mt = 0;
    for (int i = 0; i < m; i++) {
      const fit_point *p = &pb->pts[idx[i]];
      if (pb->target[idx[i]] == t) {
        b[mt] = p->batch_size;
        s[mt] = p->steps;
        mt++;
      }
    }
    ladder lf;
    fit_ladder(b, s, mt, &lf);
    if (lad)
      lad[t] = lf;
    q[2 + PER_TARGET * t] = lf.s_min;
    q[3 + PER_TARGET * t] = lf.e_min;
    q[4 + PER_TARGET * t] = lf.b_crit;
    if (lf.s_min > 0 && lf.e_min > 0 && isfinite(pb->target_loss[t])) {
      lx[nl] = log(pb->target_loss[t]);
      ly[nl] = log(lf.b_crit);
      nl++;
    }
  }
  if (pl) {
    memset(pl, 0, sizeof *pl);
    pl->n = nl;
  }
  if (pb->ntargets > 1 && nl >= 2) {
    double c0, c1, cov00, cov01, cov11, sumsq;
    gsl_fit_linear(lx, 1, ly, 1, nl, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
    /* gsl_fit_linear already scales the covariance by sumsq / (n - 2) */
    q[0] = exp(c0);
    q[1] = -1.0 / c1;
    if (pl) {
      pl->c0 = c0;
      pl->c1 = c1;
      pl->var0 = cov00;
      pl->var1 = cov11;
      pl->cov01 = cov01;
    }
  }
  free(b);
  free(s);
  free(lx);
  free(ly);
}

/* Normal (or, for log-normal quantities, exp of normal) 95% t-interval. */
static void set_interval(fit_param *p, double se, double dof, int lognormal) {
  if (!p || !(se >= 0) || dof < 1)
    return;
  double t = gsl_cdf_tdist_Pinv(0.975, dof);
  if (lognormal) {
    double se_log = se / fabs(p->value);
    p->stderr_ = se;
    p->ci_lo = p->value * exp(-t * se_log);
    p->ci_hi = p->value * exp(t * se_log);
  } else {
    p->stderr_ = se;
    p->ci_lo = p->value - t * se;
    p->ci_hi = p->value + t * se;
  }
  if (p->ci_lo > p->ci_hi) {
    double tmp = p->ci_lo;
    p->ci_lo = p->ci_hi;
    p->ci_hi = tmp;
  }
}

static void ladder_intervals(const ladder *lf, fit_param *ps, fit_param *pe, fit_param *pb) {
  if (lf->dof < 1)
    return;
  set_interval(ps, sqrt(lf->var_s), lf->dof, 0);
  set_interval(pe, sqrt(lf->var_e), lf->dof, 0);
  /* delta method on ln B_crit = ln E_min - ln S_min */
  double vl = lf->var_e / (lf->e_min * lf->e_min) + lf->var_s / (lf->s_min * lf->s_min) -
              2 * lf->cov_se / (lf->e_min * lf->s_min);
  if (pb && vl >= 0 && lf->s_min > 0 && lf->e_min > 0)
    set_interval(pb, sqrt(vl) * lf->b_crit, lf->dof, 1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* batch_size and steps on every point, positive; a target loss on every
 * point or none (*nloss: how many have one); two batch sizes or more */
static int check_ladder_points(const fit_point *pts, int n, int *nloss, char *err, size_t errlen) {
  *nloss = 0;
  for (int i = 0; i < n; i++) {
    if (isnan(pts[i].batch_size))
      return fit__fail(
          err, errlen,
          "batch: batch_size missing at point %d (the law needs columns batch_size and steps)",
          i + 1);
    if (isnan(pts[i].steps))
      return fit__fail(
          err, errlen,
          "batch: steps missing at point %d (the law needs columns batch_size and steps)", i + 1);
    if (!(pts[i].batch_size > 0) || !isfinite(pts[i].batch_size))
      return fit__fail(err, errlen, "batch: point %d: batch_size = %g, expected a positive number",
                       i + 1, pts[i].batch_size);
    if (!(pts[i].steps > 0) || !isfinite(pts[i].steps))
      return fit__fail(err, errlen, "batch: point %d: steps = %g, expected a positive number",
                       i + 1, pts[i].steps);
    if (!isnan(pts[i].loss)) {
      if (!(pts[i].loss > 0) || !isfinite(pts[i].loss))
        return fit__fail(err, errlen, "batch: point %d: loss = %g, expected a positive target loss",
                         i + 1, pts[i].loss);
      (*nloss)++;
    }
  }
  if (*nloss && *nloss != n) {
    for (int i = 0; i < n; i++)
      if (isnan(pts[i].loss))
        return fit__fail(
            err, errlen,
            "batch: loss missing at point %d but present at others (give every point its "
            "target loss, or none)",
            i + 1);
  }
  int distinct = 0;
  for (int i = 1; i < n; i++)
    if (pts[i].batch_size != pts[0].batch_size)
      distinct = 1;
  if (!distinct)
    return fit__fail(err, errlen,
                     "batch: all %d points at one batch size (%g); the ladder needs several", n,
                     pts[0].batch_size);
  return 0;
}

/* The targets: the sorted distinct losses, merged within TARGET_RTOL, into
 * tl (NAN, or the mean loss, for a single target), each point's into
 * target; returns how many */
static int find_targets(const fit_point *pts, int n, int nloss, int *target, double *tl) {
  int nt = 1;
  tl[0] = NAN;
  if (!nloss)
    return nt;
  double *v = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++)
    v[i] = pts[i].loss;
  qsort(v, n, sizeof(double), cmp_double);
  nt = 0;
  double first = 0;
  for (int i = 0; i < n; i++) {
    if (nt == 0 || v[i] > first * (1 + TARGET_RTOL)) {
      first = v[i];
      tl[nt++] = v[i];
    }
  }
  free(v);
  for (int i = 0; i < n; i++) {
    int t = nt - 1;
    while (t > 0 && pts[i].loss < tl[t])
      t--;
    target[i] = t;
  }
  if (nt == 1) {
    double sum = 0;
    for (int i = 0; i < n; i++)
      sum += pts[i].loss;
    tl[0] = sum / n;
  }
  return nt;
}

/* One target: params S_min, E_min, B_crit into slot */
static void add_one_target(fit_result *out, const double *q, fit_param **slot) {
  slot[2] = fit_result_add_param(out, "S_min", q[2]);
  slot[3] = fit_result_add_param(out, "E_min", q[3]);
  slot[4] = fit_result_add_param(out, "B_crit", q[4]);
  if (!(q[2] > 0) || !(q[3] > 0)) {
    out->converged = 0;
    fit_result_warn(out,
                    "S_min = %g, E_min = %g: both must be positive for B_crit to mean anything "
                    "(does the ladder reach batch sizes where steps stop falling?)",
                    q[2], q[3]);
  }
}

/* Several targets: params B_star, alpha_B, derived per target (all the
 * B_crit, then S_min, E_min) into slot, and the targets left out */
static void add_targets(fit_result *out, const double *q, const double *tl, int nt,
                        const ladder *lad, const powerlaw *pl, fit_param **slot) {
  slot[0] = fit_result_add_param(out, "B_star", q[0]);
  slot[1] = fit_result_add_param(out, "alpha_B", q[1]);
  if (pl->n < 2) {
    out->converged = 0;
    fit_result_warn(out, "only %d of %d target losses gave a usable ladder; B_crit(L) needs 2",
                    pl->n, nt);
  } else if (!(q[1] > 0)) {
    fit_result_warn(out, "alpha_B = %g: B_crit does not grow as the target loss falls", q[1]);
  }
  for (int j = 0; j < PER_TARGET; j++) {
    static const char *nm[PER_TARGET] = {"S_min", "E_min", "B_crit"};
    int order[PER_TARGET] = {2, 0, 1};
    for (int t = 0; t < nt; t++) {
      char name[24];
      snprintf(name, sizeof name, "%s(L=%.4g)", nm[order[j]], tl[t]);
      slot[2 + PER_TARGET * t + order[j]] =
          fit_result_add_derived(out, name, q[2 + PER_TARGET * t + order[j]]);
    }
  }
  if (out->nderived < PER_TARGET * nt)
    fit_result_warn(
        out, "%d target losses: only %d of their S_min, E_min, B_crit values fit in the result", nt,
        out->nderived);
  for (int t = 0; t < nt; t++) {
    if (lad[t].m < MIN_LADDER)
      fit_result_warn(out, "target loss %.4g: %d points, a ladder needs %d; left out", tl[t],
                      lad[t].m, MIN_LADDER);
    else if (!(lad[t].s_min > 0 && lad[t].e_min > 0))
      fit_result_warn(
          out, "target loss %.4g: S_min = %g, E_min = %g, not both positive; left out of B_crit(L)",
          tl[t], lad[t].s_min, lad[t].e_min);
  }
}

/* A B_crit outside its ladder's batch sizes is an extrapolation */
static void warn_outside(fit_result *out, const fit_point *pts, int n, const int *target,
                         const double *tl, int nt, const ladder *lad) {
  for (int t = 0; t < nt; t++) {
    double bc = lad[t].b_crit, bmin = INFINITY, bmax = 0;
    for (int i = 0; i < n; i++)
      if (target[i] == t) {
        bmin = fmin(bmin, pts[i].batch_size);
        bmax = fmax(bmax, pts[i].batch_size);
      }
    if (bc > 0 && (bc < bmin || bc > bmax)) {
      char at[48] = "";
      if (nt > 1)
        snprintf(at, sizeof at, "target loss %.4g: ", tl[t]);
      fit_result_warn(
          out, "%sB_crit = %g lies outside the ladder's batch sizes [%g, %g]: an extrapolation", at,
          bc, bmin, bmax);
    }
  }
}

/* out's residuals, (S_fit - S) / S per point on its ladder lad[at[i]]
 * (NAN where the ladder was unusable), and the objective, their sum of
 * squares */
static void ladder_residuals(const fit_point *pts, int n, const ladder *lad, const int *at,
                             fit_result *out) {
  out->residuals = malloc(sizeof(double) * n);
  out->objective = 0;
  for (int i = 0; i < n; i++) {
    const ladder *lf = &lad[at[i]];
    double f = lf->s_min + lf->e_min / pts[i].batch_size;
    double r = (f - pts[i].steps) / pts[i].steps;
    if (out->residuals)
      out->residuals[i] = isfinite(f) ? r : NAN;
    if (isfinite(f))
      out->objective += r * r;
  }
}

/* t-intervals from the regressions: each ladder's, then B_star and
 * alpha_B's from 3 usable targets on */
static void batch_intervals(const ladder *lad, int nt, const powerlaw *pl, const double *q,
                            fit_param **slot) {
  for (int t = 0; t < nt; t++)
    ladder_intervals(&lad[t], slot[2 + PER_TARGET * t], slot[3 + PER_TARGET * t],
                     slot[4 + PER_TARGET * t]);
  if (nt > 1 && pl->n >= 3) {
    double dof = pl->n - 2;
    if (slot[0])
      set_interval(slot[0], sqrt(pl->var0) * q[0], dof, 1);
    /* alpha_B = -1/c1: delta method */
    if (slot[1])
      set_interval(slot[1], sqrt(pl->var1) / (pl->c1 * pl->c1), dof, 0);
  }
}

/* One bootstrap resample of the ladder(s). */
static void boot_one(void *ctx, const int *idx, int m, double *row) {
  fit_all(ctx, idx, m, row, NULL, NULL);
}

/* Fits the batch ladder(s) in pts. Needs batch_size and steps (> 0) on every
 * point and at least 4 points (2 parameters + 2) at two or more batch sizes.
 *
 * One target (loss absent on every point, or one value within TARGET_RTOL):
 * params S_min, E_min, B_crit = E_min / S_min.
 * Several targets (every point carries its target loss): each target's
 * ladder is fitted alone, then B_crit(L) = B* / L^(1/alpha_B) by ordinary
 * least squares of ln B_crit on ln L; params B_star, alpha_B; derived per
 * target "B_crit(L=..)", then "S_min(L=..)", "E_min(L=..)" while there is
 * room. Targets with fewer than 4 points, or whose S_min or E_min is not
 * positive, are left out of the power law with a warning.
 *
 * Intervals: with opt->bootstrap > 0, percentiles over resamples of whole
 * runs (a run that reached several targets stays together); otherwise
 * t-intervals from the regression covariance (scaled by the residual
 * variance, since the weights 1/S^2 are only relative), by the delta method
 * for B_crit. converged is 1 when every reported parameter is finite and
 * positive where the model needs it (S_min, E_min > 0): a linear fit
 * always "converges", but a non-positive S_min means the ladder never
 * reached the step-limited regime and B_crit means nothing.
 * Residuals: relative, (S_fit - S) / S per point (NAN where a point's
 * ladder was unusable). objective: the weighted residual sum of squares,
 * summed over targets. */
int fit_batch(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen) {
  fit_result_init(out, "batch");
  if (!pts || n < MIN_LADDER)
    return fit__fail(err, errlen, "batch: %d point%s; the law (S_min, E_min) needs at least %d", n,
                     n == 1 ? "" : "s", MIN_LADDER);
  int nloss, rc = check_ladder_points(pts, n, &nloss, err, errlen);
  if (rc)
    return rc;
  int *target = calloc(n, sizeof(int));
  double *tl = malloc(sizeof(double) * n);
  int nt = find_targets(pts, n, nloss, target, tl);

  problem pb = {pts, target, nt, tl};
  int nq = 2 + PER_TARGET * nt;
  double *q = malloc(sizeof(double) * nq);
  ladder *lad = malloc(sizeof(ladder) * nt);
  powerlaw pl;
  int *all = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  fit_all(&pb, all, n, q, lad, &pl);

  fit_param **slot = calloc(nq, sizeof(fit_param *));
  out->n_points = n;
  out->converged = 1;
  if (nt == 1)
    add_one_target(out, q, slot);
  else
    add_targets(out, q, tl, nt, lad, &pl, slot);
  warn_outside(out, pts, n, target, tl, nt, lad);
  ladder_residuals(pts, n, lad, target, out);

  int nb = opt ? opt->bootstrap : 0;
  if (nb > 0) {
    /* a ladder unusable on all the data is not made usable by
     * resamples that happen to repeat its points */
    for (int k = 0; k < nq; k++)
      if (slot[k] && !isfinite(slot[k]->value))
        slot[k] = NULL;
    fit__boot_finish(out, fit__bootstrap(pts, n, opt, nq, boot_one, &pb), nb, nq, slot,
                     " for some quantity");
  } else {
    batch_intervals(lad, nt, &pl, q, slot);
  }
  free(slot);
  free(all);
  free(lad);
  free(q);
  free(tl);
  free(target);
  return 0;
}

/* ---- the critical batch size by branching ----------------------------------------------- */

/* Branch points whose tokens agree to this relative tolerance are one. */
#define POINT_RTOL 1e-9

/* ln y = c0 + c1 ln x by ordinary least squares over the k pairs with
 * both positive; pl->n is how many. */
static void loglog(const double *x, const double *y, int k, powerlaw *pl) {
  memset(pl, 0, sizeof *pl);
  double *lx = malloc(sizeof(double) * (k + 1)), *ly = malloc(sizeof(double) * (k + 1));
  int n = 0;
  for (int i = 0; i < k; i++)
    if (x[i] > 0 && y[i] > 0 && isfinite(x[i]) && isfinite(y[i])) {
      lx[n] = log(x[i]);
      ly[n] = log(y[i]);
      n++;
    }
  pl->n = n;
  if (n >= 2) {
    double sumsq;
    gsl_fit_linear(lx, 1, ly, 1, n, &pl->c0, &pl->c1, &pl->var0, &pl->cov01, &pl->var1, &sumsq);
  }
  free(lx);
  free(ly);
}

/* tokens, batch_size and steps on every point, positive */
static int check_rungs(const fit_point *pts, int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    const fit_point *p = &pts[i];
    const char *bad = !(p->tokens > 0) || !isfinite(p->tokens)           ? "tokens"
                      : !(p->batch_size > 0) || !isfinite(p->batch_size) ? "batch_size"
                      : !(p->steps > 0) || !isfinite(p->steps)           ? "steps"
                                                                         : NULL;
    if (bad)
      return fit__fail(err, errlen,
                       "bcrit: point %d: %s = %g, expected a positive number (tokens: the branch "
                       "point's D; batch_size; steps from the branch point to the target)",
                       i + 1, bad,
                       !strcmp(bad, "tokens")       ? p->tokens
                       : !strcmp(bad, "batch_size") ? p->batch_size
                                                    : p->steps);
  }
  return 0;
}

/* The branch points, ascending, into d (tokens within POINT_RTOL are
 * one), each point's into at; returns how many */
static int branch_points(const fit_point *pts, int n, double *d, int *at) {
  int nd = 0;
  for (int i = 0; i < n; i++)
    d[i] = pts[i].tokens;
  qsort(d, n, sizeof(double), cmp_double);
  for (int i = 0; i < n; i++)
    if (nd == 0 || d[i] > d[nd - 1] * (1 + POINT_RTOL))
      d[nd++] = d[i];
  for (int i = 0; i < n; i++) {
    int k = nd - 1;
    while (k > 0 && pts[i].tokens < d[k] * (1 - POINT_RTOL))
      k--;
    at[i] = k;
  }
  return nd;
}

/* Branch point k at D = d: its ladder into lf, derived B_crit(D=..) with
 * its interval and L(D=..) (the mean loss of its rungs, into *loss), and
 * its warning; *bc gets its B_crit (NAN when unusable); returns whether it
 * is usable */
static int fit_branch(const fit_point *pts, int n, const int *at, int k, double d, ladder *lf,
                      double *loss, double *bc, fit_result *out) {
  double *b = malloc(sizeof(double) * n), *s = malloc(sizeof(double) * n);
  int m = 0;
  double sum = 0, bmin = INFINITY, bmax = 0;
  for (int i = 0; i < n; i++)
    if (at[i] == k) {
      b[m] = pts[i].batch_size;
      s[m] = pts[i].steps;
      sum += pts[i].loss;
      bmin = fmin(bmin, b[m]);
      bmax = fmax(bmax, b[m]);
      m++;
    }
  *loss = sum / m; /* the target: one loss per branch point */
  fit_ladder(b, s, m, lf);
  free(b);
  free(s);
  int ok = lf->m >= MIN_LADDER && lf->s_min > 0 && lf->e_min > 0;
  *bc = ok ? lf->b_crit : NAN;
  char name[24];
  snprintf(name, sizeof name, "B_crit(D=%.4g)", d);
  fit_param *pb = fit_result_add_derived(out, name, *bc);
  if (ok)
    ladder_intervals(lf, NULL, NULL, pb);
  snprintf(name, sizeof name, "L(D=%.4g)", d);
  fit_result_add_derived(out, name, *loss);
  if (lf->m < MIN_LADDER)
    fit_result_warn(out, "branch point D = %.4g: %d rungs reached the target, a ladder needs %d", d,
                    lf->m, MIN_LADDER);
  else if (!ok)
    fit_result_warn(out,
                    "branch point D = %.4g: S_min = %g, E_min = %g, not both positive: the "
                    "rungs never reached batch sizes where steps stop falling",
                    d, lf->s_min, lf->e_min);
  else if (*bc < bmin || *bc > bmax)
    fit_result_warn(out,
                    "branch point D = %.4g: B_crit = %g lies outside the rungs' batch sizes "
                    "[%g, %g]: an extrapolation",
                    d, *bc, bmin, bmax);
  return ok;
}

/* Across the nd branch points: B_crit = k_D D^gamma_D, and against the
 * loss B_crit = B_star / L^(1/alpha_B), with t-intervals from 3 points */
static void bcrit_laws(const double *d, const double *lo, const double *bc, int nd,
                       fit_result *out) {
  powerlaw pd, pl;
  loglog(d, bc, nd, &pd);
  loglog(lo, bc, nd, &pl);
  fit_param *kd = fit_result_add_param(out, "k_D", pd.n >= 2 ? exp(pd.c0) : NAN);
  fit_param *gd = fit_result_add_param(out, "gamma_D", pd.n >= 2 ? pd.c1 : NAN);
  fit_param *bs = fit_result_add_param(out, "B_star", pl.n >= 2 ? exp(pl.c0) : NAN);
  fit_param *ab = fit_result_add_param(out, "alpha_B", pl.n >= 2 ? -1.0 / pl.c1 : NAN);
  if (pd.n >= 3) {
    set_interval(kd, sqrt(pd.var0) * kd->value, pd.n - 2, 1);
    set_interval(gd, sqrt(pd.var1), pd.n - 2, 0);
    set_interval(bs, sqrt(pl.var0) * bs->value, pl.n - 2, 1);
    set_interval(ab, sqrt(pl.var1) / (pl.c1 * pl.c1), pl.n - 2, 0);
  }
  if (pd.n == 2)
    fit_result_warn(out, "2 branch points: the power laws go through both, with no interval");
}

int fit_bcrit(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen) {
  (void)opt;
  fit_result_init(out, "bcrit");
  if (!pts || n < MIN_LADDER)
    return fit__fail(
        err, errlen,
        "bcrit: %d point%s; one branch point's ladder (S_min, E_min) needs at least %d", n,
        n == 1 ? "" : "s", MIN_LADDER);
  int rc = check_rungs(pts, n, err, errlen);
  if (rc)
    return rc;
  double *d = malloc(sizeof(double) * n);
  int *at = malloc(sizeof(int) * n);
  int nd = branch_points(pts, n, d, at);
  double *bc = malloc(sizeof(double) * nd), *lo = malloc(sizeof(double) * nd);
  ladder *lad = calloc((size_t)nd, sizeof(ladder));
  out->n_points = n;
  int usable = 0;
  for (int k = 0; k < nd; k++) {
    usable += fit_branch(pts, n, at, k, d[k], &lad[k], &lo[k], &bc[k], out);
  }
  ladder_residuals(pts, n, lad, at, out);
  out->converged = usable > 0;
  if (usable < 2)
    fit_result_warn(out,
                    "%d of %d branch points gave a critical batch size; B_crit against D and "
                    "against the loss needs 2",
                    usable, nd);
  bcrit_laws(d, lo, bc, nd, out);
  free(d);
  free(at);
  free(bc);
  free(lo);
  free(lad);
  return 0;
}

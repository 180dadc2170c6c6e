/* Learning-curve extrapolation (Kaplan et al. 2020, L(N, S) at fixed N):
 * L(S) = L_inf + (S_c / S)^alpha_S fitted to the early part of one run's
 * curve, the final loss predicted with a bootstrap interval whose noise
 * keeps the curve's autocorrelation,
 * and the rule that flags a run whose prediction lands far off the sweep's
 * fitted surface. Contracts in fit.h. */
#include <gsl/gsl_eigen.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_multimin.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

#define NT 3                /* fitted coordinates: e, k, a (see curve_eval) */
#define MIN_POINTS (NT + 2) /* three parameters plus two, as for the other laws */
/* Gradient tolerance on the summed objective, per point: far below what
 * moves a parameter in its 6th digit, above the gradient's rounding noise. */
#define GTOL_PER_POINT 1e-10
#define MAX_ITERS 1000  /* per BFGS2 run */
#define POLISH_ROUNDS 4 /* fresh-Hessian restarts from the best point */
#define LINE_TOL 0.1    /* Fletcher's sigma; GSL recommends 0.1 for bfgs2 */
/* alpha_S outside [ALPHA_FLOOR, ALPHA_CEIL] is "at its bound": the data do
 * not pin the curve's shape (a near-flat or near-step curve). */
#define ALPHA_FLOOR 0.01
#define ALPHA_CEIL 10.0
/* L_inf below this fraction of the smallest loss has collapsed to 0. */
#define LINF_FLOOR 1e-4
/* A target beyond this multiple of the last observed step is a far
 * extrapolation (one decade: Kaplan's fits of L(N, S) held over about that). */
#define FAR_TARGET 10.0
/* Non-monotone: a window mean of ln L rising more than this above the
 * lowest earlier window mean (2% in L: well above eval noise averaged over
 * a window, well below a loss spike or an overfitting turn). */
#define RISE_TOL 0.02
/* The AR(1) noise model's correlation is estimated in [0, RHO_MAX]. */
#define RHO_MAX 0.99

/* quantities reported per fit, in this order (the bootstrap rows too) */
enum { Q_LINF, Q_SC, Q_ALPHA, Q_TARGET, NQ };
static const char *const qnames[NQ] = {"L_inf", "S_c", "alpha_S", "loss_at_target"};

/* One curve in fitting coordinates: t = ln S - tm (centred, so that k and
 * the exponent are nearly uncorrelated), y = ln L, in step order. */
typedef struct curve {
  int m;
  double tm;
  const double *t, *y;
} curve;

/* th = (e, k, a): L_inf = e^e, alpha_S = e^a, ln L = LSE(e, z) with
 * z = k - alpha_S t, so that ln S_c = tm + k / alpha_S. Both positivity
 * constraints are built in. Objective f = sum_i r_i^2 / 2, r_i = ln L_i^ -
 * y_i; the gradient uses the LSE's softmax weights w_e = e^(e - lse) and
 * w_z = e^(z - lse): d lse/de = w_e, d lse/dk = w_z, d lse/da = -alpha t w_z. */
static double curve_eval(const curve *c, const double *th, double *g) {
  double al = exp(th[2]), f = 0, g0 = 0, g1 = 0, g2 = 0;
  for (int i = 0; i < c->m; i++) {
    double z = th[1] - al * c->t[i];
    double hi = fmax(th[0], z);
    double lse = hi + log(exp(th[0] - hi) + exp(z - hi));
    double r = lse - c->y[i], wz = exp(z - lse);
    f += 0.5 * r * r;
    g0 += r * exp(th[0] - lse);
    g1 += r * wz;
    g2 -= r * wz * al * c->t[i];
  }
  if (g) {
    g[0] = g0;
    g[1] = g1;
    g[2] = g2;
  }
  return isfinite(f) ? f : GSL_POSINF;
}

static double gsl_f(const gsl_vector *x, void *p) { return curve_eval(p, x->data, NULL); }
static void gsl_df(const gsl_vector *x, void *p, gsl_vector *g) { curve_eval(p, x->data, g->data); }
static void gsl_fdf(const gsl_vector *x, void *p, double *f, gsl_vector *g) {
  *f = curve_eval(p, x->data, g->data);
}

static double norm3(const double *g) { return sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]); }

typedef struct cfit {
  double th[NT];
  double f, gnorm;
  int converged;
} cfit;

/* Gauss-Newton steps from x while |grad f| >= gtol: solve (J'J + mu I) d =
 * -J'r with the residuals' Jacobian (the same softmax weights as
 * curve_eval's gradient), halving the step until f falls. BFGS's line search
 * can stall short of the optimum when the residuals are near zero (points
 * on the curve exactly), where Gauss-Newton converges fastest. Updates x,
 * *fx and *gx only with points that lower f. */
static void gauss_newton(const curve *c, double *x, double *fx, double *gx, double gtol) {
  for (int it = 0; it < 50 && !(*gx < gtol); it++) {
    double al = exp(x[2]), A[NT][NT] = {{0}}, b[NT] = {0};
    for (int i = 0; i < c->m; i++) {
      double z = x[1] - al * c->t[i];
      double hi = fmax(x[0], z);
      double lse = hi + log(exp(x[0] - hi) + exp(z - hi));
      double r = lse - c->y[i], wz = exp(z - lse);
      double j[NT] = {exp(x[0] - lse), wz, -wz * al * c->t[i]};
      for (int p = 0; p < NT; p++) {
        b[p] -= j[p] * r;
        for (int q = 0; q < NT; q++)
          A[p][q] += j[p] * j[q];
      }
    }
    double mu = 1e-12 * (A[0][0] + A[1][1] + A[2][2]) + 1e-300;
    for (int p = 0; p < NT; p++)
      A[p][p] += mu;
    gsl_matrix_view Av = gsl_matrix_view_array(&A[0][0], NT, NT);
    gsl_vector_view bv = gsl_vector_view_array(b, NT);
    double d[NT];
    gsl_vector_view dv = gsl_vector_view_array(d, NT);
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    int bad = gsl_linalg_cholesky_decomp1(&Av.matrix) ||
              gsl_linalg_cholesky_solve(&Av.matrix, &bv.vector, &dv.vector);
    gsl_set_error_handler(old);
    if (bad)
      return;
    int lowered = 0;
    for (double step = 1; step > 1e-6 && !lowered; step /= 2) {
      double y[NT], g[NT];
      for (int p = 0; p < NT; p++)
        y[p] = x[p] + step * d[p];
      double fy = curve_eval(c, y, g);
      if (fy < *fx) {
        memcpy(x, y, sizeof y);
        *fx = fy;
        *gx = norm3(g);
        lowered = 1;
      }
    }
    if (!lowered)
      return;
  }
}

/* BFGS2 from th0 until |grad f| < gtol: runs of MAX_ITERS iterations, a
 * stalled line search restarting from the best point with a fresh Hessian
 * estimate (up to POLISH_ROUNDS times), then Gauss-Newton steps when the
 * gradient is still above gtol. Replaces *best when it ends lower. */
static void bfgs_from(const curve *c, gsl_multimin_fdfminimizer *s, const double *th0, cfit *best) {
  double gtol = GTOL_PER_POINT * c->m, x[NT], g[NT];
  memcpy(x, th0, sizeof x);
  double fx = curve_eval(c, x, g), gx = norm3(g);
  if (!isfinite(fx) || !(fx < GSL_POSINF))
    return;
  gsl_multimin_function_fdf fn = {gsl_f, gsl_df, gsl_fdf, NT, (void *)c};
  for (int round = 0; round <= POLISH_ROUNDS && !(gx < gtol); round++) {
    gsl_vector_view v = gsl_vector_view_array(x, NT);
    gsl_multimin_fdfminimizer_set(s, &fn, &v.vector, 0.1, LINE_TOL);
    int progress = 0;
    for (int it = 0; it < MAX_ITERS && !(gx < gtol); it++) {
      int st = gsl_multimin_fdfminimizer_iterate(s);
      double gn = norm3(s->gradient->data);
      if (s->f < fx || (s->f == fx && gn < gx)) {
        progress |= s->f < fx;
        fx = s->f;
        gx = gn;
        memcpy(x, s->x->data, sizeof x);
      }
      if (st != GSL_SUCCESS || !isfinite(s->f))
        break;
    }
    if (!progress && round > 0)
      break;
  }
  gauss_newton(c, x, &fx, &gx, gtol);
  if (fx < best->f || !isfinite(best->f)) {
    memcpy(best->th, x, sizeof x);
    best->f = fx;
    best->gnorm = gx;
    best->converged = gx < gtol;
  }
}

/* The grid of starts: L_inf at fractions of the smallest loss, and for each
 * the straight line through (t, ln(L - L_inf)) for k and alpha_S (alpha_S =
 * 0.5 where that line does not fall). */
static void grid_starts(const curve *c, gsl_multimin_fdfminimizer *s, cfit *best) {
  static const double frac[] = {0.001, 0.5, 0.8, 0.9, 0.95, 0.99};
  double lmin = INFINITY;
  for (int i = 0; i < c->m; i++)
    lmin = fmin(lmin, exp(c->y[i]));
  double *ly = malloc(sizeof(double) * c->m);
  if (!ly)
    return;
  for (size_t j = 0; j < sizeof frac / sizeof *frac; j++) {
    double e = frac[j] * lmin;
    for (int i = 0; i < c->m; i++)
      ly[i] = log(exp(c->y[i]) - e);
    double c0, c1, cov00, cov01, cov11, sumsq;
    gsl_fit_linear(c->t, 1, ly, 1, c->m, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
    double al = -c1 > 0.02 && isfinite(c1) ? -c1 : 0.5;
    double th0[NT] = {log(e), isfinite(c0) ? c0 : 0, log(al)};
    bfgs_from(c, s, th0, best);
  }
  free(ly);
}

/* Fits c from start (may be NULL) and, when there is no start or it does
 * not converge, from the grid; the lowest objective wins. */
static cfit fit1(const curve *c, const double *start) {
  cfit best = {{NAN, NAN, NAN}, NAN, NAN, 0};
  gsl_multimin_fdfminimizer *s =
      gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, NT);
  if (!s)
    return best;
  if (start)
    bfgs_from(c, s, start, &best);
  if (!start || !best.converged)
    grid_starts(c, s, &best);
  gsl_multimin_fdfminimizer_free(s);
  return best;
}

static double predict(const double *th, double tm, double steps) {
  double z = th[1] - exp(th[2]) * (log(steps) - tm);
  return exp(th[0]) + exp(z);
}

static void quantities(const cfit *f, double tm, double target, double *q) {
  q[Q_LINF] = exp(f->th[0]);
  q[Q_ALPHA] = exp(f->th[2]);
  q[Q_SC] = exp(tm + f->th[1] / q[Q_ALPHA]);
  q[Q_TARGET] = target > 0 ? predict(f->th, tm, target) : NAN;
}

/* ---- the AR(1) noise model, corrected for what the fit absorbs ----
 *
 * Noise eps (ln L, step order) with covariance sd^2 R, R_ij = rho^|i-j|.
 * The residuals are e = M eps, M = I - H, H = J A+ J^T the fit's hat matrix
 * (J the n x 3 Jacobian of ln L_hat at the optimum, A = J^T J, A+ its
 * pseudo-inverse), so with S the lag-1 matrix (1/2 beside the diagonal)
 *   E[e^T e]   = sd^2 tr(M R)   = sd^2 (n - tr(A+ G)),
 *   E[e^T S e] = sd^2 tr(S M R M)
 *              = sd^2 ((n - 1) rho - 2 tr(A+ K) + tr(A+ P A+ G)),
 * G = J^T R J, K = (R J)^T (S J), P = J^T S J: O(n) per rho. rho solves
 * E[e^T S e] / E[e^T e] = the residuals' ratio (bisection; the ratio rises
 * with rho), then sd^2 = e^T e / tr(M R). */

/* out = R x: forward and backward AR(1) filters, their sum less x */
static void rmul(double rho, const double *x, double *out, double *tmp, int n) {
  for (int i = 0; i < n; i++)
    tmp[i] = x[i] + (i ? rho * tmp[i - 1] : 0);
  double b = 0;
  for (int i = n - 1; i >= 0; i--) {
    b = x[i] + (i < n - 1 ? rho * b : 0);
    out[i] = tmp[i] + b - x[i];
  }
}

static void smul(const double *x, double *out, int n) {
  for (int i = 0; i < n; i++)
    out[i] = 0.5 * ((i ? x[i - 1] : 0) + (i < n - 1 ? x[i + 1] : 0));
}

static double dot(const double *a, const double *b, int n) {
  double s = 0;
  for (int i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* tr(X Y), 3 x 3 row-major */
static double tr33(const double *x, const double *y) {
  double s = 0;
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NT; j++)
      s += x[NT * i + j] * y[NT * j + i];
  return s;
}

static void mul33(const double *x, const double *y, double *z) {
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NT; j++) {
      z[NT * i + j] = 0;
      for (int k = 0; k < NT; k++)
        z[NT * i + j] += x[NT * i + k] * y[NT * k + j];
    }
}

typedef struct absorb {
  int n;
  double *J, *SJ, *RJ, *tmp; /* columns of n: J[k n + i] */
  double Ap[NT * NT], P[NT * NT];
} absorb;

/* E[e^T S e] / E[e^T e] at rho; *trmr = tr(M R) */
static double ratio_at(absorb *ab, double rho, double *trmr) {
  int n = ab->n;
  double G[NT * NT], K[NT * NT], X[NT * NT], Y[NT * NT];
  for (int k = 0; k < NT; k++)
    rmul(rho, ab->J + k * n, ab->RJ + k * n, ab->tmp, n);
  for (int k = 0; k < NT; k++)
    for (int l = 0; l < NT; l++) {
      G[NT * k + l] = dot(ab->J + k * n, ab->RJ + l * n, n);
      K[NT * k + l] = dot(ab->RJ + k * n, ab->SJ + l * n, n);
    }
  *trmr = n - tr33(ab->Ap, G);
  mul33(ab->Ap, ab->P, X);
  mul33(X, ab->Ap, Y);
  return ((n - 1) * rho - 2 * tr33(ab->Ap, K) + tr33(Y, G)) / *trmr;
}

/* Estimates (rho, sd) of the noise from the residuals e at the optimum th;
 * *at_bound when rho ends at RHO_MAX. Returns 0 when it cannot (memory). */
static int noise_ar1(const curve *c, const double *th, const double *e, double *rho, double *sd,
                     int *at_bound) {
  int n = c->m;
  absorb ab = {.n = n};
  double *mem = malloc(sizeof(double) * (size_t)n * (3 * NT + 1));
  gsl_eigen_symmv_workspace *w = gsl_eigen_symmv_alloc(NT);
  if (!mem || !w) {
    free(mem);
    if (w)
      gsl_eigen_symmv_free(w);
    return 0;
  }
  ab.J = mem, ab.SJ = mem + NT * n, ab.RJ = mem + 2 * NT * n, ab.tmp = mem + 3 * NT * n;
  double al = exp(th[2]);
  for (int i = 0; i < n; i++) {
    double z = th[1] - al * c->t[i], hi = fmax(th[0], z);
    double lse = hi + log(exp(th[0] - hi) + exp(z - hi)), wz = exp(z - lse);
    ab.J[i] = exp(th[0] - lse);
    ab.J[n + i] = wz;
    ab.J[2 * n + i] = -al * c->t[i] * wz;
  }
  double A[NT * NT], val[NT], vec[NT * NT];
  for (int k = 0; k < NT; k++) {
    smul(ab.J + k * n, ab.SJ + k * n, n);
    for (int l = 0; l < NT; l++)
      A[NT * k + l] = dot(ab.J + k * n, ab.J + l * n, n);
  }
  for (int k = 0; k < NT; k++)
    for (int l = 0; l < NT; l++)
      ab.P[NT * k + l] = dot(ab.J + k * n, ab.SJ + l * n, n);
  /* pseudo-inverse: a collapsed L_inf leaves a zero column */
  gsl_matrix_view Am = gsl_matrix_view_array(A, NT, NT), Vm = gsl_matrix_view_array(vec, NT, NT);
  gsl_vector_view vv = gsl_vector_view_array(val, NT);
  gsl_eigen_symmv(&Am.matrix, &vv.vector, &Vm.matrix, w);
  gsl_eigen_symmv_free(w);
  double vmax = fmax(fmax(val[0], val[1]), val[2]);
  for (int k = 0; k < NT; k++)
    for (int l = 0; l < NT; l++) {
      ab.Ap[NT * k + l] = 0;
      for (int j = 0; j < NT; j++)
        if (val[j] > 1e-12 * vmax)
          ab.Ap[NT * k + l] += vec[NT * k + j] * vec[NT * l + j] / val[j];
    }
  double s0 = dot(e, e, n), s1 = 0;
  for (int i = 0; i + 1 < n; i++)
    s1 += e[i] * e[i + 1];
  double want = s0 > 0 ? s1 / s0 : 0, lo = 0, hi = RHO_MAX, trmr;
  *at_bound = 0;
  if (ratio_at(&ab, 0, &trmr) >= want) {
    hi = 0;
  } else if (ratio_at(&ab, RHO_MAX, &trmr) <= want) {
    lo = RHO_MAX;
    *at_bound = 1;
  } else {
    for (int it = 0; it < 50; it++) {
      double mid = 0.5 * (lo + hi);
      if (ratio_at(&ab, mid, &trmr) < want)
        lo = mid;
      else
        hi = mid;
    }
  }
  *rho = 0.5 * (lo + hi);
  ratio_at(&ab, *rho, &trmr);
  *sd = trmr > 0 ? sqrt(s0 / trmr) : NAN;
  free(mem);
  return 1;
}

/* ---- the bootstrap ---- */

typedef struct boot_ctx {
  const curve *c;
  const double *yhat; /* fitted ln L, step order */
  const double *res;  /* residuals (block, iid: centred and rescaled), step order */
  int method;         /* FIT_CURVE_AR1, _BLOCK, _IID */
  int block;
  double rho, sd;      /* AR(1) */
  const double *start; /* the full-data optimum */
  double target;
} boot_ctx;

/* One resample, refitted from the full-data optimum: y* = yhat + noise;
 * AR(1): noise drawn from the fitted model; block (iid: block = 1):
 * residuals taken in blocks of `block` consecutive points starting at
 * uniform positions, concatenated and cut to m. */
static void boot_one(void *ctx, gsl_rng *rng, double *row) {
  const boot_ctx *b = ctx;
  int m = b->c->m;
  double *ys = malloc(sizeof(double) * m);
  if (!ys)
    return;
  if (b->method == FIT_CURVE_AR1) {
    double eps = gsl_ran_gaussian(rng, b->sd), inno = b->sd * sqrt(1 - b->rho * b->rho);
    for (int i = 0; i < m; i++) {
      if (i)
        eps = b->rho * eps + gsl_ran_gaussian(rng, inno);
      ys[i] = b->yhat[i] + eps;
    }
  } else {
    for (int i = 0; i < m;) {
      int at = (int)gsl_rng_uniform_int(rng, (unsigned long)(m - b->block + 1));
      for (int j = 0; j < b->block && i < m; j++, i++)
        ys[i] = b->yhat[i] + b->res[at + j];
    }
  }
  curve cs = {m, b->c->tm, b->c->t, ys};
  cfit f = fit1(&cs, b->start);
  if (isfinite(f.f))
    quantities(&f, cs.tm, b->target, row);
  free(ys);
}

/* ---- checks and warnings ---- */

/* a point's steps (x) and index (i), to sort the points in step order */
typedef sweeps__ranked order;

static int check_points(const fit_point *pts, int n, const fit_options *opt, char *err,
                        size_t errlen) {
  if (!pts || n < MIN_POINTS)
    return fit__fail(err, errlen,
                     "curve: %d point%s; L(S) = L_inf + (S_c/S)^alpha_S has 3 parameters and "
                     "needs at least %d",
                     n, n == 1 ? "" : "s", MIN_POINTS);
  for (int i = 0; i < n; i++) {
    const fit_point *p = &pts[i];
    if (isnan(p->steps) || isnan(p->loss))
      return fit__fail(err, errlen,
                       "curve: %s missing at point %d (the law needs columns steps and loss)",
                       isnan(p->steps) ? "steps" : "loss", i + 1);
    if (!(p->steps > 0) || !isfinite(p->steps))
      return fit__fail(err, errlen,
                       "curve: point %d: steps = %g, expected a positive optimizer step", i + 1,
                       p->steps);
    if (!(p->loss > 0) || !isfinite(p->loss))
      return fit__fail(err, errlen, "curve: point %d: loss = %g, expected a positive number", i + 1,
                       p->loss);
  }
  int distinct = 1;
  for (int i = 1; i < n && distinct < 3; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++)
      seen = pts[j].steps == pts[i].steps;
    distinct += !seen;
  }
  if (distinct < 3)
    return fit__fail(err, errlen, "curve: only %d distinct steps among %d points; the law needs 3",
                     distinct, n);
  if (opt->bootstrap < 0)
    return fit__fail(err, errlen, "curve: bootstrap = %d, expected 0 or more", opt->bootstrap);
  if (opt->target_steps < 0 || !isfinite(opt->target_steps))
    return fit__fail(err, errlen, "curve: target_steps = %g, expected a positive step or 0",
                     opt->target_steps);
  if (opt->curve_noise < FIT_CURVE_AR1 || opt->curve_noise > FIT_CURVE_IID)
    return fit__fail(err, errlen, "curve: curve_noise = %d, expected FIT_CURVE_AR1, _BLOCK or _IID",
                     opt->curve_noise);
  return 0;
}

/* The largest rise of a window mean of ln L (windows of w consecutive
 * points in step order) above the lowest window mean that ends before it. */
static double largest_rise(const double *y, int m) {
  int w = m / 10 > 3 ? m / 10 : 3;
  if (w > m)
    return 0;
  double *mean = malloc(sizeof(double) * (m - w + 1)), rise = 0;
  if (!mean)
    return 0;
  for (int i = 0; i + w <= m; i++) {
    mean[i] = 0;
    for (int j = 0; j < w; j++)
      mean[i] += y[i + j] / w;
  }
  double low = INFINITY;
  for (int i = w; i + w <= m; i++) {
    low = fmin(low, mean[i - w]);
    rise = fmax(rise, mean[i] - low);
  }
  free(mean);
  return rise;
}

static void warn_all(fit_result *out, const fit_point *pts, int n, const fit_options *opt,
                     const cfit *f, const double *q, const double *y, double smax) {
  if (!f->converged)
    fit_result_warn(out,
                    "not converged: BFGS stopped with |gradient| = %.3g above its tolerance "
                    "%.3g; the values are the best point found",
                    f->gnorm, GTOL_PER_POINT * n);
  if (q[Q_ALPHA] < ALPHA_FLOOR || q[Q_ALPHA] > ALPHA_CEIL)
    fit_result_warn(out,
                    "alpha_S = %.4g is at its bound (%g .. %g): the curve's shape is not "
                    "identified by these points; the prediction is unreliable",
                    q[Q_ALPHA], ALPHA_FLOOR, ALPHA_CEIL);
  double lmin = INFINITY;
  for (int i = 0; i < n; i++)
    lmin = fmin(lmin, pts[i].loss);
  if (q[Q_LINF] < LINF_FLOOR * lmin)
    fit_result_warn(out, "L_inf is at its bound 0: the points show no floor yet");
  double rise = largest_rise(y, n);
  if (rise > RISE_TOL)
    fit_result_warn(out,
                    "non-monotone curve: the loss rises by %.1f%% somewhere (a spike, "
                    "divergence or overfitting); the power law does not describe it",
                    100 * (exp(rise) - 1));
  if (opt->target_steps > FAR_TARGET * smax)
    fit_result_warn(out,
                    "target_steps = %.6g is %.3g x the last observed step (%.6g): a far "
                    "extrapolation; the interval assumes the law holds that far",
                    opt->target_steps, opt->target_steps / smax, smax);
  int g0 = -1, several = 0;
  for (int i = 0; i < n && !several; i++)
    if (pts[i].group >= 0) {
      several = g0 >= 0 && pts[i].group != g0;
      g0 = pts[i].group;
    }
  if (several)
    fit_result_warn(out, "the points come from more than one run; they are fitted as one curve");
}

/* The points in step order (ord), their centred ln S (t, about *tm) and
 * ln L (y) */
static void load_curve(const fit_point *pts, int n, order *ord, double *t, double *y, double *tm) {
  for (int i = 0; i < n; i++)
    ord[i] = (order){pts[i].steps, (size_t)i};
  qsort(ord, n, sizeof *ord, sweeps__by_rank);
  *tm = 0;
  for (int i = 0; i < n; i++)
    *tm += log(ord[i].x) / n;
  for (int i = 0; i < n; i++) {
    t[i] = log(ord[i].x) - *tm;
    y[i] = log(pts[ord[i].i].loss);
  }
}

/* The fit's parameters (and loss_at_target) into out and slot */
static void add_params(fit_result *out, const double *q, double target_steps, fit_param **slot) {
  for (int k = 0; k < Q_TARGET; k++)
    slot[k] = fit_result_add_param(out, qnames[k], q[k]);
  if (target_steps > 0)
    slot[Q_TARGET] = fit_result_add_derived(out, qnames[Q_TARGET], q[Q_TARGET]);
}

/* The AR(1) noise model's SD and lag-1 correlation (NAN when it cannot be
 * estimated) into *sd, *rho, and as derived values */
static void noise_model(const curve *c, const double *th, const double *res, double *rho,
                        double *sd, fit_result *out) {
  int rho_bound = 0;
  *rho = *sd = NAN;
  if (!noise_ar1(c, th, res, rho, sd, &rho_bound))
    return;
  fit_result_add_derived(out, "noise_sd", *sd);
  fit_result_add_derived(out, "noise_rho", *rho);
  if (rho_bound)
    fit_result_warn(out,
                    "noise_rho is at its bound %g: the residuals wander like the curve itself; "
                    "the interval is wide and rough",
                    RHO_MAX);
}

/* The bootstrap of opt->curve_noise's scheme (fit.h) into slot; res, the
 * residuals in step order, are centred and scaled for the resampling
 * schemes */
static void bootstrap(const curve *c, const cfit *best, const double *yhat, double *res,
                      double rmean, double rho, double sd, const fit_options *opt,
                      fit_param *const *slot, fit_result *out) {
  int nb = opt->bootstrap, n = c->m;
  if (opt->curve_noise == FIT_CURVE_AR1 && !(sd >= 0)) {
    fit_result_warn(out, "bootstrap: the noise model could not be estimated; no intervals");
    return;
  }
  int method = opt->curve_noise;
  boot_ctx bc = {c, yhat, res, method, 1, rho, sd, best->th, opt->target_steps};
  if (method != FIT_CURVE_AR1) {
    /* centred, and scaled by sqrt(n / (n - 3)): fitted residuals are
     * smaller than the noise by the 3 degrees of freedom the fit used */
    double scale = sqrt((double)n / (n - NT));
    for (int i = 0; i < n; i++)
      res[i] = (res[i] - rmean) * scale;
    bc.block = method == FIT_CURVE_BLOCK ? (int)ceil(cbrt((double)n)) : 1;
  }
  fit__boot_finish(out, fit__bootstrap_rng(nb, NQ, opt->seed, opt->threads, boot_one, &bc), nb, NQ,
                   slot, "");
}

int fit_curve(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen) {
  opt = fit__options(opt);
  fit_result_init(out, "curve");
  int rc = check_points(pts, n, opt, err, errlen);
  if (rc)
    return rc;

  order *ord = malloc(sizeof(order) * n);
  double *buf = malloc(sizeof(double) * 4 * (size_t)n);
  if (!ord || !buf) {
    free(ord), free(buf);
    snprintf(err, errlen, "curve: out of memory for %d points", n);
    return SS_ENOMEM;
  }
  double *t = buf, *y = buf + n, *yhat = buf + 2 * n, *res = buf + 3 * n, tm;
  load_curve(pts, n, ord, t, y, &tm);
  curve c = {n, tm, t, y};
  cfit best = fit1(&c, NULL);
  if (!isfinite(best.f)) {
    free(ord), free(buf);
    snprintf(err, errlen, "curve: the objective was not finite at any starting point");
    return SS_ENUMERIC;
  }

  double q[NQ];
  quantities(&best, tm, opt->target_steps, q);
  fit_param *slot[NQ] = {0};
  add_params(out, q, opt->target_steps, slot);
  out->n_points = n;
  out->objective = 2 * best.f;
  out->converged = best.converged;
  out->residuals = malloc(sizeof(double) * n);
  double rmean = 0;
  for (int i = 0; i < n; i++) {
    yhat[i] = log(predict(best.th, tm, ord[i].x));
    res[i] = y[i] - yhat[i];
    rmean += res[i] / n;
    if (out->residuals)
      out->residuals[ord[i].i] = -res[i];
  }
  warn_all(out, pts, n, opt, &best, q, y, ord[n - 1].x);
  double rho, sd;
  noise_model(&c, best.th, res, &rho, &sd, out);
  if (opt->bootstrap > 0)
    bootstrap(&c, &best, yhat, res, rmean, rho, sd, opt, slot, out);
  free(ord);
  free(buf);
  return 0;
}

int fit_curve_flag(double predicted, double pred_lo, double pred_hi, double surface,
                   double surface_sd, double *z) {
  double sd_pred = (pred_hi - pred_lo) / 3.92;
  double sd = sqrt(sd_pred * sd_pred + surface_sd * surface_sd);
  double zz = NAN;
  if (isfinite(predicted) && isfinite(surface) && sd_pred >= 0 && surface_sd >= 0 && isfinite(sd) &&
      sd > 0)
    zz = (predicted - surface) / sd;
  if (z)
    *z = zz;
  return fabs(zz) > 3;
}

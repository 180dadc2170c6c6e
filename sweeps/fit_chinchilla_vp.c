/* Chinchilla Approach 3 by variable projection (sweeps/internal.h): the
 * same objective as fit_chinchilla_opt.c (the summed Huber, delta 1e-3, of
 * ln L_hat - ln L, L_hat = E + A/N^alpha + B/D^beta), searched over the two
 * exponents only.
 *
 * For fixed (alpha, beta), L_hat is linear in the prefactors c = (A', B', E)
 * (A' = e^t0, B' = e^t1, centred as in fit_chinchilla.c), but the
 * objective is not quadratic in them: the residual is a logarithm and the
 * loss a Huber. The inner problem is solved in two steps:
 *  1. the weighted nonnegative least squares of the relative residuals,
 *     min over c >= 0 of sum w (L_hat / L - 1)^2 (the first-order
 *     expansion of ln L_hat - ln L), exactly: the least-squares solution on
 *     each of the 7 supports, the best of the feasible ones;
 *  2. from there, Newton's method on the exact objective in the log
 *     prefactors (t0, t1, e), Levenberg-damped where the Hessian is not
 *     positive definite (Huber's linear tails make it so), each step
 *     accepted only when it lowers the objective, until the gradient is far
 *     below the outer tolerance. A prefactor that step 1 put at 0 starts at
 *     1e-9 of the mean loss, where its gradient already vanishes.
 * The inner problem is convex in neither c nor its logarithm; in practice
 * step 1 lands in the basin of its optimum whenever the exponents are
 * anywhere near sensible, and where they are not P is large anyway. The
 * global search does not depend on it being exact (see below).
 *
 * The profiled objective P(alpha, beta) = min over the prefactors is then
 *  - evaluated on a coarse grid, alpha and beta in 0.05, 0.15, ..., 2.95
 *    (the 4,500-start grid's exponent range, widened), and
 *  - minimised from each of the VP_BASINS lowest local minima of the grid by
 *    Newton's method on P: with the prefactors at their inner optimum
 *    (gradient 0), the Newton step of the whole 5-variable problem has the
 *    exponent part -S^-1 grad P, S = H_ee - H_ep H_pp^-1 H_pe the Schur
 *    complement (the Hessian of P), and its prefactor part the first-order
 *    move of the inner optimum; the step is taken, the prefactors re-solved
 *    at the new exponents, and the step halved until P decreases.
 * The lowest wins. fit_chinchilla then polishes it with the BFGS minimiser,
 * so the result is never worse than that minimiser started there. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/internal.h"

#define NT FIT__CHIN_NT  /* t0 (a), t1 (b), e, alpha, beta */
#define HUBER_DELTA 1e-3 /* fit_chinchilla_opt.c's */
#define NI 3             /* the prefactors t0, t1, e */

#define GRID_N 30 /* per exponent */
#define GRID_LO 0.05
#define GRID_STEP 0.1
#define VP_BASINS 4
#define GRID_INNER_ITERS 8 /* enough to rank the grid points */
#define INNER_ITERS 60
#define OUTER_ITERS 100
#define HALVINGS 30
#define MAX_EXP_STEP 1.0  /* the largest exponent move of one Newton step */
#define MAX_PREF_STEP 5.0 /* and of a log prefactor */
#define FLOOR_REL 1e-9    /* a zero prefactor starts at this times the mean loss */
/* a prefactor's largest share of L_hat below which it has collapsed */
#define COLLAPSED 1e-8
#define ZERO_REL 1e-30 /* a collapsed prefactor's value, relative to the mean loss */
#define INNER_TOL 0.01 /* the inner gradient's tolerance, relative to the outer's */
/* Newton stops when the decrease it predicts, g^T H^-1 g, is below this
 * fraction of f: the rounding of a sum of many terms, beyond which no step
 * can be told to lower it. The search's refinements stop on that alone (on
 * a flat optimum |grad f| < gtol still leaves parameters 1e-5 off, and the
 * last Newton steps are cheap); the bootstrap's at gtol as well. */
#define DEC_REL 1e-15

/* x = A^-1 b for the n x n symmetric matrix A (stride NT) plus mu times
 * the largest diagonal on the diagonal, by Cholesky; 0 when that is not
 * positive definite beyond rounding. */
static int solve_spd(int n, double A[][NT], double mu, const double *b, double *x) {
  double L[NT][NT], scale = 0;
  for (int a = 0; a < n; a++)
    scale = fmax(scale, fabs(A[a][a]));
  if (!(scale > 0) || !isfinite(scale))
    return 0;
  for (int a = 0; a < n; a++)
    for (int c = 0; c <= a; c++) {
      double v = A[a][c] + (a == c ? mu * scale : 0);
      for (int k = 0; k < c; k++)
        v -= L[a][k] * L[c][k];
      if (a == c) {
        if (!(v > 1e-13 * scale))
          return 0;
        L[a][a] = sqrt(v);
      } else {
        L[a][c] = v / L[c][c];
      }
    }
  double y[NT];
  for (int a = 0; a < n; a++) {
    double v = b[a];
    for (int k = 0; k < a; k++)
      v -= L[a][k] * y[k];
    y[a] = v / L[a][a];
  }
  for (int a = n - 1; a >= 0; a--) {
    double v = y[a];
    for (int k = a + 1; k < n; k++)
      v -= L[k][a] * x[k];
    x[a] = v / L[a][a];
  }
  return 1;
}

static double norm(const double *g, int n) {
  double s = 0;
  for (int k = 0; k < n; k++)
    s += g[k] * g[k];
  return sqrt(s);
}

/* Moves to the point tn, with its gradient gn and Hessian Hn. */
static void move_to(double *t, double *g, double H[NT][NT], const double *tn, const double *gn,
                    double Hn[NT][NT]) {
  memcpy(t, tn, NT * sizeof *t);
  memcpy(g, gn, NT * sizeof *g);
  memcpy(H, Hn, NT * sizeof *H);
}

/* Whether a trial (fn, gn) improves on (f, g): lower, or as low with a
 * smaller gradient over the first n coordinates. */
static int lower(double fn, const double *gn, double f, const double *g, int n) {
  return fn < f || (fn == f && norm(gn, n) < norm(g, n));
}

/* The columns of one exponent pair: u_i = e^(-alpha x1_i), v_i =
 * e^(-beta x2_i), so that L_hat_i = e^t0 u_i + e^t1 v_i + e^e. Every
 * evaluation at these exponents then costs one logarithm per point instead
 * of the three exponentials and one logarithm of the log-sum-exp form. */
typedef struct {
  const fit__chin_objective *o;
  double al, be;
  double *u, *v; /* m each, one allocation */
} columns;

static int columns_init(columns *c, const fit__chin_objective *o, double al, double be) {
  c->o = o;
  c->al = al;
  c->be = be;
  c->u = malloc(sizeof(double) * 2 * (size_t)(o->m > 0 ? o->m : 1));
  if (!c->u)
    return SS_ENOMEM;
  c->v = c->u + o->m;
  for (int i = 0; i < o->m; i++) {
    c->u[i] = exp(-al * o->x1[i]);
    c->v[i] = exp(-be * o->x2[i]);
  }
  return 0;
}

/* f, its gradient and Hessian in all five centred coordinates at the
 * prefactors t[0..2] and the columns' exponents: fit__chin_eval_hessian
 * with the softmax weights p_k = (term k) / L_hat. */
static double col_eval(const columns *c, const double *t, double *g, double H[NT][NT]) {
  const fit__chin_objective *o = c->o;
  double c0 = exp(t[0]), c1 = exp(t[1]), c2 = exp(t[2]), f = 0;
  double g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0;
  double h00 = 0, h10 = 0, h11 = 0, h20 = 0, h21 = 0, h22 = 0, h30 = 0, h31 = 0, h32 = 0, h33 = 0,
         h40 = 0, h41 = 0, h42 = 0, h43 = 0, h44 = 0;
  for (int i = 0; i < o->m; i++) {
    double a = c0 * c->u[i], b = c1 * c->v[i], lh = a + b + c2;
    double r = log(lh) - o->y[i], w = o->w[i], h1, h2;
    if (fabs(r) <= HUBER_DELTA) {
      f += w * 0.5 * r * r;
      h1 = r;
      h2 = 1;
    } else {
      f += w * HUBER_DELTA * (fabs(r) - 0.5 * HUBER_DELTA);
      h1 = r > 0 ? HUBER_DELTA : -HUBER_DELTA;
      h2 = 0;
    }
    double p1 = a / lh, p2 = b / lh, p3 = c2 / lh, x1 = o->x1[i], x2 = o->x2[i];
    double J3 = -p1 * x1, J4 = -p2 * x2, wh = w * h1, k = w * (h2 - h1);
    g0 += wh * p1, g1 += wh * p2, g2 += wh * p3, g3 += wh * J3, g4 += wh * J4;
    /* (h'' - h') J J^T + h' sum_k p_k m_k m_k^T (fit__chin_eval_hessian) */
    h00 += k * p1 * p1 + wh * p1;
    h10 += k * p2 * p1;
    h11 += k * p2 * p2 + wh * p2;
    h20 += k * p3 * p1;
    h21 += k * p3 * p2;
    h22 += k * p3 * p3 + wh * p3;
    h30 += k * J3 * p1 - wh * p1 * x1;
    h31 += k * J3 * p2;
    h32 += k * J3 * p3;
    h33 += k * J3 * J3 + wh * p1 * x1 * x1;
    h40 += k * J4 * p1;
    h41 += k * J4 * p2 - wh * p2 * x2;
    h42 += k * J4 * p3;
    h43 += k * J4 * J3;
    h44 += k * J4 * J4 + wh * p2 * x2 * x2;
  }
  g[0] = g0, g[1] = g1, g[2] = g2, g[3] = g3, g[4] = g4;
  double lower[NT][NT] = {
      {h00}, {h10, h11}, {h20, h21, h22}, {h30, h31, h32, h33}, {h40, h41, h42, h43, h44}};
  for (int a = 0; a < NT; a++)
    for (int b = 0; b <= a; b++)
      H[a][b] = H[b][a] = lower[a][b];
  return isnan(f) ? INFINITY : f;
}

/* Step 1 of the inner problem: the prefactors of the nonnegative least
 * squares of relative residuals into t[0..2]. */
static void inner_nnls(const columns *col, double *t) {
  const fit__chin_objective *o = col->o;
  double M[NT][NT] = {{0}}, rhs[NI] = {0}, lsum = 0;
  for (int i = 0; i < o->m; i++) {
    double L = exp(o->y[i]), w = o->w[i];
    double phi[NI] = {col->u[i] / L, col->v[i] / L, 1 / L};
    for (int a = 0; a < NI; a++) {
      rhs[a] += w * phi[a];
      for (int c = 0; c <= a; c++)
        M[a][c] += w * phi[a] * phi[c];
    }
    lsum += w * L;
  }
  for (int a = 0; a < NI; a++)
    for (int c = a + 1; c < NI; c++)
      M[a][c] = M[c][a];
  double best[NI] = {0, 0, 0}, qbest = INFINITY;
  for (int mask = 1; mask < 8; mask++) {
    int idx[NI], n = 0;
    for (int a = 0; a < NI; a++)
      if (mask & (1 << a))
        idx[n++] = a;
    double S[NT][NT], b[NI], c[NI];
    for (int a = 0; a < n; a++) {
      b[a] = rhs[idx[a]];
      for (int k = 0; k < n; k++)
        S[a][k] = M[idx[a]][idx[k]];
    }
    if (!solve_spd(n, S, 0, b, c))
      continue;
    int feasible = 1;
    double q = 0; /* c^T M c - 2 c^T rhs at the support's solution */
    for (int a = 0; a < n; a++) {
      feasible &= c[a] > 0;
      q -= c[a] * b[a];
    }
    if (feasible && q < qbest) {
      qbest = q;
      memset(best, 0, sizeof best);
      for (int a = 0; a < n; a++)
        best[idx[a]] = c[a];
    }
  }
  double floor_ = FLOOR_REL * lsum / o->wsum;
  for (int a = 0; a < NI; a++)
    t[a] = log(fmax(best[a], floor_));
  t[3] = col->al;
  t[4] = col->be;
}

/* Step 2: Newton on the log prefactors t[0..2] at the columns' exponents,
 * at most iters steps, until their gradient is below tol or the predicted
 * decrease below DEC_REL of f. Returns f at the result, with its gradient g
 * and Hessian H; *done says whether it stopped for one of those two
 * reasons (not the step limit, nor a step that found no decrease). */
static double inner_newton(const columns *col, double *t, int iters, double tol, double *g,
                           double H[NT][NT], int *done) {
  double f = col_eval(col, t, g, H);
  double mu = 0;
  *done = 0;
  for (int it = 0; it < iters && isfinite(f); it++) {
    if (norm(g, NI) < tol) {
      *done = 1;
      break;
    }
    int moved = 0;
    while (!moved && mu < 1e10) {
      double d[NI], nb[NI] = {-g[0], -g[1], -g[2]};
      if (!solve_spd(NI, H, mu, nb, d)) {
        mu = mu > 0 ? mu * 10 : 1e-10;
        continue;
      }
      if (mu == 0 && -(g[0] * d[0] + g[1] * d[1] + g[2] * d[2]) <= DEC_REL * f) {
        *done = 1;
        return f;
      }
      double big = fmax(fabs(d[0]), fmax(fabs(d[1]), fabs(d[2])));
      double shrink = big > MAX_PREF_STEP ? MAX_PREF_STEP / big : 1;
      double tn[NT], gn[NT], Hn[NT][NT];
      memcpy(tn, t, sizeof tn);
      for (int a = 0; a < NI; a++)
        tn[a] += shrink * d[a];
      double fn = col_eval(col, tn, gn, Hn);
      if (lower(fn, gn, f, g, NI)) {
        move_to(t, g, H, tn, gn, Hn);
        f = fn;
        moved = 1;
        mu = mu > 1e-9 ? mu / 10 : 0;
      } else {
        mu = mu > 0 ? mu * 10 : 1e-10;
      }
    }
    if (!moved)
      break;
  }
  if (!*done && isfinite(f) && norm(g, NI) < tol)
    *done = 1;
  return f;
}

/* A prefactor the data drive to 0 has its optimum at t_k = -infinity, which
 * Newton approaches one unit step at a time, stopping where the gradient
 * falls below tol (a share of ~1e-11 of L_hat) while the objective still
 * falls in the 12th digit. Such a prefactor (its term's share of L_hat
 * below COLLAPSED at every point, the objective falling as it shrinks) is
 * set to ZERO_REL of the mean loss, 0 for every purpose of the fit, and
 * the others re-solved; kept when the objective is no higher. */
static double snap_collapsed(const columns *col, double *t, double f, int iters, double tol,
                             double *g, double H[NT][NT]) {
  if (!(g[0] > 0 || g[1] > 0 || g[2] > 0))
    return f;
  const fit__chin_objective *o = col->o;
  double most[NI] = {0, 0, 0}, lsum = 0, c[NI] = {exp(t[0]), exp(t[1]), exp(t[2])};
  for (int i = 0; i < o->m; i++) {
    double term[NI] = {c[0] * col->u[i], c[1] * col->v[i], c[2]};
    double lh = term[0] + term[1] + term[2];
    for (int k = 0; k < NI; k++)
      most[k] = fmax(most[k], term[k] / lh);
  }
  for (int k = 0; k < NI; k++) {
    if (!(g[k] > 0) || most[k] >= COLLAPSED)
      continue;
    if (lsum == 0)
      for (int i = 0; i < o->m; i++)
        lsum += o->w[i] * exp(o->y[i]);
    double tz[NT], gz[NT], Hz[NT][NT];
    int done;
    memcpy(tz, t, sizeof tz);
    tz[k] = log(ZERO_REL * lsum / o->wsum);
    double fz = inner_newton(col, tz, iters, tol, gz, Hz, &done);
    if (fz <= f) {
      move_to(t, g, H, tz, gz, Hz);
      f = fz;
    }
  }
  return f;
}

/* P at t's exponents, the prefactors into t (INFINITY when out of memory):
 * the inner problem from t's own prefactors when warm (a re-solve near a
 * known optimum), and from the least-squares start when cold or when the
 * warm solve did not finish (then the lower of the two). */
static double profile(const fit__chin_objective *o, double *t, int warm, int iters, double tol,
                      double *g, double H[NT][NT]) {
  columns col;
  if (columns_init(&col, o, t[3], t[4]))
    return INFINITY;
  double fw = INFINITY, gw[NT], Hw[NT][NT], tw[NT], f;
  int done = 0;
  if (warm) {
    memcpy(tw, t, sizeof tw);
    fw = inner_newton(&col, tw, iters, tol, gw, Hw, &done);
  }
  if (warm && done) {
    move_to(t, g, H, tw, gw, Hw);
    f = fw;
  } else {
    inner_nnls(&col, t);
    f = inner_newton(&col, t, iters, tol, g, H, &done);
    if (warm && isfinite(fw) && !(f < fw)) {
      move_to(t, g, H, tw, gw, Hw);
      f = fw;
    }
  }
  if (isfinite(f))
    f = snap_collapsed(&col, t, f, iters, tol, g, H);
  free(col.u);
  return f;
}

void fit__chin_vp_local(const fit__chin_objective *o, const double *t0, double gtol, double gstop,
                        fit__chin_run *out) {
  double t[NT], g[NT], H[NT][NT], itol = INNER_TOL * gstop;
  memcpy(t, t0, sizeof t);
  double f = profile(o, t, 1, INNER_ITERS, itol, g, H);
  int it = 0;
  for (; it < OUTER_ITERS && isfinite(f) && norm(g, NT) >= gstop; it++) {
    /* the Newton step of all five (LM-damped when H is not positive
     * definite); with the prefactors' gradient 0 its exponent part is P's */
    double d[NT], nb[NT], mu = 0;
    for (int a = 0; a < NT; a++)
      nb[a] = -g[a];
    while (!solve_spd(NT, H, mu, nb, d) && mu < 1e10)
      mu = mu > 0 ? mu * 10 : 1e-10;
    double dec = 0;
    for (int a = 0; a < NT; a++)
      dec -= g[a] * d[a];
    if (!(mu < 1e10) || (mu == 0 && dec <= DEC_REL * f))
      break;
    double big = fmax(fabs(d[3]), fabs(d[4]));
    double lam = big > MAX_EXP_STEP ? MAX_EXP_STEP / big : 1;
    int moved = 0;
    for (int h = 0; h < HALVINGS && !moved; h++, lam /= 2) {
      double tn[NT], gn[NT], Hn[NT][NT];
      for (int a = 0; a < NT; a++)
        tn[a] = t[a] + lam * d[a];
      double fn = profile(o, tn, 1, INNER_ITERS, itol, gn, Hn);
      if (lower(fn, gn, f, g, NT)) {
        move_to(t, g, H, tn, gn, Hn);
        f = fn;
        moved = 1;
      }
    }
    if (!moved)
      break;
  }
  if (isfinite(f)) /* the reference form, as the BFGS minimiser sees it */
    f = fit__chin_eval_hessian(o, t, g, H);
  memcpy(out->t, t, sizeof t);
  out->f = f;
  out->gnorm = norm(g, NT);
  out->converged = out->gnorm < gtol && isfinite(f);
  out->iters = it;
}

int fit__chin_vp_search(const fit__chin_objective *o, int threads, double gtol,
                        fit__chin_run *best) {
  enum { NG = GRID_N * GRID_N };
  double *P = malloc(NG * sizeof *P), *T = malloc((size_t)NG * NT * sizeof *T);
  sweeps__ranked *basin = malloc(NG * sizeof *basin);
  if (!P || !T || !basin) {
    free(P), free(T), free(basin);
    return SS_ENOMEM;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int k = 0; k < NG; k++) {
    double *t = &T[(size_t)k * NT], g[NT], H[NT][NT];
    t[3] = GRID_LO + GRID_STEP * (k % GRID_N);
    t[4] = GRID_LO + GRID_STEP * (k / GRID_N);
    P[k] = profile(o, t, 0, GRID_INNER_ITERS, INNER_TOL * gtol, g, H);
    if (!isfinite(P[k]))
      P[k] = INFINITY;
  }
  /* the grid's local minima (no lower neighbour of the 8), lowest first */
  int nb = 0;
  for (int k = 0; k < NG; k++) {
    int i = k % GRID_N, j = k / GRID_N, lowest = isfinite(P[k]);
    for (int dj = -1; dj <= 1 && lowest; dj++)
      for (int di = -1; di <= 1 && lowest; di++) {
        int ii = i + di, jj = j + dj;
        if ((di || dj) && ii >= 0 && ii < GRID_N && jj >= 0 && jj < GRID_N)
          lowest =
              P[jj * GRID_N + ii] > P[k] || (P[jj * GRID_N + ii] == P[k] && jj * GRID_N + ii > k);
      }
    if (lowest)
      basin[nb++] = (sweeps__ranked){P[k], (size_t)k};
  }
  qsort(basin, nb, sizeof *basin, sweeps__by_rank);
  if (nb > VP_BASINS)
    nb = VP_BASINS;
  fit__chin_run res[VP_BASINS];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int b = 0; b < nb; b++)
    fit__chin_vp_local(o, &T[basin[b].i * NT], gtol, 0, &res[b]);
  int w = -1;
  for (int b = 0; b < nb; b++)
    if (isfinite(res[b].f) && (w < 0 || res[b].f < res[w].f))
      w = b;
  if (w >= 0)
    *best = res[w];
  free(P), free(T), free(basin);
  return w >= 0 ? 0 : SS_ENUMERIC;
}

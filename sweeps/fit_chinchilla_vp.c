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

#define NT FIT__CHIN_NT /* t0 (a), t1 (b), e, alpha, beta */
#define NI 3            /* the prefactors t0, t1, e */

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
#define INNER_TOL 0.01    /* the inner gradient's tolerance, relative to the outer's */
/* The search's refinements go on past gtol (converged) to this fraction of
 * it, or until no step lowers P: at 1e-9 per point the parameters of a
 * flat optimum can still move by 1e-7, and Newton's last steps are cheap. */
#define FINAL_TOL 1e-4

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

/* Step 1 of the inner problem at t's exponents: the prefactors of the
 * nonnegative least squares of relative residuals into t[0..2]. */
static void inner_nnls(const fit__chin_objective *o, double *t) {
  double M[NT][NT] = {{0}}, rhs[NI] = {0}, lsum = 0;
  for (int i = 0; i < o->m; i++) {
    double L = exp(o->y[i]), w = o->w[i];
    double phi[NI] = {exp(-t[3] * o->x1[i]) / L, exp(-t[4] * o->x2[i]) / L, 1 / L};
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
}

/* Step 2: Newton on the log prefactors t[0..2] at t's exponents, at most
 * iters steps, until their gradient is below tol. Returns f at the result,
 * with its gradient g and Hessian H. */
static double inner_newton(const fit__chin_objective *o, double *t, int iters, double tol,
                           double *g, double H[NT][NT]) {
  double f = fit__chin_eval_hessian(o, t, g, H);
  double mu = 0;
  for (int it = 0; it < iters && isfinite(f) && norm(g, NI) >= tol; it++) {
    int moved = 0;
    while (!moved && mu < 1e10) {
      double d[NI], nb[NI] = {-g[0], -g[1], -g[2]};
      if (!solve_spd(NI, H, mu, nb, d)) {
        mu = mu > 0 ? mu * 10 : 1e-10;
        continue;
      }
      double big = fmax(fabs(d[0]), fmax(fabs(d[1]), fabs(d[2])));
      double shrink = big > MAX_PREF_STEP ? MAX_PREF_STEP / big : 1;
      double tn[NT], gn[NT], Hn[NT][NT];
      memcpy(tn, t, sizeof tn);
      for (int a = 0; a < NI; a++)
        tn[a] += shrink * d[a];
      double fn = fit__chin_eval_hessian(o, tn, gn, Hn);
      if (fn < f || (fn == f && norm(gn, NI) < norm(g, NI))) {
        memcpy(t, tn, sizeof tn);
        memcpy(g, gn, sizeof gn);
        memcpy(H, Hn, sizeof Hn);
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
  return f;
}

/* P at t's exponents, the prefactors into t: the inner problem from t's
 * own prefactors when warm (a re-solve near a known optimum), and from the
 * least-squares start when cold or when the warm solve did not reach tol
 * (then the lower of the two). */
static double profile(const fit__chin_objective *o, double *t, int warm, int iters, double tol,
                      double *g, double H[NT][NT]) {
  double fw = INFINITY, gw[NT], Hw[NT][NT], tw[NT];
  if (warm) {
    memcpy(tw, t, sizeof tw);
    fw = inner_newton(o, tw, iters, tol, gw, Hw);
    if (isfinite(fw) && norm(gw, NI) < tol) {
      memcpy(t, tw, sizeof tw);
      memcpy(g, gw, sizeof gw);
      memcpy(H, Hw, sizeof Hw);
      return fw;
    }
  }
  inner_nnls(o, t);
  double fs = inner_newton(o, t, iters, tol, g, H);
  if (warm && isfinite(fw) && !(fs < fw)) {
    memcpy(t, tw, sizeof tw);
    memcpy(g, gw, sizeof gw);
    memcpy(H, Hw, sizeof Hw);
    return fw;
  }
  return fs;
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
    if (!(mu < 1e10))
      break;
    double big = fmax(fabs(d[3]), fabs(d[4]));
    double lam = big > MAX_EXP_STEP ? MAX_EXP_STEP / big : 1;
    int moved = 0;
    for (int h = 0; h < HALVINGS && !moved; h++, lam /= 2) {
      double tn[NT], gn[NT], Hn[NT][NT];
      for (int a = 0; a < NT; a++)
        tn[a] = t[a] + lam * d[a];
      double fn = profile(o, tn, 1, INNER_ITERS, itol, gn, Hn);
      if (fn < f || (fn == f && norm(gn, NT) < norm(g, NT))) {
        memcpy(t, tn, sizeof t);
        memcpy(g, gn, sizeof g);
        memcpy(H, Hn, sizeof Hn);
        f = fn;
        moved = 1;
      }
    }
    if (!moved)
      break;
  }
  memcpy(out->t, t, sizeof t);
  out->f = f;
  out->gnorm = norm(g, NT);
  out->converged = out->gnorm < gtol && isfinite(f);
  out->iters = it;
}

typedef struct {
  double f;
  int k;
} cell;

static int by_f(const void *pa, const void *pb) {
  const cell *a = pa, *b = pb;
  if (a->f != b->f)
    return a->f < b->f ? -1 : 1;
  return (a->k > b->k) - (a->k < b->k);
}

int fit__chin_vp_search(const fit__chin_objective *o, int threads, double gtol,
                        fit__chin_run *best) {
  enum { NG = GRID_N * GRID_N };
  double *P = malloc(NG * sizeof *P), *T = malloc((size_t)NG * NT * sizeof *T);
  cell *basin = malloc(NG * sizeof *basin);
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
      basin[nb++] = (cell){P[k], k};
  }
  qsort(basin, nb, sizeof *basin, by_f);
  if (nb > VP_BASINS)
    nb = VP_BASINS;
  fit__chin_run res[VP_BASINS];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int b = 0; b < nb; b++)
    fit__chin_vp_local(o, &T[(size_t)basin[b].k * NT], gtol, FINAL_TOL * gtol, &res[b]);
  int w = -1;
  for (int b = 0; b < nb; b++)
    if (isfinite(res[b].f) && (w < 0 || res[b].f < res[w].f))
      w = b;
  if (w >= 0)
    *best = res[w];
  free(P), free(T), free(basin);
  return w >= 0 ? 0 : SS_ENUMERIC;
}

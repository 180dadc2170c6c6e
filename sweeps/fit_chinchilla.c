/* Chinchilla Approach 3 (SCIENCE.md section 2): L = E + A/N^alpha + B/D^beta
 * fitted on log loss with a summed Huber objective and a bootstrap over
 * runs. Two minimisers of that one objective: variable projection (the
 * default; fit_chinchilla_vp.c), and the multistart of SCIENCE.md, GSL's
 * BFGS2 with the analytic gradient from a 4,500-point grid of starts
 * (FIT_CHIN_BFGS, and the reference --full-grid), kept for comparison.
 *
 * Internally the optimiser works in centred coordinates
 * t = (a - alpha cN, b - beta cD, e, alpha, beta), cN and cD the mean ln N and
 * ln D of the data: a - alpha ln N = t0 - alpha (ln N - cN), so the prefactors
 * no longer move with the exponents and the problem is far better conditioned
 * (the gradient tolerance then means the same thing in every direction).
 * Everything outside this file sees theta = (a, b, e, alpha, beta). The
 * objective and its BFGS minimiser are in fit_chinchilla_opt.c. */
#include <gsl/gsl_multimin.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

#define NT FIT__CHIN_NT /* t0 (a), t1 (b), e, alpha, beta */

/* The starting grid of SCIENCE.md: alpha, beta in 0..2 step 0.5, e in -1..1
 * step 0.5, a, b in 0..25 step 5. */
#define GRID_AB 6
#define GRID_E 5
#define GRID_EXP 5
#define GRID_N (GRID_AB * GRID_AB * GRID_E * GRID_EXP * GRID_EXP)

/* The screen: the objective at every grid start, a few BFGS iterations from
 * the SCREEN_KEEP best of those, then the REFINE_KEEP best of the shortened
 * runs to the gradient tolerance. test_fit_chinchilla checks the result
 * against BFGS from every start. */
#define SCREEN_KEEP 512
#define SCREEN_ITERS 25
#define REFINE_KEEP 32

/* Gradient tolerance on |grad f| in centred coordinates, relative to the
 * total weight (the number of points, or of draws in a resample): the
 * objective is a sum, so its gradient grows with the data. 1e-9 per point
 * pins the parameters far below the 1e-6 that distinguishes fits and stays
 * above the rounding noise of the gradient; 1e-11 is not always reachable. */
#define GTOL_PER_POINT 1e-9
#define PLAIN_ITERS 200 /* before whitening (see frame, fit_chinchilla_opt.c) */
#define POLISH_ROUNDS 4 /* whitened runs, each from a fresh Hessian */

/* Flags: an exponent below EXP_FLOOR is "at its bound"; e below E_FLOOR
 * means E collapsed toward 0; an N or D term below TERM_FLOOR of the
 * predicted loss at every point has collapsed too. */
#define EXP_FLOOR 0.01
#define E_FLOOR (-10.0)
#define TERM_FLOOR 1e-4

/* ---- coordinates and derived quantities ---- */

static void to_theta(const double *t, double cN, double cD, double *th) {
  th[0] = t[0] + t[3] * cN;
  th[1] = t[1] + t[4] * cD;
  th[2] = t[2];
  th[3] = t[3];
  th[4] = t[4];
}

static void to_centred(const double *th, double cN, double cD, double *t) {
  t[0] = th[0] - th[3] * cN;
  t[1] = th[1] - th[4] * cD;
  t[2] = th[2];
  t[3] = th[3];
  t[4] = th[4];
}

enum { Q_E, Q_A, Q_B, Q_ALPHA, Q_BETA, Q_a, Q_b, Q_G, Q_NOPT, Q_DOPT, Q_LOSS, NQ };
static const char *const qnames[NQ] = {"E", "A", "B",     "alpha", "beta",          "a",
                                       "b", "G", "N_opt", "D_opt", "loss_at_target"};

void fit_chinchilla_allocation(double A, double B, double alpha, double beta, double C, double *G,
                               double *a, double *b, double *n_opt, double *d_opt) {
  double s = alpha + beta;
  double g = pow(alpha * A / (beta * B), 1.0 / s);
  double ea = beta / s, eb = alpha / s;
  if (G)
    *G = g;
  if (a)
    *a = ea;
  if (b)
    *b = eb;
  if (n_opt)
    *n_opt = g * pow(C / 6, ea);
  if (d_opt)
    *d_opt = pow(C / 6, eb) / g;
}

/* All reported quantities from theta, in logs where the exponentials could
 * overflow (a bootstrap resample can wander far). Quantities that do not
 * exist (G with a non-positive exponent) are NAN. */
static void quantities(const double *th, double C, double *q) {
  double a = th[0], b = th[1], al = th[3], be = th[4];
  q[Q_E] = exp(th[2]);
  q[Q_A] = exp(a);
  q[Q_B] = exp(b);
  q[Q_ALPHA] = al;
  q[Q_BETA] = be;
  q[Q_a] = be / (al + be);
  q[Q_b] = al / (al + be);
  double lnG = (al > 0 && be > 0) ? (log(al) + a - log(be) - b) / (al + be) : NAN;
  q[Q_G] = exp(lnG);
  q[Q_NOPT] = q[Q_DOPT] = q[Q_LOSS] = NAN;
  if (C > 0 && isfinite(lnG)) {
    double lnN = lnG + q[Q_a] * log(C / 6), lnD = q[Q_b] * log(C / 6) - lnG;
    q[Q_NOPT] = exp(lnN);
    q[Q_DOPT] = exp(lnD);
    q[Q_LOSS] = q[Q_E] + exp(a - al * lnN) + exp(b - be * lnD);
  }
}

/* ---- search ---- */

static int threads_of(const fit_options *opt) {
  return opt && opt->threads > 0 ? opt->threads : omp_get_max_threads();
}

static void grid_start(int k, double cN, double cD, double *t) {
  double th[NT];
  int ia = k % GRID_AB;
  k /= GRID_AB;
  int ib = k % GRID_AB;
  k /= GRID_AB;
  int ie = k % GRID_E;
  k /= GRID_E;
  int ial = k % GRID_EXP;
  int ibe = k / GRID_EXP;
  th[0] = 5.0 * ia;
  th[1] = 5.0 * ib;
  th[2] = -1.0 + 0.5 * ie;
  th[3] = 0.5 * ial;
  th[4] = 0.5 * ibe;
  to_centred(th, cN, cD, t);
}

static fit__chin_objective objective_copy(const fit__chin_objective *src) {
  fit__chin_objective o = *src;
  o.cvalid = 0;
  return o;
}

/* fit__chin_minimise() from the grid starts idx[0..n) into res[0..n) (f NAN where
 * GSL could not allocate its minimiser). */
static void run_starts(const fit__chin_objective *o, const int *idx, int n, double cN, double cD,
                       int max_iters, int polish, double gtol, int nt, fit__chin_run *res) {
#pragma omp parallel num_threads(nt)
  {
    fit__chin_objective loc = objective_copy(o);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, NT);
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
      double t[NT];
      grid_start(idx[i], cN, cD, t);
      if (s)
        fit__chin_minimise(&loc, s, t, max_iters, polish, gtol, &res[i]);
      else
        res[i] = (fit__chin_run){.f = NAN, .gnorm = NAN};
    }
    if (s)
      gsl_multimin_fdfminimizer_free(s);
  }
}

static int best_of(const fit__chin_run *res, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (isfinite(res[i].f) && (best < 0 || res[i].f < res[best].f))
      best = i;
  return best;
}

/* The optimum over the grid: BFGS from every start when full, else the
 * screen described at SCREEN_KEEP. */
static int search(const fit__chin_objective *o, double cN, double cD, int full, int nt,
                  fit__chin_run *best) {
  double gtol = GTOL_PER_POINT * o->wsum;
  int *idx = malloc(GRID_N * sizeof *idx);
  sweeps__ranked *rk = malloc(GRID_N * sizeof *rk);
  fit__chin_run *res = malloc(GRID_N * sizeof *res);
  if (!idx || !rk || !res) {
    free(idx), free(rk), free(res);
    return SS_ENOMEM;
  }
  int nkeep = GRID_N;
  for (int k = 0; k < GRID_N; k++)
    idx[k] = k;
  if (!full) {
#pragma omp parallel num_threads(nt)
    {
      fit__chin_objective loc = objective_copy(o);
#pragma omp for schedule(static)
      for (int k = 0; k < GRID_N; k++) {
        double t[NT], g[NT];
        grid_start(k, cN, cD, t);
        rk[k] = (sweeps__ranked){fit__chin_eval(&loc, t, g), (size_t)k};
      }
    }
    qsort(rk, GRID_N, sizeof *rk, sweeps__by_rank);
    for (int k = 0; k < SCREEN_KEEP; k++)
      idx[k] = (int)rk[k].i;
    run_starts(o, idx, SCREEN_KEEP, cN, cD, SCREEN_ITERS, 0, gtol, nt, res);
    for (int k = 0; k < SCREEN_KEEP; k++)
      rk[k] = (sweeps__ranked){res[k].f, (size_t)idx[k]};
    qsort(rk, SCREEN_KEEP, sizeof *rk, sweeps__by_rank);
    for (int k = 0; k < REFINE_KEEP; k++)
      idx[k] = (int)rk[k].i;
    nkeep = REFINE_KEEP;
  }
  run_starts(o, idx, nkeep, cN, cD, PLAIN_ITERS, POLISH_ROUNDS, gtol, nt, res);
  int b = best_of(res, nkeep);
  if (b >= 0)
    *best = res[b];
  free(idx), free(rk), free(res);
  return b >= 0 ? 0 : SS_ENUMERIC;
}

/* The variable-projection search (fit_chinchilla_vp.c), then BFGS from its
 * optimum (PLAIN_ITERS, then POLISH_ROUNDS whitened; nothing to do when the
 * gradient is already below the tolerance), the lower of the two kept: the
 * result is never worse than the BFGS minimiser started there. */
static int search_vp(const fit__chin_objective *o, int nt, fit__chin_run *best) {
  double gtol = GTOL_PER_POINT * o->wsum;
  fit__chin_run vp;
  int rc = fit__chin_vp_search(o, nt, gtol, &vp);
  if (rc)
    return rc;
  *best = vp;
  gsl_multimin_fdfminimizer *s =
      gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, NT);
  if (!s)
    return SS_ENOMEM;
  fit__chin_objective loc = objective_copy(o);
  fit__chin_run pol;
  fit__chin_minimise(&loc, s, vp.t, PLAIN_ITERS, POLISH_ROUNDS, gtol, &pol);
  gsl_multimin_fdfminimizer_free(s);
  if (pol.f < vp.f || (pol.f == vp.f && pol.converged && !vp.converged))
    *best = pol;
  return 0;
}

/* ---- input ---- */

static int positive(double x) { return isfinite(x) && x > 0; }

static int check_points(const fit_point *pts, int n, char *err, size_t errlen) {
  static const char *const cols[3] = {"params", "tokens", "loss"};
  for (int c = 0; c < 3; c++) {
    int present = 0;
    for (int i = 0; i < n && !present; i++) {
      double v = c == 0 ? pts[i].params : c == 1 ? pts[i].tokens : pts[i].loss;
      present = !isnan(v);
    }
    if (!present && n > 0) {
      snprintf(err, errlen,
               "column '%s' is missing: the chinchilla law needs params (N), tokens (D, "
               "or flops to derive it) and loss",
               cols[c]);
      return SS_EINVAL;
    }
  }
  if (n < NT + 2) {
    snprintf(err, errlen,
             "too few points: %d; the chinchilla law has 5 parameters and needs at least "
             "%d points",
             n, NT + 2);
    return SS_EINVAL;
  }
  for (int i = 0; i < n; i++) {
    const fit_point *p = &pts[i];
    const char *bad = !positive(p->params)   ? "params"
                      : !positive(p->tokens) ? "tokens"
                      : !positive(p->loss)   ? "loss"
                                             : NULL;
    if (bad) {
      double v = bad[0] == 'p' ? p->params : bad[0] == 't' ? p->tokens : p->loss;
      snprintf(err, errlen, "point %d: %s = %g, expected a positive number", i + 1, bad, v);
      return SS_EINVAL;
    }
  }
  int distinct_n = 0, distinct_d = 0;
  for (int i = 1; i < n; i++) {
    distinct_n |= pts[i].params != pts[0].params;
    distinct_d |= pts[i].tokens != pts[0].tokens;
  }
  if (!distinct_n || !distinct_d) {
    snprintf(err, errlen,
             "all %d points have the same %s (%g): the chinchilla law needs several "
             "model sizes and several token counts to separate A/N^alpha, B/D^beta and E",
             n, !distinct_n ? "params" : "tokens", !distinct_n ? pts[0].params : pts[0].tokens);
    return SS_EINVAL;
  }
  return 0;
}

/* ---- bootstrap ---- */

/* Resample k of the bootstrap (whole runs, or whole cells when c is
 * not NULL; sweeps/internal.h), refitted
 * from t_opt; q receives the quantities. A resample is the full data with
 * integer weights, each point counted as often as its run was drawn. Each
 * resample seeds its own generator from (seed, k), so results do not
 * depend on the thread count. Returns whether the refit converged. */
static int bootstrap_one(const fit__chin_objective *full, const fit__groups *g, const fit__cells *c,
                         uint64_t seed, int k, int method, const double *t_opt, double cN,
                         double cD, double C, const fit_result *grid, int keep, gsl_rng *rng,
                         gsl_multimin_fdfminimizer *s, int *drawn, int *count,
                         fit__chin_objective *o, double *q) {
  gsl_rng_set(rng, (unsigned long)fit__mix64(seed + (uint64_t)k));
  int m = c ? fit__cells_draw(g, c, rng, drawn) : fit__groups_draw(g, rng, drawn);
  memset(count, 0, (size_t)full->m * sizeof *count);
  for (int j = 0; j < m; j++)
    count[drawn[j]]++;
  o->m = 0;
  o->wsum = 0;
  o->cvalid = 0;
  for (int i = 0; i < full->m; i++) {
    if (!count[i])
      continue;
    o->x1[o->m] = full->x1[i];
    o->x2[o->m] = full->x2[i];
    o->y[o->m] = full->y[i];
    o->w[o->m] = count[i];
    o->wsum += count[i];
    o->m++;
  }
  fit__chin_run rr;
  double gtol = GTOL_PER_POINT * o->wsum;
  if (method == FIT_CHIN_VARPRO) {
    fit__chin_vp_local(o, t_opt, gtol, gtol, &rr);
    if (!rr.converged) { /* stalled on rounding or a kink: BFGS from there */
      fit__chin_run pol;
      fit__chin_minimise(o, s, rr.t, 0, POLISH_ROUNDS, gtol, &pol);
      if (pol.f < rr.f || (pol.f == rr.f && pol.converged))
        rr = pol;
    }
  } else {
    fit__chin_minimise(o, s, t_opt, 0, POLISH_ROUNDS, gtol, &rr);
  }
  double th[NT];
  to_theta(rr.t, cN, cD, th);
  quantities(th, C, q);
  for (int j = 0; j < grid->nfrontier; j++) { /* the frontier after the quantities */
    double f[NQ];
    quantities(th, grid->frontier[j].flops, f);
    q[NQ + j] = f[Q_LOSS];
  }
  if (keep) /* the surface itself after them: ln A, ln B, ln E, alpha, beta */
    memcpy(&q[NQ + grid->nfrontier], th, NT * sizeof *th);
  return rr.converged;
}

/* What every resample shares, and what it refits from */
typedef struct boot_job {
  const fit__chin_objective *full;
  const fit__groups *g;
  const fit__cells *c; /* NULL: by run */
  size_t cap;          /* the largest resample's points */
  const double *t_opt;
  double cN, cD;
  const fit_options *opt;
  int method, keep, W;
} boot_job;

/* Every resample into its row of vals (NAN when a thread had no memory),
 * on nt threads; returns how many refits stopped short of the tolerance */
static int bootstrap_rows(const boot_job *j, int nt, const fit_result *out, double *vals) {
  int n = j->full->m, B = j->opt->bootstrap, W = j->W;
  int failed = 0;
#pragma omp parallel num_threads(nt) reduction(+ : failed)
  {
    fit__chin_objective o = {0};
    o.x1 = malloc((size_t)n * 4 * sizeof(double));
    int *drawn = malloc(j->cap * sizeof *drawn);
    int *count = malloc((size_t)n * sizeof *count);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, NT);
    int ok = o.x1 && drawn && count && rng && s;
    if (ok)
      o.x2 = o.x1 + n, o.y = o.x2 + n, o.w = o.y + n;
#pragma omp for schedule(dynamic, 4)
    for (int k = 0; k < B; k++) {
      if (ok) {
        failed += !bootstrap_one(j->full, j->g, j->c, j->opt->seed, k, j->method, j->t_opt, j->cN,
                                 j->cD, j->opt->target_flops, out, j->keep, rng, s, drawn, count,
                                 &o, &vals[(size_t)k * W]);
      } else {
        failed++;
        for (int i = 0; i < W; i++)
          vals[(size_t)k * W + i] = NAN;
      }
    }
    free(o.x1);
    free(drawn);
    free(count);
    if (rng)
      gsl_rng_free(rng);
    if (s)
      gsl_multimin_fdfminimizer_free(s);
  }
  return failed;
}

/* The B x W table of resamples into out: the nq quantities' intervals,
 * the frontier's band, the kept surfaces (keep), and the warnings */
static void bootstrap_summary(const double *vals, int B, int W, int nq, int keep, int failed,
                              fit_result *out) {
  int nonfinite = 0;
  for (int j = 0; j < nq; j++) {
    int m = fit__boot_column(vals, B, W, j, j < NT ? &out->params[j] : &out->derived[j - NT]);
    if (B - m > nonfinite)
      nonfinite = B - m;
  }
  for (int j = 0; j < out->nfrontier; j++) {
    fit_param band = {.ci_lo = NAN, .ci_hi = NAN};
    fit__boot_column(vals, B, W, NQ + j, &band);
    out->frontier[j].lo = band.ci_lo;
    out->frontier[j].hi = band.ci_hi;
  }
  if (keep && (out->draws = malloc((size_t)B * NT * sizeof *out->draws)) != NULL) {
    for (int k = 0; k < B; k++)
      memcpy(&out->draws[(size_t)k * NT], &vals[(size_t)k * W + NQ + out->nfrontier],
             NT * sizeof *out->draws);
    out->ndraws = B;
  } else if (keep) {
    fit_result_warn(out, "out of memory keeping the %d resamples' surfaces: none are kept", B);
  }
  if (failed)
    fit_result_warn(out,
                    "%d of %d bootstrap refits stopped before the gradient tolerance; "
                    "their best points are included in the intervals",
                    failed, B);
  if (nonfinite)
    fit_result_warn(out,
                    "%d of %d bootstrap refits gave a non-finite value for some "
                    "quantity (an exponent at or below 0); those are left out of its "
                    "interval",
                    nonfinite, B);
}

static int bootstrap(const fit__chin_objective *full, const fit_point *pts, const double *t_opt,
                     double cN, double cD, const fit_options *opt, int method, int nt, int nq,
                     fit_result *out) {
  int n = full->m, B = opt->bootstrap, keep = opt->keep_draws != 0;
  int W = NQ + out->nfrontier + (keep ? NT : 0);
  fit__groups g;
  fit__groups_build(pts, n, &g);
  fit__cells cells = {0};
  double *vals = malloc((size_t)B * W * sizeof *vals);
  if (!g.idx || !g.start || !vals || fit__cells_build(pts, &g, &cells)) {
    free(g.idx), free(g.start), free(vals);
    return SS_ENOMEM;
  }
  /* by cell only when seeds replicate one: otherwise the draws, and so
   * every result, stay those of the bootstrap over runs */
  const fit__cells *c = cells.replicated && !opt->boot_by_run ? &cells : NULL;
  size_t cap = c ? fit__cells_capacity(&g, c) : (size_t)g.ng * g.maxsize;
  boot_job job = {full, &g, c, cap, t_opt, cN, cD, opt, method, keep, W};
  int failed = bootstrap_rows(&job, nt, out, vals);
  bootstrap_summary(vals, B, W, nq, keep, failed, out);
  free(g.idx), free(g.start), free(vals);
  fit__cells_free(&cells);
  return 0;
}

/* ---- the fit ---- */

/* The frontier's grid of C and its point estimate (fit.h). */
static void frontier(const double *th, const fit_point *pts, int n, double target,
                     fit_result *out) {
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < n; i++) {
    double c = isfinite(pts[i].flops) && pts[i].flops > 0 ? pts[i].flops
                                                          : 6 * pts[i].params * pts[i].tokens;
    lo = fmin(lo, c);
    hi = fmax(hi, c);
  }
  if (!(lo > 0) || !isfinite(hi))
    return;
  lo /= 2;
  hi = fmax(hi * 10, target);
  out->nfrontier = FIT_FRONTIER_POINTS;
  for (int j = 0; j < FIT_FRONTIER_POINTS; j++) {
    double q[NQ];
    fit_frontier *f = &out->frontier[j];
    f->flops = lo * pow(hi / lo, (double)j / (FIT_FRONTIER_POINTS - 1));
    quantities(th, f->flops, q);
    f->loss = q[Q_LOSS];
    f->lo = f->hi = NAN;
  }
}

static void flag_bounds(const double *th, const fit_point *pts, int n, fit_result *out) {
  static const char *const nm[NT] = {"a = ln A", "b = ln B", "e = ln E", "alpha", "beta"};
  static const double lo[NT] = {0, 0, -1, 0, 0}, hi[NT] = {25, 25, 1, 2, 2};
  char buf[192] = "";
  size_t len = 0;
  for (int k = 0; k < NT; k++) {
    double margin = 0.01 * (hi[k] - lo[k]);
    if (th[k] <= lo[k] + margin || th[k] >= hi[k] - margin)
      len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0,
                              "%s%s = %.4g (grid %g..%g)", len ? ", " : "", nm[k], th[k], lo[k],
                              hi[k]);
  }
  if (len)
    fit_result_warn(out,
                    "the optimum lies on or beyond the edge of the starting grid: %s; "
                    "check that it is a real minimum",
                    buf);
  if (th[3] < EXP_FLOOR)
    fit_result_warn(out,
                    "alpha = %.4g is at its bound (0): the data do not show loss falling "
                    "with N, so A and alpha are not identified",
                    th[3]);
  if (th[4] < EXP_FLOOR)
    fit_result_warn(out,
                    "beta = %.4g is at its bound (0): the data do not show loss falling "
                    "with D, so B and beta are not identified",
                    th[4]);
  if (th[2] < E_FLOOR)
    fit_result_warn(out,
                    "E = %.3g collapsed toward 0 (ln E = %.1f): the data do not identify "
                    "the irreducible loss",
                    exp(th[2]), th[2]);
  /* a term that is a negligible share of the predicted loss at every point
   * has collapsed just as surely, whatever its exponent */
  double share_n = 0, share_d = 0;
  for (int i = 0; i < n; i++) {
    double u1 = th[0] - th[3] * log(pts[i].params), u2 = th[1] - th[4] * log(pts[i].tokens);
    double mx = fmax(fmax(u1, u2), th[2]);
    double s = exp(u1 - mx) + exp(u2 - mx) + exp(th[2] - mx);
    share_n = fmax(share_n, exp(u1 - mx) / s);
    share_d = fmax(share_d, exp(u2 - mx) / s);
  }
  if (share_n < TERM_FLOOR)
    fit_result_warn(out,
                    "the N term A/N^alpha is at most %.2g of the predicted loss: A and "
                    "alpha are not identified",
                    share_n);
  if (share_d < TERM_FLOOR)
    fit_result_warn(out,
                    "the D term B/D^beta is at most %.2g of the predicted loss: B and "
                    "beta are not identified",
                    share_d);
}

/* The pooled SD of ln L (y) over the cells (N, D, B, lr) with replicates. */
static int seed_noise(const fit_point *pts, const double *y, int n, fit_seeds *s) {
  double *k = malloc(sizeof(double) * FIT__CELL_KEYS * (size_t)n);
  if (!k)
    return SS_ENOMEM;
  const double *keys[FIT__CELL_KEYS] = {k, k + n, k + 2 * n, k + 3 * n};
  for (int i = 0; i < n; i++) {
    k[i] = pts[i].params;
    k[n + i] = pts[i].tokens;
    k[2 * n + i] = pts[i].batch_size;
    k[3 * n + i] = pts[i].lr;
  }
  int rc = fit__seed_pool(keys, FIT__CELL_KEYS, y, n, s);
  free(k);
  return rc;
}

/* The options this law reads, checked */
static int check_options(const fit_options *opt, char *err, size_t errlen) {
  if (opt->bootstrap < 0) {
    snprintf(err, errlen, "bootstrap: %d resamples, expected 0 or more", opt->bootstrap);
    return SS_EINVAL;
  }
  if (opt->chin_method != FIT_CHIN_VARPRO && opt->chin_method != FIT_CHIN_BFGS) {
    snprintf(err, errlen,
             "chinchilla: method %d, expected FIT_CHIN_VARPRO (%d) or FIT_CHIN_BFGS (%d)",
             opt->chin_method, FIT_CHIN_VARPRO, FIT_CHIN_BFGS);
    return SS_EINVAL;
  }
  return 0;
}

/* The objective over the n points, in coordinates centred on the mean
 * ln N (*cN) and ln D (*cD), every weight 1; o->x1 owns its arrays. 0 or
 * SS_ENOMEM. */
static int objective_of(const fit_point *pts, int n, fit__chin_objective *o, double *cN,
                        double *cD) {
  *o = (fit__chin_objective){0};
  o->x1 = malloc((size_t)n * 4 * sizeof(double));
  if (!o->x1)
    return SS_ENOMEM;
  o->x2 = o->x1 + n, o->y = o->x2 + n, o->w = o->y + n;
  o->m = n;
  *cN = *cD = 0;
  for (int i = 0; i < n; i++) {
    *cN += log(pts[i].params) / n;
    *cD += log(pts[i].tokens) / n;
  }
  for (int i = 0; i < n; i++) {
    o->x1[i] = log(pts[i].params) - *cN;
    o->x2[i] = log(pts[i].tokens) - *cD;
    o->y[i] = log(pts[i].loss);
    o->w[i] = 1;
  }
  o->wsum = n;
  return 0;
}

/* ln L_hat - ln L per point at th (malloc'd; NULL when out of memory) */
static double *residuals(const double *th, const fit_point *pts, int n) {
  double *r = malloc((size_t)n * sizeof *r);
  for (int i = 0; i < n && r; i++) {
    double u1 = th[0] - th[3] * log(pts[i].params), u2 = th[1] - th[4] * log(pts[i].tokens);
    double mx = fmax(fmax(u1, u2), th[2]);
    r[i] = mx + log(exp(u1 - mx) + exp(u2 - mx) + exp(th[2] - mx)) - log(pts[i].loss);
  }
  return r;
}

/* The optimum th into out: parameters, derived quantities (nq of them in
 * all), the objective, residuals and the optimiser's warnings */
static void report(const fit__chin_run *best, const double *th, const double *q, int nq, int method,
                   double gtol, const fit_point *pts, int n, fit_result *out) {
  out->n_points = n;
  out->objective = best->f;
  out->converged = best->converged;
  for (int k = 0; k < NT; k++)
    fit_result_add_param(out, qnames[k], q[k]);
  for (int k = NT; k < nq; k++)
    fit_result_add_derived(out, qnames[k], q[k]);
  out->residuals = residuals(th, pts, n);
  if (!best->converged)
    fit_result_warn(out,
                    "not converged: %s stopped after %d iterations with |gradient| = %.3g "
                    "above its tolerance %.3g; the values are the best point found",
                    method == FIT_CHIN_VARPRO ? "the minimiser" : "BFGS", best->iters, best->gnorm,
                    gtol);
  flag_bounds(th, pts, n, out);
}

/* Contract in fit.h. The search is variable projection (search_vp) by
 * default; with FIT_CHIN_BFGS a screen of the 4,500-start grid (see
 * SCREEN_KEEP), with opt->full_grid BFGS from every start. converged
 * means the best run met the gradient tolerance; the bootstrap refits each
 * resample of runs from the full-data optimum (not the grid: a resample's
 * optimum is a small step away, and restarting the grid would let a
 * resample jump between local optima and inflate the intervals for reasons
 * unrelated to the data), by the same method's local step: profiled Newton
 * (BFGS from where it stops short of the tolerance), or whitened BFGS. */
int fit_chinchilla(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
                   size_t errlen) {
  opt = fit__options(opt);
  fit_result_init(out, "chinchilla");
  if (n < 0 || (n > 0 && !pts)) {
    snprintf(err, errlen, "no points");
    return SS_EINVAL;
  }
  int rc = check_points(pts, n, err, errlen);
  if (rc || (rc = check_options(opt, err, errlen)))
    return rc;
  int method = opt->full_grid ? FIT_CHIN_BFGS : opt->chin_method;
  int nt = threads_of(opt);
  fit__chin_objective o;
  double cN, cD;
  if (objective_of(pts, n, &o, &cN, &cD)) {
    snprintf(err, errlen, "out of memory for %d points", n);
    return SS_ENOMEM;
  }
  fit__chin_run best;
  rc = method == FIT_CHIN_VARPRO ? search_vp(&o, nt, &best)
                                 : search(&o, cN, cD, opt->full_grid, nt, &best);
  if (rc) {
    free(o.x1);
    if (rc == SS_ENOMEM)
      snprintf(err, errlen, "out of memory for the starting grid");
    else
      snprintf(err, errlen, "the objective was not finite at any starting point");
    return rc;
  }
  double th[NT], q[NQ];
  to_theta(best.t, cN, cD, th);
  quantities(th, opt->target_flops, q);
  int nq = opt->target_flops > 0 ? NQ : Q_NOPT;
  report(&best, th, q, nq, method, GTOL_PER_POINT * o.wsum, pts, n, out);
  frontier(th, pts, n, opt->target_flops, out);
  if (seed_noise(pts, o.y, n, &out->seeds)) {
    free(o.x1);
    fit_result_free(out);
    snprintf(err, errlen, "out of memory for %d points", n);
    return SS_ENOMEM;
  }
  if (opt->bootstrap > 0) {
    rc = bootstrap(&o, pts, best.t, cN, cD, opt, method, nt, nq, out);
    if (rc) {
      free(o.x1);
      fit_result_free(out);
      snprintf(err, errlen, "out of memory for %d bootstrap resamples", opt->bootstrap);
      return rc;
    }
  }
  free(o.x1);
  return 0;
}

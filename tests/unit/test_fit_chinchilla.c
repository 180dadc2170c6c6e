/* Chinchilla Approach 3 and the CSV reader (sweeps/fit_chinchilla.c,
 * fit_chinchilla_vp.c, sweeps/csv.c): SCIENCE.md known answers 1 and 2, the
 * search (variable projection, the default) against BFGS from every grid
 * start, variable projection against the BFGS multistart on noise-free,
 * noisy and multi-minimum data, the flags, determinism of the bootstrap,
 * and the CSV reader's errors. */
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/err.h"
#include "fit_testlib.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

/* Hoffmann et al.'s rounded published parameters */
#define E0 1.69
#define A0 406.4
#define B0 410.7
#define ALPHA0 0.34
#define BETA0 0.28

static double law(double N, double D) { return E0 + A0 / pow(N, ALPHA0) + B0 / pow(D, BETA0); }

/* SCIENCE.md known answer 2's design: 5 budgets log-spaced 1e17..1e21, 15
 * sizes per budget log-spaced over [N_opt/10, 10 N_opt], D = C / (6 N), with
 * Gaussian noise of SD sd on L. Returns 75 malloc'd points. */
static fit_point *approach3_points(double sd, unsigned long seed, int *n) {
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(r, seed);
  fit_point *p = calloc(75, sizeof *p);
  int k = 0;
  for (int i = 0; i < 5; i++) {
    double C = 1e17 * pow(10, i), n_opt;
    fit_chinchilla_allocation(A0, B0, ALPHA0, BETA0, C, NULL, NULL, NULL, &n_opt, NULL);
    for (int j = 0; j < 15; j++) {
      double N = n_opt / 10 * pow(100, j / 14.0), D = C / (6 * N);
      double L = law(N, D) + (sd > 0 ? gsl_ran_gaussian(r, sd) : 0);
      p[k++] = fitt_point(N, D, C, L);
    }
  }
  gsl_rng_free(r);
  *n = k;
  return p;
}

static const fit_param *param(const fit_result *r, const char *name) {
  const fit_param *p = fit_result_get(r, name);
  if (!p) {
    fprintf(stderr, "no parameter '%s'\n", name);
    exit(1);
  }
  return p;
}

static double value(const fit_result *r, const char *name) { return param(r, name)->value; }

static void test_allocation(void) {
  double G, a, b, n_opt, d_opt;
  fit_chinchilla_allocation(A0, B0, ALPHA0, BETA0, 5.76e23, &G, &a, &b, &n_opt, &d_opt);
  CHECK_NEAR(G, 1.34471, 0, 1e-4);
  CHECK_NEAR(a, 0.451613, 0, 1e-4);
  CHECK_NEAR(b, 1 - 0.451613, 0, 1e-4);
  CHECK_NEAR(n_opt, 3.219e10, 0, 1e-4);
  CHECK_NEAR(d_opt / n_opt, 92.65, 0, 1e-4);
  /* the allocation spends the whole budget */
  CHECK_NEAR(6 * n_opt * d_opt, 5.76e23, 0, 1e-12);
}

static void test_exact_recovery(void) {
  int n;
  fit_point *p = approach3_points(0, 1, &n);
  fit_options opt = {.target_flops = 5.76e23};
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &opt, &r, err, sizeof err), 0);
  /* noise-free points are fitted to rounding: 1e-9 leaves 5 orders of
   * margin over what the gradient tolerance gives (~1e-14 here) */
  CHECK_NEAR(value(&r, "E"), E0, 0, 1e-9);
  CHECK_NEAR(value(&r, "A"), A0, 0, 1e-9);
  CHECK_NEAR(value(&r, "B"), B0, 0, 1e-9);
  CHECK_NEAR(value(&r, "alpha"), ALPHA0, 0, 1e-9);
  CHECK_NEAR(value(&r, "beta"), BETA0, 0, 1e-9);
  CHECK_NEAR(value(&r, "G"), 1.34471, 0, 1e-4);
  CHECK_NEAR(value(&r, "N_opt"), 3.219e10, 0, 1e-4);
  CHECK_NEAR(value(&r, "D_opt") / value(&r, "N_opt"), 92.65, 0, 1e-4);
  CHECK_NEAR(value(&r, "loss_at_target"), law(value(&r, "N_opt"), value(&r, "D_opt")), 0, 1e-9);
  CHECK(r.objective < 1e-20);
  CHECK_INT_EQ(r.converged, 1);
  CHECK_INT_EQ(r.nwarnings, 0);
  CHECK_INT_EQ(r.n_points, n);
  CHECK(r.residuals != NULL);
  for (int i = 0; i < n && r.residuals; i++)
    CHECK_NEAR(r.residuals[i], 0, 1e-10, 0);
  fit_result_free(&r);
  free(p);
}

static void test_noisy_recovery(void) {
  int n;
  fit_point *p = approach3_points(0.002, 2, &n);
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, NULL, &r, err, sizeof err), 0);
  /* SCIENCE.md's tolerances for SD 0.002 */
  CHECK_NEAR(value(&r, "alpha"), ALPHA0, 0.005, 0);
  CHECK_NEAR(value(&r, "beta"), BETA0, 0.005, 0);
  CHECK_NEAR(value(&r, "E"), E0, 0.01, 0);
  CHECK_INT_EQ(r.converged, 1);
  /* no bootstrap asked: no intervals */
  CHECK(isnan(param(&r, "alpha")->stderr_));
  fit_result_free(&r);
  free(p);
}

static void test_bootstrap_covers_truth(void) {
  int n;
  fit_point *p = approach3_points(0.01, 3, &n);
  fit_options opt = {.bootstrap = 300, .seed = 7};
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &opt, &r, err, sizeof err), 0);
  static const char *const names[] = {"E", "A", "B", "alpha", "beta"};
  static const double truth[] = {E0, A0, B0, ALPHA0, BETA0};
  for (int i = 0; i < 5; i++) {
    const fit_param *q = param(&r, names[i]);
    if (!(q->ci_lo <= truth[i] && truth[i] <= q->ci_hi))
      fprintf(stderr, "%s: truth %g outside [%g, %g]\n", names[i], truth[i], q->ci_lo, q->ci_hi);
    CHECK(q->ci_lo <= truth[i] && truth[i] <= q->ci_hi);
    CHECK(q->stderr_ > 0);
    CHECK(q->ci_lo < q->value && q->value < q->ci_hi);
  }
  double a_true = BETA0 / (ALPHA0 + BETA0);
  CHECK(param(&r, "a")->ci_lo <= a_true && a_true <= param(&r, "a")->ci_hi);
  CHECK(isfinite(param(&r, "G")->stderr_));
  /* the frontier: 16 points from 5e16 to 1e22, each the fitted law at the
   * compute-optimal allocation, inside its band; the truth inside the band
   * over the data's range; the band widest where it extrapolates */
  CHECK_INT_EQ(r.nfrontier, FIT_FRONTIER_POINTS);
  CHECK_NEAR(r.frontier[0].flops, 5e16, 0, 1e-12);
  CHECK_NEAR(r.frontier[FIT_FRONTIER_POINTS - 1].flops, 1e22, 0, 1e-12);
  double narrowest = INFINITY;
  for (int j = 0; j < r.nfrontier; j++) {
    const fit_frontier *f = &r.frontier[j];
    double n_opt, d_opt, width = f->hi - f->lo;
    fit_chinchilla_allocation(value(&r, "A"), value(&r, "B"), value(&r, "alpha"), value(&r, "beta"),
                              f->flops, NULL, NULL, NULL, &n_opt, &d_opt);
    CHECK_NEAR(f->loss,
               value(&r, "E") + value(&r, "A") / pow(n_opt, value(&r, "alpha")) +
                   value(&r, "B") / pow(d_opt, value(&r, "beta")),
               0, 1e-9);
    CHECK(f->lo < f->loss && f->loss < f->hi);
    fit_chinchilla_allocation(A0, B0, ALPHA0, BETA0, f->flops, NULL, NULL, NULL, &n_opt, &d_opt);
    if (f->flops >= 1e17 && f->flops <= 1e21)
      CHECK(f->lo <= law(n_opt, d_opt) && law(n_opt, d_opt) <= f->hi);
    narrowest = fmin(narrowest, width);
  }
  CHECK(r.frontier[FIT_FRONTIER_POINTS - 1].hi - r.frontier[FIT_FRONTIER_POINTS - 1].lo >
        2 * narrowest);
  fit_result_free(&r);
  free(p);
}

/* The screen (objective at every start, short runs from the best, full
 * runs from the best of those) must land where BFGS from all 4,500 starts
 * does. Objectives agree to 1e-10 relative and parameters to 1e-7: both
 * runs stop at the same gradient tolerance, which pins the parameters to
 * ~1e-10 here. */
static void compare_with_full_grid(const fit_point *p, int n, const char *what) {
  fit_options screened = {0}, full = {.full_grid = 1};
  fit_result a, b;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &screened, &a, err, sizeof err), 0);
  CHECK_INT_EQ(fit_chinchilla(p, n, &full, &b, err, sizeof err), 0);
  if (fabs(a.objective - b.objective) > 1e-10 * b.objective)
    fprintf(stderr, "%s: screened objective %.17g, full grid %.17g\n", what, a.objective,
            b.objective);
  CHECK_NEAR(a.objective, b.objective, 1e-30, 1e-10);
  for (int i = 0; i < a.nparams; i++)
    CHECK_NEAR(a.params[i].value, b.params[i].value, 0, 1e-7);
  CHECK_INT_EQ(a.converged, 1);
  CHECK_INT_EQ(b.converged, 1);
  fit_result_free(&a);
  fit_result_free(&b);
}

/* A design far from compute-optimal: 4 model sizes, each run's checkpoints
 * at 6 token counts, multiplicative noise of SD sd (the same draws for
 * every sd: seed 5). */
static void checkpoint_design(double sd, fit_point q[24]) {
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(r, 5);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++) {
      double N = 1e6 * pow(10, i * 0.7), D = 2e8 * pow(3, j);
      q[i * 6 + j] = (fit_point){
          .params = N, .tokens = D, .loss = law(N, D) * exp(gsl_ran_gaussian(r, sd)), .group = i};
    }
  gsl_rng_free(r);
}

static void test_screen_matches_full_grid(void) {
  int n;
  fit_point *p = approach3_points(0.01, 4, &n);
  compare_with_full_grid(p, n, "approach 3 design, SD 0.01");
  free(p);
  /* a different design: checkpoints, 2% noise */
  fit_point q[24];
  checkpoint_design(0.02, q);
  compare_with_full_grid(q, 24, "checkpoint design, 2% noise");
}

static void test_bootstrap_deterministic(void) {
  int n;
  fit_point *p = approach3_points(0.01, 6, &n);
  for (int i = 0; i < n; i++)
    p[i].group = i / 3; /* three checkpoints per run: resampled together */
  fit_options one = {.bootstrap = 100, .seed = 11, .threads = 1};
  fit_options two = {.bootstrap = 100, .seed = 11, .threads = 2};
  fit_options other = {.bootstrap = 100, .seed = 12, .threads = 2};
  fit_result a, b, c;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &one, &a, err, sizeof err), 0);
  CHECK_INT_EQ(fit_chinchilla(p, n, &two, &b, err, sizeof err), 0);
  CHECK_INT_EQ(fit_chinchilla(p, n, &other, &c, err, sizeof err), 0);
  for (int i = 0; i < a.nparams; i++) {
    CHECK(a.params[i].stderr_ == b.params[i].stderr_);
    CHECK(a.params[i].ci_lo == b.params[i].ci_lo);
    CHECK(a.params[i].ci_hi == b.params[i].ci_hi);
    CHECK(a.params[i].stderr_ != c.params[i].stderr_);
  }
  fit_result_free(&a);
  fit_result_free(&b);
  fit_result_free(&c);
  free(p);
}

static void test_flags(void) {
  /* a pure power law in N and D: E has nothing to fit and collapses */
  fit_point p[40];
  for (int i = 0; i < 40; i++) {
    double N = 1e7 * pow(10, (i % 8) * 0.4), D = 1e9 * pow(10, (i / 8) * 0.5);
    p[i] = (fit_point){
        .params = N, .tokens = D, .loss = A0 / pow(N, ALPHA0) + B0 / pow(D, BETA0), .group = -1};
  }
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, 40, NULL, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "collapsed toward 0"));
  CHECK(fitt_has_warning(&r, "edge of the starting grid"));
  fit_result_free(&r);
  /* loss that does not fall with N: alpha at its bound */
  for (int i = 0; i < 40; i++)
    p[i].loss = E0 + B0 / pow(p[i].tokens, BETA0) + 1e-3 * ((i * 7919) % 13 - 6) / 6.0;
  CHECK_INT_EQ(fit_chinchilla(p, 40, NULL, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "alpha = ") || fitt_has_warning(&r, "the N term"));
  fit_result_free(&r);
}

static void test_bad_points(void) {
  int n;
  fit_point *p = approach3_points(0, 1, &n);
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, 6, NULL, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "too few points: 6") != NULL);
  fit_result_free(&r);
  fit_point same[10];
  for (int i = 0; i < 10; i++)
    same[i] = (fit_point){.params = 1e8, .tokens = 1e9 * (i + 1), .loss = 3, .group = -1};
  CHECK_INT_EQ(fit_chinchilla(same, 10, NULL, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "same params") != NULL);
  fit_result_free(&r);
  for (int i = 0; i < n; i++)
    p[i].loss = NAN;
  CHECK_INT_EQ(fit_chinchilla(p, n, NULL, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "column 'loss' is missing") != NULL);
  fit_result_free(&r);
  free(p);
  p = approach3_points(0, 1, &n);
  p[4].tokens = -1;
  CHECK_INT_EQ(fit_chinchilla(p, n, NULL, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "point 5: tokens") != NULL);
  fit_result_free(&r);
  free(p);
}

/* ---- variable projection against the BFGS multistart ---- */

/* The two minimisers meet at one optimum to the rounding of the summed
 * objective (n terms, each exact to an ulp or so, summed in different
 * orders at points that agree to ~1e-10): a relative 1e-13 in either
 * direction is the same optimum. Beyond that, variable projection must not
 * be the higher. */
#define SAME_OPTIMUM 1e-13

static double objective_of(const fit_point *p, int n, int method, int full, fit_result *r) {
  fit_options o = {.chin_method = method, .full_grid = full, .threads = 2};
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &o, r, err, sizeof err), 0);
  return r->objective;
}

static void check_vp_not_worse(const fit_point *p, int n, const char *what) {
  fit_result vp, bf;
  double fv = objective_of(p, n, FIT_CHIN_VARPRO, 0, &vp);
  double fb = objective_of(p, n, FIT_CHIN_BFGS, 0, &bf);
  if (!(fv <= fb * (1 + SAME_OPTIMUM)))
    fprintf(stderr, "%s: variable projection %.17g, BFGS %.17g\n", what, fv, fb);
  CHECK(fv <= fb * (1 + SAME_OPTIMUM));
  CHECK_INT_EQ(vp.converged, 1);
  fit_result_free(&vp);
  fit_result_free(&bf);
}

/* Noise-free points from several known laws (the published one, one with
 * steep exponents like the quick-start study's, one with a Kaplan-like
 * shallow alpha), each on SCIENCE.md's design for its own N_opt: variable
 * projection recovers every parameter to 1e-8 (the gradient tolerance pins
 * them to ~1e-10; the steep law's A and B are e^8..e^11 and amplify that). */
static void test_vp_exact_recovery(void) {
  static const double laws[][5] = {/* E, A, B, alpha, beta */
                                   {1.69, 406.4, 410.7, 0.34, 0.28},
                                   {0.6, 9500, 99000, 1.24, 0.99},
                                   {2.5, 30, 800, 0.08, 0.3}};
  for (size_t l = 0; l < sizeof laws / sizeof *laws; l++) {
    const double *t = laws[l];
    fit_point p[75];
    int n = 0;
    for (int i = 0; i < 5; i++) {
      double C = 1e17 * pow(10, i), n_opt;
      fit_chinchilla_allocation(t[1], t[2], t[3], t[4], C, NULL, NULL, NULL, &n_opt, NULL);
      for (int j = 0; j < 15; j++, n++) {
        double N = n_opt / 10 * pow(100, j / 14.0), D = C / (6 * N);
        p[n] = fitt_point(N, D, NAN, t[0] + t[1] / pow(N, t[3]) + t[2] / pow(D, t[4]));
      }
    }
    fit_result r;
    objective_of(p, n, FIT_CHIN_VARPRO, 0, &r);
    static const char *const names[] = {"E", "A", "B", "alpha", "beta"};
    for (int k = 0; k < 5; k++) {
      if (!(fabs(value(&r, names[k]) - t[k]) <= 1e-8 * t[k]))
        fprintf(stderr, "law %zu: %s = %.17g, truth %g\n", l, names[k], value(&r, names[k]), t[k]);
      CHECK_NEAR(value(&r, names[k]), t[k], 0, 1e-8);
    }
    CHECK(r.objective < 1e-20);
    CHECK_INT_EQ(r.converged, 1);
    fit_result_free(&r);
  }
}

/* Noisy data: SCIENCE.md's design at three noise levels and seeds, and the
 * checkpoint design of test_screen_matches_full_grid. */
static void test_vp_noisy(void) {
  static const double sd[] = {0.002, 0.01, 0.03};
  for (int i = 0; i < 3; i++)
    for (unsigned long seed = 20; seed < 23; seed++) {
      int n;
      fit_point *p = approach3_points(sd[i], seed, &n);
      char what[64];
      snprintf(what, sizeof what, "approach 3 design, SD %g, seed %lu", sd[i], seed);
      check_vp_not_worse(p, n, what);
      free(p);
    }
  fit_point q[24];
  checkpoint_design(0.05, q);
  check_vp_not_worse(q, 24, "checkpoint design, 5% noise");
}

/* Data with several local minima: 15 points (3 sizes x 5 token counts, 3%
 * multiplicative noise). BFGS from 90 of the 4,500 grid starts converges to
 * at least 3 optima whose objectives differ by more than 1% (a term
 * collapsing into E is a minimum too); variable projection must find one
 * no higher than the lowest of them, than the screened multistart, and
 * than BFGS from all 4,500 starts. */
static void test_vp_local_minima(void) {
  gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(rng, 1);
  fit_point p[15];
  int n = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++, n++) {
      double N = 1e7 * pow(10, i), D = 1e9 * pow(4, j);
      p[n] = fitt_point(N, D, NAN, law(N, D) * exp(gsl_ran_gaussian(rng, 0.03)));
    }
  gsl_rng_free(rng);

  double cN = 0, cD = 0;
  for (int i = 0; i < n; i++)
    cN += log(p[i].params) / n, cD += log(p[i].tokens) / n;
  double buf[4 * 15];
  fit__chin_objective o = {.m = n, .x1 = buf, .x2 = buf + n, .y = buf + 2 * n, .w = buf + 3 * n};
  for (int i = 0; i < n; i++) {
    o.x1[i] = log(p[i].params) - cN;
    o.x2[i] = log(p[i].tokens) - cD;
    o.y[i] = log(p[i].loss);
    o.w[i] = 1;
  }
  o.wsum = n;
  gsl_multimin_fdfminimizer *s =
      gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, FIT__CHIN_NT);
  double found[90], lowest = INFINITY;
  int distinct = 0;
  for (int k = 0; k < 4500; k += 50) { /* the grid of SCIENCE.md, every 50th start */
    int ia = k % 6, ib = k / 6 % 6, ie = k / 36 % 5, ial = k / 180 % 5, ibe = k / 900;
    double al = 0.5 * ial, be = 0.5 * ibe;
    double t[FIT__CHIN_NT] = {5.0 * ia - al * cN, 5.0 * ib - be * cD, -1 + 0.5 * ie, al, be};
    fit__chin_run run;
    fit__chin_minimise(&o, s, t, 200, 4, 1e-9 * n, &run);
    if (!run.converged)
      continue;
    int j = 0;
    while (j < distinct && fabs(found[j] - run.f) > 0.01 * run.f)
      j++;
    if (j == distinct)
      found[distinct++] = run.f;
    lowest = fmin(lowest, run.f);
  }
  gsl_multimin_fdfminimizer_free(s);
  if (distinct < 3)
    fprintf(stderr, "local minima: only %d distinct optima\n", distinct);
  CHECK(distinct >= 3);

  fit_result vp, bf, full;
  double fv = objective_of(p, n, FIT_CHIN_VARPRO, 0, &vp);
  double fb = objective_of(p, n, FIT_CHIN_BFGS, 0, &bf);
  double ff = objective_of(p, n, FIT_CHIN_BFGS, 1, &full);
  CHECK(fv <= lowest * (1 + SAME_OPTIMUM));
  CHECK(fv <= fb * (1 + SAME_OPTIMUM));
  CHECK(fv <= ff * (1 + SAME_OPTIMUM));
  if (!(fv <= ff * (1 + SAME_OPTIMUM)))
    fprintf(stderr, "local minima: VP %.17g, screened BFGS %.17g, full grid %.17g\n", fv, fb, ff);
  fit_result_free(&vp);
  fit_result_free(&bf);
  fit_result_free(&full);
}

/* The method option: BFGS and variable projection give the same bootstrap
 * intervals to well within their own width (each refit ends at the same
 * tolerance, from the same full-data optimum), and an unknown method is
 * refused. */
static void test_vp_bootstrap_and_method(void) {
  int n;
  fit_point *p = approach3_points(0.01, 8, &n);
  fit_options vo = {.bootstrap = 200, .seed = 3, .threads = 2};
  fit_options bo = vo;
  bo.chin_method = FIT_CHIN_BFGS;
  fit_result a, b;
  char err[256];
  CHECK_INT_EQ(fit_chinchilla(p, n, &vo, &a, err, sizeof err), 0);
  CHECK_INT_EQ(fit_chinchilla(p, n, &bo, &b, err, sizeof err), 0);
  for (int i = 0; i < a.nparams; i++) {
    CHECK_NEAR(a.params[i].stderr_, b.params[i].stderr_, 0, 1e-4);
    CHECK_NEAR(a.params[i].ci_lo, b.params[i].ci_lo, 0, 1e-4);
    CHECK_NEAR(a.params[i].ci_hi, b.params[i].ci_hi, 0, 1e-4);
  }
  CHECK_INT_EQ(a.nwarnings, 0);
  fit_result_free(&a);
  fit_result_free(&b);
  vo.chin_method = 7;
  CHECK_INT_EQ(fit_chinchilla(p, n, &vo, &a, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "method 7") != NULL);
  fit_result_free(&a);
  free(p);
}

/* ---- CSV ---- */

static char dir[64];

static const char *write_file(const char *name, const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
  return path;
}

/* Reads text as a CSV; returns the error code, err filled. */
static int read_text(const char *name, const char *text, fit_point **p, int *n, char *err,
                     size_t len) {
  return fit_read_csv(write_file(name, text), p, n, err, len);
}

static void expect_error(const char *name, const char *text, int code, const char *needle) {
  fit_point *p = (fit_point *)1;
  int n = -1;
  char err[512] = "", want[256];
  CHECK_INT_EQ(read_text(name, text, &p, &n, err, sizeof err), code);
  CHECK(p == NULL && n == 0);
  snprintf(want, sizeof want, "%s/%s%s", dir, name, needle);
  if (!strstr(err, want))
    fprintf(stderr, "expected '%s' in '%s'\n", want, err);
  CHECK(strstr(err, want) != NULL);
}

static void test_csv(void) {
  fit_point *p;
  int n;
  char err[512];
  /* BOM, CRLF, any column order, an ignored column with quotes and a comma,
   * run names, blank trailing lines */
  CHECK_INT_EQ(read_text("good.csv",
                         "\xef\xbb\xbfrun,loss,notes,params,tokens\r\n"
                         "r1,3.5,\"warm, \"\"restart\"\"\",1e6,2e9\r\n"
                         "r2, 3.25 ,x,2e6,4e9\r\n"
                         "\"r1\",3.0,,1e6,8e9\r\n"
                         "\r\n\r\n",
                         &p, &n, err, sizeof err),
               0);
  CHECK_INT_EQ(n, 3);
  if (n == 3) {
    CHECK_NEAR(p[0].loss, 3.5, 0, 0);
    CHECK_NEAR(p[1].loss, 3.25, 0, 0);
    CHECK_NEAR(p[0].params, 1e6, 0, 0);
    CHECK_NEAR(p[2].tokens, 8e9, 0, 0);
    CHECK(isnan(p[0].flops) && isnan(p[0].batch_size) && isnan(p[0].steps) && isnan(p[0].lr));
    CHECK_INT_EQ(p[0].group, 0);
    CHECK_INT_EQ(p[1].group, 1);
    CHECK_INT_EQ(p[2].group, 0);
  }
  free(p);
  /* tokens from flops; no run column: every point its own run */
  CHECK_INT_EQ(read_text("flops.csv", "params,flops,loss\n1e6,6e15,3.1\n2e6,6e15,3.0", &p, &n, err,
                         sizeof err),
               0);
  CHECK_INT_EQ(n, 2);
  if (n == 2) {
    CHECK_NEAR(p[0].tokens, 1e9, 0, 1e-15);
    CHECK_NEAR(p[1].tokens, 5e8, 0, 1e-15);
    CHECK_INT_EQ(p[1].group, -1);
  }
  free(p);
  /* a column the law needs is missing: the reader returns what it has and
   * the law names the column */
  CHECK_INT_EQ(read_text("notokens.csv",
                         "params,loss\n1e6,3\n2e6,3\n3e6,3\n4e6,3\n5e6,3\n6e6,3\n7e6,3\n", &p, &n,
                         err, sizeof err),
               0);
  fit_result r;
  CHECK_INT_EQ(fit_chinchilla(p, n, NULL, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "column 'tokens' is missing") != NULL);
  fit_result_free(&r);
  free(p);

  expect_error("abc.csv", "params,tokens,loss\n1e6,1e9,3.5\n2e6,1e9,abc\n", SS_EINVAL,
               ":3:9: column 'loss': found 'abc', expected a positive number");
  expect_error("neg.csv", "params,tokens,loss\n-1e6,1e9,3.5\n", SS_EINVAL,
               ":2:1: column 'params': found '-1e6', expected a positive number");
  expect_error("zero.csv", "loss,tokens\n3,0\n", SS_EINVAL,
               ":2:3: column 'tokens': found '0', expected a positive number");
  expect_error("empty_cell.csv", "loss,tokens\n3,\n", SS_EINVAL,
               ":2:3: column 'tokens': found '', expected a positive number");
  expect_error("inf.csv", "loss\ninf\n", SS_EINVAL, ":2:1: column 'loss': found 'inf'");
  expect_error("crlf.csv", "params,tokens,loss\r\n1e6,1e9,3.5\r\n\r\n2e6,1e9,x\r\n", SS_EINVAL,
               ":4:9: column 'loss': found 'x'");
  expect_error("fields.csv", "params,tokens,loss\n1e6,1e9\n", SS_EINVAL,
               ":2: found 2 fields, expected 3");
  expect_error("quote.csv", "params,loss\n\"1e6,3\n", SS_EINVAL, ":2:1: quoted field not closed");
  expect_error("empty.csv", "", SS_EINVAL, ": empty file");
  expect_error("blank.csv", "\n\n", SS_EINVAL, ": empty file");
  expect_error("header.csv", "params,tokens,loss\r\n", SS_EINVAL, ": no data rows");
  expect_error("unknown.csv", "a,b\n1,2\n", SS_EINVAL, ":1: the header names none");
  expect_error("twice.csv", "loss,params,loss\n1,2,3\n", SS_EINVAL,
               ":1:13: column 'loss' appears twice");
  p = (fit_point *)1;
  CHECK_INT_EQ(fit_read_csv("/nonexistent/points.csv", &p, &n, err, sizeof err), SS_ENOENT);
  CHECK(strstr(err, "/nonexistent/points.csv: cannot open") != NULL);
  CHECK(p == NULL);
}

static void cleanup(void) {
  static const char *const names[] = {"good.csv",  "flops.csv",  "notokens.csv",   "abc.csv",
                                      "neg.csv",   "zero.csv",   "empty_cell.csv", "inf.csv",
                                      "crlf.csv",  "fields.csv", "quote.csv",      "empty.csv",
                                      "blank.csv", "header.csv", "unknown.csv",    "twice.csv"};
  char path[128];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

int main(void) {
  if (check_tmpdir(dir, sizeof dir, "test_fit_chinchilla"))
    return 1;
  test_allocation();
  test_exact_recovery();
  test_noisy_recovery();
  test_bootstrap_covers_truth();
  test_screen_matches_full_grid();
  test_bootstrap_deterministic();
  test_flags();
  test_bad_points();
  test_vp_exact_recovery();
  test_vp_noisy();
  test_vp_local_minima();
  test_vp_bootstrap_and_method();
  test_csv();
  cleanup();
  CHECK_DONE();
}

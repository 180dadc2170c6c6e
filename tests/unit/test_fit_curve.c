/* Known answers for the learning-curve extrapolation (fit_curve, Kaplan's
 * L(N, S) at fixed N): exact recovery from noise-free points, the coverage
 * of the moving-block bootstrap interval under autocorrelated noise (and
 * how much narrower i.i.d. residuals would make it), the warnings, the bad
 * inputs, and the scheduler's flag rule (fit_curve_flag). */
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "fit_testlib.h"
#include "sweeps/fit.h"

/* The truth: L(S) = 1.5 + (2000 / S)^0.6, evaluated every 100 steps. */
#define LINF 1.5
#define SC 2e3
#define ALPHA 0.6
#define EVERY 100
#define LAST 5000

static double truth(double s) { return LINF + pow(SC / s, ALPHA); }

static fit_point curve_point(double s, double loss) {
  fit_point p = fitt_blank();
  p.loss = loss;
  p.steps = s;
  return p;
}

/* Noise-free points at steps 100..5000: the parameters to 1e-4 relative
 * (the optimiser's tolerance pins them far tighter; 1e-4 is the brief's). */
static void test_exact(void) {
  fit_point p[LAST / EVERY];
  int n = 0;
  for (int s = EVERY; s <= LAST; s += EVERY, n++)
    p[n] = curve_point(s, truth(s));
  fit_options o = {.target_steps = 2e4, .threads = 2};
  fit_result r;
  char err[256];
  CHECK_INT_EQ(fit_curve(p, n, &o, &r, err, sizeof err), 0);
  CHECK(!strcmp(r.law, "curve"));
  CHECK_INT_EQ(r.n_points, n);
  CHECK_NEAR(fitt_param(&r, "L_inf"), LINF, 0, 1e-4);
  CHECK_NEAR(fitt_param(&r, "S_c"), SC, 0, 1e-4);
  CHECK_NEAR(fitt_param(&r, "alpha_S"), ALPHA, 0, 1e-4);
  const fit_param *lt = fitt_find(r.derived, r.nderived, "loss_at_target");
  CHECK(lt && fabs(lt->value - truth(2e4)) < 1e-6 * truth(2e4));
  CHECK_INT_EQ(r.converged, 1);
  CHECK(r.objective < 1e-16);
  CHECK(r.residuals && fabs(r.residuals[0]) < 1e-8 && fabs(r.residuals[n - 1]) < 1e-8);
  CHECK_INT_EQ(r.nwarnings, 0);
  fit_result_free(&r);

  /* 200,000 steps: 40x the last observed, a far extrapolation */
  o.target_steps = 2e5;
  CHECK_INT_EQ(fit_curve(p, n, &o, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "far extrapolation"));
  fit_result_free(&r);

  /* input order does not matter (the fit sorts by step) */
  fit_point q[LAST / EVERY];
  for (int i = 0; i < n; i++)
    q[i] = p[n - 1 - i];
  o.target_steps = 0;
  CHECK_INT_EQ(fit_curve(q, n, &o, &r, err, sizeof err), 0);
  CHECK_NEAR(fitt_param(&r, "S_c"), SC, 0, 1e-4);
  CHECK(!fitt_find(r.derived, r.nderived, "loss_at_target"));
  fit_result_free(&r);
}

/* Points at steps 100..last with AR(1) multiplicative noise: eps_1 ~
 * N(0, sd^2), eps_i = rho eps_{i-1} + sqrt(1 - rho^2) sd z_i (stationary
 * SD sd), L = L_true (1 + eps). */
static int noisy_curve(gsl_rng *rng, double last, double sd, double rho, fit_point *p) {
  int n = 0;
  double eps = gsl_ran_gaussian(rng, sd);
  for (int s = EVERY; s <= last; s += EVERY, n++) {
    if (n)
      eps = rho * eps + sqrt(1 - rho * rho) * gsl_ran_gaussian(rng, sd);
    p[n] = curve_point(s, truth(s) * (1 + eps));
  }
  return n;
}

/* Fit on steps <= 1500 (15 evaluations), predict step 5000, 100 seeded
 * replicates of 100 resamples, noise SD 1% with rho = 0.8, each bootstrap noise model from
 * the same resampling seeds. With rho = 0.8, 15 points hold about 2
 * independent ones' worth of noise, and the fit absorbs most of it: the
 * residuals' SD is about half the noise's and their lag-1 correlation
 * about 0.2. Residual resampling (block or not) therefore cannot cover
 * (measured: i.i.d. 46%, moving-block 56%); the AR(1) model corrected for
 * the absorption reaches about 78% (200 replicates), short of nominal
 * because rho from 15 points ranges over all of [0, 0.99]. Asserted: the
 * AR(1) interval covers in at least 70 of 100 (its measured level less
 * about 2 binomial SDs), and the widths order AR(1) > block > i.i.d. */
static void test_coverage(void) {
  const int reps = 100, nb = 100;
  static const char *const names[3] = {"AR(1), absorption-corrected", "moving-block residuals",
                                       "i.i.d. residuals"};
  gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
  int cover[3] = {0}, fitted[3] = {0};
  double width[3] = {0}, want = truth(LAST);
  char err[256];
  for (int rep = 0; rep < reps; rep++) {
    gsl_rng_set(rng, 1000 + rep);
    fit_point p[15];
    int n = noisy_curve(rng, 1500, 0.01, 0.8, p);
    for (int m = 0; m < 3; m++) {
      fit_options o = {
          .bootstrap = nb, .seed = 77 + rep, .threads = 2, .target_steps = LAST, .curve_noise = m};
      fit_result r;
      CHECK_INT_EQ(fit_curve(p, n, &o, &r, err, sizeof err), 0);
      const fit_param *b = fitt_find(r.derived, r.nderived, "loss_at_target");
      if (b && isfinite(b->ci_lo) && isfinite(b->ci_hi)) {
        fitted[m]++;
        cover[m] += b->ci_lo <= want && want <= b->ci_hi;
        width[m] += (b->ci_hi - b->ci_lo) / reps;
      }
      fit_result_free(&r);
    }
  }
  gsl_rng_free(rng);
  printf("coverage of L(%d) = %.4f by the 95%% interval, %d replicates, %d resamples:\n", LAST,
         want, reps, nb);
  for (int m = 0; m < 3; m++) {
    printf("  %-28s %3d%%, mean width %.4f\n", names[m], cover[m], width[m]);
    CHECK_INT_EQ(fitted[m], reps);
  }
  CHECK(cover[FIT_CURVE_AR1] >= 70);
  CHECK(width[FIT_CURVE_AR1] > width[FIT_CURVE_BLOCK]);
  CHECK(width[FIT_CURVE_BLOCK] > width[FIT_CURVE_IID]);
}

/* The bootstrap is deterministic per seed whatever the thread count. */
static void test_determinism(void) {
  gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(rng, 5);
  fit_point p[20];
  int n = noisy_curve(rng, 2000, 0.01, 0.8, p);
  gsl_rng_free(rng);
  fit_options one = {.bootstrap = 200, .seed = 9, .threads = 1, .target_steps = LAST};
  fit_options two = one;
  two.threads = 2;
  fit_result a, b;
  char err[256];
  CHECK_INT_EQ(fit_curve(p, n, &one, &a, err, sizeof err), 0);
  CHECK_INT_EQ(fit_curve(p, n, &two, &b, err, sizeof err), 0);
  for (int k = 0; k < a.nparams; k++) {
    CHECK(a.params[k].stderr_ > 0);
    CHECK(a.params[k].ci_lo == b.params[k].ci_lo && a.params[k].ci_hi == b.params[k].ci_hi);
  }
  CHECK(a.derived[0].ci_lo < a.derived[0].value && a.derived[0].value < a.derived[0].ci_hi);
  CHECK(a.derived[0].ci_lo == b.derived[0].ci_lo && a.derived[0].ci_hi == b.derived[0].ci_hi);
  fit_result_free(&a);
  fit_result_free(&b);
}

static void test_warnings(void) {
  fit_point p[40];
  char err[256];
  fit_result r;
  fit_options o = {.threads = 1};
  /* the loss turns up by 10% over the last 10 evaluations (overfitting) */
  for (int i = 0; i < 40; i++) {
    double s = EVERY * (i + 1);
    p[i] = curve_point(s, i < 30 ? truth(s) : truth(3000) * (1 + 0.01 * (i - 29)));
  }
  CHECK_INT_EQ(fit_curve(p, 40, &o, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "non-monotone"));
  fit_result_free(&r);
  /* a flat curve: no shape to identify */
  for (int i = 0; i < 10; i++)
    p[i] = curve_point(EVERY * (i + 1), 2.0 + 1e-3 * (i % 2));
  CHECK_INT_EQ(fit_curve(p, 10, &o, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "at its bound"));
  fit_result_free(&r);
  /* several runs in one table */
  for (int i = 0; i < 10; i++) {
    p[i] = curve_point(EVERY * (i + 1), truth(EVERY * (i + 1)));
    p[i].group = i / 5;
  }
  CHECK_INT_EQ(fit_curve(p, 10, &o, &r, err, sizeof err), 0);
  CHECK(fitt_has_warning(&r, "more than one run"));
  fit_result_free(&r);
}

static void test_bad_input(void) {
  fit_point p[6];
  char err[256];
  fit_result r;
  fit_options o = {0};
  for (int i = 0; i < 6; i++)
    p[i] = curve_point(EVERY * (i + 1), truth(EVERY * (i + 1)));
  CHECK_INT_EQ(fit_curve(p, 4, &o, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "4 points") && strstr(err, "at least 5"));
  p[2].steps = 0;
  CHECK_INT_EQ(fit_curve(p, 6, &o, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "point 3: steps = 0"));
  p[2].steps = -300;
  CHECK_INT_EQ(fit_curve(p, 6, &o, &r, err, sizeof err), SS_EINVAL);
  p[2].steps = NAN;
  CHECK_INT_EQ(fit_curve(p, 6, &o, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "steps missing at point 3"));
  p[2].steps = 300;
  p[4].loss = -1;
  CHECK_INT_EQ(fit_curve(p, 6, &o, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "point 5: loss = -1"));
  p[4].loss = 2;
  for (int i = 0; i < 6; i++)
    p[i].steps = i < 3 ? 100 : 200;
  CHECK_INT_EQ(fit_curve(p, 6, &o, &r, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "distinct steps"));
  fit_result_free(&r);
}

static void test_flag(void) {
  double z;
  /* interval width 3.92 -> sd_pred 1; surface_sd 0: z = the difference */
  CHECK_INT_EQ(fit_curve_flag(5.0, 3.0, 6.92, 2.5, 0, &z), 0);
  CHECK_NEAR(z, 2.5, 1e-12, 0);
  CHECK_INT_EQ(fit_curve_flag(2.0, 1.0, 4.92, 5.5, 0, &z), 1);
  CHECK_NEAR(z, -3.5, 1e-12, 0);
  /* sd_pred 3 and surface_sd 4: combined 5 */
  CHECK_INT_EQ(fit_curve_flag(20.0, 0, 3 * 3.92, 4.0, 4.0, &z), 1);
  CHECK_NEAR(z, 16.0 / 5, 1e-12, 0);
  CHECK_INT_EQ(fit_curve_flag(19.0, 0, 3 * 3.92, 4.0, 4.0, &z), 0);
  /* no uncertainty, or unknown inputs: no judgement */
  CHECK_INT_EQ(fit_curve_flag(3.0, 2.0, 2.0, 2.0, 0, &z), 0);
  CHECK(isnan(z));
  CHECK_INT_EQ(fit_curve_flag(NAN, 2.0, 3.0, 2.0, 0.1, &z), 0);
  CHECK(isnan(z));
  CHECK_INT_EQ(fit_curve_flag(9.0, 2.0, 3.0, 2.0, 0.1, NULL), 1);
}

int main(void) {
  test_exact();
  test_bad_input();
  test_flag();
  test_warnings();
  test_determinism();
  test_coverage();
  CHECK_DONE();
}

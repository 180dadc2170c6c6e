/* fit_vp_bench: Chinchilla Approach 3's two minimisers on the same data
 * (sweeps/fit_chinchilla.c): variable projection (the default) against the
 * BFGS multistart (screened 4,500-start grid), each the whole fit_chinchilla
 * call, the fit and its bootstrap refits, in this process (no CSV, no
 * process start).
 *
 * Data: 240 points, SCIENCE.md's Approach 3 design widened: 10 compute
 * budgets log-spaced over 1e17..1e21, 24 sizes per budget log-spaced over
 * [N_opt/10, 10 N_opt], D = C/(6N), the published parameters, Gaussian
 * noise of SD --sd (0.01) on L, seed --seed (1).
 *
 * Usage: fit_vp_bench [--bootstrap 4000] [--threads 2] [--repeats 5]
 *                     [--sd 0.01] [--seed 1]
 * Prints, per method, the median (and the fastest) wall time of --repeats
 * runs with the bootstrap and without it, the median CPU time (all
 * threads) with it, the ratios of the medians, both
 * objectives and the largest relative difference between the parameters
 * and between the bootstrap SDs. Information, never a test: run by hand
 * (`cmake --build build --target fit_vp_bench && build/tests/fit_vp_bench`).
 */
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sweeps/fit.h"

#define E0 1.69
#define A0 406.4
#define B0 410.7
#define ALPHA0 0.34
#define BETA0 0.28
#define BUDGETS 10
#define SIZES 24
#define MAX_REPEATS 99

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process, all threads: on a shared machine a
 * steadier measure of work than the wall clock */
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
         (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static fit_point *points(double sd, unsigned long seed, int *n) {
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(r, seed);
  fit_point *p = calloc(BUDGETS * SIZES, sizeof *p);
  int k = 0;
  for (int i = 0; i < BUDGETS; i++) {
    double C = 1e17 * pow(10, 4.0 * i / (BUDGETS - 1)), n_opt;
    fit_chinchilla_allocation(A0, B0, ALPHA0, BETA0, C, NULL, NULL, NULL, &n_opt, NULL);
    for (int j = 0; j < SIZES; j++, k++) {
      double N = n_opt / 10 * pow(100, (double)j / (SIZES - 1)), D = C / (6 * N);
      p[k] = (fit_point){.params = N, .tokens = D, .flops = C, .group = -1};
      p[k].loss = E0 + A0 / pow(N, ALPHA0) + B0 / pow(D, BETA0) + gsl_ran_gaussian(r, sd);
      p[k].batch_size = p[k].steps = p[k].lr = NAN;
    }
  }
  gsl_rng_free(r);
  *n = k;
  return p;
}

typedef struct {
  double t_boot[MAX_REPEATS], t_fit[MAX_REPEATS], cpu_boot[MAX_REPEATS]; /* seconds */
  fit_result last; /* the last run with the bootstrap */
} timing;

static int measure(const fit_point *p, int n, int method, int boot, int threads, int repeats,
                   timing *tm) {
  char err[256];
  for (int r = 0; r < repeats; r++) {
    fit_options o = {.chin_method = method, .threads = threads, .seed = 1};
    fit_result res;
    double t0 = now_s();
    if (fit_chinchilla(p, n, &o, &res, err, sizeof err)) {
      fprintf(stderr, "fit_vp_bench: %s\n", err);
      return 1;
    }
    tm->t_fit[r] = now_s() - t0;
    fit_result_free(&res);
    o.bootstrap = boot;
    t0 = now_s();
    double c0 = cpu_s();
    if (fit_chinchilla(p, n, &o, &res, err, sizeof err)) {
      fprintf(stderr, "fit_vp_bench: %s\n", err);
      return 1;
    }
    tm->t_boot[r] = now_s() - t0;
    tm->cpu_boot[r] = cpu_s() - c0;
    if (r)
      fit_result_free(&tm->last);
    tm->last = res;
  }
  return 0;
}

int main(int argc, char **argv) {
  int boot = 4000, threads = 2, repeats = 5;
  double sd = 0.01;
  unsigned long seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "fit_vp_bench: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--bootstrap"))
      boot = atoi(v);
    else if (!strcmp(a, "--threads"))
      threads = atoi(v);
    else if (!strcmp(a, "--repeats"))
      repeats = atoi(v);
    else if (!strcmp(a, "--sd"))
      sd = atof(v);
    else if (!strcmp(a, "--seed"))
      seed = strtoul(v, NULL, 10);
    else {
      fprintf(stderr, "usage: fit_vp_bench [--bootstrap B] [--threads T] [--repeats R] [--sd S] "
                      "[--seed S]\n");
      return 2;
    }
    i++;
  }
  if (repeats < 1 || repeats > MAX_REPEATS || boot < 0 || threads < 1) {
    fprintf(stderr, "fit_vp_bench: repeats 1..%d, bootstrap >= 0, threads >= 1\n", MAX_REPEATS);
    return 2;
  }
  int n;
  fit_point *p = points(sd, seed, &n);
  static timing vp, bf;
  if (measure(p, n, FIT_CHIN_VARPRO, boot, threads, repeats, &vp) ||
      measure(p, n, FIT_CHIN_BFGS, boot, threads, repeats, &bf))
    return 1;
  double vb_min = vp.t_boot[0], bb_min = bf.t_boot[0];
  for (int r = 1; r < repeats; r++) {
    vb_min = fmin(vb_min, vp.t_boot[r]);
    bb_min = fmin(bb_min, bf.t_boot[r]);
  }
  double vb = median(vp.t_boot, repeats), bb = median(bf.t_boot, repeats);
  double vf = median(vp.t_fit, repeats), bfit = median(bf.t_fit, repeats);
  printf("Chinchilla Approach 3: %d points (SD %g, seed %lu), %d bootstrap refits, %d threads, "
         "median of %d runs\n\n",
         n, sd, seed, boot, threads, repeats);
  printf("  %-34s %12s %12s %8s\n", "", "varpro", "BFGS", "ratio");
  printf("  %-34s %11.3fs %11.3fs %7.2fx\n", "fit alone", vf, bfit, bfit / vf);
  printf("  %-34s %11.3fs %11.3fs %7.2fx\n", "fit + bootstrap (median)", vb, bb, bb / vb);
  printf("  %-34s %11.3fs %11.3fs\n", "fit + bootstrap (fastest)", vb_min, bb_min);
  double vc = median(vp.cpu_boot, repeats), bc = median(bf.cpu_boot, repeats);
  printf("  %-34s %11.3fs %11.3fs %7.2fx\n", "fit + bootstrap, CPU (median)", vc, bc, bc / vc);
  const fit_result *a = &vp.last, *b = &bf.last;
  double fa = a->objective, fb = b->objective;
  printf("\n  objective   varpro %.17g\n              BFGS   %.17g\n", fa, fb);
  printf("              varpro - BFGS = %.3g (relative %.3g; %s)\n", fa - fb, (fa - fb) / fb,
         fa < fb   ? "varpro lower"
         : fa > fb ? "BFGS lower"
                   : "equal");
  double dp = 0, ds = 0;
  for (int i = 0; i < a->nparams; i++) {
    dp = fmax(dp, fabs(a->params[i].value - b->params[i].value) / fabs(b->params[i].value));
    ds = fmax(ds, fabs(a->params[i].stderr_ - b->params[i].stderr_) / b->params[i].stderr_);
  }
  printf("  largest relative difference: parameters %.2g, bootstrap SDs %.2g\n", dp, ds);
  printf("  converged: varpro %d, BFGS %d; warnings: varpro %d, BFGS %d\n", a->converged,
         b->converged, a->nwarnings, b->nwarnings);
  for (int i = 0; i < a->nparams; i++)
    printf("    %-6s %.10g +- %.4g  (BFGS %.10g +- %.4g)\n", a->params[i].name, a->params[i].value,
           a->params[i].stderr_, b->params[i].value, b->params[i].stderr_);
  fit_result_free(&vp.last);
  fit_result_free(&bf.last);
  free(p);
  return 0;
}

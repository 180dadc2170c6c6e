/* Helpers shared by the fits (sweeps/internal.h): error messages,
 * bootstrap resampling by run, seeds, percentile intervals. */
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "sweeps/internal.h"

static int cmp_group(const void *a, const void *b, void *ctx) {
  const fit_point *p = ctx;
  int ia = *(const int *)a, ib = *(const int *)b;
  int ga = p[ia].group, gb = p[ib].group;
  if (ga < 0 && gb < 0)
    return (ia > ib) - (ia < ib);
  if (ga < 0 || gb < 0)
    return ga < 0 ? 1 : -1;
  return ga != gb ? (ga > gb) - (ga < gb) : (ia > ib) - (ia < ib);
}

void fit__groups_build(const fit_point *p, int n, fit__groups *g) {
  g->idx = malloc(sizeof(int) * n);
  g->start = malloc(sizeof(int) * (n + 1));
  for (int i = 0; i < n; i++)
    g->idx[i] = i;
  qsort_r(g->idx, n, sizeof(int), cmp_group, (void *)p);
  g->ng = 0;
  g->maxsize = 0;
  for (int i = 0; i < n; i++) {
    int gi = p[g->idx[i]].group;
    if (i == 0 || gi < 0 || gi != p[g->idx[i - 1]].group)
      g->start[g->ng++] = i;
  }
  g->start[g->ng] = n;
  for (int k = 0; k < g->ng; k++)
    if (g->start[k + 1] - g->start[k] > g->maxsize)
      g->maxsize = g->start[k + 1] - g->start[k];
}

int fit__groups_draw(const fit__groups *g, gsl_rng *rng, int *out) {
  int m = 0;
  for (int k = 0; k < g->ng; k++) {
    int c = (int)gsl_rng_uniform_int(rng, g->ng);
    for (int j = g->start[c]; j < g->start[c + 1]; j++)
      out[m++] = g->idx[j];
  }
  return m;
}

uint64_t fit__mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Standard deviation and 2.5/97.5 percentiles of column k over the
 * resamples where it was finite. Returns how many were. */
int fit__boot_column(const double *boot, int nb, int nq, int k, fit_param *p) {
  double *v = malloc(sizeof(double) * nb);
  int m = 0;
  for (int b = 0; b < nb; b++)
    if (isfinite(boot[(size_t)b * nq + k]))
      v[m++] = boot[(size_t)b * nq + k];
  if (p && m >= 2) {
    gsl_sort(v, 1, m);
    p->stderr_ = gsl_stats_sd(v, 1, m);
    p->ci_lo = gsl_stats_quantile_from_sorted_data(v, 1, m, 0.025);
    p->ci_hi = gsl_stats_quantile_from_sorted_data(v, 1, m, 0.975);
  }
  free(v);
  return m;
}

int fit__boot_columns(const double *boot, int nb, int nq, fit_param *const *slot) {
  int fewest = nb;
  for (int k = 0; k < nq; k++)
    if (slot[k]) {
      int ok = fit__boot_column(boot, nb, nq, k, slot[k]);
      fewest = ok < fewest ? ok : fewest;
    }
  return fewest;
}

void fit__boot_finish(fit_result *out, double *boot, int nb, int nq, fit_param *const *slot,
                      const char *what) {
  if (!boot) {
    fit_result_warn(out, "bootstrap: out of memory for %d resamples; no intervals", nb);
    return;
  }
  int fewest = fit__boot_columns(boot, nb, nq, slot);
  if (fewest < nb)
    fit_result_warn(out, "bootstrap: %d of %d resamples could not be fitted%s", nb - fewest, nb,
                    what);
  free(boot);
}

const fit_options *fit__options(const fit_options *opt) {
  static const fit_options defaults = {0};
  return opt ? opt : &defaults;
}

int fit__fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return SS_EINVAL;
}

double *fit__bootstrap(const fit_point *pts, int n, const fit_options *opt, int nq,
                       void (*fit1)(void *ctx, const int *idx, int m, double *row), void *ctx) {
  int nb = opt->bootstrap;
  fit__groups g;
  fit__groups_build(pts, n, &g);
  double *boot = malloc(sizeof(double) * (size_t)nb * nq);
  if (!boot || !g.idx || !g.start) {
    free(boot), free(g.idx), free(g.start);
    return NULL;
  }
  int nthreads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
#pragma omp parallel num_threads(nthreads)
  {
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    int *idx = malloc(sizeof(int) * (size_t)g.ng * g.maxsize);
#pragma omp for schedule(dynamic, 8)
    for (int b = 0; b < nb; b++) {
      double *row = boot + (size_t)b * nq;
      for (int k = 0; k < nq; k++)
        row[k] = NAN;
      if (!rng || !idx)
        continue;
      gsl_rng_set(rng, (unsigned long)fit__mix64(opt->seed + (uint64_t)b));
      int m = fit__groups_draw(&g, rng, idx);
      fit1(ctx, idx, m, row);
    }
    free(idx);
    if (rng)
      gsl_rng_free(rng);
  }
  free(g.idx);
  free(g.start);
  return boot;
}

double *fit__bootstrap_rng(int nb, int nq, uint64_t seed, int threads,
                           void (*draw1)(void *ctx, gsl_rng *rng, double *row), void *ctx) {
  double *boot = malloc(sizeof(double) * (size_t)nb * nq);
  if (!boot)
    return NULL;
  int nthreads = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nthreads)
  {
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
#pragma omp for schedule(dynamic, 8)
    for (int b = 0; b < nb; b++) {
      double *row = boot + (size_t)b * nq;
      for (int k = 0; k < nq; k++)
        row[k] = NAN;
      if (!rng)
        continue;
      gsl_rng_set(rng, (unsigned long)fit__mix64(seed + (uint64_t)b));
      draw1(ctx, rng, row);
    }
    if (rng)
      gsl_rng_free(rng);
  }
  return boot;
}

/* Helpers shared by the fits (sweeps/internal.h): error messages,
 * bootstrap resampling by run, seeds, percentile intervals. */
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics.h>
#include <math.h>
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

int fit__fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return SS_EINVAL;
}


/* Seeds: replicated cells for the bootstrap and the pooled seed noise
 * (sweeps/internal.h, fit.h's fit_seeds). A cell is a design point, (N, D,
 * B, lr) for Approach 3; runs that differ only by `train.seed` land in one
 * cell, runs of a grid over batch sizes or learning rates do not. */
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>

#include "common/err.h"
#include "sweeps/internal.h"

/* Keys of one design point agree exactly when they come from one planned
 * config; the tolerance only absorbs a round trip through decimal text. */
#define KEY_RTOL 1e-9

/* A key that is not known (NAN: a table without that column) equals only
 * another unknown one, and sorts first. */
static int key_cmp(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b) ? 0 : isnan(a) ? -1 : 1;
  if (fabs(a - b) <= KEY_RTOL * fmax(fabs(a), fabs(b)))
    return 0;
  return a < b ? -1 : 1;
}

typedef struct keyed {
  double k[FIT__CELL_KEYS];
  int nk, i;
} keyed;

static int keys_cmp(const keyed *a, const keyed *b) {
  int c = 0;
  for (int j = 0; j < a->nk && !c; j++)
    c = key_cmp(a->k[j], b->k[j]);
  return c;
}

/* By the keys, then index, so the order never depends on qsort. Within
 * the tolerance keys compare equal, and equal keys sort by index: a cell's
 * members are contiguous as long as the tolerance does not chain distinct
 * keys, which values planned apart never do. */
static int by_key(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  int c = keys_cmp(a, b);
  return c ? c : (a->i > b->i) - (a->i < b->i);
}

int fit__cells_build(const fit_point *p, const fit__groups *g, fit__cells *c) {
  c->nc = c->maxsize = c->replicated = 0;
  c->start = malloc(sizeof(int) * (size_t)(g->ng + 1));
  c->run = malloc(sizeof(int) * (size_t)(g->ng ? g->ng : 1));
  keyed *k = malloc(sizeof *k * (size_t)(g->ng ? g->ng : 1));
  if (!c->start || !c->run || !k) {
    free(k);
    fit__cells_free(c);
    return SS_ENOMEM;
  }
  for (int r = 0; r < g->ng; r++) {
    /* a run's cell is that of its last point (most tokens): checkpoints of
     * replicates share their tokens, the final one included */
    int last = g->idx[g->start[r]];
    for (int j = g->start[r] + 1; j < g->start[r + 1]; j++)
      if (p[g->idx[j]].tokens > p[last].tokens)
        last = g->idx[j];
    k[r] = (keyed){
        {p[last].params, p[last].tokens, p[last].batch_size, p[last].lr}, FIT__CELL_KEYS, r};
  }
  qsort(k, (size_t)g->ng, sizeof *k, by_key);
  for (int r = 0; r < g->ng; r++) {
    if (r == 0 || keys_cmp(&k[r], &k[r - 1]))
      c->start[c->nc++] = r;
    c->run[r] = k[r].i;
  }
  c->start[c->nc] = g->ng;
  for (int j = 0; j < c->nc; j++) {
    int size = c->start[j + 1] - c->start[j];
    c->maxsize = size > c->maxsize ? size : c->maxsize;
    c->replicated += size >= 2;
  }
  free(k);
  return 0;
}

void fit__cells_free(fit__cells *c) {
  free(c->start);
  free(c->run);
  c->start = c->run = NULL;
}

size_t fit__cells_capacity(const fit__groups *g, const fit__cells *c) {
  size_t cap = (size_t)c->nc * (size_t)c->maxsize * (size_t)g->maxsize;
  return cap ? cap : 1;
}

int fit__cells_draw(const fit__groups *g, const fit__cells *c, gsl_rng *rng, int *out) {
  int m = 0;
  for (int k = 0; k < c->nc; k++) {
    int cell = (int)gsl_rng_uniform_int(rng, (unsigned long)c->nc);
    int s = c->start[cell], size = c->start[cell + 1] - s;
    for (int j = 0; j < size; j++) { /* the cell whole: all its runs */
      int r = c->run[s + j];
      for (int i = g->start[r]; i < g->start[r + 1]; i++)
        out[m++] = g->idx[i];
    }
  }
  return m;
}

int fit__seed_pool(const double *const *keys, int nkeys, const double *y, int n, fit_seeds *s) {
  *s = (fit_seeds){.sd = NAN, .lo = NAN, .hi = NAN};
  keyed *k = malloc(sizeof *k * (size_t)(n > 0 ? n : 1));
  if (!k || nkeys < 1 || nkeys > FIT__CELL_KEYS) {
    free(k);
    return k ? SS_EINVAL : SS_ENOMEM;
  }
  for (int i = 0; i < n; i++) {
    k[i] = (keyed){.nk = nkeys, .i = i};
    for (int j = 0; j < nkeys; j++)
      k[i].k[j] = keys[j][i];
  }
  qsort(k, (size_t)n, sizeof *k, by_key);
  double ss = 0;
  for (int a = 0, b; a < n; a = b) {
    b = a + 1;
    while (b < n && !keys_cmp(&k[b], &k[a]))
      b++;
    if (b - a < 2)
      continue;
    /* two passes: the deviations are ~1e-2 of values ~1, and one-pass
     * sums of squares would lose digits to cancellation */
    double mean = 0;
    for (int j = a; j < b; j++)
      mean += y[k[j].i];
    mean /= b - a;
    for (int j = a; j < b; j++)
      ss += (y[k[j].i] - mean) * (y[k[j].i] - mean);
    s->cells++;
    s->runs += b - a;
    s->df += b - a - 1;
  }
  free(k);
  if (s->df > 0) {
    double var = ss / s->df;
    s->sd = sqrt(var);
    s->lo = sqrt(s->df * var / gsl_cdf_chisq_Pinv(0.975, s->df));
    s->hi = sqrt(s->df * var / gsl_cdf_chisq_Pinv(0.025, s->df));
  }
  return 0;
}

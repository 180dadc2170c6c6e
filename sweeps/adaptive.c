/* An adaptive design: the criterion and the rounds (adaptive.h). */
#include "sweeps/adaptive.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "runcfg/runcfg.h"
#include "sweeps/internal.h"
#include "sweeps/plan_draft.h"
#include "sweeps/spec_json.h"

int adaptive_candidates(const plan *p, adaptive_cand **out, size_t *n) {
  *out = NULL;
  *n = 0;
  adaptive_cand *c = calloc(p->n ? p->n : 1, sizeof *c);
  if (!c)
    return SS_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    if (strcmp(r->part, "isoflop") != 0)
      continue;
    /* its branch point: the steps before its decay (wsd) */
    int64_t stable = 0;
    if (r->cfg && !strcmp(r->cfg->train.schedule, "wsd")) {
      stable = rcfg_wsd_stable_steps(r->cfg);
      if (stable < 1 || stable >= r->steps)
        stable = 0;
    }
    double step_tokens = (double)r->batch_size * r->seq_len;
    c[k++] = (adaptive_cand){.run = i,
                             .params = (double)r->nonembedding_params,
                             .tokens = (double)r->tokens,
                             .flops = r->flops,
                             .budget = r->budget,
                             .group = r->branch_of >= 0 ? (size_t)r->branch_of : i,
                             .decay = stable > 0 ? 1 - (double)stable * step_tokens / r->tokens : 1,
                             .stable = stable,
                             .step_tokens = step_tokens};
  }
  *out = c;
  *n = k;
  return 0;
}

/* what x trains: from its start; else whole, or as a branch its decay */
static double cost_of(const adaptive_cand *x, int whole) {
  if (x->start > 0)
    return x->flops * (1 - (double)x->start * x->step_tokens / x->tokens);
  return whole ? x->flops : x->flops * x->decay;
}

double adaptive_cost(const adaptive_cand *c, const size_t *pick, size_t k) {
  double cost = 0;
  for (size_t i = 0; i < k; i++) {
    const adaptive_cand *x = &c[pick[i]];
    /* the longest of its group in the set trains whole (the first of
     * equals), the others their decay; one with a start from there, and it
     * is no trunk for the others */
    int longest = !x->start;
    for (size_t j = 0; j < k && longest; j++) {
      const adaptive_cand *y = &c[pick[j]];
      if (j != i && !y->start && y->group == x->group &&
          (y->tokens > x->tokens || (y->tokens == x->tokens && j < i)))
        longest = 0;
    }
    cost += cost_of(x, longest || x->decay >= 1);
  }
  return cost;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

char *adaptive_keep_json(const adaptive_cand *c, size_t n, const adaptive_cand_state *st, size_t me,
                         int64_t start, int *nomem) {
  *nomem = 0;
  const adaptive_cand *m = &c[me];
  if (m->stable <= start)
    return NULL; /* it passes no branch point: it only decays */
  int64_t *steps = malloc((n + 1) * sizeof *steps);
  if (!steps) {
    *nomem = 1;
    return NULL;
  }
  size_t k = 0;
  int longer = 0;
  for (size_t j = 0; j < n; j++) {
    if (j == me || c[j].group != m->group || (st && st[j] != ADAPT_FREE))
      continue;
    if (c[j].stable > start && c[j].stable < m->stable)
      steps[k++] = c[j].stable; /* a shorter one decays from here */
    longer |= c[j].tokens > m->tokens;
  }
  if (longer) /* a longer one goes on from its branch point */
    steps[k++] = m->stable;
  if (!k) {
    free(steps);
    return NULL;
  }
  qsort(steps, k, sizeof *steps, cmp_i64);
  size_t len = 3 + 21 * k;
  char *t = malloc(len), *o = t;
  if (!t) {
    free(steps);
    *nomem = 1;
    return NULL;
  }
  *o++ = '[';
  for (size_t j = 0; j < k; j++)
    if (j == 0 || steps[j] != steps[j - 1])
      o += snprintf(o, len - (size_t)(o - t), "%s%lld", o > t + 1 ? "," : "", (long long)steps[j]);
  *o++ = ']';
  *o = 0;
  free(steps);
  return t;
}

int adaptive_keep_steps(plan *sub, const plan *cands, const adaptive_cand *c, size_t n,
                        const adaptive_cand_state *st) {
  for (size_t i = 0; i < sub->n; i++) {
    plan_run *r = &sub->runs[i];
    if (r->branch_of >= 0 || strcmp(r->part, "isoflop") != 0)
      continue;
    size_t me = n;
    for (size_t j = 0; j < n && me == n; j++)
      if (!strcmp(cands->runs[c[j].run].config_hash, r->config_hash))
        me = j;
    if (me == n)
      continue;
    int nomem;
    char *t = adaptive_keep_json(c, n, st, me, 0, &nomem);
    if (nomem)
      return SS_ENOMEM;
    free(r->keep_steps);
    r->keep_steps = t;
  }
  return 0;
}

/* (ln N, ln C) scaled to the unit square over the candidates */
typedef struct unit {
  double n0, nr, c0, cr;
} unit;

static unit unit_of(const adaptive_cand *c, size_t n) {
  double nlo = INFINITY, nhi = -INFINITY, clo = INFINITY, chi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    nlo = fmin(nlo, log(c[i].params));
    nhi = fmax(nhi, log(c[i].params));
    clo = fmin(clo, log(c[i].budget));
    chi = fmax(chi, log(c[i].budget));
  }
  return (unit){nlo, nhi > nlo ? nhi - nlo : 1, clo, chi > clo ? chi - clo : 1};
}

static double dist2(const unit *u, const adaptive_cand *a, const adaptive_cand *b) {
  double dn = (log(a->params) - log(b->params)) / u->nr;
  double dc = (log(a->budget) - log(b->budget)) / u->cr;
  return dn * dn + dc * dc;
}

/* Farthest-point picks among the eligible candidates, from those chosen
 * already (chosen[i] set; none: the first pick is the eligible candidate
 * at the smallest budget nearest the middle size). Returns the count. */
static size_t maximin(const adaptive_cand *c, size_t n, const unsigned char *eligible,
                      unsigned char *chosen, size_t want, size_t *pick) {
  unit u = unit_of(c, n);
  size_t k = 0;
  int any = 0;
  for (size_t i = 0; i < n; i++)
    any |= chosen[i];
  if (!any && want > 0) {
    double cmin = INFINITY;
    for (size_t i = 0; i < n; i++)
      if (eligible[i])
        cmin = fmin(cmin, c[i].budget);
    size_t best = n;
    double bd = INFINITY, mid = u.n0 + u.nr / 2;
    for (size_t i = 0; i < n; i++)
      if (eligible[i] && c[i].budget == cmin && fabs(log(c[i].params) - mid) < bd) {
        bd = fabs(log(c[i].params) - mid);
        best = i;
      }
    if (best == n)
      return 0;
    chosen[best] = 1;
    pick[k++] = best;
  }
  while (k < want) {
    size_t best = n;
    double bd = -1;
    for (size_t i = 0; i < n; i++) {
      if (!eligible[i] || chosen[i])
        continue;
      double d = INFINITY;
      for (size_t j = 0; j < n; j++)
        if (chosen[j])
          d = fmin(d, dist2(&u, &c[i], &c[j]));
      if (d > bd + 1e-12) {
        bd = d;
        best = i;
      }
    }
    if (best == n)
      break;
    chosen[best] = 1;
    pick[k++] = best;
  }
  return k;
}

size_t adaptive_initial(const adaptive_cand *c, size_t n, int initial, size_t *pick) {
  if (n == 0 || initial <= 0)
    return 0;
  unsigned char *eligible = calloc(n, 1), *chosen = calloc(n, 1);
  if (!eligible || !chosen) {
    free(eligible);
    free(chosen);
    return 0;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    lo = fmin(lo, c[i].budget);
    hi = fmax(hi, c[i].budget);
  }
  double middle = sqrt(lo * hi) * (1 + 1e-9);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    m += eligible[i] = c[i].budget <= middle;
  if (m < (size_t)initial) /* too few below the middle: all of them */
    memset(eligible, 1, n);
  size_t k = maximin(c, n, eligible, chosen, (size_t)initial, pick);
  free(eligible);
  free(chosen);
  return k;
}

/* ln L of the surface th (ln A, ln B, ln E, alpha, beta) at (N, D), in logs */
static double ln_loss(const double *th, double n, double d) {
  double u1 = th[0] - th[3] * log(n), u2 = th[1] - th[4] * log(d), u3 = th[2];
  double mx = fmax(fmax(u1, u2), u3);
  return mx + log(exp(u1 - mx) + exp(u2 - mx) + exp(u3 - mx));
}

/* ln N_opt(C) for C = 6ND (fit_chinchilla_allocation, in logs) */
static double ln_n_opt(const double *th, double C) {
  double al = th[3], be = th[4];
  if (!(al > 0) || !(be > 0))
    return NAN;
  double ln_g = (log(al) + th[0] - log(be) - th[1]) / (al + be);
  return ln_g + be / (al + be) * log(C / 6);
}

static double question(const spec_adaptive *a, const double *th) {
  return a->question == SPEC_Q_LOSS ? ln_loss(th, a->params, a->tokens) : ln_n_opt(th, a->flops);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* the p-quantile of sorted v (n >= 1), linear between order statistics */
static double quantile(const double *v, size_t n, double p) {
  double h = p * (double)(n - 1);
  size_t i = (size_t)h;
  if (i + 1 >= n)
    return v[n - 1];
  return v[i] + (h - (double)i) * (v[i + 1] - v[i]);
}

/* the interval's half-width as a factor: [q / (1 + w), q (1 + w)] holds it
 * (symmetric in logs: a lower end near 0 does not cap it at 1) */
static double rel_width(double q, double lo, double hi) {
  return fmax(0, fmax(exp(hi - q), exp(q - lo)) - 1);
}

/* The ensemble: K resamples x (1 + m) columns (the question, then each
 * free candidate's ln L), each column clipped to its 2.5 and 97.5
 * percentiles; cov is its (1 + m)^2 covariance. */
typedef struct ensemble {
  size_t m;     /* free candidates */
  size_t *cand; /* column 1 + j is candidate cand[j] */
  double *cov;  /* the clipped columns' covariance (the linear criterion) */
  double *raw;  /* rows x (1 + m): the resamples' values as they are (reweighting) */
  size_t rows;
} ensemble;

static void ensemble_free(ensemble *e) {
  free(e->cand);
  free(e->cov);
  free(e->raw);
}

static int ensemble_make(const spec_adaptive *a, const fit_result *f, const adaptive_cand *c,
                         size_t n, const adaptive_cand_state *state, ensemble *e) {
  *e = (ensemble){0};
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    m += state[i] == ADAPT_FREE;
  size_t w = 1 + m, K = (size_t)f->ndraws;
  e->cand = malloc((m ? m : 1) * sizeof *e->cand);
  e->cov = calloc(w * w, sizeof *e->cov);
  double *x = malloc((K ? K : 1) * w * sizeof *x), *col = malloc((K ? K : 1) * sizeof *col);
  if (!e->cand || !e->cov || !x || !col) {
    free(x);
    free(col);
    ensemble_free(e);
    return SS_ENOMEM;
  }
  e->m = m;
  for (size_t i = 0, j = 0; i < n; i++)
    if (state[i] == ADAPT_FREE)
      e->cand[j++] = i;
  size_t rows = 0;
  for (size_t k = 0; k < K; k++) {
    const double *th = &f->draws[k * FIT_CHIN_DRAW];
    double *row = &x[rows * w];
    row[0] = question(a, th);
    int ok = isfinite(row[0]);
    for (size_t j = 0; ok && j < m; j++) {
      row[1 + j] = ln_loss(th, c[e->cand[j]].params, c[e->cand[j]].tokens);
      ok = isfinite(row[1 + j]);
    }
    rows += ok;
  }
  e->rows = rows;
  e->raw = malloc((rows ? rows : 1) * w * sizeof *e->raw);
  if (!e->raw) {
    free(x);
    free(col);
    ensemble_free(e);
    return SS_ENOMEM;
  }
  memcpy(e->raw, x, rows * w * sizeof *x);
  if (rows >= 2) {
    for (size_t j = 0; j < w; j++) {
      for (size_t k = 0; k < rows; k++)
        col[k] = x[k * w + j];
      qsort(col, rows, sizeof *col, cmp_double);
      double lo = quantile(col, rows, 0.025), hi = quantile(col, rows, 0.975), mean = 0;
      for (size_t k = 0; k < rows; k++)
        mean += x[k * w + j] = fmin(hi, fmax(lo, x[k * w + j]));
      mean /= (double)rows;
      for (size_t k = 0; k < rows; k++)
        x[k * w + j] -= mean;
    }
    for (size_t i = 0; i < w; i++)
      for (size_t j = i; j < w; j++) {
        double s = 0;
        for (size_t k = 0; k < rows; k++)
          s += x[k * w + i] * x[k * w + j];
        e->cov[i * w + j] = e->cov[j * w + i] = s / (double)(rows - 1);
      }
  }
  free(x);
  free(col);
  return 0;
}

/* The criterion's state as the greedy round conditions it on one
 * candidate after another (adaptive.h):
 * - linear: the clipped columns' covariance, conditioned by rank-one
 *   updates; the question's spread is SD(q);
 * - reweighting: T simulated truths (resamples spread over the ensemble,
 *   their ln L at every candidate plus a run's scatter, drawn from the
 *   seed), and per truth the log weight of every resample given the
 *   candidates taken so far (Gaussian in ln L with the scatter s); the
 *   question's spread is the expected width of its weighted 2.5-97.5%
 *   interval over the truths, over 3.92 (an SD's equivalent). */
#define REWEIGHT_TRUTHS 32
typedef struct crit {
  int reweight;
  const ensemble *e;
  double s2;
  double *cov;      /* linear: (1 + m)^2 */
  double *obs, *lw; /* reweighting: T x m observations, T x rows log weights */
  size_t *order;    /* reweighting: rows sorted by q */
  double *tmp;      /* rows */
} crit;

static void crit_free(crit *k) {
  free(k->cov);
  free(k->obs);
  free(k->lw);
  free(k->order);
  free(k->tmp);
}

/* rows by their q (glibc's qsort_r: no shared state between threads) */
static int cmp_by_key(const void *x, const void *y, void *key) {
  const double *k = key;
  size_t a = *(const size_t *)x, b = *(const size_t *)y;
  return k[a] < k[b] ? -1 : k[a] > k[b] ? 1 : (a > b) - (a < b);
}

/* a standard normal from (seed, i, j), deterministic */
static double normal_of(uint64_t seed, uint64_t i, uint64_t j) {
  uint64_t a = fit__mix64(seed ^ fit__mix64(i * 0x9e3779b97f4a7c15ull + j + 1));
  uint64_t b = fit__mix64(a + 0x632be59bd9b4e019ull);
  double u1 = ((double)(a >> 11) + 0.5) / 9007199254740992.0;
  double u2 = ((double)(b >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static int crit_init(crit *k, const ensemble *e, double s2, int reweight, uint64_t seed) {
  *k = (crit){.reweight = reweight, .e = e, .s2 = s2};
  size_t w = 1 + e->m, R = e->rows;
  if (!reweight) {
    k->cov = malloc(w * w * sizeof *k->cov);
    if (!k->cov)
      return SS_ENOMEM;
    memcpy(k->cov, e->cov, w * w * sizeof *k->cov);
    return 0;
  }
  k->obs = malloc(REWEIGHT_TRUTHS * (e->m ? e->m : 1) * sizeof *k->obs);
  k->lw = calloc(REWEIGHT_TRUTHS * (R ? R : 1), sizeof *k->lw);
  k->order = malloc((R ? R : 1) * sizeof *k->order);
  k->tmp = malloc((R ? R : 1) * sizeof *k->tmp);
  if (!k->obs || !k->lw || !k->order || !k->tmp) {
    crit_free(k);
    return SS_ENOMEM;
  }
  for (size_t i = 0; i < R; i++) {
    k->order[i] = i;
    k->tmp[i] = e->raw[i * w];
  }
  qsort_r(k->order, R, sizeof *k->order, cmp_by_key, k->tmp);
  for (size_t t = 0; t < REWEIGHT_TRUTHS; t++) {
    size_t truth = R ? (t * R + R / 2) / REWEIGHT_TRUTHS : 0;
    for (size_t j = 0; j < e->m; j++)
      k->obs[t * e->m + j] = e->raw[truth * w + 1 + j] + sqrt(s2) * normal_of(seed, t, e->cand[j]);
  }
  return 0;
}

/* the expected width of q's weighted 95% interval over the truths, with
 * candidate column j also observed (j = m: none) */
static double rw_width(crit *k, size_t j) {
  const ensemble *e = k->e;
  size_t w = 1 + e->m, R = e->rows;
  double sum = 0;
  for (size_t t = 0; t < REWEIGHT_TRUTHS; t++) {
    const double *lw = &k->lw[t * R];
    double mx = -INFINITY;
    for (size_t i = 0; i < R; i++) {
      double v = lw[i];
      if (j < e->m) {
        double d = e->raw[i * w + 1 + j] - k->obs[t * e->m + j];
        v -= d * d / (2 * k->s2);
      }
      k->tmp[i] = v;
      mx = fmax(mx, v);
    }
    double tot = 0;
    for (size_t i = 0; i < R; i++)
      tot += k->tmp[i] = exp(k->tmp[i] - mx);
    double cum = 0, lo = NAN, hi = NAN;
    for (size_t r = 0; r < R; r++) {
      size_t i = k->order[r];
      cum += k->tmp[i] / tot;
      if (isnan(lo) && cum >= 0.025)
        lo = e->raw[i * w];
      if (cum >= 0.975) {
        hi = e->raw[i * w];
        break;
      }
    }
    if (isnan(hi))
      hi = e->raw[k->order[R - 1] * w];
    sum += hi - lo;
  }
  return sum / REWEIGHT_TRUTHS / 3.92;
}

/* the question's spread now, and after observing column j */
static double crit_sd(crit *k) { return k->reweight ? rw_width(k, k->e->m) : sqrt(k->cov[0]); }

static double crit_after(crit *k, size_t j) {
  if (k->reweight)
    return rw_width(k, j);
  size_t w = 1 + k->e->m;
  double v = k->cov[0], cq = k->cov[1 + j], d = k->cov[(1 + j) * w + 1 + j] + k->s2;
  return sqrt(fmax(0, v - (d > 0 ? cq * cq / d : 0)));
}

static void condition(double *cov, size_t w, size_t j, double s2);

static void crit_take(crit *k, size_t j) {
  const ensemble *e = k->e;
  if (!k->reweight) {
    condition(k->cov, 1 + e->m, 1 + j, k->s2);
    return;
  }
  size_t w = 1 + e->m, R = e->rows;
  for (size_t t = 0; t < REWEIGHT_TRUTHS; t++)
    for (size_t i = 0; i < R; i++) {
      double d = e->raw[i * w + 1 + j] - k->obs[t * e->m + j];
      k->lw[t * R + i] -= d * d / (2 * k->s2);
    }
}

/* conditions cov (w x w) on observing column j with noise variance s2 */
static void condition(double *cov, size_t w, size_t j, double s2) {
  double d = cov[j * w + j] + s2;
  if (!(d > 0))
    return;
  double *cj = malloc(w * sizeof *cj);
  if (!cj)
    return;
  for (size_t i = 0; i < w; i++)
    cj[i] = cov[i * w + j];
  for (size_t i = 0; i < w; i++)
    for (size_t k = 0; k < w; k++)
      cov[i * w + k] -= cj[i] * cj[k] / d;
  free(cj);
  for (size_t i = 0; i < w; i++) /* rounding must not make a variance negative */
    if (cov[i * w + i] < 0)
      cov[i * w + i] = 0;
}

/* The greedy picks (adaptive.h): into picks (room for e->m), at most
 * limit of them and within budget FLOPs (INFINITY: no limit), conditioning
 * k in place; stops early once the predicted width (scale: the width per
 * unit of the question's spread, sd0 at the start) is at most target (0:
 * never). Returns the count; *cost the FLOPs. */
static size_t greedy(crit *kr, const adaptive_cand *c, size_t limit, double budget, double sd0,
                     double width0, double target, adaptive_pick *picks, size_t *idx,
                     double *cost) {
  const ensemble *e = kr->e;
  size_t k = 0;
  unsigned char *taken = calloc(e->m ? e->m : 1, 1);
  *cost = 0;
  if (!taken)
    return 0;
  double v = crit_sd(kr);
  while (k < limit) {
    if (target > 0 && sd0 > 0 && width0 * v / sd0 <= target)
      break;
    double best = 0, best_cost = 0, best_after = 0;
    size_t bj = e->m;
    for (size_t j = 0; j < e->m; j++) {
      if (taken[j])
        continue;
      idx[k] = e->cand[j];
      double mc = adaptive_cost(c, idx, k + 1) - *cost;
      if (!(mc > 0) || *cost + mc > budget * (1 + 1e-9))
        continue;
      double after = crit_after(kr, j);
      double score = (v - after) / mc;
      if (score > best * (1 + 1e-12) && v - after > 1e-9 * v) {
        best = score;
        bj = j;
        best_cost = mc;
        best_after = after;
      }
    }
    if (bj == e->m)
      break;
    taken[bj] = 1;
    idx[k] = e->cand[bj];
    picks[k] = (adaptive_pick){.cand = e->cand[bj],
                               .cost = best_cost,
                               .sd_before = v,
                               .sd_after = best_after,
                               .score = best * 1e15};
    *cost += best_cost;
    crit_take(kr, bj);
    v = best_after;
    k++;
  }
  free(taken);
  return k;
}

void adaptive_result_free(adaptive_result *r) {
  free(r->picks);
  *r = (adaptive_result){0};
}

static void param3(const fit_result *f, const char *name, double out[3]) {
  const fit_param *p = fit_result_get(f, name);
  out[0] = p ? p->value : NAN;
  out[1] = p ? p->ci_lo : NAN;
  out[2] = p ? p->ci_hi : NAN;
}

/* the first round's picks again, for a sweep whose law cannot be fitted
 * yet: space-filling among the free candidates, from all in the sweep */
static int space_filling(const adaptive_cand *c, size_t n, const adaptive_cand_state *state,
                         size_t want, double budget, adaptive_result *out) {
  unsigned char *eligible = calloc(n ? n : 1, 1), *chosen = calloc(n ? n : 1, 1);
  size_t *pick = malloc((n ? n : 1) * sizeof *pick);
  out->picks = calloc(n ? n : 1, sizeof *out->picks);
  if (!eligible || !chosen || !pick || !out->picks) {
    free(eligible);
    free(chosen);
    free(pick);
    return SS_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) { /* free, and within the compute left alone */
    eligible[i] = state[i] == ADAPT_FREE && cost_of(&c[i], 1) <= budget * (1 + 1e-9);
    chosen[i] = state[i] != ADAPT_FREE;
  }
  size_t k = maximin(c, n, eligible, chosen, want, pick);
  /* within the compute left: the last picks go first */
  while (k > 0 && adaptive_cost(c, pick, k) > budget * (1 + 1e-9))
    k--;
  for (size_t i = 0; i < k; i++)
    out->picks[i] = (adaptive_pick){
        .cand = pick[i], .cost = NAN, .sd_before = NAN, .sd_after = NAN, .score = NAN};
  out->npicks = k;
  out->cost = adaptive_cost(c, pick, k);
  free(eligible);
  free(chosen);
  free(pick);
  return 0;
}

/* a run's scatter about the fitted surface, SD of ln L: the residual RMS,
 * at least ADAPTIVE_MIN_NOISE, or the pooled seed SD when larger */
static double run_scatter(const fit_result *f) {
  double rms = 0;
  for (int i = 0; i < f->n_points && f->residuals; i++)
    rms += f->residuals[i] * f->residuals[i];
  rms = f->n_points > 0 ? sqrt(rms / f->n_points) : NAN;
  double s = fmax(ADAPTIVE_MIN_NOISE, isfinite(rms) ? rms : 0);
  if (f->seeds.cells > 0 && isfinite(f->seeds.sd))
    s = fmax(s, f->seeds.sd);
  return s;
}

/* A result with nothing known yet: every figure NAN */
static adaptive_result result_empty(double compute) {
  adaptive_result r = {.answer = NAN,
                       .lo = NAN,
                       .hi = NAN,
                       .width = NAN,
                       .pred_lo = NAN,
                       .pred_hi = NAN,
                       .pred_width = NAN,
                       .noise_sd = NAN,
                       .compute = compute,
                       .more_flops = NAN,
                       .best_width = NAN};
  for (int i = 0; i < 3; i++)
    r.E[i] = r.alpha[i] = r.beta[i] = NAN;
  return r;
}

/* The law fitted to pts with its resamples' surfaces (into f, which the
 * caller frees), and the question's answer with its interval (out: fitted
 * when 20 or more resamples answer it; err says why not). 0 or SS_ENOMEM. */
static int fit_answer(const spec_adaptive *a, const fit_point *pts, int npts, int threads,
                      fit_result *f, char *err, size_t errlen, adaptive_result *out) {
  if (npts < ADAPTIVE_MIN_POINTS)
    return 0;
  fit_options o = {.bootstrap = a->bootstrap, .seed = a->seed, .threads = threads, .keep_draws = 1};
  int rc = fit_chinchilla(pts, npts, &o, f, err, errlen);
  if (rc)
    return rc == SS_ENOMEM ? rc : 0;
  double th[FIT_CHIN_DRAW];
  const char *names[] = {"A", "B", "E", "alpha", "beta"};
  for (int i = 0; i < FIT_CHIN_DRAW; i++) {
    const fit_param *p = fit_result_get(f, names[i]);
    th[i] = p ? (i < 3 ? log(p->value) : p->value) : NAN;
  }
  double qhat = question(a, th);
  param3(f, "E", out->E);
  param3(f, "alpha", out->alpha);
  param3(f, "beta", out->beta);
  double *qs = malloc((f->ndraws ? (size_t)f->ndraws : 1) * sizeof *qs);
  if (!qs)
    return SS_ENOMEM;
  size_t nq = 0;
  for (int k = 0; k < f->ndraws; k++) {
    double q = question(a, &f->draws[(size_t)k * FIT_CHIN_DRAW]);
    if (isfinite(q))
      qs[nq++] = q;
  }
  out->n_draws = (int)nq;
  if (isfinite(qhat) && nq >= 20) {
    qsort(qs, nq, sizeof *qs, cmp_double);
    double lo = quantile(qs, nq, 0.025), hi = quantile(qs, nq, 0.975);
    out->fitted = 1;
    out->answer = exp(qhat);
    out->lo = exp(lo);
    out->hi = exp(hi);
    out->width = rel_width(qhat, lo, hi);
  } else {
    snprintf(err, errlen, "%zu of %d resamples could be fitted", nq, f->ndraws);
  }
  free(qs);
  out->noise_sd = run_scatter(f);
  return 0;
}

/* The law could not be fitted: a space-filling round, unless the design
 * has stopped already (err: why the law could not be fitted) */
static int space_filling_round(const spec_adaptive *a, const adaptive_cand *c, size_t n,
                               const adaptive_cand_state *state, int npts, double left,
                               const char *err, adaptive_result *out) {
  if (out->status != ADAPT_WAITING)
    return 0;
  int rc = space_filling(c, n, state, (size_t)a->round, left, out);
  if (rc)
    return rc;
  out->status = out->npicks ? ADAPT_ROUND : ADAPT_SPENT;
  if (npts < ADAPTIVE_MIN_POINTS)
    snprintf(out->reason, sizeof out->reason,
             "%d run%s succeeded, and the law needs %d: a space-filling round", npts,
             npts == 1 ? "" : "s", ADAPTIVE_MIN_POINTS);
  else
    snprintf(out->reason, sizeof out->reason,
             "the law could not be fitted (%s): a space-filling round", err);
  if (!out->npicks)
    snprintf(out->reason, sizeof out->reason,
             "the law could not be fitted, and no free candidate fits the compute left "
             "(%.3g FLOPs)",
             left);
  return 0;
}

/* What more compute would buy: the greedy conditioning over every free
 * candidate, no limits (k2, scratch and idx its room) */
static void forecast_more(const spec_adaptive *a, const adaptive_cand *c, size_t m, crit *k2,
                          double sd0, adaptive_pick *scratch, size_t *idx, adaptive_result *out) {
  double lnq = log(out->answer), lnlo = log(out->lo), lnhi = log(out->hi);
  double more = 0;
  size_t all = greedy(k2, c, m, INFINITY, sd0, out->width, a->precision, scratch, idx, &more);
  double r_all = sd0 > 0 ? (all ? scratch[all - 1].sd_after : sd0) / sd0 : 1;
  out->best_width = rel_width(lnq, lnq - (lnq - lnlo) * r_all, lnq + (lnhi - lnq) * r_all);
  out->more_flops = all > 0 && out->best_width <= a->precision * (1 + 1e-9) ? more : NAN;
}

/* The round: the greedy conditioning within its size and the compute left,
 * and the interval it predicts */
static void choose_round(const spec_adaptive *a, const adaptive_cand *c, crit *kr, double sd0,
                         double left, size_t *idx, adaptive_result *out) {
  double lnq = log(out->answer), lnlo = log(out->lo), lnhi = log(out->hi);
  out->npicks =
      greedy(kr, c, (size_t)a->round, left, sd0, out->width, 0, out->picks, idx, &out->cost);
  double r = sd0 > 0 && out->npicks ? out->picks[out->npicks - 1].sd_after / sd0 : 1;
  if (out->npicks == 0) {
    out->status = ADAPT_SPENT;
    snprintf(out->reason, sizeof out->reason,
             "no free candidate narrows the answer within the compute left (%.3g FLOPs)", left);
    return;
  }
  double plo = lnq - (lnq - lnlo) * r, phi = lnq + (lnhi - lnq) * r;
  out->pred_lo = exp(plo);
  out->pred_hi = exp(phi);
  out->pred_width = rel_width(lnq, plo, phi);
  out->status = ADAPT_ROUND;
  snprintf(out->reason, sizeof out->reason,
           "%zu run%s chosen for %.3g FLOPs: the interval's half-width %.3g now, %.3g "
           "predicted after them (%.3g wanted)",
           out->npicks, out->npicks == 1 ? "" : "s", out->cost, out->width, out->pred_width,
           a->precision);
}

/* The law was fitted (f): the forecast of more compute and, while the
 * design goes on, the round. 0 or SS_ENOMEM. */
static int design_round(const spec_adaptive *a, const adaptive_cand *c, size_t n,
                        const adaptive_cand_state *state, const fit_result *f, double left,
                        adaptive_result *out) {
  ensemble e;
  int rc = ensemble_make(a, f, c, n, state, &e);
  if (rc)
    return rc;
  out->picks = calloc(e.m ? e.m : 1, sizeof *out->picks);
  size_t *idx = malloc((e.m ? e.m : 1) * sizeof *idx);
  adaptive_pick *scratch = calloc(e.m ? e.m : 1, sizeof *scratch);
  double s2 = out->noise_sd * out->noise_sd;
  crit kr = {0}, k2 = {0};
  if (!out->picks || !idx || !scratch ||
      crit_init(&kr, &e, s2, a->criterion == SPEC_CRIT_REWEIGHT, a->seed) ||
      crit_init(&k2, &e, s2, a->criterion == SPEC_CRIT_REWEIGHT, a->seed)) {
    crit_free(&kr);
    free(idx);
    free(scratch);
    ensemble_free(&e);
    return SS_ENOMEM;
  }
  double sd0 = crit_sd(&kr);
  forecast_more(a, c, e.m, &k2, sd0, scratch, idx, out);
  if (out->status == ADAPT_WAITING)
    choose_round(a, c, &kr, sd0, left, idx, out);
  crit_free(&kr);
  crit_free(&k2);
  free(idx);
  free(scratch);
  ensemble_free(&e);
  return 0;
}

int adaptive_decide(const spec_adaptive *a, const adaptive_cand *c, size_t n,
                    const adaptive_cand_state *state, const fit_point *pts, int npts, double spent,
                    int threads, adaptive_result *out) {
  *out = result_empty(a->compute);
  out->spent = spent;
  out->n_points = npts;
  if (!a->present)
    return SS_EINVAL;
  size_t nfree = 0;
  for (size_t i = 0; i < n; i++) {
    if (state[i] == ADAPT_ACTIVE) {
      out->status = ADAPT_WAITING;
      snprintf(out->reason, sizeof out->reason, "a run of the round is still queued or running");
      return 0;
    }
    nfree += state[i] == ADAPT_FREE;
  }
  double left = a->compute - spent;

  fit_result f;
  fit_result_init(&f, "chinchilla");
  char err[256] = "";
  int rc = fit_answer(a, pts, npts, threads, &f, err, sizeof err, out);
  if (rc == 0 && out->fitted && out->width <= a->precision) {
    out->status = ADAPT_REACHED;
    snprintf(out->reason, sizeof out->reason,
             "the answer's 95%% interval is within +-%.3g of it (%.3g): the precision asked, "
             "%.3g, is reached",
             out->width, out->width, a->precision);
  } else if (rc == 0) {
    if (nfree == 0) {
      out->status = ADAPT_EXHAUSTED;
      snprintf(out->reason, sizeof out->reason, "every candidate has been tried");
    } else if (left <= 0) {
      out->status = ADAPT_SPENT;
      snprintf(out->reason, sizeof out->reason, "the compute is spent (%.3g of %.3g FLOPs)", spent,
               a->compute);
    }
    rc = out->fitted ? design_round(a, c, n, state, &f, left, out)
                     : space_filling_round(a, c, n, state, npts, left, err, out);
  }
  fit_result_free(&f);
  return rc;
}

int adaptive_forecast(const spec_adaptive *a, const adaptive_cand *c, size_t n,
                      const adaptive_cand_state *state, const fit_point *pts, int npts, int threads,
                      adaptive_step *path, size_t *k, double *now, char *err, size_t errlen) {
  *k = 0;
  *now = NAN;
  spec_adaptive b = *a;
  b.compute = INFINITY;
  b.precision = 0; /* never reached: the whole path */
  b.round = 0;     /* no round: only the forecast below */
  adaptive_result r;
  int rc = adaptive_decide(&b, c, n, state, pts, npts, 0, threads, &r);
  int fitted = r.fitted;
  double lnq = log(r.answer), lnlo = log(r.lo), lnhi = log(r.hi);
  *now = r.width;
  snprintf(err, errlen, "%s", r.reason);
  adaptive_result_free(&r);
  if (rc)
    return rc;
  if (!fitted)
    return SS_EINVAL;
  fit_result f;
  fit_result_init(&f, "chinchilla");
  fit_options o = {.bootstrap = a->bootstrap, .seed = a->seed, .threads = threads, .keep_draws = 1};
  char e2[256];
  if (fit_chinchilla(pts, npts, &o, &f, e2, sizeof e2) != 0) {
    fit_result_free(&f);
    snprintf(err, errlen, "%s", e2);
    return SS_EINVAL;
  }
  double noise = run_scatter(&f);
  ensemble e;
  rc = ensemble_make(a, &f, c, n, state, &e);
  fit_result_free(&f);
  if (rc)
    return rc;
  adaptive_pick *picks = calloc(e.m ? e.m : 1, sizeof *picks);
  size_t *idx = malloc((e.m ? e.m : 1) * sizeof *idx);
  crit kr = {0};
  if (!picks || !idx ||
      crit_init(&kr, &e, noise * noise, a->criterion == SPEC_CRIT_REWEIGHT, a->seed)) {
    free(picks);
    free(idx);
    ensemble_free(&e);
    return SS_ENOMEM;
  }
  double sd0 = crit_sd(&kr), cost = 0;
  size_t m = greedy(&kr, c, e.m, INFINITY, sd0, *now, 0, picks, idx, &cost);
  crit_free(&kr);
  double total = 0;
  for (size_t i = 0; i < m; i++) {
    total += picks[i].cost;
    double ratio = sd0 > 0 ? picks[i].sd_after / sd0 : 1;
    path[i] =
        (adaptive_step){picks[i].cand, total,
                        rel_width(lnq, lnq - (lnq - lnlo) * ratio, lnq + (lnhi - lnq) * ratio)};
  }
  *k = m;
  free(picks);
  free(idx);
  ensemble_free(&e);
  return 0;
}

static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *triple(const double v[3]) {
  return json_pack("[o,o,o]", num(v[0]), num(v[1]), num(v[2]));
}

static const char *status_name(adaptive_status s) {
  switch (s) {
  case ADAPT_ROUND:
    return "round";
  case ADAPT_REACHED:
    return "reached";
  case ADAPT_SPENT:
    return "spent";
  case ADAPT_EXHAUSTED:
    return "exhausted";
  default:
    return "waiting";
  }
}

json_t *adaptive_round_json(const adaptive_result *r, int round, const plan *p,
                            const adaptive_cand *cands) {
  json_t *runs = json_array();
  for (size_t i = 0; runs && i < r->npicks; i++) {
    const adaptive_pick *k = &r->picks[i];
    const adaptive_cand *c = &cands[k->cand];
    json_t *o = json_pack("{s:s,s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o,s:I}", "config_hash",
                          p->runs[c->run].config_hash, "params", c->params, "tokens", c->tokens,
                          "flops", c->flops, "budget", c->budget, "cost", num(k->cost), "sd_before",
                          num(k->sd_before), "sd_after", num(k->sd_after), "score", num(k->score),
                          "start", (json_int_t)c->start);
    if (!o || json_array_append_new(runs, o)) {
      json_decref(runs);
      return NULL;
    }
  }
  if (!runs)
    return NULL;
  return json_pack(
      "{s:i,s:s,s:b,s:o,s:[o,o],s:o,s:{s:[o,o],s:o},s:o,s:o,s:o,s:i,s:o,s:f,s:f,s:f,s:o,s:o,s:o,"
      "s:s}",
      "round", round, "status", status_name(r->status), "fitted", r->fitted, "answer",
      num(r->answer), "ci95", num(r->lo), num(r->hi), "width", num(r->width), "predicted", "ci95",
      num(r->pred_lo), num(r->pred_hi), "width", num(r->pred_width), "E", triple(r->E), "alpha",
      triple(r->alpha), "beta", triple(r->beta), "points", r->n_points, "noise_sd",
      num(r->noise_sd), "spent", r->spent, "compute", r->compute, "cost", r->cost, "runs", runs,
      "more_flops", num(r->more_flops), "best_width", num(r->best_width), "reason", r->reason);
}

void adaptive_question_text(const spec_adaptive *a, char *out, size_t n) {
  if (a->question == SPEC_Q_LOSS)
    snprintf(out, n, "the loss at N = %.3g, D = %.3g, its 95%% interval within a factor of %.4g",
             a->params, a->tokens, 1 + a->precision);
  else
    snprintf(out, n, "N_opt at C* = %.3g FLOPs (6ND), its 95%% interval within a factor of %.4g",
             a->flops, 1 + a->precision);
}

void adaptive_outcome_free(adaptive_outcome *o) {
  adaptive_result_free(&o->r);
  free(o->doc_json);
  free(o->runs_json);
  *o = (adaptive_outcome){0};
}

static const char *doc_status(adaptive_status s) {
  return s == ADAPT_ROUND ? "running" : status_name(s);
}

/* the failed design's document: {"status": "failed", "reason"} */
static int fail(adaptive_outcome *o, json_t *doc, const char *fmt, const char *what) {
  snprintf(o->reason, sizeof o->reason, fmt, what);
  o->failed = 1;
  json_t *d = doc ? doc : json_object();
  if (!d)
    return SS_ENOMEM;
  json_object_set_new(d, "status", json_string("failed"));
  json_object_set_new(d, "reason", json_string(o->reason));
  if (!json_is_array(json_object_get(d, "rounds")))
    json_object_set_new(d, "rounds", json_array());
  o->doc_json = json_dumps(d, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(d);
  o->runs_json = strdup("[]");
  o->r.status = ADAPT_EXHAUSTED;
  return o->doc_json && o->runs_json ? 0 : SS_ENOMEM;
}

static int cmp_size(const void *x, const void *y) {
  size_t a = *(const size_t *)x, b = *(const size_t *)y;
  return a < b ? -1 : a > b;
}

/* out->runs_json: the round's runs (plan_runs_json objects), those of
 * candidates with a start with "branch_run", "branch_step" and
 * "branch_path" (the run that kept that checkpoint), the others as a subset
 * of the candidates' plan (branches inside the round); every run that
 * trains through branch points keeps those of the free candidates
 * (adaptive_keep_json) */
static int round_runs(adaptive_outcome *out, const plan *cp, const adaptive_cand *c, size_t nc,
                      const adaptive_cand_state *st, json_t *const *kept, const int64_t *kept_run) {
  size_t k = out->r.status == ADAPT_ROUND ? out->r.npicks : 0, a = 0, b = 0;
  size_t *whole = malloc((k ? k : 1) * sizeof *whole), *from = malloc((k ? k : 1) * sizeof *from);
  json_t *all = json_array();
  int rc = whole && from && all ? 0 : SS_ENOMEM;
  for (size_t i = 0; rc == 0 && i < k; i++) {
    size_t ci = out->r.picks[i].cand;
    if (c[ci].start > 0)
      from[b++] = ci;
    else
      whole[a++] = c[ci].run;
  }
  if (rc == 0)
    qsort(whole, a, sizeof *whole, cmp_size);
  plan *sub = rc == 0 ? plan__subset(cp, whole, a) : NULL;
  if (rc == 0 && (!sub || adaptive_keep_steps(sub, cp, c, nc, st)))
    rc = SS_ENOMEM;
  char *text = rc == 0 ? plan_runs_json(sub) : NULL;
  json_t *first = text ? json_loads(text, 0, NULL) : NULL;
  free(text);
  if (rc == 0 && (!first || json_array_extend(all, first)))
    rc = SS_ENOMEM;
  json_decref(first);
  plan_free(sub);
  for (size_t i = 0; rc == 0 && i < b; i++) {
    size_t one = c[from[i]].run;
    plan *p1 = plan__subset(cp, &one, 1);
    char *t1 = p1 ? plan_runs_json(p1) : NULL;
    json_t *a1 = t1 ? json_loads(t1, 0, NULL) : NULL, *r1 = json_array_get(a1, 0);
    free(t1);
    plan_free(p1);
    int nomem = 0;
    char *keep = adaptive_keep_json(c, nc, st, from[i], c[from[i]].start, &nomem);
    json_t *kj = keep ? json_loads(keep, 0, NULL) : NULL;
    free(keep);
    if (!r1 || nomem ||
        json_object_set_new(r1, "index", json_integer((json_int_t)json_array_size(all))) ||
        json_object_set_new(r1, "branch_run", json_integer(kept_run[from[i]])) ||
        json_object_set_new(r1, "branch_step", json_integer(c[from[i]].start)) ||
        json_object_set(r1, "branch_path", kept[from[i]]) ||
        (kj && json_object_set(r1, "keep_steps", kj)) || json_array_append(all, r1))
      rc = SS_ENOMEM;
    json_decref(kj);
    json_decref(a1);
  }
  out->runs_json = rc == 0 ? json_dumps(all, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  out->nruns = k;
  json_decref(all);
  free(whole);
  free(from);
  return rc == 0 && out->runs_json ? 0 : SS_ENOMEM;
}

/* The stored spec planned again (its numbers, all reals as stored, made
 * whole where they are): 0 with *sp and *p, whose plan has candidates; a
 * spec that does not plan fails the design (out, doc consumed) */
static int replan(const char *spec_json, json_t **doc, adaptive_outcome *out, spec **sp, plan **p) {
  json_t *root = json_loads(spec_json, 0, NULL);
  if (!root) {
    json_t *d = *doc;
    *doc = NULL;
    return fail(out, d, "the stored spec is not JSON%s", "");
  }
  sweeps__integral(root);
  char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!text)
    return SS_ENOMEM;
  spec_problems pr = {0};
  int rc = spec_parse(text, "sweep", sp, &pr);
  free(text);
  if (rc == 0)
    rc = plan_spec(*sp, p, &pr);
  if (rc == 0 && !(*p)->candidates)
    rc = SS_EINVAL;
  if (rc == 0) {
    spec_problems_free(&pr);
    return 0;
  }
  char first[900] = "the spec has no adaptive design";
  if (pr.n)
    snprintf(first, sizeof first, "%s: %s", pr.items[0].path, pr.items[0].message);
  spec_problems_free(&pr);
  plan_free(*p);
  spec_free(*sp);
  *p = NULL;
  *sp = NULL;
  if (rc == SS_ENOMEM)
    return rc;
  json_t *d = *doc;
  *doc = NULL;
  return fail(out, d, "the spec could not be planned again: %s", first);
}

/* Each candidate's state: that of the sweep's run with its config (a run
 * tried again after a failure is the same run), else free */
static void candidate_states(const plan *cp, const adaptive_cand *c, size_t nc,
                             const adaptive_run_obs *runs, size_t nruns, adaptive_cand_state *st) {
  for (size_t i = 0; i < nc; i++)
    for (size_t k = 0; k < nruns; k++)
      if (!strcmp(runs[k].config_hash, cp->runs[c[i].run].config_hash)) {
        /* reproductions aside, one run per config */
        st[i] = runs[k].state;
        break;
      }
}

/* Branch points kept by runs trained in earlier rounds: a free candidate
 * of such a run's trajectory starts at the latest of its checkpoints up to
 * the candidate's own branch point (c[i].start, kept[i] its path,
 * kept_run[i] the run); a shorter one decays from there, a longer one goes
 * on */
static void kept_starts(const plan *cp, adaptive_cand *c, size_t nc, const adaptive_cand_state *st,
                        const adaptive_run_obs *runs, size_t nruns, json_t **kept,
                        int64_t *kept_run) {
  for (size_t k = 0; k < nruns; k++) {
    if (runs[k].state != ADAPT_DONE || !runs[k].kept)
      continue;
    size_t t = nc;
    for (size_t i = 0; i < nc && t == nc; i++)
      if (!strcmp(runs[k].config_hash, cp->runs[c[i].run].config_hash))
        t = i;
    json_t *kj = t < nc ? json_loads(runs[k].kept, 0, NULL) : NULL;
    for (size_t i = 0; kj && i < nc; i++) {
      if (st[i] != ADAPT_FREE || c[i].stable <= 0 || c[i].group != c[t].group)
        continue;
      const char *key;
      json_t *path;
      json_object_foreach(kj, key, path) {
        long long s = strtoll(key, NULL, 10);
        if (s < 1 || s > c[i].stable || s <= c[i].start || !json_is_string(path))
          continue;
        c[i].start = s;
        json_decref(kept[i]);
        kept[i] = json_incref(path);
        kept_run[i] = runs[k].id;
      }
    }
    json_decref(kj);
  }
}

/* The design's document at its first decision: the question, and the
 * first round (space-filling) as round 0 (first: room for nc picks). New
 * reference; NULL when out of memory. */
static json_t *first_doc(const spec *sp, const plan *p, const adaptive_cand *c, size_t nc,
                         size_t *first) {
  char q[160];
  adaptive_question_text(&sp->adaptive, q, sizeof q);
  json_t *doc = json_pack("{s:s,s:s,s:f,s:f,s:[]}", "question", q, "kind",
                          sp->adaptive.question == SPEC_Q_LOSS ? "loss" : "n_opt", "precision",
                          sp->adaptive.precision, "compute", sp->adaptive.compute, "rounds");
  size_t k = adaptive_initial(c, nc, sp->adaptive.initial, first);
  adaptive_result r0 = result_empty(sp->adaptive.compute);
  r0.status = ADAPT_ROUND;
  r0.cost = p->adaptive_initial_flops;
  adaptive_pick *pk = calloc(k ? k : 1, sizeof *pk);
  for (size_t i = 0; pk && i < k; i++)
    pk[i] = (adaptive_pick){first[i], NAN, NAN, NAN, NAN};
  r0.picks = pk;
  r0.npicks = pk ? k : 0;
  snprintf(r0.reason, sizeof r0.reason,
           "the first round: %zu runs, space-filling over the budgets up to the middle of the "
           "range",
           k);
  json_t *j0 = pk ? adaptive_round_json(&r0, 0, p->candidates, c) : NULL;
  free(pk);
  if (!doc || !j0 || json_array_append_new(json_object_get(doc, "rounds"), j0)) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* The decision recorded in doc: its round, the status, the compute spent
 * and the answer; out->doc_json the document as text. 0 or SS_ENOMEM. */
static int record_round(json_t *doc, double spent, const plan *cp, const adaptive_cand *c,
                        adaptive_outcome *out) {
  json_t *rounds = json_object_get(doc, "rounds");
  json_t *rec = adaptive_round_json(&out->r, (int)json_array_size(rounds), cp, c);
  if (!rec || json_array_append_new(rounds, rec))
    return SS_ENOMEM;
  json_object_set_new(doc, "status", json_string(doc_status(out->r.status)));
  json_object_set_new(doc, "spent", json_real(spent + out->r.cost));
  if (out->r.fitted)
    json_object_set_new(doc, "answer",
                        json_pack("{s:f,s:[f,f],s:f}", "value", out->r.answer, "ci95", out->r.lo,
                                  out->r.hi, "width", out->r.width));
  out->doc_json = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17));
  return out->doc_json ? 0 : SS_ENOMEM;
}

int adaptive_conclude(const char *spec_json, const char *adaptive_json,
                      const adaptive_run_obs *runs, size_t nruns, const fit_point *pts, int npts,
                      int threads, adaptive_outcome *out) {
  *out = (adaptive_outcome){0};
  /* through jsonb, 1e231 comes back as 232 digits: reals, not integers */
  json_t *doc = adaptive_json ? json_loads(adaptive_json, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
  if (adaptive_json && !json_is_object(doc)) { /* nothing to store over it: said, and left */
    json_decref(doc);
    snprintf(out->reason, sizeof out->reason,
             "its stored design (sweeps.adaptive) is not a "
             "JSON object");
    return SS_EINVAL;
  }
  out->rounds = (int)json_array_size(json_object_get(doc, "rounds"));
  spec *sp = NULL;
  plan *p = NULL;
  int rc = replan(spec_json, &doc, out, &sp, &p);
  if (rc || !p) {
    json_decref(doc);
    return rc;
  }
  out->gpus = sp->gpus;
  out->priority = sp->priority;
  out->max_attempts = sp->max_attempts > 0 ? sp->max_attempts : 3;

  const plan *cp = p->candidates;
  adaptive_cand *c = NULL;
  size_t nc = 0;
  adaptive_cand_state *st = NULL;
  size_t *first = NULL;
  json_t **kept = NULL;
  int64_t *kept_run = NULL;
  rc = adaptive_candidates(cp, &c, &nc);
  if (rc == 0 && (!(st = calloc(nc ? nc : 1, sizeof *st)) ||
                  !(first = malloc((nc ? nc : 1) * sizeof *first)) ||
                  !(kept = calloc(nc ? nc : 1, sizeof *kept)) ||
                  !(kept_run = calloc(nc ? nc : 1, sizeof *kept_run))))
    rc = SS_ENOMEM;
  if (rc == 0) {
    candidate_states(cp, c, nc, runs, nruns, st);
    kept_starts(cp, c, nc, st, runs, nruns, kept, kept_run);
  }
  double spent =
      out->rounds ? json_number_value(json_object_get(doc, "spent")) : p->adaptive_initial_flops;
  if (rc == 0)
    rc = adaptive_decide(&sp->adaptive, c, nc, st, pts, npts, spent, threads, &out->r);
  if (rc == 0 && out->r.status != ADAPT_WAITING) {
    /* the first decision records the first round too */
    if (!doc && !(doc = first_doc(sp, p, c, nc, first)))
      rc = SS_ENOMEM;
    if (rc == 0)
      rc = record_round(doc, spent, cp, c, out);
    /* the round's runs: those that start from a kept branch point alone,
     * the others with branches inside the round */
    if (rc == 0)
      rc = round_runs(out, cp, c, nc, st, kept, kept_run);
  }
  for (size_t i = 0; kept && i < nc; i++)
    json_decref(kept[i]);
  free(kept);
  free(kept_run);
  json_decref(doc);
  free(c);
  free(st);
  free(first);
  plan_free(p);
  spec_free(sp);
  return rc;
}

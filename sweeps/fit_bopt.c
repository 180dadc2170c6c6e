/* Optimal batch size and learning rate against compute (SCIENCE.md section
 * 3, after DeepSeek LLM 2024): per compute budget, the runs whose loss is
 * within a small tolerance of that budget's best loss are "near-optimal";
 * their batch sizes and learning rates (geometric means) are B_opt(C) and
 * eta_opt(C); power laws in C are fitted across budgets, and B_opt also
 * against the near-optimal runs' token count D (Zhang et al. 2024 and
 * Bergsma et al. 2025 find the optimal batch follows D rather than N).
 *
 * Budgets: points sorted by C; a point joins the budget of the previous one
 * when its C is within BUDGET_RTOL of that budget's first C (planned runs
 * of one budget differ by the rounding of D to whole batches). Each power
 * law is ordinary least squares in log-log space; intervals from the
 * bootstrap over runs, which redoes everything (budgets, near-optimal sets,
 * the regressions), so the choice of near-optimal runs is part of the
 * uncertainty. */
#include <gsl/gsl_fit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

#define BUDGET_RTOL 0.05
#define DEFAULT_NEAR_RTOL 0.01
/* a power law's two parameters plus one residual degree of freedom */
#define MIN_BUDGETS 3

/* The flat vector of fitted values: the three laws' (k, beta). */
enum { Q_KB, Q_BB, Q_KE, Q_BE, Q_KD, Q_BD, Q_FIXED };

typedef struct budget {
  double lc;             /* mean ln C */
  double b, lr, d, best; /* geometric means over the near-optimal runs; best loss */
  int n, near;           /* runs, near-optimal runs */
} budget;

typedef struct problem {
  const fit_point *pts;
  double near_rtol;
  int has_lr;
} problem;

static int cmp_flops(const void *a, const void *b, void *ctx) {
  const fit_point *p = ctx;
  double x = p[*(const int *)a].flops, y = p[*(const int *)b].flops;
  return (x > y) - (x < y);
}

/* Groups idx[0..m) by budget into bud (at most m); returns how many. */
static int find_budgets(const problem *pb, const int *idx, int m, budget *bud) {
  const fit_point *p = pb->pts;
  int *ord = malloc(sizeof(int) * (m ? m : 1));
  memcpy(ord, idx, sizeof(int) * m);
  qsort_r(ord, m, sizeof(int), cmp_flops, (void *)p);
  int nb = 0;
  for (int i = 0; i < m;) {
    int j = i;
    double c0 = p[ord[i]].flops;
    while (j < m && p[ord[j]].flops <= c0 * (1 + BUDGET_RTOL))
      j++;
    budget *b = &bud[nb++];
    memset(b, 0, sizeof *b);
    b->n = j - i;
    b->best = INFINITY;
    for (int k = i; k < j; k++) {
      b->lc += log(p[ord[k]].flops) / b->n;
      if (p[ord[k]].loss < b->best)
        b->best = p[ord[k]].loss;
    }
    double sb = 0, sl = 0, sd = 0;
    for (int k = i; k < j; k++) {
      const fit_point *q = &p[ord[k]];
      if (q->loss > b->best * (1 + pb->near_rtol))
        continue;
      b->near++;
      sb += log(q->batch_size);
      sd += log(q->tokens);
      sl += pb->has_lr ? log(q->lr) : 0;
    }
    b->b = exp(sb / b->near);
    b->d = exp(sd / b->near);
    b->lr = pb->has_lr ? exp(sl / b->near) : NAN;
    i = j;
  }
  free(ord);
  return nb;
}

/* y = ln k + beta x over the budgets with at least 2 runs (a budget of one
 * run says nothing about which batch size is best); NAN when fewer than
 * MIN_BUDGETS. */
static void powerlaw(const budget *bud, int nb, int what, double *k, double *beta) {
  double x[FIT_MAX_BUDGETS], y[FIT_MAX_BUDGETS];
  int m = 0;
  for (int i = 0; i < nb && m < FIT_MAX_BUDGETS; i++) {
    if (bud[i].n < 2)
      continue;
    x[m] = what == 2 ? log(bud[i].d) : bud[i].lc;
    y[m] = log(what == 1 ? bud[i].lr : bud[i].b);
    m++;
  }
  *k = *beta = NAN;
  if (m < MIN_BUDGETS)
    return;
  double c0, c1, cov00, cov01, cov11, ss;
  gsl_fit_linear(x, 1, y, 1, m, &c0, &c1, &cov00, &cov01, &cov11, &ss);
  *k = exp(c0);
  *beta = c1;
}

/* Everything for the points idx[0..m) into q[0..Q_FIXED). */
static int fit_all(const problem *pb, const int *idx, int m, double *q, budget *bud) {
  int nb = find_budgets(pb, idx, m, bud);
  powerlaw(bud, nb, 0, &q[Q_KB], &q[Q_BB]);
  powerlaw(bud, nb, 1, &q[Q_KE], &q[Q_BE]);
  powerlaw(bud, nb, 2, &q[Q_KD], &q[Q_BD]);
  if (!pb->has_lr)
    q[Q_KE] = q[Q_BE] = NAN;
  return nb;
}

static void boot_one(void *ctx, const int *idx, int m, double *row) {
  budget *bud = malloc(sizeof(budget) * (m ? m : 1));
  if (bud)
    fit_all(ctx, idx, m, row, bud);
  else
    for (int k = 0; k < Q_FIXED; k++)
      row[k] = NAN;
  free(bud);
}

/* flops, batch_size, tokens and loss on every point, positive; *has_lr:
 * every point has a learning rate too */
static int check_points(const fit_point *pts, int n, int *has_lr, char *err, size_t errlen) {
  *has_lr = 1;
  for (int i = 0; i < n; i++) {
    const fit_point *p = &pts[i];
    static const char *const what[4] = {"flops", "batch_size", "tokens", "loss"};
    double v[4] = {p->flops, p->batch_size, p->tokens, p->loss};
    for (int k = 0; k < 4; k++)
      if (!(v[k] > 0) || !isfinite(v[k]))
        return fit__fail(err, errlen, "bopt: point %d: %s = %g, expected a positive number", i + 1,
                         what[k], v[k]);
    if (!(p->lr > 0) || !isfinite(p->lr))
      *has_lr = 0;
  }
  return 0;
}

/* The parameters into slot (k_eta, beta_eta only with has_lr) */
static void add_params(fit_result *out, const double *q, int has_lr, fit_param **slot) {
  slot[Q_KB] = fit_result_add_param(out, "k_B", q[Q_KB]);
  slot[Q_BB] = fit_result_add_param(out, "beta_B", q[Q_BB]);
  if (has_lr) {
    slot[Q_KE] = fit_result_add_param(out, "k_eta", q[Q_KE]);
    slot[Q_BE] = fit_result_add_param(out, "beta_eta", q[Q_BE]);
  }
  slot[Q_KD] = fit_result_add_param(out, "k_BD", q[Q_KD]);
  slot[Q_BD] = fit_result_add_param(out, "beta_BD", q[Q_BD]);
}

/* out's budgets, a warning for each whose runs are all near its best, and
 * the objective: the squared residuals of ln B_opt(C) over the usable ones */
static void list_budgets(fit_result *out, const budget *bud, int nb, const double *q,
                         double near_rtol) {
  double ss = 0;
  for (int i = 0; i < nb; i++) {
    fit_budget *b = &out->budgets[out->nbudgets++];
    memset(b, 0, sizeof *b);
    b->flops = exp(bud[i].lc);
    b->loss = bud[i].best;
    b->n_points = bud[i].n;
    b->usable = bud[i].n >= 2;
    b->b_opt = bud[i].b;
    b->lr_opt = bud[i].lr;
    b->d_opt = bud[i].d;
    b->n_opt = NAN;
    b->n_near = bud[i].near;
    if (b->usable) {
      double r = log(q[Q_KB]) + q[Q_BB] * bud[i].lc - log(bud[i].b);
      ss += r * r;
    }
    if (bud[i].n >= 2 && bud[i].near == bud[i].n)
      fit_result_warn(out,
                      "budget C = %.4g: all %d runs are within %g%% of the best loss; the "
                      "batch sizes tried do not bracket an optimum",
                      exp(bud[i].lc), bud[i].n, 100 * near_rtol);
  }
  out->objective = ss;
}

/* The bootstrap over runs: each parameter's stderr and percentiles */
static void bootstrap(const fit_point *pts, int n, const fit_options *opt, problem *pb,
                      fit_param *const *slot, fit_result *out) {
  double *boot = fit__bootstrap(pts, n, opt, Q_FIXED, boot_one, pb);
  if (!boot) {
    fit_result_warn(out, "out of memory: no bootstrap intervals");
    return;
  }
  for (int k = 0; k < Q_FIXED; k++)
    if (slot[k])
      fit__boot_column(boot, opt->bootstrap, Q_FIXED, k, slot[k]);
  free(boot);
}

int fit_bopt(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
             size_t errlen) {
  fit_result_init(out, "bopt");
  opt = fit__options(opt);
  if (n < 4)
    return fit__fail(err, errlen,
                     "bopt: %d points; the law needs at least 4 (its 2 parameters plus 2), "
                     "runs at %d or more compute budgets",
                     n, MIN_BUDGETS);
  int has_lr, rc = check_points(pts, n, &has_lr, err, errlen);
  if (rc)
    return rc;
  int *all = malloc(sizeof(int) * n);
  budget *bud = malloc(sizeof(budget) * n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  problem pb = {pts, opt->near_best_rtol > 0 ? opt->near_best_rtol : DEFAULT_NEAR_RTOL, has_lr};
  double q[Q_FIXED];
  int nb = fit_all(&pb, all, n, q, bud);
  int usable = 0;
  for (int i = 0; i < nb; i++)
    usable += bud[i].n >= 2;
  if (usable < MIN_BUDGETS) {
    free(all);
    free(bud);
    return fit__fail(err, errlen,
                     "bopt: %d compute budget%s with 2 or more runs (budgets: points whose C "
                     "agree within %g%%); the power laws need %d",
                     usable, usable == 1 ? "" : "s", 100 * BUDGET_RTOL, MIN_BUDGETS);
  }
  if (nb > FIT_MAX_BUDGETS) {
    fit_result_warn(out, "%d compute budgets: the first %d are listed", nb, FIT_MAX_BUDGETS);
    nb = FIT_MAX_BUDGETS;
  }

  out->n_points = n;
  out->converged = 1;
  fit_param *slot[Q_FIXED] = {0};
  add_params(out, q, has_lr, slot);
  list_budgets(out, bud, nb, q, pb.near_rtol);
  if (!has_lr)
    fit_result_warn(out, "no learning rate on every point (column lr): eta_opt(C) not fitted");
  if (usable < 4)
    fit_result_warn(out, "%d usable budgets: the exponents rest on %d degree%s of freedom", usable,
                    usable - 2, usable == 3 ? "" : "s");
  if (opt->bootstrap > 0)
    bootstrap(pts, n, opt, &pb, slot, out);
  free(all);
  free(bud);
  return 0;
}

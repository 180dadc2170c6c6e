/* The fitting library: scaling laws from (N, D, C, B, S, loss) points
 * (SCIENCE.md section 2 and 3). Used by `scalesweep fit` and, later, by the
 * scheduler when runs finish.
 *
 * Every law fills one fit_result: named parameters with standard errors and
 * 95% intervals (bootstrap where the law supports it), derived quantities,
 * the objective at the optimum, whether the optimiser converged, residuals
 * and warnings. fit_result_to_json() renders the object that `fit --json`
 * prints and the API serves.
 *
 * Errors: 0 or a negative SS_E* code (common/err.h) with a message in err. */
#ifndef SS_SWEEPS_FIT_H
#define SS_SWEEPS_FIT_H

#include <stddef.h>
#include <stdint.h>

/* One observation. Fields a law does not use may be NAN. group identifies
 * the run a point comes from (several checkpoints of one run share it), so
 * the bootstrap resamples whole runs; -1 means each point is its own run. */
typedef struct fit_point {
  double params;     /* N: non-embedding parameters */
  double tokens;     /* D */
  double flops;      /* C */
  double loss;       /* L, nats per token */
  double batch_size; /* B, tokens per step (or sequences; the caller says) */
  double steps;      /* S: optimizer steps to reach the target loss */
  double lr;         /* learning rate (B_opt / eta_opt fits) */
  int group;
} fit_point;

#define FIT_MAX_PARAMS 24
#define FIT_MAX_WARNINGS 16
#define FIT_MAX_BUDGETS 64

typedef struct fit_param {
  char name[24];
  double value;
  double stderr_;      /* bootstrap standard deviation (NAN when not computed) */
  double ci_lo, ci_hi; /* 2.5 and 97.5 percentiles (NAN when not computed) */
} fit_param;

typedef struct fit_budget { /* isoflop and bopt: one compute budget */
  double flops, n_opt, d_opt, loss;
  int n_points;
  int usable; /* 0: no interior minimum (c2 <= 0 or vertex outside the range); bopt: < 2 runs */
  double c2, c1, c0;
  double b_opt, lr_opt; /* bopt: geometric means over the near-optimal runs (d_opt too) */
  int n_near;           /* bopt: runs within near_best_rtol of the budget's best loss */
  /* isoflop: the 2.5 and 97.5 percentiles of n_opt over the bootstrap (NAN
   * without one); with replicates (runs at one N differing only by seed)
   * the parabola is fitted to the n_cells per-N mean losses and seed_sd is
   * the pooled within-N SD of L over the budget's replicated sizes (NAN
   * when none has 2 runs) */
  double n_opt_lo, n_opt_hi;
  int n_cells;
  double seed_sd;
} fit_budget;

/* Run-to-run (seed) noise, from replicates: points at the same (N, D)
 * (isoflop: the same N and C) are one cell, and the sample variance of
 * ln L within each cell of 2 or more points is pooled over those cells,
 *   s^2 = sum_cells sum_i (ln L_i - mean_cell)^2 / df,
 *   df = sum_cells (n_cell - 1).
 * sd = s (an SD of ln L, i.e. a relative SD of L); lo, hi: its 95% interval
 * from df s^2 / sigma^2 ~ chi-square(df), for Gaussian noise. cells = 0
 * (and sd, lo, hi NAN) when no cell is replicated. */
typedef struct fit_seeds {
  int cells; /* cells with 2 or more points */
  int runs;  /* points in those cells */
  int df;
  double sd, lo, hi;
} fit_seeds;

/* chinchilla: the compute-optimal frontier L(N_opt(C), D_opt(C)) at C, with
 * the bootstrap's 2.5 and 97.5 percentiles of it (NAN without a bootstrap):
 * a band that keeps the parameters' correlation, which intervals per
 * parameter cannot. */
#define FIT_FRONTIER_POINTS 16
typedef struct fit_frontier {
  double flops, loss, lo, hi;
} fit_frontier;

typedef struct fit_options {
  int bootstrap;         /* resamples (0: none) */
  uint64_t seed;         /* bootstrap resampling seed */
  int threads;           /* <= 0: all cores */
  double target_flops;   /* chinchilla: also predict N_opt, D_opt and loss here (0: none) */
  int fit_irreducible;   /* kaplan: include E (1) or fix E = 0 (0) */
  int full_grid;         /* chinchilla: BFGS from all 4,500 starts, no screen (reference;
                          * implies FIT_CHIN_BFGS) */
  int chin_method;       /* chinchilla: FIT_CHIN_VARPRO (0, the default) or FIT_CHIN_BFGS */
  double near_best_rtol; /* bopt: near-optimal = loss <= best (1 + this); 0: 0.01 */
  double target_steps;   /* curve: also predict the loss at this optimizer step (0: none) */
  int curve_noise;       /* curve: the bootstrap's noise model, FIT_CURVE_* (0: AR(1)) */
  int boot_by_run;       /* chinchilla, isoflop: resample runs (points) independently even
                          * when seeds replicate cells (the naive scheme, kept for
                          * comparison); 0: by cell when there are replicates */
  int keep_draws;        /* chinchilla: keep every bootstrap resample's fitted surface in
                          * fit_result.draws (what `scalesweep next` predicts from) */
} fit_options;

/* fit_chinchilla's minimisers (fit_options.chin_method; see fit_chinchilla) */
enum { FIT_CHIN_VARPRO = 0, FIT_CHIN_BFGS = 1 };

/* fit_curve's bootstrap noise models (fit_options.curve_noise; see fit_curve) */
enum { FIT_CURVE_AR1 = 0, FIT_CURVE_BLOCK = 1, FIT_CURVE_IID = 2 };

typedef struct fit_result {
  char law[16]; /* "chinchilla", "kaplan", "isoflop", "batch", "bopt", "curve" */
  int n_points;
  int nparams;
  fit_param params[FIT_MAX_PARAMS];
  int nderived;
  fit_param derived[FIT_MAX_PARAMS];
  double objective;
  int converged;
  int nwarnings;
  char warnings[FIT_MAX_WARNINGS][256];
  int nbudgets;
  fit_budget budgets[FIT_MAX_BUDGETS];
  double *residuals; /* n_points entries (log-loss residuals for chinchilla); owned */
  int nfrontier;     /* chinchilla: FIT_FRONTIER_POINTS, log-spaced from half the
                      * smallest C of the points to 10 times the largest (or to
                      * target_flops when that is larger) */
  fit_frontier frontier[FIT_FRONTIER_POINTS];
  fit_seeds seeds; /* chinchilla, isoflop: seed noise from replicates */
  /* chinchilla with opt->keep_draws and a bootstrap: ndraws rows of
   * FIT_CHIN_DRAW values, one per resample, in resample order: ln A, ln B,
   * ln E, alpha, beta (L = e^lnA N^-alpha + e^lnB D^-beta + e^lnE); owned */
  double *draws;
  int ndraws;
} fit_result;

#define FIT_CHIN_DRAW 5

void fit_result_init(fit_result *r, const char *law);
void fit_result_free(fit_result *r);
/* Adds a parameter or derived quantity (value only; intervals NAN). */
fit_param *fit_result_add_param(fit_result *r, const char *name, double value);
fit_param *fit_result_add_derived(fit_result *r, const char *name, double value);
void fit_result_warn(fit_result *r, const char *fmt, ...);
/* The parameter or derived quantity named name (parameters first), or NULL. */
const fit_param *fit_result_get(const fit_result *r, const char *name);
/* The same in a fit's JSON object (fit_result_to_json, as stored and served):
 * its "params" or "derived" member named name, or NULL. */
struct json_t;
struct json_t *fit_json_get(struct json_t *fit, const char *name);
/* How many budgets an isoflop (or bopt) fit object lists; *usable gets how
 * many of them it used (an interior minimum; bopt: 2 or more runs). */
int fit_json_budgets(struct json_t *fit, int *usable);

/* Chinchilla Approach 3: L = E + A/N^alpha + B/D^beta, Huber (delta 1e-3)
 * on log loss, summed; grid of 4,500 starts (SCIENCE.md), BFGS from the best;
 * bootstrap over runs. params: E, A, B, alpha, beta; derived: a, b, G, and at
 * target_flops N_opt, D_opt, loss_at_target. residuals: ln L_hat - ln L.
 *
 * Seeds: runs (groups) whose last point has the same (N, D) are replicates
 * of one cell. out->seeds gets the pooled seed noise (fit_seeds). When a
 * cell has 2 or more runs and opt->boot_by_run is 0, the bootstrap is by
 * cell (a cluster bootstrap): cells with replacement, each drawn cell whole
 * with all its runs, so a cell's replicates are never counted as
 * independent designs; the run-to-run noise enters through the spread of
 * the cells' means, and noise that a cell's seeds share (a config that is
 * simply better or worse than the law) widens the intervals, as the by-run
 * bootstrap does not. Drawing runs again within a drawn cell (two-stage)
 * would count the within-cell variance about twice (Davison and Hinkley
 * 1997, section 3.8). Without replicated cells it is the bootstrap over
 * runs, bit for bit. */
int fit_chinchilla(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
                   size_t errlen);

/* Closed-form compute-optimal allocation for C = 6 N D (SCIENCE.md):
 * G = (alpha A / (beta B))^(1/(alpha+beta)), a = beta/(alpha+beta),
 * b = alpha/(alpha+beta), N_opt = G (C/6)^a, D_opt = (C/6)^b / G. */
void fit_chinchilla_allocation(double A, double B, double alpha, double beta, double C, double *G,
                               double *a, double *b, double *n_opt, double *d_opt);

/* Kaplan single-variable laws L(X) = E + (X_c / X)^alpha_X for X in N, D, C
 * (each fitted when the points carry that column); params per variable:
 * N_c, alpha_N, E_N (when fit_irreducible), and the same for D and C. */
int fit_kaplan(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
               size_t errlen);

/* Chinchilla Approach 2: per compute budget a parabola in ln N, its vertex
 * N*, D* = C / (6 N*); then ln N* and ln D* regressed on ln C. Replicates
 * (points of one budget at the same N) are fitted by their mean loss and
 * resampled by cell, like fit_chinchilla's cells. params: a, b
 * (exponents) and their prefactors; budgets listed; off-centre, drifting
 * and narrow sampling and budgets without an interior minimum reported as
 * warnings (fit_isoflop_vertex_offset says what the first two cost). */
int fit_isoflop(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
                size_t errlen);

/* Approach 2's vertex on the Chinchilla surface, noise-free. Along an
 * IsoFLOP C = 6 N D, with z = ln N - ln N_opt(C), the law is
 *   L = E + (A / (beta N_opt^alpha)) (beta e^(-alpha z) + alpha e^(beta z)),
 * a constant plus a positive factor times a shape that depends on alpha and
 * beta only. A least-squares parabola's vertex does not move under either,
 * so a budget sampled at offsets z[0..k) from its optimum has its vertex at
 * ln N_opt(C) + v, v = this function's value, whatever E, A, B and C. Hence
 * the same offsets at every budget leave a exact and n_coef off by e^v, and
 * offsets that change with C bias a by the least-squares slope of v against
 * ln C. For small symmetric offsets v ~ (alpha - beta) sum z^4 / (6 sum z^2).
 * NAN when k is not in 3..64, an exponent is not positive, or the parabola
 * has no minimum. */
double fit_isoflop_vertex_offset(double alpha, double beta, const double *z, int k);

/* Critical batch size from a batch ladder: S = S_min + E_min / B, weighted
 * least squares (weights 1/S^2). params: S_min, E_min, B_crit = E_min/S_min. */
int fit_batch(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen);

/* Critical batch size by branching (Merrill et al. 2025; docs/sweeps.md
 * "Critical batch size by branching"): each point is one rung, a run that
 * started from a trunk's checkpoint at D = tokens (the trunk's tokens there)
 * with its own batch_size, and took steps optimizer steps of its own from
 * there to reach loss (the target at that branch point, what the trunk
 * reached a little later). Points group by tokens (one ladder per branch
 * point, at least 4 rungs): S = S_min + E_min / B by weighted least squares
 * (fit_batch's), B_crit = E_min / S_min, in derived "B_crit(D=..)" with its
 * t-interval (delta method) and "L(D=..)", the target. Across the usable
 * branch points params k_D, gamma_D (B_crit = k_D D^gamma_D) and B_star,
 * alpha_B (B_crit = B_star / L^(1/alpha_B)), ordinary least squares in
 * log-log space, t-intervals from 3 points on. opt is not used (no
 * bootstrap). converged: at least one branch point gave B_crit. */
int fit_bcrit(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen);

/* Optimal batch size and learning rate against compute (SCIENCE.md section 3,
 * DeepSeek LLM 2024): budgets are points whose C agree within 5%; per budget
 * the runs within near_best_rtol of its best loss give B_opt(C) and
 * eta_opt(C) (geometric means); across budgets with 2 or more runs (at
 * least 3 of them) B_opt = k_B C^beta_B, eta_opt = k_eta C^beta_eta (when
 * every point has lr) and B_opt = k_BD D^beta_BD (D: the near-optimal runs'
 * geometric mean tokens), least squares in log-log space, intervals from the
 * bootstrap over runs. budgets lists flops, b_opt, lr_opt, d_opt, loss (the
 * best), n_points, n_near. B is in the unit of the points' batch_size
 * (tokens for a comparison with the published 0.292 C^0.3271). */
int fit_bopt(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
             size_t errlen);

/* Learning-curve extrapolation (Kaplan et al. 2020, L(N, S) at fixed N):
 * L(S) = L_inf + (S_c / S)^alpha_S fitted to one run's curve, to predict
 * the loss at a later step. Points: .steps = optimizer step S (> 0), .loss
 * = loss at S (validation evaluations preferred; training-loss points are
 * accepted but noisier); other fields ignored (NAN). At least 5 points
 * (3 parameters plus two) with 3 distinct steps, else SS_EINVAL; points of
 * several runs (group) are fitted as one curve, with a warning.
 *
 * Method: least squares on ln L (a loss's noise is roughly relative; the
 * form ln L = LSE(ln L_inf, alpha_S (ln S_c - ln S)) with ln L_inf and
 * ln alpha_S as coordinates keeps L_inf >= 0, S_c > 0, alpha_S > 0 without
 * bounds), GSL's BFGS2 with the analytic gradient from a grid of 6 starts
 * (L_inf at fractions of the smallest loss, k and alpha_S from the straight
 * line through ln(L - L_inf)); the lowest objective wins. objective: the
 * sum of squared ln L residuals; residuals: ln L_hat - ln L per point.
 * params: L_inf, S_c, alpha_S. opt->target_steps > 0: derived
 * loss_at_target, the predicted loss at that step.
 *
 * Intervals (opt->bootstrap > 0 resamples): stderr and 2.5/97.5
 * percentiles of every parameter and loss_at_target over resamples
 * y* = ln L_hat + noise, each refitted from the full-data optimum (the grid
 * only when that does not converge). A curve's noise is autocorrelated
 * (successive evaluations share most of the weights), and the fitted law
 * absorbs its slow part: on a short curve the residuals are about half as
 * large as the noise and nearly uncorrelated, so resampling them gives
 * dishonestly narrow intervals. opt->curve_noise:
 *  FIT_CURVE_AR1 (default): noise drawn from an AR(1) model in ln L whose
 *   SD and lag-1 correlation (derived noise_sd, noise_rho; rho in
 *   [0, 0.99]) match the residuals' variance and lag-1 covariance through
 *   the fit's hat matrix, i.e. corrected for what the fit absorbs.
 *  FIT_CURVE_BLOCK: moving-block bootstrap of the residuals (centred,
 *   scaled by sqrt(n / (n - 3))), blocks of ceil(n^(1/3)) consecutive ones
 *   at uniform starts, concatenated and cut to n.
 *  FIT_CURVE_IID: the same with blocks of 1 (i.i.d. residuals).
 * Measured (15 evaluations, 1% noise with rho 0.8, predicting 3.3x beyond
 * the last step): 95% intervals cover about 79% (AR1), 55% (block), 47%
 * (iid): with so few effectively independent points even AR1 is short of
 * nominal. Seeded as fit__bootstrap: deterministic per opt->seed, whatever
 * opt->threads. All schemes assume evaluations about evenly spaced.
 *
 * Warnings: not converged; alpha_S at its bound (outside 0.01 .. 10);
 * L_inf at its bound 0; noise_rho at its bound 0.99; a non-monotone curve
 * (a window mean of ln L rising more than 0.02 above an earlier one: a
 * spike, divergence, overfitting); target_steps more than 10x the last
 * observed step (far extrapolation).
 *
 * A learning-rate schedule bends the late curve (warmup, then cosine decay
 * to the end steepens the descent near the end), which the law does not
 * model: the prediction holds for the schedule's shape only roughly, and
 * from the early part of a decaying schedule it tends to be pessimistic.
 * The caller should pass points from after warmup. */
int fit_curve(const fit_point *pts, int n, const fit_options *opt, fit_result *out, char *err,
              size_t errlen);

/* The scheduler's check of a running run: does its predicted final loss
 * (fit_curve's loss_at_target with its 95% interval [pred_lo, pred_hi])
 * lie far off the sweep's fitted surface at the run's N and D (surface,
 * with standard deviation surface_sd, e.g. the chinchilla bootstrap's)?
 * The interval becomes a standard deviation as if normal,
 * sd_pred = (pred_hi - pred_lo) / 3.92, the two are taken as independent,
 *   *z = (predicted - surface) / sqrt(sd_pred^2 + surface_sd^2),
 * and the run is flagged (returns 1) when |*z| > 3: about 3 false flags in
 * 1,000 checks of runs that follow the surface. Otherwise 0. When it
 * cannot judge (an input not finite, a negative width or SD, or both SDs
 * 0) *z = NAN and it returns 0: without an uncertainty there is no scale by
 * which a difference is far. z may be NULL. */
int fit_curve_flag(double predicted, double pred_lo, double pred_hi, double surface,
                   double surface_sd, double *z);

/* Extrapolation check: refits `law` without the points of the largest
 * compute budget and predicts the held-out points' losses. Adds derived
 * values holdout_flops, holdout_pred_loss, holdout_loss, holdout_rel_err. */
int fit_extrapolation_check(const fit_point *pts, int n, const fit_options *opt, fit_result *out,
                            char *err, size_t errlen);

/* The JSON object `fit --json` prints (a malloc'd string): law, n_points,
 * params, stderr, ci95 ([lo, hi]), derived, objective, converged, warnings,
 * and for isoflop budgets. */
char *fit_result_to_json(const fit_result *r);

/* Reads a CSV with a header naming columns among params, tokens, flops,
 * loss, batch_size, steps, lr, run (any order; others ignored); when tokens
 * is missing but flops and params are present, tokens = flops / (6 params).
 * Errors name FILE:line:column and what was expected. *pts is malloc'd. */
int fit_read_csv(const char *path, fit_point **pts, int *n, char *err, size_t errlen);

#endif

/* Internals shared by the fits and the planner (not exported outside
 * sweeps/). */
#ifndef SS_SWEEPS_INTERNAL_H
#define SS_SWEEPS_INTERNAL_H

#include <gsl/gsl_multimin.h>
#include <gsl/gsl_rng.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "sweeps/fit.h"

/* Sets first[i] to the index of the first of the n strings equal to s[i]
 * (i itself for a first occurrence): a CSV's points by run name, a plan's
 * runs by config hash. Sorts (string, index) pairs, as comparing every pair
 * of many strings costs too much (a fuzzing timeout). 0 or SS_ENOMEM. */
int sweeps__first_equal(const char *const *s, size_t n, size_t *first);

/* A value and where it was, to sort by value with ties in position order,
 * so that what follows never depends on qsort (not stable) or on which
 * thread filled the array; NaN sorts last. */
typedef struct sweeps__ranked {
  double x;
  size_t i;
} sweeps__ranked;

/* qsort's comparison for sweeps__ranked. */
int sweeps__by_rank(const void *a, const void *b);

/* Resampling units: whole runs (group >= 0), else single points. */
typedef struct fit__groups {
  int ng, maxsize;
  int *start; /* ng + 1 */
  int *idx;   /* n point indices ordered by group */
} fit__groups;

/* Orders the points by run (group), single points last. */
void fit__groups_build(const fit_point *p, int n, fit__groups *g);
/* One bootstrap resample of whole runs: point indices into out (at most n);
 * returns how many. */
int fit__groups_draw(const fit__groups *g, gsl_rng *rng, int *out);
/* Replicated cells (fit_seeds.c): runs grouped by the cell of their last
 * point, key1 and key2 (N and D for chinchilla) equal to 1e-9 relative. */
typedef struct fit__cells {
  int nc, maxsize;
  int replicated; /* cells with 2 or more runs */
  int *start;     /* nc + 1 */
  int *run;       /* g->ng run indices (into g->start) ordered by cell */
} fit__cells;

/* Builds c over g's runs of p; 0 or SS_ENOMEM. */
int fit__cells_build(const fit_point *p, const fit__groups *g, fit__cells *c);
void fit__cells_free(fit__cells *c);
/* One resample by cell: nc cells with replacement, each drawn cell with
 * all its runs (a cluster bootstrap); point indices into out (at most the largest cell's points x
 * runs, see fit__cells_capacity); returns how many. */
int fit__cells_draw(const fit__groups *g, const fit__cells *c, gsl_rng *rng, int *out);
/* The size out must have for fit__cells_draw. */
size_t fit__cells_capacity(const fit__groups *g, const fit__cells *c);
/* The keys of a cell: N, D, batch size, learning rate (fit__cells_build). */
#define FIT__CELL_KEYS 4
/* Pools the within-cell variance of y over the n points, a cell being
 * the points whose nkeys keys (keys[j][i], at most FIT__CELL_KEYS) are
 * equal (1e-9 relative; NAN equals NAN); fills s (fit.h). 0, SS_ENOMEM or
 * SS_EINVAL (s then says no cells). */
int fit__seed_pool(const double *const *keys, int nkeys, const double *y, int n, fit_seeds *s);

/* The length of a fit's or a design's warning (fit.h, next.h), cut there. */
#define FIT__WARNING_LEN 256
/* Appends a warning, formatted, to warnings (*n of at most max held);
 * one more than max is dropped. */
void fit__vwarn(char (*warnings)[FIT__WARNING_LEN], int *n, int max, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* v[0..n) as a JSON array of numbers, null where not finite (JSON has no
 * NaN). */
struct json_t *sweeps__json_reals(const double *v, size_t n);

/* splitmix64: independent seeds for the resamples from one seed. */
uint64_t fit__mix64(uint64_t x);
/* SD and 2.5/97.5 percentiles of column k of an nb x nq table of resamples
 * (finite values only) into p; returns how many were finite. */
int fit__boot_column(const double *boot, int nb, int nq, int k, fit_param *p);
/* fit__boot_column for every quantity k < nq whose slot[k] is not NULL;
 * returns the fewest finite resamples over them (nb when there is none), for
 * the "N of M resamples could not be fitted" warning. */
int fit__boot_columns(const double *boot, int nb, int nq, fit_param *const *slot);
/* Ends a bootstrap of nb resamples: boot (the nb x nq table from
 * fit__bootstrap or fit__bootstrap_rng, NULL when it ran out of memory) goes
 * through fit__boot_columns into slot, and out is warned of an out-of-memory
 * or of resamples that could not be fitted (that warning ending in `what`,
 * "" for none). Frees boot. */
void fit__boot_finish(fit_result *out, double *boot, int nb, int nq, fit_param *const *slot,
                      const char *what);
/* The bootstrap by run: opt->bootstrap resamples of whole runs, each drawn
 * with a generator seeded from opt->seed and its index (so the result does
 * not depend on the thread count), refitted by fit1 into its row of nq
 * values (NAN where it cannot). Returns the malloc'd nb x nq table, or
 * NULL when out of memory. */
double *fit__bootstrap(const fit_point *pts, int n, const fit_options *opt, int nq,
                       void (*fit1)(void *ctx, const int *idx, int m, double *row), void *ctx);

/* The same seeding for any resampling scheme: nb resamples run in
 * parallel, the b-th with an MT19937 generator seeded from
 * fit__mix64(seed + b) exactly as in fit__bootstrap (so the result does not
 * depend on the thread count); draw1 draws its resample from rng and
 * refits it into row (nq values, NAN on entry). threads <= 0: all cores.
 * Returns the malloc'd nb x nq table, or NULL when out of memory. */
double *fit__bootstrap_rng(int nb, int nq, uint64_t seed, int threads,
                           void (*draw1)(void *ctx, gsl_rng *rng, double *row), void *ctx);

/* opt, or the defaults (all zero) where opt is NULL, as fit.h promises. */
const fit_options *fit__options(const fit_options *opt);

/* Writes a printf-style message to err and returns SS_EINVAL. */
int fit__fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- Chinchilla Approach 3 (fit_chinchilla.c; its objective and minimiser
 * in fit_chinchilla_opt.c), in centred coordinates
 * t = (a - alpha cN, b - beta cD, e, alpha, beta) ---- */
enum { FIT__CHIN_NT = 5 };

/* The data the objective sees: m points with weights. */
typedef struct fit__chin_objective {
  int m;
  double *x1, *x2, *y, *w; /* ln N - cN, ln D - cD, ln L, weight */
  double wsum;
  /* cache of the last evaluation: GSL's line search asks for f and then the
   * gradient at the same point, and both come from one pass */
  double cx[FIT__CHIN_NT], cf, cg[FIT__CHIN_NT];
  int cvalid;
} fit__chin_objective;

/* Where one minimisation ended. */
typedef struct fit__chin_run {
  double t[FIT__CHIN_NT];
  double f;
  double gnorm;
  int converged;
  int iters;
} fit__chin_run;

/* The summed Huber objective f and its gradient g at t. */
double fit__chin_eval(fit__chin_objective *o, const double *t, double *g);

/* f at t, with its gradient g and its Hessian H (full, symmetric): per
 * point, with p the softmax weights, J = dr/dt and m_k = du_k/dt,
 * d2r/dt2 = sum_k p_k m_k m_k^T - J J^T, and Huber adds h'' J J^T (h'' is
 * 1 inside delta, 0 outside). One pass over the points. */
double fit__chin_eval_hessian(const fit__chin_objective *o, const double *t, double *g,
                              double H[FIT__CHIN_NT][FIT__CHIN_NT]);

/* Minimises from t0 with s (a BFGS2 minimiser of FIT__CHIN_NT variables):
 * up to plain_iters BFGS2 iterations in centred coordinates, then up to
 * polish rounds of BFGS2 whitened by the Hessian at the current point.
 * converged is set only when |grad f| (centred coordinates) fell below
 * gtol. */
void fit__chin_minimise(fit__chin_objective *o, gsl_multimin_fdfminimizer *s, const double *t0,
                        int plain_iters, int polish, double gtol, fit__chin_run *out);

/* ---- Variable projection (fit_chinchilla_vp.c): for fixed (alpha, beta)
 * the prefactors (A, B, E) are solved for, and the search is over the
 * profiled objective P(alpha, beta) = min over (A, B, E) of f. ---- */

/* The global search: P on a coarse (alpha, beta) grid with threads
 * threads, profiled Newton from the best few basins of the grid; the best
 * into *best (centred coordinates; converged as in fit__chin_minimise, for
 * gtol). 0, SS_ENOMEM, or SS_ENUMERIC when P was not finite anywhere. */
int fit__chin_vp_search(const fit__chin_objective *o, int threads, double gtol,
                        fit__chin_run *best);

/* The local refinement alone, from t0's (alpha, beta) (its prefactors
 * only a first guess for the inner solve): profiled Newton until
 * |grad f| < gstop (<= gtol; 0: never) or no further decrease (predicted
 * or found); converged when |grad f| < gtol. The bootstrap's refit
 * (gstop = gtol). */
void fit__chin_vp_local(const fit__chin_objective *o, const double *t0, double gtol, double gstop,
                        fit__chin_run *out);

#endif

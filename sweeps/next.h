/* The next compute budget, designed from a sweep's fits (`scalesweep next`,
 * GET and POST /api/sweeps/{id}/next; docs/sweeps.md "The next budget").
 *
 * From the sweep's points, the Chinchilla surface is fitted with its
 * bootstrap at the new budget C, keeping every resample's surface
 * (fit_options.keep_draws). The budget's runs are an IsoFLOP at C: the
 * sweep's own spec with method "isoflop", "flops": [C] and a "centre" on
 * the fitted N_opt(C) = coef C^a, whose span covers N_opt's 95% interval
 * (NEXT_SPAN_REACH times its further end, within [NEXT_SPAN_MIN,
 * NEXT_SPAN_MAX]), so the budget's IsoFLOP minimum is inside its sizes
 * even where N_opt is uncertain. Batch size and learning rate come from the
 * sweep's fitted rules (the bopt law: B_opt = k_B C^beta_B, eta_opt =
 * k_eta C^beta_eta) when that law used 3 or more budgets, the sweep's runs
 * tried 2 or more values of it, the spec's base does not fix it, and its
 * constants are ones a spec accepts; else from the spec's own rules. A sweep
 * that is a grid of WSD branches (an isoflop over listed sizes, schedule
 * wsd) trains every size at the batch size and learning rate of its run at
 * the smallest budget, whatever the budget; its next budget joins the grid
 * the same way: each size at C and at the sweep's smallest budget (a branch
 * of the run at C, which shares its batch and rate), so that the runs at C
 * train as the runs the law was fitted to did. That spec goes
 * through the planner like any submitted one (shapes, exact N, D, memory,
 * max_hours), so what is proposed is what would run.
 *
 * Each run's predicted final loss is the fitted surface at its exact
 * (N, D); its 95% prediction interval joins the bootstrap's interval of the
 * surface there (the 2.5 and 97.5 percentiles of the resamples' ln L) with
 * a run's own scatter about the surface, in quadrature on ln L: the pooled
 * seed SD where seeds replicate a cell, else the fit's residual RMS (which
 * holds seed noise and misfit). The budget's compute-optimal loss (at N_opt,
 * D_opt) is given the same way. */
#ifndef SS_SWEEPS_NEXT_H
#define SS_SWEEPS_NEXT_H

#include <jansson.h>
#include <stdint.h>

#include "sweeps/fit.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

#define NEXT_POINTS 5       /* model sizes at the budget unless asked */
#define NEXT_MAX_POINTS 15  /* and at most */
#define NEXT_BOOTSTRAP 400  /* resamples of the Chinchilla fit unless asked */
#define NEXT_SPAN_REACH 1.5 /* the span: this times N_opt's interval reach */
#define NEXT_SPAN_MIN 2.0   /* sizes over at least [N_opt / 2, 2 N_opt] */
#define NEXT_SPAN_MAX 8.0   /* and at most [N_opt / 8, 8 N_opt] */
#define NEXT_FAR 10.0       /* C beyond this times the largest budget: warned */
#define NEXT_MAX_WARNINGS 8

typedef struct next_options {
  double flops;  /* the new budget C, > 0 */
  int points;    /* model sizes (3..NEXT_MAX_POINTS; 0: NEXT_POINTS) */
  int bootstrap; /* resamples (0: NEXT_BOOTSTRAP) */
  uint64_t seed; /* of the bootstrap */
  int threads;   /* <= 0: all cores */
} next_options;

typedef struct next_prediction {
  double loss, lo, hi; /* predicted final loss and its 95% prediction interval */
} next_prediction;

typedef struct next_design {
  double flops;
  double n_opt, n_lo, n_hi, d_opt; /* N_opt(C) with its 95% interval; D_opt */
  next_prediction opt;             /* the loss at (N_opt, D_opt) */
  double centre_coef, centre_exponent, span;
  int points; /* model sizes at the budget (the plan has seeds times as many runs) */
  double noise_sd;                     /* a run's scatter about the surface, SD of ln L */
  const char *noise_from;              /* "seeds" or "residuals" (static) */
  double largest_budget;               /* the sweep's largest run compute (6 N D) */
  int batch_fitted, lr_fitted;         /* batch size, lr from the sweep's bopt law */
  double grid_flops; /* a grid of WSD branches: its smallest budget, where each size also
                      * gets a run (whose batch and lr its run at C shares); else 0 */
  double k_b, beta_b, k_eta, beta_eta; /* those rules (NAN: not used) */
  char *spec_json;                     /* the budget's spec (canonical text), owned */
  int gpus, priority, max_attempts;    /* its resources, as a submission stores them */
  plan *plan;                          /* its runs, owned */
  next_prediction *runs;               /* one per plan run, owned */
  fit_result fit;                      /* the Chinchilla fit it came from (its draws) */
  int nwarnings;
  char warnings[NEXT_MAX_WARNINGS][256];
} next_design;

/* Designs the budget o->flops for the sweep whose canonical spec is
 * spec_json, from its loss laws' points (pts, n: what the scheduler's
 * Chinchilla refit uses) and its latest bopt fit (its JSON object, or NULL).
 * Returns 0 with *out filled (next_design_free releases it), or SS_EINVAL /
 * SS_ENOMEM with the reasons in pr, each under a path of the request
 * ("$.flops", "$.points") or of the budget's spec, and *out empty. */
int next_design_make(const char *spec_json, const fit_point *pts, int n, json_t *bopt,
                     const next_options *o, next_design *out, spec_problems *pr);

/* The design as the API answers it: {"flops", "n_opt": {"value", "ci95"},
 * "d_opt", "loss_at_n_opt": {"value", "ci95"}, "centre": {"coef",
 * "exponent", "span", "points"}, "noise": {"sd", "from"}, "rules": {"batch": {"from", "k_B",
 * "beta_B"}, "lr": {"from", "k_eta", "beta_eta"}}, "fit": {"n_points", "alpha", "beta", "E",
 * "bootstrap"}, "largest_budget", "runs": [{"index", "n_layer", "d_model", "n_head", "params",
 * "nonembedding_params", "tokens", "batch_size", "lr", "steps", "flops", "config_hash",
 * "predicted_loss", "ci95"}], "spec", "warnings"}. malloc'd; NULL when out of memory. */
char *next_design_json(const next_design *d);

/* The plan's runs as store_sweeps_extend takes them: plan_runs_json's
 * objects, each with "designed": {"flops", "loss", "ci95", "noise_sd",
 * "n_opt", "fit_points"} (what was predicted when the run was designed).
 * malloc'd; NULL when out of memory. */
char *next_runs_json(const next_design *d);

void next_design_free(next_design *d);

#endif

/* An adaptive design (docs/sweeps.md "An adaptive design"; spec.h
 * spec_adaptive): the study states its question (N_opt at a compute C*, or
 * the loss at an (N, D)), the precision it wants and the compute it may
 * train, and trains rounds of runs chosen from its isoflop plan (the
 * candidates) instead of all of them.
 *
 * The first round is space-filling: the candidates of the lower budgets
 * (up to the geometric middle of the sampled range), chosen one by one, each
 * the farthest in (ln N, ln C), scaled to the unit square, from those
 * chosen already; the first is the middle size at the smallest budget. Ties go to
 * the lower plan index.
 *
 * Every later round: the Chinchilla surface is fitted with its bootstrap
 * (spec.adaptive.bootstrap resamples, keeping each resample's surface), the
 * question's answer q is evaluated on every resample (ln N_opt(C*) or
 * ln L(N, D)), and so is each free candidate's predicted ln L, y_j. The
 * criterion: the question's variance after observing y_j with a run's
 * scatter s^2, by Gaussian conditioning on the resamples' joint covariance
 * (an ensemble form of the linearised Bayesian update):
 *
 *   Var(q | y_j) = Var(q) - Cov(q, y_j)^2 / (Var(y_j) + s^2)
 *
 * Each column is clipped to its 2.5 and 97.5 percentiles first (a few
 * resamples that wander to E = 0 or alpha = 20 would otherwise own the
 * covariance). The round is chosen greedily: the candidate with the largest
 * reduction of SD(q) per FLOP it would train is taken, the covariance is
 * conditioned on it (a rank-one update of the whole matrix), and so on,
 * until the round holds spec.adaptive.round runs or nothing more fits the
 * compute left. A candidate's FLOPs: its whole compute, or only its decay
 * when a longer run of its trajectory (a WSD trunk's group) is in the same
 * round; a candidate longer than those already taken becomes their trunk
 * and costs its compute less what the former trunk no longer trains. s is
 * the fit's residual RMS of ln L (seed noise and misfit; at least
 * ADAPTIVE_MIN_NOISE), or the pooled seed SD when larger.
 *
 * Why this and not simulated outcomes refitted by bootstrap: simulating
 * needs candidates x outcomes x resamples refits (36 x 20 x 200 = 144,000
 * Chinchilla fits a round, about an hour here); the conditioning costs one
 * bootstrap (the one the fits make anyway, about a second) and M^2 per
 * pick over M candidates (microseconds). The update is linear in y: it can
 * promise less or more than a refit delivers, so each round records the
 * interval it predicted and the next round the interval the refit found.
 *
 * It stops when the answer's 95% interval (the resamples' 2.5 and 97.5
 * percentiles) is within the precision p on both sides of the answer,
 * as a factor: inside [answer / (1 + p), answer (1 + p)] (REACHED), when the compute is spent or no
 * free candidate fits what is left (SPENT), or when every candidate has been tried (EXHAUSTED).
 * Then the same greedy conditioning, over every free candidate without the round's size or the
 * compute's limit, predicts what more compute would buy: the FLOPs after which the predicted
 * interval meets the precision, or the width the candidates can reach at best.
 *
 * Deterministic: the same points, spec and seed give the same round. */
#ifndef SS_SWEEPS_ADAPTIVE_H
#define SS_SWEEPS_ADAPTIVE_H

#include <jansson.h>
#include <stddef.h>

#include "sweeps/fit.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

#define ADAPTIVE_MIN_NOISE 0.005 /* a run's scatter about the surface, SD of ln L, at least */
#define ADAPTIVE_MIN_POINTS 7    /* runs the fit needs before the criterion */

/* A candidate: one isoflop run of the plan. */
typedef struct adaptive_cand {
  size_t run;                   /* its index in the candidate plan */
  double params, tokens, flops; /* N (non-embedding), D, C (the plan's count) */
  double budget;                /* the isoflop budget it was planned at */
  size_t group;                 /* its trajectory: the plan index of its group's longest run */
  double decay;                 /* the share of flops a branch of it trains (1: cannot branch) */
  int64_t stable;               /* wsd: its steps before the decay, its branch point (0: none) */
  double step_tokens;           /* tokens per step (batch size x seq_len) */
  int64_t start; /* a run the sweep trained in an earlier round kept a checkpoint of its
                  * trajectory at this step, at most its own branch point: it starts there
                  * (0: from scratch) */
} adaptive_cand;

/* The isoflop runs of a plan as candidates: *out malloc'd (n of them), 0,
 * or SS_ENOMEM. */
int adaptive_candidates(const plan *p, adaptive_cand **out, size_t *n);

/* The FLOPs a set of candidates trains as one round (each group: its
 * longest whole, the others their decay; one with a start what it trains
 * from there, and it is no trunk for the others). */
double adaptive_cost(const adaptive_cand *c, const size_t *pick, size_t k);

/* The first round (space-filling; above): up to `initial` candidate
 * indices into pick (room for initial), the count returned. */
size_t adaptive_initial(const adaptive_cand *c, size_t n, int initial, size_t *pick);

typedef enum adaptive_cand_state {
  ADAPT_FREE = 0, /* not in the sweep */
  ADAPT_ACTIVE,   /* queued or running */
  ADAPT_DONE,     /* succeeded */
  ADAPT_FAILED    /* every attempt failed, or cancelled: not chosen again */
} adaptive_cand_state;

/* Sets keep_steps on the runs of sub (a subset of cands, the candidates'
 * plan) that train their stable phase (from scratch: branch_of < 0): the
 * branch points of the free candidates of their trajectory (st NULL: every
 * one) that they pass, their own included when a longer one is free, so
 * that a later round may start there: a shorter run decays from one, a
 * longer one goes on from it. 0 or SS_ENOMEM. */
int adaptive_keep_steps(plan *sub, const plan *cands, const adaptive_cand *c, size_t n,
                        const adaptive_cand_state *st);

/* The same steps for candidate me starting at step start, as a JSON array
 * (malloc'd; NULL: none, or out of memory with *nomem set). */
char *adaptive_keep_json(const adaptive_cand *c, size_t n, const adaptive_cand_state *st, size_t me,
                         int64_t start, int *nomem);

typedef enum adaptive_status {
  ADAPT_WAITING = 0, /* a run of the sweep is still queued or running */
  ADAPT_ROUND,       /* a round was chosen */
  ADAPT_REACHED,     /* the precision is reached */
  ADAPT_SPENT,       /* the compute is spent (or what is left buys no candidate) */
  ADAPT_EXHAUSTED,   /* every candidate has been tried */
} adaptive_status;

typedef struct adaptive_pick {
  size_t cand;      /* index into the candidates */
  double cost;      /* the FLOPs it added to the round when taken */
  double sd_before; /* SD(q) before it was taken (ensemble, ln units) */
  double sd_after;  /* and after */
  double score;     /* (sd_before - sd_after) / cost, per PFLOP */
} adaptive_pick;

typedef struct adaptive_result {
  adaptive_status status;
  int fitted;              /* the law was fitted (else the round is space-filling) */
  double answer, lo, hi;   /* the question's answer and its 95% interval (fitted) */
  double width;            /* max(hi / answer, answer / lo) - 1: the interval lies
                            * within [answer / (1 + width), answer (1 + width)] */
  double pred_lo, pred_hi; /* the interval predicted after the round (ROUND) */
  double pred_width;
  double E[3], alpha[3], beta[3]; /* value, 2.5%, 97.5% */
  int n_points, n_draws;
  double noise_sd;
  double spent, compute; /* FLOPs trained before this round, allowed */
  adaptive_pick *picks;  /* the round (owned), npicks of them */
  size_t npicks;
  double cost;       /* its FLOPs */
  double more_flops; /* SPENT / EXHAUSTED: the FLOPs the design predicts would meet the
                      * precision (NAN: the free candidates cannot) */
  double best_width; /* the width predicted after every free candidate */
  char reason[512];  /* what happened, in words */
} adaptive_result;

/* Designs the next round. cands (n) with their states in the sweep; pts
 * (npts): the succeeded candidates' points (fit_point: params, tokens,
 * flops, loss); spent: the FLOPs the sweep has trained. 0 with *out filled
 * (adaptive_result_free), SS_ENOMEM, or SS_EINVAL (a spec without
 * "adaptive"). */
int adaptive_decide(const spec_adaptive *a, const adaptive_cand *cands, size_t n,
                    const adaptive_cand_state *state, const fit_point *pts, int npts, double spent,
                    int threads, adaptive_result *out);

void adaptive_result_free(adaptive_result *r);

/* The round's record as the sweep stores it (sweeps.adaptive's "rounds"
 * entries) and the API shows it: {"round", "status", "fitted", "answer",
 * "ci95", "width", "predicted": {"ci95", "width"}, "E", "alpha", "beta" (each
 * [value, lo, hi]), "points", "noise_sd", "spent", "compute", "cost",
 * "runs": [{"config_hash", "params", "tokens", "flops", "budget", "cost",
 * "sd_before", "sd_after", "score"}], "more_flops", "best_width",
 * "reason"}. New reference; NULL when out of memory. */
json_t *adaptive_round_json(const adaptive_result *r, int round, const plan *p,
                            const adaptive_cand *cands);

/* The question in words: "N_opt at C* = 1e+13 FLOPs (6ND), its 95% interval
 * within a factor of 1.25". */
void adaptive_question_text(const spec_adaptive *a, char *out, size_t n);

/* What more compute would buy, step by step: the greedy conditioning of a
 * round (adaptive_decide) over every free candidate with no limit of size
 * or compute, from the fit of pts. path[i] after the (i+1)-th pick: its
 * candidate, the FLOPs so far, the width the conditioning predicts. *k
 * gets the count (at most n); *now the width of the fit's own interval.
 * 0, SS_ENOMEM, or SS_EINVAL when the law cannot be fitted (err). */
typedef struct adaptive_step {
  size_t cand;
  double flops, width;
} adaptive_step;
int adaptive_forecast(const spec_adaptive *a, const adaptive_cand *cands, size_t n,
                      const adaptive_cand_state *state, const fit_point *pts, int npts, int threads,
                      adaptive_step *path, size_t *k, double *now, char *err, size_t errlen);

/* A run of the sweep as the scheduler has it. */
typedef struct adaptive_run_obs {
  int64_t id;
  const char *config_hash;
  adaptive_cand_state state;
  const char *kept; /* runs.kept: {"STEP": "PATH"} of its branch points, or NULL */
} adaptive_run_obs;

/* The scheduler's step once every run of an adaptive sweep has ended. */
typedef struct adaptive_outcome {
  adaptive_result r; /* the decision (WAITING: nothing to store) */
  int rounds;        /* rounds the sweep held before (what the store checks) */
  int failed;        /* the design could not run (reason): the sweep fails */
  char reason[1024];
  char *doc_json;  /* the new sweeps.adaptive (owned; NULL while WAITING) */
  char *runs_json; /* the round's runs, plan_runs_json ("[]" when it stopped) */
  size_t nruns;
  int gpus, priority, max_attempts; /* the spec's, as a submission stores them */
} adaptive_outcome;

/* From the sweep's canonical spec (as stored), its sweeps.adaptive (NULL
 * before the first decision), its isoflop runs and the points of those
 * that succeeded: plans the spec again (the same candidates, the same
 * first round), decides (adaptive_decide, with the compute spent: the
 * first round's and every recorded round's cost) and, for a round, its
 * runs (a subset of the candidates' plan: branches inside the round). The
 * first decision also records the first round. sweeps.adaptive:
 * {"question", "kind", "precision", "compute", "status", "spent", "answer":
 * {"value", "ci95", "width"}, "rounds": [adaptive_round_json ...]}. 0 with
 * *out filled (adaptive_outcome_free), SS_ENOMEM, or SS_EINVAL when the
 * stored design does not parse (out->reason). */
int adaptive_conclude(const char *spec_json, const char *adaptive_json,
                      const adaptive_run_obs *runs, size_t nruns, const fit_point *pts, int npts,
                      int threads, adaptive_outcome *out);

void adaptive_outcome_free(adaptive_outcome *o);

#endif

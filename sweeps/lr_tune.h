/* Tuning the learning rate on a muP proxy (docs/sweeps.md, "Tuning the
 * learning rate on a muP proxy"; spec.h spec_lr_tune).
 *
 * Under muP (Yang et al. 2022, "Tensor Programs V") the best learning rate
 * does not move with the width, so a spec with "lr_tune" first trains a
 * proxy of width base.model.base_width at each of the grid's rates (the
 * planner's part "lr_tune", plan_draft.c), and once every one of those runs
 * has ended the scheduler chooses the rate with the lowest final validation
 * loss (lr_tune_decide) and plans the study at it: the same spec without
 * "lr_tune", base.train.lr that rate (lr_tune_plan_study), through the same
 * planner as a submission, so the study is what `scalesweep plan` showed at
 * its placeholder rate, the rate apart.
 *
 * The decision: per rate of the grid, the mean final validation loss of
 * its tune runs that succeeded (one per seed); the rate with the lowest
 * mean wins, the smaller rate on a tie. A rate whose runs all failed (a
 * diverged run fails: the trainer stops at a non-finite loss) or were
 * cancelled has no loss and cannot win. It waits while any tune run is
 * queued or running (a failed attempt that will be tried again is queued),
 * and decides nothing when fewer than SPEC_LR_TUNE_MIN_RATES rates have a
 * loss (undecided, with the reason). A best rate at either end of the grid
 * is flagged (LR_TUNE_EDGE_WARNING): the best rate may lie beyond it. */
#ifndef SS_SWEEPS_LR_TUNE_H
#define SS_SWEEPS_LR_TUNE_H

#include <jansson.h>
#include <stddef.h>

#include "sweeps/plan.h"
#include "sweeps/spec.h"

#define LR_TUNE_EDGE_WARNING "best lr at the grid's edge; widen it"

/* The rate the study is planned at before the tune has chosen one, for
 * `scalesweep plan`'s time and compute (which do not depend on it): the
 * grid's middle rate (the lower of the two middle ones for an even count);
 * NAN for an empty grid or out of memory. */
double lr_tune_placeholder(const spec_values *lr);

/* The study's spec: root (a spec's JSON; a stored, canonical one too)
 * without "lr_tune", with base.train.lr = lr, whole numbers as integers (a
 * stored spec's numbers are all reals, and the planner reads sizes and
 * counts from integers only), and without max_hours when drop_max_hours.
 * New reference; NULL when out of memory. */
json_t *lr_tune_study_root(const json_t *root, double lr, int drop_max_hours);

/* Plans the study of the spec root at rate lr (lr_tune_study_root, then
 * spec_parse and plan_spec): 0 with *sp and *out set (the caller frees
 * both), else SS_EINVAL or SS_ENOMEM with the problems in pr (under the
 * paths of root, which the study's spec keeps) and both NULL. */
int lr_tune_plan_study(const json_t *root, double lr, int drop_max_hours, spec **sp, plan **out,
                       spec_problems *pr);

/* One tune run as the scheduler has it. */
typedef enum lr_tune_run_state {
  LR_TUNE_ACTIVE,    /* queued or running (a failed attempt to be tried again is queued) */
  LR_TUNE_SUCCEEDED, /* ended with its final validation loss */
  LR_TUNE_FAILED,    /* every attempt failed */
  LR_TUNE_CANCELLED
} lr_tune_run_state;

typedef struct lr_tune_obs {
  double lr; /* its config's train.lr */
  lr_tune_run_state state;
  double loss; /* final validation loss (succeeded) */
} lr_tune_obs;

/* One rate of the grid. */
typedef struct lr_tune_rate {
  double lr;
  double loss; /* mean final validation loss of its succeeded runs (NAN: none) */
  int runs, succeeded, failed, cancelled, active;
} lr_tune_rate;

typedef enum lr_tune_state {
  LR_TUNE_WAITING,   /* a tune run is still queued or running */
  LR_TUNE_DECIDED,   /* lr is the best rate */
  LR_TUNE_UNDECIDED, /* every run ended, but too few rates have a loss: reason */
} lr_tune_state;

typedef struct lr_tune_decision {
  lr_tune_state state;
  double lr;           /* the chosen rate (DECIDED), else NAN */
  int chosen;          /* its index in rates (-1: none) */
  int edge;            /* -1: the grid's smallest rate, 1: its largest, 0: inside (or none) */
  int with_loss;       /* rates with a loss */
  lr_tune_rate *rates; /* the grid's rates in ascending order (owned), nrates of them */
  size_t nrates;
  size_t unmatched; /* observations at no rate of the grid (ignored) */
  char reason[512]; /* WAITING and UNDECIDED: why; DECIDED: "" */
} lr_tune_decision;

/* Decides from the grid (n rates, in any order, distinct) and the tune's
 * runs. 0 with *out filled (lr_tune_decision_free releases it), or
 * SS_EINVAL (an empty grid) / SS_ENOMEM with *out empty. A run matches a
 * rate within 1e-9 relative (the rate went through the config's text). */
int lr_tune_decide(const double *grid, size_t n, const lr_tune_obs *obs, size_t nobs,
                   lr_tune_decision *out);

void lr_tune_decision_free(lr_tune_decision *d);

/* The decision as the sweep stores it (sweeps.lr_tune) and the API shows
 * it: {"status": "decided" | "undecided" | "waiting", "lr" (null unless
 * decided), "at_edge": "low" | "high" | null, "warnings": [...], "rates":
 * [{"lr", "loss", "runs", "succeeded", "failed", "cancelled", "chosen"}],
 * "reason" (null when decided)}. New reference; NULL when out of memory. */
json_t *lr_tune_decision_json(const lr_tune_decision *d);

/* The scheduler's step once a sweep's tune runs may all have ended: the
 * decision and, when it decides, the study planned at the chosen rate. */
typedef struct lr_tune_outcome {
  lr_tune_decision d;  /* WAITING: nothing to store yet */
  int failed;          /* decided, but the study could not be planned (reason) */
  char reason[1024];   /* failed: the first problem and the count */
  char *decision_json; /* what sweeps.lr_tune stores (owned; NULL while WAITING) */
  char *runs_json;     /* the study's runs, plan_runs_json ("[]" unless decided) */
  size_t study_runs;
  int gpus, priority, max_attempts; /* the study's, as a submission stores them */
} lr_tune_outcome;

/* From the sweep's canonical spec (as stored) and its tune runs: decides
 * (lr_tune_decide over the spec's grid) and plans the study at the chosen
 * rate (lr_tune_plan_study, without max_hours: the submission checked the
 * time, which the rate does not change). proxy (borrowed, may be NULL): the
 * proxy's shape and D, copied into the decision. The decision's JSON is
 * lr_tune_decision_json's with "proxy", "study_runs" and, when the study
 * could not be planned, "status": "failed" and the reason. 0 with *out
 * filled (lr_tune_outcome_free releases it); SS_EINVAL when the spec has
 * no lr tune or does not parse (the reason in out->reason), SS_ENOMEM. */
int lr_tune_conclude(const char *spec_json, const lr_tune_obs *obs, size_t nobs,
                     const json_t *proxy, lr_tune_outcome *out);

void lr_tune_outcome_free(lr_tune_outcome *o);

#endif

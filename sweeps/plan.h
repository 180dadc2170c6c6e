/* Planning: a validated spec -> the list of runs it asks for (docs/design.md#sweep-specs,
 * docs/sweeps.md "The plan").
 *
 * Each planned run is base merged with the planned values (shape, tokens,
 * batch size, learning rate, seed, backend, world_size, threads) and resolved
 * through the run config library the trainer uses (rcfg_parse ->
 * rcfg_to_json), so a planned config is exactly what `scalesweep train`
 * runs, and its config_hash (rcfg_hash) is the SHA-256 of that canonical
 * text. Where the spec chooses no checkpoint.every_tokens, the planner sets
 * about ten checkpoints per run (whole steps) before hashing; the
 * checkpoint directory is not in the config (the worker passes it to the
 * trainer as --checkpoint-dir). Planning is
 * deterministic: the same spec gives the same runs, in the same order
 * (smallest compute first), with the same hashes, on any machine (threads is
 * always set, never left to the planning machine's core count).
 *
 * Counting (SCIENCE.md section 1): flops = flops_per_token * tokens, where
 * tokens is what the trainer trains (a whole number of batches: planned D is
 * rounded to the nearest multiple of batch_size * seq_len); flops_6nd =
 * 6 * nonembedding_params * tokens. est_seconds adds the evaluation passes'
 * forward FLOPs and divides by the spec's throughput_flops.
 *
 * Who decides each value of a planned config (one owner each; a spec's
 * own value, in $.base or $.runs[i], always wins and reaches the config
 * through runcfg's parse unchanged):
 *   model shape (n_layer, d_model, n_head)  plan_draft.c plan_shape (the
 *                                  shape rule); the lr tune's proxy: plan__lr_tune
 *   train.batch_size               plan_draft.c plan_train / plan__explicit
 *                                  (rule_batch); a WSD group's: plan_branch.c share
 *   train.micro_batch_size         plan_memory.c: plan__micro_batch (the spec's
 *                                  cap at a planned batch) and plan__fit_memory
 *                                  (lowered to fit); otherwise runcfg's default
 *                                  batch_size / world_size
 *   gradient accumulation          not a key: the trainer's batch_size /
 *                                  (micro_batch_size x world_size)
 *   train.lr                       plan_draft.c rule_lr (and the branched
 *                                  ladder's sqrt(B / B0) scaling)
 *   train.tokens, hence steps      plan_draft.c plan_train (D rounded to whole
 *                                  batches); steps = tokens / (batch x seq_len)
 *                                  wherever it is needed (plan__fill, trainer)
 *   train.schedule, decay_frac     the spec; the branched ladder sets
 *                                  "constant"; runcfg's default "cosine", 0.2
 *   train.warmup_tokens            runcfg's default (5% of tokens); the
 *                                  branched ladder's shared one; a WSD group's
 *                                  defaulted ones: plan_branch.c share
 *   train.seed                     plan_draft.c put_seed
 *   eval.every_tokens              runcfg's default (tokens / 10); the
 *                                  branched ladder's (branch tokens / 8)
 *   checkpoint.every_tokens        plan.c checkpoint_every (about ten per run)
 *   backend, world_size, threads   plan_draft.c plan__put_resources
 * Which runs share a WSD trunk follows from runcfg's schema (rcfg_schema,
 * rcfg_trajectory_key), not from a list here.
 *
 * Ownership: a plan owns everything in it; plan_free releases it. */
#ifndef SS_SWEEPS_PLAN_H
#define SS_SWEEPS_PLAN_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "runcfg/runcfg.h"
#include "sweeps/spec.h"

/* Host threads of a GPU run (always set so the config, and its hash, do not
 * depend on the machine that planned it). */
#define PLAN_GPU_HOST_THREADS 4
/* Runs with fewer optimizer steps than this get a warning. */
#define PLAN_FEW_STEPS 100

#define PLAN_BATCH_RULE_NAME "deepseek_bopt_pow2_min_steps"
#define PLAN_LR_RULE_NAME "deepseek_eta_opt_sqrt_batch_clamped"

typedef struct plan_run {
  int index;        /* position in the plan (smallest compute first) */
  const char *part; /* "grid", "isoflop", "batch", "bcrit", "runs", "lr_tune" (static) */
  /* the resolved run config, decided once (plan.c resolve, then the WSD
   * group's shared values: plan_branch.c) and only then written as text,
   * once: config is rcfg_to_json(cfg), config_hash the SHA-256 of that
   * text (owned, both) */
  rcfg *cfg;
  char *config;
  char config_hash[65];
  int n_layer, d_model, n_head, seq_len, vocab_size;
  int family, parametrization, base_width; /* the config's model (runcfg.h) */
  int64_t params, nonembedding_params;
  double target_params; /* N asked for; 0 when the shape was given */
  int64_t tokens;       /* D trained: steps * batch_size * seq_len */
  int64_t steps;
  int batch_size; /* sequences */
  double lr;
  uint64_t seed;
  double flops_per_token, flops, flops_6nd, est_seconds;
  double budget; /* isoflop: the budget C (else 0) */
  int batch_from_rule, lr_from_rule;
  double rule_compute; /* C the rules were evaluated at */
  double b_opt_tokens; /* B_opt(C) before rounding and the step floor */
  double *target_loss; /* batch ladder: the target losses (owned) */
  size_t n_target_loss;
  /* WSD branches (docs/sweeps.md): the index of the longer run whose
   * checkpoint after branch_step steps this run starts from (-1: none; then
   * branch_step is 0); a trunk counts its branch points. flops is still the
   * run's whole compute, what the fits see; est_seconds only what it trains. */
  int branch_of;
  int64_t branch_step;
  int n_branch_points;
  /* a branched batch ladder's (part "bcrit"): a rung's branch point in
   * the trunk's tokens (0: the trunk, or not such a run) */
  int64_t bcrit_at;
  int warmup_given; /* the spec set train.warmup_tokens (else the default, 5% of D) */
  /* wsd: the run whose rule-chosen batch size and lr (rule_compute,
   * b_opt_tokens) this one shares, the smallest of its group (-1: its own) */
  int rules_from;
  /* an adaptive design's run that trains whole: the steps its trainer keeps
   * a checkpoint at for branches a later round may add (a JSON array, owned;
   * NULL: none) */
  char *keep_steps;
} plan_run;

typedef struct plan {
  plan_run *runs;
  size_t n;
  char spec_digest[65];
  char name[160];
  spec_method method;
  int has_ladder;
  spec_batch_rule batch_rule;
  spec_lr_rule lr_rule;
  double aspect_ratio;
  int head_size;
  double throughput_flops;
  int parallel_runs;
  double max_hours;
  double total_flops, total_seconds; /* sums over runs */
  double wall_seconds;               /* total_seconds / parallel_runs */
  /* WSD branches: how many runs start from a trunk's checkpoint, how many
   * trunks they have, and the training FLOPs they do not repeat (total_flops
   * counts every run whole, as if trained alone) */
  size_t n_branches, n_trunks;
  double branch_flops_saved;
  /* of those, a branched batch ladder's rungs and trunks, and what they saved */
  size_t n_rungs, n_rung_trunks;
  double rung_flops_saved;
  char **warnings; /* owned, n_warnings of them */
  size_t n_warnings;
  /* a spec with "lr_tune" (sweeps/lr_tune.h): runs are the tune's (part
   * "lr_tune", on the proxy); the study follows at the rate the tune
   * chooses, and is planned here at study_lr (lr_tune_placeholder) for its
   * time and compute, which the totals above include (tune_flops and
   * tune_seconds are the tune's alone) */
  struct plan *study; /* owned; NULL without lr_tune */
  double study_lr;
  double tune_flops, tune_seconds;
  /* a spec with "adaptive" (sweeps/adaptive.h): runs are the first round
   * (and any batch ladder); candidates is the whole isoflop plan the
   * rounds choose from (owned; NULL without "adaptive"); adaptive_compute
   * the FLOPs the study may train, adaptive_initial_flops the first
   * round's (its branches counted by their decay) */
  struct plan *candidates;
  double adaptive_compute, adaptive_initial_flops, adaptive_grid_flops;
  char adaptive_question[160]; /* adaptive_question_text */
} plan;

/* Expands a spec into its runs. Returns 0 and a new plan in *out, or
 * SS_EINVAL with every problem appended to pr (JSON path, found vs
 * expected) and *out NULL: a model below one head, D smaller than one batch,
 * a run config the trainer refuses, two identical runs, more than
 * SPEC_MAX_RUNS runs, an estimated time over max_hours. With "lr_tune" the
 * runs are the tune's, and the study is planned too (plan.study), its
 * problems reported with the tune's; the run count and max_hours hold for
 * both together. */
int plan_spec(const spec *s, plan **out, spec_problems *pr);

/* spec_load then plan_spec: *s and *out are set as far as each succeeded
 * (the caller frees both, either may be NULL); returns the first error. */
int plan_load(const char *path, spec **s, plan **out, spec_problems *pr);

void plan_free(plan *p);

/* One planned run as JSON text: {"index", "part", "config": {...},
 * "config_hash", "params", "nonembedding_params", "tokens", "batch_size",
 * "lr", "steps", "flops", "flops_6nd", "est_seconds", "seed",
 * "target_params", "budget", "target_loss", "batch_rule", "lr_rule"}; the
 * config is spliced in verbatim so that its hash can be checked from the
 * text. malloc'd. */
char *plan_run_json(const plan_run *r, const plan *p);

/* The whole plan as a JSON list of plan_run_json objects (what `scalesweep
 * plan --json` prints). malloc'd. */
char *plan_runs_json(const plan *p);

/* The rules with their names and constants (new reference): {"batch": {...},
 * "lr": {...}, "shape": {...}, "throughput_flops", "parallel_runs"}. */
json_t *plan_rules_json(const plan *p);

/* The human-readable plan: the model family and parametrisation of its runs
 * (rcfg_model_text), one line per run (index, part, n_layer, d_model,
 * n_head, N, D, B, steps, lr, C, estimated time), totals, the rules and the
 * warnings. */
void plan_write_table(const plan *p, FILE *f);

#endif

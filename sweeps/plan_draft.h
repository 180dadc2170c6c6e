/* Internal to sweeps/: planning's drafts (plan_draft.c), resolved into
 * runs by plan.c. A draft is one planned run before it is resolved: the
 * planned values, as a partial run config, and where they came from. */
#ifndef SS_SWEEPS_PLAN_DRAFT_H
#define SS_SWEEPS_PLAN_DRAFT_H

#include <jansson.h>
#include <stddef.h>

#include "runcfg/runcfg.h"
#include "sweeps/shapes.h"
#include "sweeps/spec.h"

typedef struct plan__draft {
  const char *part;
  int part_order;
  json_t *over;            /* planned values, a partial run config (owned) */
  const json_t *run_layer; /* method runs: the $.runs[i] object */
  char layer_path[32];
  char size_path[192]; /* where the model's size comes from, when not fallback */
  char fallback[256];  /* spec path a problem with a planned value is reported at */
  char context[512];   /* which planned run, for messages */
  double target_params, budget;
  int batch_from_rule, lr_from_rule;
  double rule_compute, b_opt;
  const spec_values *target_loss;
  int64_t bcrit_at; /* a branched ladder's rung: the trunk's tokens it starts from (0: none) */
  int failed;       /* a problem was reported: not resolved, not planned */
} plan__draft;

typedef struct plan__drafts {
  plan__draft *d;
  size_t n, cap;
} plan__drafts;

typedef struct plan__planner {
  const spec *s;
  spec_problems *pr;
  plan__drafts ds;
  shape_rule shape;
  int T, V;
  int base_batch; /* base.train.batch_size, 0 when unset */
  int wsd;        /* base.train.schedule is "wsd" */
  double base_lr;
} plan__planner;

/* Each appends the drafts of one method (or the batch ladder) to P->ds,
 * reporting into P->pr what cannot be planned (a draft then has failed
 * set). */
void plan__grid(plan__planner *P);
void plan__isoflop(plan__planner *P);
void plan__ladder(plan__planner *P);
void plan__explicit(plan__planner *P);
/* With "lr_tune": the tune's runs on the proxy, instead of the method's
 * (the study is planned apart: sweeps/lr_tune.h) */
void plan__lr_tune(plan__planner *P);

/* backend, world_size, threads: from $.resources unless base or the run set
 * them (threads always ends up set: see PLAN_GPU_HOST_THREADS) */
void plan__put_resources(const spec *s, plan__draft *d);

void plan__drafts_free(plan__drafts *ds);

/* plan_branch.c: wsd runs that differ only in tokens share the settings
 * the planner chose (batch size, lr, warmup) and, with branch, start from
 * the longest of them (plan_run.branch_of, branch_step; plan's totals of
 * them); the runs' indices are set. 0 or SS_ENOMEM. */
struct plan;
int plan__branch(struct plan *p, int branch);
/* A branched batch ladder's rungs onto their trunks (the run of the same
 * seed with bcrit_at 0), after the plan is sorted. */
void plan__bcrit_link(struct plan *p);

/* The runs keep[0..k) of p (ascending plan indices) as a plan of their
 * own, the header copied: each WSD group's longest kept run is its trunk
 * and the others kept branch from it at their own stable steps (a branch
 * of a trunk left out, when it is the longest kept, trains whole); other
 * branches keep their trunk, which must be kept. NULL when out of memory. */
struct plan *plan__subset(const struct plan *p, const size_t *keep, size_t k);

/* plan.c: a planned run's figures (shape, counts, steps, tokens, FLOPs,
 * estimated seconds at throughput) from its resolved config */
struct plan_run;
void plan__fill(struct plan_run *r, const rcfg *cfg, double throughput);

/* plan_memory.c, the planner's one owner of train.micro_batch_size: the
 * micro-batch of a batch size B the planner chose for d's run, when the
 * spec asks for one (base.train.micro_batch_size as a cap: the largest
 * divisor of B not above it); 0 when the run sets its own or the spec
 * leaves it to runcfg's default (batch_size / world_size), which
 * plan__fit_memory may lower. */
int plan__micro_batch(const plan__planner *P, const plan__draft *d, int B);

/* plan_memory.c: 0 when the run of d, resolved into cfg, fits
 * $.resources.max_memory_gib (runcfg/memory.h's estimate), after lowering
 * cfg's micro_batch_size to the largest divisor of batch_size that fits
 * when neither the base nor the run chose it; else -1 with a problem naming
 * where the size comes from and the figures. */
int plan__fit_memory(const plan__planner *P, const plan__draft *d, rcfg *cfg);

#endif

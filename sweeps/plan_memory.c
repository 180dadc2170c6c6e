/* The planner's memory check: a run whose estimate (runcfg/memory.h: the
 * trainer's own allocations) exceeds what the spec asks for per GPU (or per
 * CPU run), $.resources.max_memory_gib, cannot train there; the spec is
 * refused with the figures rather than the run meeting the OOM killer. A
 * run whose micro-batch the spec leaves to the planner gets the largest
 * one that fits first (the same batch, accumulated).
 *
 * Every micro-batch the planner decides is decided here: the spec's cap at
 * a planned batch size (plan__micro_batch) and the memory fit; the rest is
 * runcfg's default or the spec's own value. */
#include <stdio.h>

#include "runcfg/flops.h"
#include "runcfg/memory.h"
#include "sweeps/plan_draft.h"

/* Where the model's size comes from: the planned size's value, else the
 * run's own model section, else the base's, else the draft's fallback. */
static const char *size_path(const plan__planner *P, const plan__draft *d, char *buf, size_t n) {
  if (d->size_path[0])
    return d->size_path;
  if (d->run_layer && json_object_get(d->run_layer, "model")) {
    snprintf(buf, n, "%s.model", d->layer_path);
    return buf;
  }
  if (json_object_get(P->s->base, "model"))
    return "$.base.model";
  return d->fallback;
}

/* did the run's own layer ($.runs[i]) choose its micro-batch? */
static int run_sets_micro(const plan__draft *d) {
  const json_t *rt = d->run_layer ? json_object_get(d->run_layer, "train") : NULL;
  return rt && json_object_get(rt, "micro_batch_size");
}

/* did the spec choose this run's micro-batch? */
static int micro_chosen(const plan__planner *P, const plan__draft *d) {
  return P->s->base_sets_micro || run_sets_micro(d);
}

int plan__micro_batch(const plan__planner *P, const plan__draft *d, int B) {
  if (!P->s->base_sets_micro || run_sets_micro(d))
    return 0;
  int cap = P->s->base_micro;
  for (int m = cap < B ? cap : B; m > 1; m--)
    if (B % m == 0)
      return m;
  return 1;
}

int plan__fit_memory(const plan__planner *P, const plan__draft *d, rcfg *cfg) {
  const spec *s = P->s;
  double limit = s->max_memory_gib * 1073741824.0;
  rcfg_mem m = rcfg_memory_host(cfg);
  if (m.total <= limit)
    return 0;
  /* gradient accumulation trains the same batch in less memory */
  int auto_micro = !micro_chosen(P, d);
  for (int mb = cfg->train.micro_batch_size - 1; auto_micro && mb >= 1; mb--) {
    if (cfg->train.batch_size % mb)
      continue;
    rcfg t = *cfg;
    t.train.micro_batch_size = mb;
    m = rcfg_memory_host(&t);
    if (m.total <= limit) {
      cfg->train.micro_batch_size = mb;
      return 0;
    }
    if (mb == 1)
      cfg->train.micro_batch_size = 1; /* for the message */
  }
  char need[256], buf[256], dflt[48] = "", model[80] = "";
  rcfg_memory_text(&m, need, sizeof need);
  rcfg_shape sh = rcfg_shape_of(cfg);
  if (sh.family != RCFG_GPT2 || sh.parametrization != RCFG_SP) { /* gpt2's text as it was */
    char t[64];
    rcfg_model_text(&sh, t, sizeof t);
    snprintf(model, sizeof model, " (%s)", t);
  }
  if (!json_object_get(json_object_get(s->root, "resources"), "max_memory_gib"))
    snprintf(dflt, sizeof dflt, ", default %g", SPEC_MAX_MEMORY_GIB);
  spec_problem_add(
      P->pr, size_path(P, d, buf, sizeof buf),
      "%s: a run%s with n_layer %d, d_model %d, n_head %d, seq_len %d, vocab_size %d and "
      "micro-batches of %d sequence%s%s needs %s, more than the %g GiB %s "
      "($.resources.max_memory_gib%s); expected a smaller model, seq_len or "
      "train.micro_batch_size%s, or a larger max_memory_gib",
      d->context, model, cfg->model.n_layer, cfg->model.d_model, cfg->model.n_head,
      cfg->model.seq_len, cfg->model.vocab_size, cfg->train.micro_batch_size,
      cfg->train.micro_batch_size == 1 ? "" : "s", auto_micro ? " (the smallest)" : "", need,
      s->max_memory_gib, s->gpus > 0 ? "of one GPU" : "a CPU run may use", dflt,
      cfg->memory.recompute ? "" : " (or memory.recompute: true)");
  return -1;
}

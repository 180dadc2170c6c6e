/* WSD branches (plan.h, docs/sweeps.md "WSD branches"): planned wsd runs
 * that differ only in how many tokens they train share their warmup and
 * stable phase, so each shorter one starts its decay from a checkpoint of
 * the longest one (the trunk) instead of training that phase again.
 *
 * Runs group by their trajectory key (runcfg.h rcfg_trajectory_key): the
 * config without the keys its schema marks as differing along a
 * trajectory (train.tokens, eval, checkpoint). What the planner chose per
 * run from its own compute would split every group: where the batch size
 * and the learning rate both come from the rules, the keys marked ruled
 * are left out too, and every run of the group takes the smallest run's
 * (the rules at the group's smallest compute, so that every run keeps the
 * rule's floor of steps); a warmup the planner defaulted (marked as a
 * default that follows the length) becomes the smallest run's too. The
 * shared values are set in the runs' resolved configs, before any is
 * written as text (plan.c). */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "runcfg/runcfg.h"
#include "sweeps/plan.h"
#include "sweeps/plan_draft.h"

typedef struct member {
  size_t run;     /* index into plan.runs */
  char *key;      /* the config without what a branch may change */
  int64_t tokens; /* train.tokens as given */
  double warmup;
  int rules; /* batch size and lr from the rules: the group takes its smallest's */
} member;

static int cmp_members(const void *a, const void *b) {
  const member *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c)
    return c;
  return x->tokens < y->tokens ? 1 : x->tokens > y->tokens ? -1 : 0; /* longest first */
}

/* the grouping key of a run; NULL when it is not a wsd run (or out of
 * memory, which the caller cannot tell apart: it only branches less) */
static char *group_key(const plan_run *r, int rules, int64_t *tokens, double *warmup) {
  const rcfg *c = r->cfg;
  if (strcmp(c->train.schedule, "wsd") != 0)
    return NULL;
  *tokens = c->train.tokens;
  *warmup = c->train.warmup_tokens;
  unsigned shared = (rules ? RCFG_SHARES(RCFG_TRAJ_RULED) : 0) |
                    (r->warmup_given ? 0 : RCFG_SHARES(RCFG_TRAJ_LENGTH_DEFAULT));
  return rcfg_trajectory_key(c, shared);
}

/* run r takes the shared settings of from (the group's smallest): its
 * batch size, micro-batch and learning rate when rules, and the warmup when
 * warmup >= 0; its tokens then a whole number of the new batches. Its
 * figures are recomputed. */
static void share(plan *p, plan_run *r, const plan_run *src, int rules, double warmup) {
  rcfg *cfg = r->cfg;
  const rcfg *from = src->cfg;
  if (rules) {
    r->rules_from = src->index;
    r->rule_compute = src->rule_compute;
    r->b_opt_tokens = src->b_opt_tokens;
    cfg->train.batch_size = from->train.batch_size;
    cfg->train.micro_batch_size = from->train.micro_batch_size;
    cfg->train.lr = from->train.lr;
    int64_t bt = (int64_t)cfg->train.batch_size * cfg->model.seq_len;
    cfg->train.tokens = cfg->train.tokens / bt * bt;
  }
  if (warmup >= 0)
    cfg->train.warmup_tokens = warmup;
  plan__fill(r, cfg, p->throughput_flops);
}

/* One group, m[0] the longest: the shared warmup, then each shorter run
 * branches from m[0] at its own stable steps (0: trains from scratch). */
static void branch_group(plan *p, member *m, size_t n, int branch) {
  /* the key holds the warmup unless it is the default: all or none are */
  int defaulted = !p->runs[m[0].run].warmup_given;
  double w = defaulted ? m[n - 1].warmup : -1; /* the smallest run's own default */
  for (size_t i = 0; i + 1 < n; i++)
    if (m[i].rules || defaulted)
      share(p, &p->runs[m[i].run], &p->runs[m[n - 1].run], m[i].rules, w);
  plan_run *trunk = &p->runs[m[0].run];
  for (size_t i = 1; branch && i < n; i++) {
    plan_run *b = &p->runs[m[i].run];
    int64_t at = rcfg_wsd_stable_steps(b->cfg);
    if (at < 1 || at >= b->steps)
      continue;
    b->branch_of = trunk->index;
    b->branch_step = at;
    double skipped = b->flops_per_token * (double)(at * b->batch_size * b->seq_len);
    b->est_seconds *= (b->flops - skipped) / b->flops;
    p->branch_flops_saved += skipped;
    p->n_branches++;
    trunk->n_branch_points++;
  }
  p->n_trunks += trunk->n_branch_points > 0;
}

int plan__branch(plan *p, int branch) {
  for (size_t i = 0; i < p->n; i++)
    p->runs[i].branch_of = p->runs[i].rules_from = -1;
  member *m = calloc(p->n ? p->n : 1, sizeof *m);
  if (!m)
    return SS_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < p->n; i++) {
    m[n].run = i;
    m[n].rules = p->runs[i].batch_from_rule && p->runs[i].lr_from_rule;
    m[n].key = group_key(&p->runs[i], m[n].rules, &m[n].tokens, &m[n].warmup);
    if (m[n].key)
      n++;
  }
  qsort(m, n, sizeof *m, cmp_members);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && !strcmp(m[j].key, m[i].key))
      j++;
    if (j - i > 1)
      branch_group(p, m + i, j - i, branch);
    i = j;
  }
  for (size_t i = 0; i < n; i++)
    free(m[i].key);
  free(m);
  return 0;
}

void plan__bcrit_link(plan *p) {
  for (size_t i = 0; i < p->n; i++) {
    plan_run *b = &p->runs[i];
    if (strcmp(b->part, "bcrit") != 0 || b->bcrit_at <= 0)
      continue;
    for (size_t j = 0; j < p->n; j++) {
      plan_run *t = &p->runs[j];
      if (strcmp(t->part, "bcrit") != 0 || t->bcrit_at != 0 || t->seed != b->seed)
        continue;
      int64_t bt = (int64_t)t->batch_size * t->seq_len;
      b->branch_of = t->index;
      b->branch_step = b->bcrit_at / bt;
      double skipped = b->flops_per_token * (double)b->bcrit_at;
      b->est_seconds *= (b->flops - skipped) / b->flops;
      p->branch_flops_saved += skipped;
      p->rung_flops_saved += skipped;
      p->n_branches++;
      p->n_rungs++;
      t->n_branch_points++;
      break;
    }
  }
  for (size_t j = 0; j < p->n; j++)
    p->n_rung_trunks += !strcmp(p->runs[j].part, "bcrit") && p->runs[j].bcrit_at == 0 &&
                        p->runs[j].n_branch_points > 0;
  p->n_trunks += p->n_rung_trunks;
}

/* An empty copy of p for k runs: p's settings and warnings, none of its
 * runs, sums or branches; NULL where memory ran out. */
static plan *subset_new(const plan *p, size_t k) {
  plan *q = malloc(sizeof *q);
  if (!q)
    return NULL;
  *q = *p;
  q->runs = calloc(k ? k : 1, sizeof *q->runs);
  q->warnings = calloc(p->n_warnings ? p->n_warnings : 1, sizeof *q->warnings);
  q->n = q->n_warnings = 0;
  q->study = q->candidates = NULL;
  q->n_branches = q->n_trunks = q->n_rungs = q->n_rung_trunks = 0;
  q->branch_flops_saved = q->rung_flops_saved = 0;
  q->total_flops = q->total_seconds = q->wall_seconds = 0;
  if (!q->runs || !q->warnings) {
    plan_free(q);
    return NULL;
  }
  for (size_t i = 0; i < p->n_warnings; i++)
    if ((q->warnings[q->n_warnings] = strdup(p->warnings[i])))
      q->n_warnings++;
  return q;
}

/* Run r of p copied in as q's run i (q->n becomes i + 1), unlinked from
 * any trunk, its time its whole training's; -1 where memory ran out. */
static int subset_copy(const plan_run *r, plan *q, size_t i) {
  plan_run *c = &q->runs[i];
  *c = *r;
  c->config = strdup(r->config);
  if ((c->cfg = malloc(sizeof *c->cfg)))
    *c->cfg = *r->cfg;
  c->target_loss = NULL;
  c->keep_steps = NULL;
  if (r->n_target_loss && (c->target_loss = malloc(r->n_target_loss * sizeof *c->target_loss)))
    memcpy(c->target_loss, r->target_loss, r->n_target_loss * sizeof *c->target_loss);
  q->n = i + 1;
  if (!c->config || !c->cfg || (r->n_target_loss && !c->target_loss))
    return -1;
  c->index = (int)i;
  c->n_branch_points = 0;
  if (r->branch_of >= 0 && r->branch_step > 0) /* its whole time, until it branches again */
    c->est_seconds =
        r->est_seconds * r->flops /
        (r->flops - r->flops_per_token * (double)(r->branch_step * r->batch_size * r->seq_len));
  return 0;
}

/* The kept run that kept run i (a branch in p) branches from, as an index
 * into keep (at: p's run to its index there, or -1), or -1: a rung's
 * trunk, else the longest kept run of its group (the first of equals). */
static long subset_trunk(const plan *p, const size_t *keep, size_t k, size_t i, const long *at) {
  const plan_run *r = &p->runs[keep[i]];
  if (!strcmp(r->part, "bcrit"))
    return at[r->branch_of];
  long trunk = -1;
  for (size_t j = 0; j < k; j++) {
    const plan_run *o = &p->runs[keep[j]];
    size_t g = o->branch_of >= 0 ? (size_t)o->branch_of : keep[j];
    if (g != (size_t)r->branch_of || j == i)
      continue;
    const plan_run *t = trunk >= 0 ? &p->runs[keep[trunk]] : r;
    if (o->tokens > t->tokens || (o->tokens == t->tokens && trunk < 0 && j < i))
      trunk = (long)j;
  }
  return trunk;
}

/* q's runs (p's runs keep[0..k)) linked to the kept runs they take their
 * rules from and branch from, with what branching saves among them. */
static void subset_link(const plan *p, const size_t *keep, size_t k, const long *at, plan *q) {
  for (size_t i = 0; i < k; i++) {
    const plan_run *r = &p->runs[keep[i]];
    plan_run *c = &q->runs[i];
    c->branch_of = -1;
    c->branch_step = 0;
    c->rules_from = r->rules_from >= 0 && at[r->rules_from] >= 0 ? (int)at[r->rules_from] : -1;
    long trunk = r->branch_of >= 0 ? subset_trunk(p, keep, k, i, at) : -1;
    if (trunk < 0)
      continue;
    c->branch_of = (int)trunk;
    c->branch_step = r->branch_step;
    double skipped = r->flops_per_token * (double)(r->branch_step * r->batch_size * r->seq_len);
    c->est_seconds *= (r->flops - skipped) / r->flops;
    q->runs[trunk].n_branch_points++;
    q->n_branches++;
    q->branch_flops_saved += skipped;
    if (!strcmp(r->part, "bcrit")) {
      q->n_rungs++;
      q->rung_flops_saved += skipped;
    }
  }
  for (size_t i = 0; i < k; i++)
    if (q->runs[i].n_branch_points > 0) {
      q->n_trunks++;
      q->n_rung_trunks += !strcmp(q->runs[i].part, "bcrit");
    }
}

plan *plan__subset(const plan *p, const size_t *keep, size_t k) {
  long *at = malloc((p->n ? p->n : 1) * sizeof *at);
  plan *q = at ? subset_new(p, k) : NULL;
  if (!q) {
    free(at);
    return NULL;
  }
  for (size_t i = 0; i < p->n; i++)
    at[i] = -1;
  for (size_t i = 0; i < k; i++) {
    if (subset_copy(&p->runs[keep[i]], q, i) != 0) {
      free(at);
      plan_free(q);
      return NULL;
    }
    at[keep[i]] = (long)i;
  }
  subset_link(p, keep, k, at, q);
  free(at);
  return q;
}

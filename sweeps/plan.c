/* Planning: drafts (plan_draft.c) -> resolved run configs, with the FLOP
 * accounting of SCIENCE.md, the duplicate and time checks and the
 * warnings. */
#include "sweeps/plan.h"

#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "runcfg/flops.h"
#include "runcfg/runcfg.h"
#include "runcfg/shard.h"
#include "sweeps/adaptive.h"
#include "sweeps/internal.h"
#include "sweeps/lr_tune.h"
#include "sweeps/plan_draft.h"
#include "sweeps/shapes.h"

/* ---- resolving and accounting ----------------------------------------- */

/* Evaluation passes the trainer makes (its training loop): one at every
 * crossing of a multiple of every_tokens, and one at the last step. */
static double eval_passes(int64_t D, int64_t BT, int64_t every) {
  if (D < BT)
    return 1;
  double n = 0;
  int last_counted = 0;
  if (every > 0) {
    n = every >= BT ? (double)(D / every) : (double)(D / BT);
    last_counted = D / every > (D - BT) / every;
  }
  return n + (last_counted ? 0 : 1);
}

static void add_warning(plan *p, const char *fmt, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  size_t k = p->n_warnings;
  if ((k & (k - 1)) == 0) { /* 0 or a power of two: full; doubling keeps 20,000 warnings linear */
    char **w = realloc(p->warnings, (k ? 2 * k : 1) * sizeof *w);
    if (!w)
      return;
    p->warnings = w;
  }
  size_t n = strlen(buf) + 1;
  char *c = malloc(n);
  if (!c)
    return;
  memcpy(c, buf, n);
  p->warnings[p->n_warnings++] = c;
}

/* Tokens in the shards matching pattern (headers only); -1 when none match. */
static double shard_tokens(const char *pattern) {
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0)
    return -1;
  double total = 0;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    int64_t n = rcfg_shard_tokens(g.gl_pathv[i]);
    total += n > 0 ? (double)n : 0;
  }
  globfree(&g);
  return total;
}

/* The checkpoint interval of a run whose spec chooses none: about ten
 * checkpoints per run, in whole steps, so that a re-queued run resumes
 * from its last one. Decided here, before the hash, so that config_hash is
 * the hash of the config that trains. */
static int64_t checkpoint_every(const rcfg *cfg) {
  double step = (double)cfg->train.batch_size * cfg->model.seq_len;
  return (int64_t)(ceil((double)cfg->train.tokens / 10.0 / step) * step);
}

static int resolve_rest(plan__draft *d, plan_run *r);

static int resolve(plan__planner *P, plan__draft *d, plan_run *r) {
  const spec *s = P->s;
  plan__put_resources(s, d);
  json_t *m = json_deep_copy(s->base);
  if (d->run_layer)
    json_object_update_recursive(m, (json_t *)d->run_layer);
  json_object_update_recursive(m, d->over);
  rcfg cfg;
  const json_t *layers[2];
  const char *paths[2];
  int n = 0;
  if (d->run_layer) {
    layers[n] = d->run_layer;
    paths[n++] = d->layer_path;
  }
  layers[n] = s->base;
  paths[n++] = "$.base";
  int rc = spec_resolve_config(m, &cfg, layers, paths, n, d->fallback, d->context, P->pr);
  r->warmup_given = json_object_get(json_object_get(m, "train"), "warmup_tokens") != NULL;
  json_decref(m);
  if (rc)
    return -1;
  if (cfg.checkpoint.every_tokens <= 0)
    cfg.checkpoint.every_tokens = checkpoint_every(&cfg);
  if (plan__fit_memory(P, d, &cfg) != 0)
    return -1;
  r->cfg = malloc(sizeof *r->cfg);
  if (!r->cfg)
    return -1;
  *r->cfg = cfg;
  r->part = d->part;
  plan__fill(r, &cfg, s->throughput_flops);
  r->target_params = d->target_params;
  return resolve_rest(d, r);
}

void plan__fill(plan_run *r, const rcfg *c, double throughput) {
  rcfg cfg = *c;
  rcfg_shape sh = rcfg_shape_of(&cfg);
  r->n_layer = sh.n_layer;
  r->d_model = sh.d_model;
  r->n_head = sh.n_head;
  r->seq_len = sh.seq_len;
  r->vocab_size = sh.vocab_size;
  r->family = sh.family;
  r->parametrization = sh.parametrization;
  r->base_width = sh.base_width;
  r->params = rcfg_params(&sh);
  r->nonembedding_params = rcfg_nonembedding_params(&sh);
  r->batch_size = cfg.train.batch_size;
  r->lr = cfg.train.lr;
  r->seed = cfg.train.seed;
  int64_t BT = (int64_t)cfg.train.batch_size * cfg.model.seq_len;
  r->steps = cfg.train.tokens / BT;
  r->tokens = r->steps * BT;
  r->flops_per_token = rcfg_flops_per_token(&sh);
  r->flops = r->flops_per_token * (double)r->tokens;
  r->flops_6nd = 6.0 * (double)r->nonembedding_params * (double)r->tokens;
  int64_t eval_tokens = cfg.eval.tokens / cfg.model.seq_len * cfg.model.seq_len;
  double eval_flops = eval_passes(r->tokens, BT, cfg.eval.every_tokens) * (double)eval_tokens *
                      r->flops_per_token / 3.0;
  r->est_seconds = (r->flops + eval_flops) / throughput;
}

static int resolve_rest(plan__draft *d, plan_run *r) {
  r->budget = d->budget;
  r->batch_from_rule = d->batch_from_rule;
  r->lr_from_rule = d->lr_from_rule;
  r->rule_compute = d->rule_compute;
  r->b_opt_tokens = d->b_opt;
  r->bcrit_at = d->bcrit_at;
  if (d->target_loss && d->target_loss->n) {
    r->target_loss = malloc(d->target_loss->n * sizeof *r->target_loss);
    if (r->target_loss) {
      memcpy(r->target_loss, d->target_loss->v, d->target_loss->n * sizeof *r->target_loss);
      r->n_target_loss = d->target_loss->n;
    }
  }
  return 0;
}

/* Each run's config as text, the one time it is written: every value is
 * decided by now (resolve, then plan__branch's shared ones), and the hash
 * is taken over this text. 0 or SS_ENOMEM. */
static int write_configs(plan *p) {
  for (size_t i = 0; i < p->n; i++) {
    plan_run *r = &p->runs[i];
    r->config = rcfg_to_json(r->cfg);
    if (!r->config)
      return SS_ENOMEM;
    rcfg_hash_text(r->config, r->config_hash);
  }
  return 0;
}

/* smallest first: nominal compute (the budget for isoflop runs), then N, D,
 * B, lr, seed, part */
static int cmp_runs(const void *a, const void *b) {
  const plan_run *x = a, *y = b;
  double cx = x->budget > 0 ? x->budget : x->flops, cy = y->budget > 0 ? y->budget : y->flops;
#define CMP(u, v) \
  if ((u) != (v)) \
    return (u) < (v) ? -1 : 1;
  CMP(cx, cy);
  CMP(x->nonembedding_params, y->nonembedding_params);
  CMP(x->tokens, y->tokens);
  CMP(x->batch_size, y->batch_size);
  CMP(x->lr, y->lr);
  CMP(x->seed, y->seed);
#undef CMP
  int s = strcmp(x->part, y->part);
  if (s)
    return s;
  return x->index < y->index ? -1 : x->index > y->index;
}

typedef struct str_ref {
  const char *s;
  size_t i;
} str_ref;

static int cmp_str_refs(const void *a, const void *b) {
  const str_ref *x = a, *y = b;
  int c = strcmp(x->s, y->s);
  return c ? c : (x->i > y->i) - (x->i < y->i);
}

int sweeps__by_rank(const void *pa, const void *pb) {
  const sweeps__ranked *a = pa, *b = pb;
  int na = isnan(a->x), nb = isnan(b->x);
  if (na != nb)
    return na - nb;
  if (a->x != b->x)
    return a->x < b->x ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

int sweeps__first_equal(const char *const *s, size_t n, size_t *first) {
  str_ref *refs = malloc((n ? n : 1) * sizeof *refs);
  if (!refs)
    return SS_ENOMEM;
  for (size_t i = 0; i < n; i++)
    refs[i] = (str_ref){s[i], i};
  qsort(refs, n, sizeof *refs, cmp_str_refs);
  for (size_t k = 0, g = 0; k < n; k++) {
    if (strcmp(refs[k].s, refs[g].s))
      g = k; /* a new string: refs[g] is its first occurrence */
    first[refs[k].i] = refs[g].i;
  }
  free(refs);
  return 0;
}

/* Later runs of a group named in its problem; the rest are counted. */
#define PLAN_COPIES_NAMED 5

/* Identical runs (the same config twice is wasted compute): each config
 * planned more than once is reported once, at the first run that repeats
 * it, with the run it repeats, the number of copies and a few of them (10,000
 * copies of one run are one problem, not 9,999). 0 or SS_ENOMEM. */
static int report_duplicates(const plan *p, spec_problems *pr) {
  if (p->n < 2)
    return 0;
  const char **hashes = malloc(p->n * sizeof *hashes);
  size_t *first = malloc(p->n * sizeof *first);
  /* a run that repeats an earlier one: the first of its config (x), and it (i) */
  sweeps__ranked *pairs = malloc(p->n * sizeof *pairs);
  for (size_t i = 0; hashes && i < p->n; i++)
    hashes[i] = p->runs[i].config_hash;
  if (!hashes || !first || !pairs || sweeps__first_equal(hashes, p->n, first)) {
    free(hashes);
    free(first);
    free(pairs);
    return SS_ENOMEM;
  }
  size_t m = 0;
  for (size_t i = 0; i < p->n; i++)
    if (first[i] != i)
      pairs[m++] = (sweeps__ranked){(double)first[i], i};
  /* each group contiguous, groups in plan order of their first run */
  qsort(pairs, m, sizeof *pairs, sweeps__by_rank);
  for (size_t g = 0, e; g < m; g = e) {
    for (e = g + 1; e < m && pairs[e].x == pairs[g].x;)
      e++;
    const plan_run *r = &p->runs[pairs[g].i];
    char more[160] = "";
    size_t copies = e - g + 1;
    if (copies > 2) {
      size_t w = (size_t)snprintf(more, sizeof more, ", as are run%s", copies > 3 ? "s" : "");
      size_t named = copies - 2 < PLAN_COPIES_NAMED ? copies - 2 : PLAN_COPIES_NAMED;
      for (size_t c = 0; c < named && w < sizeof more; c++)
        w +=
            (size_t)snprintf(more + w, sizeof more - w, "%s %zu", c ? "," : "", pairs[g + 1 + c].i);
      if (copies - 2 > named && w < sizeof more)
        w += (size_t)snprintf(more + w, sizeof more - w, " and %zu more", copies - 2 - named);
      if (w < sizeof more)
        snprintf(more + w, sizeof more - w, " (%zu copies)", copies);
    }
    spec_problem_add(pr, "$",
                     "planned runs %zu and %zu are identical%s (%s, %d layers x d_model %d, "
                     "D = %lld, batch %d, lr %g; config_hash %.12s); expected distinct runs: "
                     "use fewer sizes, a wider range or more distinct values",
                     (size_t)pairs[g].x, pairs[g].i, more, r->part, r->n_layer, r->d_model,
                     (long long)r->tokens, r->batch_size, r->lr, r->config_hash);
  }
  free(hashes);
  free(first);
  free(pairs);
  return 0;
}

void plan_free(plan *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->n; i++) {
    free(p->runs[i].cfg);
    free(p->runs[i].config);
    free(p->runs[i].target_loss);
    free(p->runs[i].keep_steps);
  }
  free(p->runs);
  for (size_t i = 0; i < p->n_warnings; i++)
    free(p->warnings[i]);
  free(p->warnings);
  plan_free(p->study);
  plan_free(p->candidates);
  free(p);
}

/* How many runs the spec asks for, before building any (refuses huge
 * products early). */
static double count_runs(const spec *s) {
  double n = 0;
  if (s->lr_tune.present) /* the tune's; the study is counted when planned */
    return (double)s->lr_tune.lr.n * (double)(s->lr_tune.seeds.n ? s->lr_tune.seeds.n : 1);
  if (s->method == SPEC_GRID) {
    n = (double)s->grid.params.n * (double)s->grid.tokens.n *
        (double)(s->grid.batch_size.n ? s->grid.batch_size.n : 1) *
        (double)(s->grid.lr.n ? s->grid.lr.n : 1) * (double)(s->grid.seeds.n ? s->grid.seeds.n : 1);
  } else if (s->method == SPEC_ISOFLOP) {
    double sizes = s->isoflop.centred ? s->isoflop.centre_points : (double)s->isoflop.params.n;
    n = (double)s->isoflop.flops.n * sizes * (double)(s->isoflop.seeds.n ? s->isoflop.seeds.n : 1);
  } else if (s->method == SPEC_RUNS) {
    n = (double)json_array_size(s->runs);
  }
  if (s->batch.present && s->batch.branched) /* a trunk, and the other sizes at each point */
    n += (1.0 + (double)(s->batch.batch_size.n - 1) * (double)s->batch.branch_at.n) *
         (double)(s->batch.seeds.n ? s->batch.seeds.n : 1);
  else if (s->batch.present)
    n += (double)s->batch.batch_size.n * (double)(s->batch.seeds.n ? s->batch.seeds.n : 1);
  return n;
}

/* The plan's header: what it was planned from. NULL when out of memory. */
static plan *plan_new(const spec *s, size_t n) {
  plan *p = calloc(1, sizeof *p);
  if (!p || (n && !(p->runs = calloc(n, sizeof *p->runs)))) {
    free(p);
    return NULL;
  }
  snprintf(p->spec_digest, sizeof p->spec_digest, "%s", s->digest);
  snprintf(p->name, sizeof p->name, "%s", s->name ? s->name : "");
  p->method = s->method;
  p->has_ladder = s->batch.present;
  p->batch_rule = s->batch_rule;
  p->lr_rule = s->lr_rule;
  p->aspect_ratio = s->aspect_ratio;
  p->head_size = s->head_size;
  p->throughput_flops = s->throughput_flops;
  p->parallel_runs = s->parallel_runs;
  p->max_hours = s->max_hours;
  return p;
}

/* Every method's drafts into P->ds. */
static void draft_all(plan__planner *P, const spec *s, spec_problems *pr) {
  memset(P, 0, sizeof *P);
  P->s = s;
  P->pr = pr;
  P->shape.aspect_ratio = s->aspect_ratio;
  P->shape.head_size = s->head_size;
  P->T = s->seq_len;
  P->V = s->vocab_size;
  json_t *bb = json_object_get(json_object_get(s->base, "train"), "batch_size");
  P->base_batch = json_is_integer(bb) ? (int)json_integer_value(bb) : 0;
  const char *sched =
      json_string_value(json_object_get(json_object_get(s->base, "train"), "schedule"));
  P->wsd = sched && !strcmp(sched, "wsd");
  if (s->lr_tune.present) {
    plan__lr_tune(P);
    return;
  }
  if (s->method == SPEC_GRID)
    plan__grid(P);
  else if (s->method == SPEC_ISOFLOP)
    plan__isoflop(P);
  else if (s->method == SPEC_RUNS)
    plan__explicit(P);
  if (s->batch.present)
    plan__ladder(P);
}

/* Resolves every draft even when some points already failed, so that the
 * run config's problems, duplicates and the time check are reported too;
 * then orders the runs smallest first. */
static void resolve_all(plan__planner *P, plan *p) {
  for (size_t i = 0; i < P->ds.n; i++) {
    plan_run *r = &p->runs[p->n];
    if (!P->ds.d[i].failed && resolve(P, &P->ds.d[i], r) == 0) {
      r->index = (int)p->n; /* creation order, the last sort key */
      p->n++;
    } else {
      free(r->cfg);
      r->cfg = NULL;
    }
  }
  if (p->n)
    qsort(p->runs, p->n, sizeof *p->runs, cmp_runs);
  for (size_t i = 0; i < p->n; i++)
    p->runs[i].index = (int)i;
}

/* Totals (an lr tune's study included), and the problem when they exceed
 * max_hours. */
static void check_time(plan *p, const spec *s, spec_problems *pr) {
  for (size_t i = 0; i < p->n; i++) {
    p->total_flops += p->runs[i].flops;
    p->total_seconds += p->runs[i].est_seconds;
  }
  p->tune_flops = p->total_flops;
  p->tune_seconds = p->total_seconds;
  size_t n = p->n;
  if (p->study) {
    p->total_flops += p->study->total_flops;
    p->total_seconds += p->study->total_seconds;
    n += p->study->n;
  }
  if (p->candidates && p->throughput_flops > 0) /* the compute it may spend, at most */
    p->total_seconds = fmax(p->total_seconds, p->adaptive_compute / p->throughput_flops);
  p->wall_seconds = p->total_seconds / p->parallel_runs;
  if (s->max_hours > 0 && p->wall_seconds / 3600.0 > s->max_hours)
    spec_problem_add(pr, "$.max_hours",
                     "found %g, but the plan's estimated time is %.3g hours (%zu run%s%s, %.3g "
                     "FLOPs%s at throughput_flops %.3g FLOP/s per run, %d at a time); expected at "
                     "least %.3g, or a smaller sweep",
                     s->max_hours, p->wall_seconds / 3600.0, n, n == 1 ? "" : "s",
                     p->study ? ", the lr tune's and the study's" : "", p->total_flops,
                     p->candidates ? " (or the adaptive design's compute, when more)" : "",
                     s->throughput_flops, s->parallel_runs, p->wall_seconds / 3600.0);
}

/* A spec with "adaptive": p's isoflop runs become the candidates, and
 * the plan keeps the first round and any batch ladder (adaptive.h). */
static int adapt(plan **pp, const spec *s) {
  plan *p = *pp;
  adaptive_cand *c;
  size_t nc;
  if (adaptive_candidates(p, &c, &nc))
    return SS_ENOMEM;
  size_t *pick = malloc((nc ? nc : 1) * sizeof *pick);
  size_t *keep = malloc((p->n ? p->n : 1) * sizeof *keep);
  unsigned char *in = calloc(p->n ? p->n : 1, 1);
  if (!pick || !keep || !in) {
    free(c);
    free(pick);
    free(keep);
    free(in);
    return SS_ENOMEM;
  }
  for (size_t i = 0; i < nc; i++)
    pick[i] = i;
  double grid = adaptive_cost(c, pick, nc);
  size_t k = adaptive_initial(c, nc, s->adaptive.initial, pick);
  double cost = adaptive_cost(c, pick, k);
  for (size_t i = 0; i < k; i++)
    in[c[pick[i]].run] = 1;
  size_t nk = 0;
  for (size_t i = 0; i < p->n; i++)
    if (in[i] || strcmp(p->runs[i].part, "isoflop") != 0)
      keep[nk++] = i;
  plan *q = plan__subset(p, keep, nk);
  if (q && adaptive_keep_steps(q, p, c, nc, NULL)) {
    plan_free(q);
    q = NULL;
  }
  free(c);
  free(pick);
  free(keep);
  free(in);
  if (!q)
    return SS_ENOMEM;
  q->candidates = p;
  q->adaptive_compute = s->adaptive.compute;
  q->adaptive_initial_flops = cost;
  q->adaptive_grid_flops = grid;
  adaptive_question_text(&s->adaptive, q->adaptive_question, sizeof q->adaptive_question);
  *pp = q;
  return 0;
}

/* Data reuse of shard runs: the config names its data. */
static void warn_data(plan *p, size_t i, char *last_pattern, size_t n, double *last_tokens) {
  const plan_run *r = &p->runs[i];
  const char *pattern = r->cfg->data.synthetic ? NULL : r->cfg->data.train;
  if (pattern && strcmp(pattern, last_pattern)) {
    snprintf(last_pattern, n, "%s", pattern);
    *last_tokens = shard_tokens(pattern);
    if (*last_tokens < 0)
      add_warning(p,
                  "no file matches the training shards '%s' on this host: data reuse not "
                  "checked",
                  pattern);
  }
  if (pattern && *last_tokens > 0) {
    double epochs = (double)r->tokens / *last_tokens;
    double unique = fmin((double)r->tokens, *last_tokens);
    double bound = 5e3 * pow((double)r->nonembedding_params, 0.74);
    if (epochs > 1)
      add_warning(p, "run %zu makes %.2f epochs over the %.4g tokens of '%s': data repeats", i,
                  epochs, *last_tokens, pattern);
    if (unique < bound)
      add_warning(p,
                  "run %zu sees %.4g distinct tokens, below Kaplan's overfitting bound "
                  "5e3 * N^0.74 = %.4g for N = %lld",
                  i, unique, bound, (long long)r->nonembedding_params);
  }
}

/* The plan runs, but the user should know. */
static void add_warnings(plan *p) {
  char last_pattern[1024] = "";
  double last_tokens = -1;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    /* a rung of a branched ladder is read for its steps to a target, not
     * its final loss */
    int rung = r->bcrit_at > 0;
    if (r->steps < PLAN_FEW_STEPS && !rung)
      add_warning(p,
                  "run %zu (%s, N %lld, D %lld, batch %d) makes only %lld optimizer steps "
                  "(fewer than %d): its loss measures the step budget more than the model",
                  i, r->part, (long long)r->nonembedding_params, (long long)r->tokens,
                  r->batch_size, (long long)r->steps, PLAN_FEW_STEPS);
    else if (r->batch_from_rule && r->steps < p->batch_rule.min_steps)
      add_warning(p,
                  "run %zu (%s, N %lld, D %lld) makes %lld steps at the smallest batch (%d), "
                  "below the rule's floor of %g",
                  i, r->part, (long long)r->nonembedding_params, (long long)r->tokens,
                  (long long)r->steps, r->batch_size, p->batch_rule.min_steps);
    warn_data(p, i, last_pattern, sizeof last_pattern, &last_tokens);
  }
}

int plan_spec(const spec *s, plan **out, spec_problems *pr) {
  *out = NULL;
  size_t before = pr->n;
  double want = count_runs(s);
  if (want > SPEC_MAX_RUNS) {
    spec_problem_add(pr, "$", "the spec asks for %.0f runs; expected at most %d", want,
                     SPEC_MAX_RUNS);
    return SS_EINVAL;
  }
  /* an lr tune's study, at the placeholder rate: its problems are the
   * spec's, and its runs count towards the limits */
  plan *study = NULL;
  if (s->lr_tune.present && s->lr_tune.lr.n) {
    spec *ss = NULL;
    double lr = lr_tune_placeholder(&s->lr_tune.lr);
    if (isnan(lr)) /* out of memory */
      return SS_ENOMEM;
    if (lr_tune_plan_study(s->root, lr, 1, &ss, &study, pr) == SS_ENOMEM)
      return SS_ENOMEM;
    spec_free(ss);
    if (study && want + (double)study->n > SPEC_MAX_RUNS)
      spec_problem_add(pr, "$",
                       "the spec asks for %.0f runs: %.0f of the lr tune and %zu of the study; "
                       "expected at most %d",
                       want + (double)study->n, want, study->n, SPEC_MAX_RUNS);
  }
  plan__planner P;
  draft_all(&P, s, pr);
  plan *p = plan_new(s, P.ds.n);
  if (!p) {
    plan__drafts_free(&P.ds);
    plan_free(study);
    return SS_ENOMEM;
  }
  p->study = study;
  p->study_lr = study ? lr_tune_placeholder(&s->lr_tune.lr) : 0;
  resolve_all(&P, p);
  if (p->n == 0 && pr->n == before)
    spec_problem_add(pr, "$", "the spec plans no runs; expected at least one");
  /* branching first: a batch size shared by a group rounds its runs' tokens,
   * which could make two of them one */
  int rc = plan__branch(p, s->branches);
  if (rc == 0)
    rc = write_configs(p);
  if (rc == 0)
    plan__bcrit_link(p);
  if (rc == 0)
    rc = report_duplicates(p, pr);
  if (rc == 0 && s->adaptive.present && pr->n == before)
    rc = adapt(&p, s);
  if (rc == 0)
    check_time(p, s, pr);
  plan__drafts_free(&P.ds);
  if (rc == 0 && pr->n > before)
    rc = SS_EINVAL;
  if (rc) {
    plan_free(p);
    return rc;
  }
  add_warnings(p);
  *out = p;
  return 0;
}

int plan_load(const char *path, spec **s, plan **out, spec_problems *pr) {
  *out = NULL;
  int rc = spec_load(path, s, pr);
  return rc ? rc : plan_spec(*s, out, pr);
}

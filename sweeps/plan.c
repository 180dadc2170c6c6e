/* Planning: spec -> resolved run configs, with the batch/lr rules, the shape
 * rule and the FLOP accounting of SCIENCE.md. */
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
#include "sweeps/shapes.h"

/* One run before it is resolved: the planned values and where they came from. */
typedef struct draft {
  const char *part;
  int part_order;
  json_t *over;            /* planned values, a partial run config (owned) */
  const json_t *run_layer; /* method runs: the $.runs[i] object */
  char layer_path[32];
  char fallback[256]; /* spec path a problem with a planned value is reported at */
  char context[512];  /* which planned run, for messages */
  double target_params, budget;
  int batch_from_rule, lr_from_rule;
  double rule_compute, b_opt;
  const spec_values *target_loss;
  int failed; /* a problem was reported: not resolved, not planned */
} draft;

typedef struct drafts {
  draft *d;
  size_t n, cap;
} drafts;

static draft *draft_new(drafts *ds, const char *part, int order) {
  if (ds->n == ds->cap) {
    size_t cap = ds->cap ? 2 * ds->cap : 64;
    draft *d = realloc(ds->d, cap * sizeof *d);
    if (!d)
      return NULL;
    ds->d = d;
    ds->cap = cap;
  }
  draft *d = &ds->d[ds->n++];
  memset(d, 0, sizeof *d);
  d->part = part;
  d->part_order = order;
  d->over = json_object();
  return d;
}

static void drafts_free(drafts *ds) {
  for (size_t i = 0; i < ds->n; i++)
    json_decref(ds->d[i].over);
  free(ds->d);
}

/* Sets over.section.key (creating the section). */
static void put(json_t *over, const char *section, const char *key, json_t *v) {
  if (!section) {
    json_object_set_new(over, key, v);
    return;
  }
  json_t *sec = json_object_get(over, section);
  if (!sec) {
    sec = json_object();
    json_object_set_new(over, section, sec);
  }
  json_object_set_new(sec, key, v);
}

static int sets(const json_t *obj, const char *section, const char *key) {
  if (!obj)
    return 0;
  if (!section)
    return json_object_get(obj, key) != NULL;
  return json_object_get(json_object_get(obj, section), key) != NULL;
}

/* ---- the rules -------------------------------------------------------- */

static double b_opt_tokens(const spec_batch_rule *r, double C) {
  return r->coef * pow(C, r->exponent);
}

/* Batch size in sequences from the rule (spec.h spec_batch_rule). */
static int rule_batch(const spec_batch_rule *r, double C, double D, int T) {
  double seqs = b_opt_tokens(r, C) / T;
  double e = round(log2(fmax(seqs, 1e-300)));
  int B = e < 0 ? 1 : e > 30 ? (1 << 30) : (1 << (int)e);
  if (B < r->min_batch)
    B = r->min_batch;
  if (B > r->max_batch)
    B = r->max_batch;
  while (B > r->min_batch && D / ((double)B * T) < r->min_steps)
    B = B / 2 > r->min_batch ? B / 2 : r->min_batch;
  return B;
}

/* 3 significant digits, through the decimal text, so the config prints it
 * exactly as written */
static double round_sig3(double x) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.3g", x);
  return strtod(buf, NULL);
}

static double rule_lr(const spec_lr_rule *r, const spec_batch_rule *br, double C, int B, int T) {
  double eta = r->coef * pow(C, r->exponent);
  if (r->sqrt_batch)
    eta *= sqrt((double)B * T / b_opt_tokens(br, C));
  eta = fmin(fmax(eta, r->min), r->max);
  return round_sig3(eta);
}

/* Largest divisor of B not above cap. */
static int micro_for(int B, int cap) {
  for (int m = cap < B ? cap : B; m > 1; m--)
    if (B % m == 0)
      return m;
  return 1;
}

/* ---- drafting --------------------------------------------------------- */

typedef struct planner {
  const spec *s;
  spec_problems *pr;
  drafts ds;
  shape_rule shape;
  int T, V;
  int base_batch; /* base.train.batch_size, 0 when unset */
  double base_lr;
} planner;

/* Shape for target N; a problem at path when below one head. */
static int plan_shape(planner *P, double target, const char *path, const char *context,
                      rcfg_shape *sh) {
  rcfg_shape s = {0, 0, 0, P->T, P->V};
  if (shape_for_params(&P->shape, target, &s) != 0) {
    double n = (double)rcfg_nonembedding_params(&s);
    spec_problem_add(P->pr, path,
                     "%sfound target N = %.4g, below the smallest model the shape rule builds "
                     "(1 layer x d_model %d, %d head%s of %d: N = %.0f); a smaller one would "
                     "need a d_model below the rule's aspect ratio band (d_model / n_layer >= "
                     "%g) or below one head; expected at least %.4g (or a smaller "
                     "$.shape.aspect_ratio / head_size)",
                     context, target, s.d_model, s.n_head, s.n_head == 1 ? "" : "s",
                     shape_head_size(&P->shape, s.d_model), n,
                     P->shape.aspect_ratio / SHAPE_ASPECT_BAND, n / SHAPE_TOO_SMALL);
    return -1;
  }
  *sh = s;
  return 0;
}

/* The trainer's bound on train.tokens (runcfg/runcfg.c): 2^53, the
 * largest integer a JSON number carries exactly. */
#define PLAN_MAX_TOKENS 9007199254740992.0

/* Batch size, lr and rounded D for one planned point; fixed_B / fixed_lr
 * are 0 when the rule decides. Sets train.* in d->over. Returns -1 (with a
 * problem at d_path) when D is smaller than one batch or larger than
 * PLAN_MAX_TOKENS. */
static int plan_train(planner *P, draft *d, double C, double D, int fixed_B, double fixed_lr,
                      const char *d_path, const char *what) {
  const spec *s = P->s;
  int T = P->T;
  int B = fixed_B ? fixed_B : P->base_batch;
  d->rule_compute = C;
  d->b_opt = b_opt_tokens(&s->batch_rule, C);
  if (!B) {
    B = rule_batch(&s->batch_rule, C, D, T);
    d->batch_from_rule = 1;
  }
  if (D < (double)B * T) {
    spec_problem_add(P->pr, d_path,
                     "%s gives D = %.4g tokens, smaller than one batch of %d x %d = %lld tokens; "
                     "expected D >= one batch (a larger D, a smaller model, or a smaller batch)",
                     what, D, B, T, (long long)B * T);
    return -1;
  }
  if (!(D <= PLAN_MAX_TOKENS)) { /* also keeps D / step * step below INT64_MAX */
    spec_problem_add(P->pr, d_path,
                     "%s gives D = %.4g tokens; expected at most 2^53 = %.4g, the most "
                     "train.tokens a run config holds (a smaller budget or a larger model)",
                     what, D, PLAN_MAX_TOKENS);
    return -1;
  }
  int64_t step = (int64_t)B * T;
  int64_t tokens = (int64_t)llround(D / (double)step) * step;
  put(d->over, "train", "tokens", json_integer(tokens));
  if (!P->base_batch || fixed_B) {
    put(d->over, "train", "batch_size", json_integer(B));
    if (s->base_sets_micro)
      put(d->over, "train", "micro_batch_size", json_integer(micro_for(B, s->base_micro)));
  }
  if (fixed_lr > 0) {
    put(d->over, "train", "lr", json_real(fixed_lr));
  } else if (!s->base_sets_lr) {
    put(d->over, "train", "lr", json_real(rule_lr(&s->lr_rule, &s->batch_rule, C, B, T)));
    d->lr_from_rule = 1;
  }
  return 0;
}

static void put_shape(draft *d, const rcfg_shape *sh) {
  put(d->over, "model", "n_layer", json_integer(sh->n_layer));
  put(d->over, "model", "d_model", json_integer(sh->d_model));
  put(d->over, "model", "n_head", json_integer(sh->n_head));
}

static void put_seed(draft *d, const spec_values *seeds, size_t k) {
  if (seeds->n)
    put(d->over, "train", "seed", json_integer((json_int_t)seeds->v[k]));
}

static double fpt_of(const rcfg_shape *sh) { return rcfg_flops_per_token(sh); }

static void plan_grid(planner *P) {
  const spec *s = P->s;
  const spec_values *ps = &s->grid.params, *ts = &s->grid.tokens, *bs = &s->grid.batch_size,
                    *ls = &s->grid.lr, *ss = &s->grid.seeds;
  size_t nb = bs->n ? bs->n : 1, nl = ls->n ? ls->n : 1, nseed = ss->n ? ss->n : 1;
  for (size_t i = 0; i < ps->n; i++) {
    char ppath[192];
    spec_values_path(ps, i, ppath, sizeof ppath);
    rcfg_shape sh;
    if (plan_shape(P, ps->v[i], ppath, "", &sh))
      continue;
    for (size_t j = 0; j < ts->n; j++)
      for (size_t b = 0; b < nb; b++)
        for (size_t l = 0; l < nl; l++)
          for (size_t k = 0; k < nseed; k++) {
            draft *d = draft_new(&P->ds, "grid", 0);
            if (!d)
              return;
            double D = ts->v[j];
            d->target_params = ps->v[i];
            put_shape(d, &sh);
            put_seed(d, ss, k);
            char tpath[192], what[512];
            spec_values_path(ts, j, tpath, sizeof tpath);
            snprintf(d->fallback, sizeof d->fallback, "%s", tpath);
            snprintf(d->context, sizeof d->context,
                     "grid run (params %s: %d layers x d_model %d; tokens %s)", ppath, sh.n_layer,
                     sh.d_model, tpath);
            snprintf(what, sizeof what, "with %s (%d layers x d_model %d), this token count", ppath,
                     sh.n_layer, sh.d_model);
            d->failed = plan_train(P, d, fpt_of(&sh) * D, D, bs->n ? (int)bs->v[b] : 0,
                                   ls->n ? ls->v[l] : 0, tpath, what) != 0;
          }
  }
}

static void plan_isoflop(planner *P) {
  const spec *s = P->s;
  const spec_values *fs = &s->isoflop.flops, *ss = &s->isoflop.seeds;
  size_t nseed = ss->n ? ss->n : 1;
  for (size_t i = 0; i < fs->n; i++) {
    double C = fs->v[i];
    char cpath[192];
    spec_values_path(fs, i, cpath, sizeof cpath);
    size_t nsz = s->isoflop.centred ? (size_t)s->isoflop.centre_points : s->isoflop.params.n;
    double nc = s->isoflop.centre_coef * pow(C, s->isoflop.centre_exponent);
    for (size_t j = 0; j < nsz; j++) {
      double target;
      char ppath[192];
      if (s->isoflop.centred) {
        double u = nsz > 1 ? 2.0 * (double)j / (double)(nsz - 1) - 1.0 : 0.0;
        target = nc * pow(s->isoflop.centre_span, u);
        snprintf(ppath, sizeof ppath, "$.isoflop.centre");
      } else {
        target = s->isoflop.params.v[j];
        spec_values_path(&s->isoflop.params, j, ppath, sizeof ppath);
      }
      char ctx[384];
      snprintf(ctx, sizeof ctx, "at budget %s = %.4g FLOPs, size %zu of %zu: ", cpath, C, j + 1,
               nsz);
      rcfg_shape sh;
      if (plan_shape(P, target, ppath, s->isoflop.centred ? ctx : "", &sh))
        continue;
      double N = (double)rcfg_nonembedding_params(&sh);
      double D = s->isoflop.exact ? C / fpt_of(&sh) : C / (6.0 * N);
      for (size_t k = 0; k < nseed; k++) {
        draft *d = draft_new(&P->ds, "isoflop", 1);
        if (!d)
          return;
        d->target_params = target;
        d->budget = C;
        put_shape(d, &sh);
        put_seed(d, ss, k);
        snprintf(d->fallback, sizeof d->fallback, "%s", cpath);
        snprintf(d->context, sizeof d->context,
                 "isoflop run (budget %s = %.4g FLOPs, size %zu of %zu: %d layers x d_model %d)",
                 cpath, C, j + 1, nsz, sh.n_layer, sh.d_model);
        char what[512];
        snprintf(what, sizeof what,
                 "this budget with size %zu of %zu (%d layers x d_model %d, N = %.0f)", j + 1, nsz,
                 sh.n_layer, sh.d_model, N);
        d->failed = plan_train(P, d, C, D, 0, 0, cpath, what) != 0;
      }
    }
  }
}

/* The ladder's model: from $.batch.params, or base.model (resolved). */
static int ladder_shape(planner *P, rcfg_shape *sh) {
  const spec_ladder *b = &P->s->batch;
  if (b->has_params)
    return plan_shape(P, b->params, "$.batch.params", "", sh);
  json_t *m = json_deep_copy(P->s->base);
  json_t *over = json_pack("{s:{s:i, s:i, s:I}}", "train", "batch_size", 1, "micro_batch_size", 1,
                           "tokens", (json_int_t)1 << 40);
  json_object_update_recursive(m, over);
  json_decref(over);
  rcfg cfg;
  const json_t *layers[] = {P->s->base};
  const char *paths[] = {"$.base"};
  int rc = spec_resolve_config(m, &cfg, layers, paths, 1, "$.batch", "batch ladder", P->pr);
  json_decref(m);
  if (rc)
    return -1;
  rcfg_shape s = {cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.seq_len,
                  cfg.model.vocab_size};
  *sh = s;
  return 0;
}

static void plan_ladder(planner *P) {
  const spec_ladder *b = &P->s->batch;
  rcfg_shape sh;
  if (ladder_shape(P, &sh))
    return;
  const spec_values *bs = &b->batch_size, *ss = &b->seeds;
  size_t nseed = ss->n ? ss->n : 1;
  double D = b->tokens;
  double C = fpt_of(&sh) * D;
  for (size_t i = 0; i < bs->n; i++)
    for (size_t k = 0; k < nseed; k++) {
      draft *d = draft_new(&P->ds, "batch", 2);
      if (!d)
        return;
      char bpath[192], what[512];
      spec_values_path(bs, i, bpath, sizeof bpath);
      d->target_params = b->has_params ? b->params : 0;
      d->target_loss = &b->target_loss;
      if (b->has_params)
        put_shape(d, &sh);
      put_seed(d, ss, k);
      snprintf(d->fallback, sizeof d->fallback, "%s", bpath);
      snprintf(d->context, sizeof d->context,
               "batch ladder run (%s = %d sequences, %d layers x d_model %d)", bpath, (int)bs->v[i],
               sh.n_layer, sh.d_model);
      snprintf(what, sizeof what, "$.batch.tokens with %s = %d sequences", bpath, (int)bs->v[i]);
      d->failed = plan_train(P, d, C, D, (int)bs->v[i], 0, bpath, what) != 0;
    }
}

static void plan_explicit(planner *P) {
  const spec *s = P->s;
  size_t i;
  json_t *run;
  json_array_foreach(s->runs, i, run) {
    draft *d = draft_new(&P->ds, "runs", 3);
    if (!d)
      return;
    d->run_layer = run;
    snprintf(d->layer_path, sizeof d->layer_path, "$.runs[%zu]", i);
    snprintf(d->fallback, sizeof d->fallback, "$.runs[%zu]", i);
    snprintf(d->context, sizeof d->context, "run $.runs[%zu]", i);
    int has_B = sets(run, "train", "batch_size") || s->base_sets_batch;
    int has_lr = sets(run, "train", "lr") || s->base_sets_lr;
    if (has_B && has_lr)
      continue;
    /* the rule needs the run's shape and D: resolve it with a stand-in batch */
    json_t *m = json_deep_copy(s->base);
    json_object_update_recursive(m, run);
    int has_D = sets(m, "train", "tokens");
    if (!has_B && !has_D) {
      char p[64];
      snprintf(p, sizeof p, "$.runs[%zu].train.tokens", i);
      spec_problem_add(P->pr, p,
                       "missing; expected the run's D (here or in $.base.train) so the "
                       "batch rule can choose its batch size (or set "
                       "train.batch_size)");
      json_decref(m);
      d->failed = 1;
      continue;
    }
    if (!has_B) {
      json_t *o = json_pack("{s:{s:i, s:i}}", "train", "batch_size", 1, "micro_batch_size", 1);
      json_object_update_recursive(m, o);
      json_decref(o);
    }
    rcfg cfg;
    const json_t *layers[] = {run, s->base};
    const char *paths[] = {d->layer_path, "$.base"};
    int rc = spec_resolve_config(m, &cfg, layers, paths, 2, d->fallback, d->context, P->pr);
    json_decref(m);
    if (rc) {
      d->failed = 1;
      continue;
    }
    rcfg_shape sh = {cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.seq_len,
                     cfg.model.vocab_size};
    double D = (double)cfg.train.tokens;
    double C = fpt_of(&sh) * D;
    int T = cfg.model.seq_len;
    int B = has_B ? cfg.train.batch_size : rule_batch(&s->batch_rule, C, D, T);
    d->rule_compute = C;
    d->b_opt = b_opt_tokens(&s->batch_rule, C);
    if (!has_B) {
      d->batch_from_rule = 1;
      put(d->over, "train", "batch_size", json_integer(B));
      if (!sets(run, "train", "micro_batch_size") && s->base_sets_micro)
        put(d->over, "train", "micro_batch_size", json_integer(micro_for(B, s->base_micro)));
      if (D < (double)B * T) {
        char p[64];
        snprintf(p, sizeof p, "%s.train.tokens",
                 sets(run, "train", "tokens") ? d->layer_path : "$.base");
        spec_problem_add(P->pr, p,
                         "found %.0f, smaller than one batch of %d x %d = %lld tokens; expected "
                         "D >= one batch",
                         D, B, T, (long long)B * T);
        d->failed = 1;
      }
    }
    if (!has_lr) {
      d->lr_from_rule = 1;
      put(d->over, "train", "lr", json_real(rule_lr(&s->lr_rule, &s->batch_rule, C, B, T)));
    }
  }
}

/* backend, world_size, threads: from $.resources unless base or the run set
 * them (threads always ends up set: see PLAN_GPU_HOST_THREADS) */
static void put_resources(const spec *s, draft *d) {
  const json_t *r = d->run_layer;
  if (!sets(s->base, NULL, "backend") && !sets(r, NULL, "backend"))
    put(d->over, NULL, "backend", json_string(s->gpus > 0 ? "cuda" : "cpu"));
  if (!sets(s->base, NULL, "world_size") && !sets(r, NULL, "world_size"))
    put(d->over, NULL, "world_size", json_integer(s->gpus > 0 ? s->gpus : 1));
  if (!sets(s->base, NULL, "threads") && !sets(r, NULL, "threads"))
    put(d->over, NULL, "threads", json_integer(s->gpus > 0 ? PLAN_GPU_HOST_THREADS : s->cpus));
}

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
  char **w = realloc(p->warnings, (p->n_warnings + 1) * sizeof *w);
  if (!w)
    return;
  p->warnings = w;
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

static int resolve(planner *P, draft *d, plan_run *r) {
  const spec *s = P->s;
  put_resources(s, d);
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
  json_decref(m);
  if (rc)
    return -1;
  if (cfg.checkpoint.every_tokens <= 0)
    cfg.checkpoint.every_tokens = checkpoint_every(&cfg);
  r->config = rcfg_to_json(&cfg);
  if (!r->config || rcfg_hash(&cfg, r->config_hash) != 0)
    return -1;
  rcfg_shape sh = {cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.seq_len,
                   cfg.model.vocab_size};
  r->part = d->part;
  r->n_layer = sh.n_layer;
  r->d_model = sh.d_model;
  r->n_head = sh.n_head;
  r->seq_len = sh.seq_len;
  r->vocab_size = sh.vocab_size;
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
  r->est_seconds = (r->flops + eval_flops) / s->throughput_flops;
  r->target_params = d->target_params;
  r->budget = d->budget;
  r->batch_from_rule = d->batch_from_rule;
  r->lr_from_rule = d->lr_from_rule;
  r->rule_compute = d->rule_compute;
  r->b_opt_tokens = d->b_opt;
  if (d->target_loss && d->target_loss->n) {
    r->target_loss = malloc(d->target_loss->n * sizeof *r->target_loss);
    if (r->target_loss) {
      memcpy(r->target_loss, d->target_loss->v, d->target_loss->n * sizeof *r->target_loss);
      r->n_target_loss = d->target_loss->n;
    }
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

typedef struct hash_ref {
  const char *hash;
  size_t i;
} hash_ref;

static int cmp_hash_refs(const void *a, const void *b) {
  const hash_ref *x = a, *y = b;
  int c = strcmp(x->hash, y->hash);
  return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Identical runs (the same config twice is wasted compute): each run that
 * repeats an earlier one is reported with the first it repeats, in plan
 * order. The hashes are sorted: comparing every pair of SPEC_MAX_RUNS runs
 * cost as much as planning them (a fuzzing timeout). 0 or SS_ENOMEM. */
static int report_duplicates(const plan *p, spec_problems *pr) {
  if (p->n < 2)
    return 0;
  hash_ref *refs = malloc(p->n * sizeof *refs);
  size_t *first = malloc(p->n * sizeof *first);
  if (!refs || !first) {
    free(refs);
    free(first);
    return SS_ENOMEM;
  }
  for (size_t i = 0; i < p->n; i++)
    refs[i] = (hash_ref){p->runs[i].config_hash, i};
  qsort(refs, p->n, sizeof *refs, cmp_hash_refs);
  for (size_t k = 0, g = 0; k < p->n; k++) {
    if (strcmp(refs[k].hash, refs[g].hash))
      g = k; /* a new hash: refs[g] is its first run */
    first[refs[k].i] = refs[g].i;
  }
  for (size_t i = 0; i < p->n; i++) {
    size_t j = first[i];
    if (j == i)
      continue;
    spec_problem_add(pr, "$",
                     "planned runs %zu and %zu are identical (%s, %d layers x d_model %d, "
                     "D = %lld, batch %d, lr %g; config_hash %.12s); expected distinct runs: "
                     "use fewer sizes, a wider range or more distinct values",
                     j, i, p->runs[i].part, p->runs[i].n_layer, p->runs[i].d_model,
                     (long long)p->runs[i].tokens, p->runs[i].batch_size, p->runs[i].lr,
                     p->runs[i].config_hash);
  }
  free(refs);
  free(first);
  return 0;
}

void plan_free(plan *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->n; i++) {
    free(p->runs[i].config);
    free(p->runs[i].target_loss);
  }
  free(p->runs);
  for (size_t i = 0; i < p->n_warnings; i++)
    free(p->warnings[i]);
  free(p->warnings);
  free(p);
}

/* How many runs the spec asks for, before building any (refuses huge
 * products early). */
static double count_runs(const spec *s) {
  double n = 0;
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
  if (s->batch.present)
    n += (double)s->batch.batch_size.n * (double)(s->batch.seeds.n ? s->batch.seeds.n : 1);
  return n;
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
  planner P;
  memset(&P, 0, sizeof P);
  P.s = s;
  P.pr = pr;
  P.shape.aspect_ratio = s->aspect_ratio;
  P.shape.head_size = s->head_size;
  P.T = s->seq_len;
  P.V = s->vocab_size;
  json_t *bb = json_object_get(json_object_get(s->base, "train"), "batch_size");
  P.base_batch = json_is_integer(bb) ? (int)json_integer_value(bb) : 0;

  if (s->method == SPEC_GRID)
    plan_grid(&P);
  else if (s->method == SPEC_ISOFLOP)
    plan_isoflop(&P);
  else if (s->method == SPEC_RUNS)
    plan_explicit(&P);
  if (s->batch.present)
    plan_ladder(&P);

  plan *p = calloc(1, sizeof *p);
  if (!p || (P.ds.n && !(p->runs = calloc(P.ds.n, sizeof *p->runs)))) {
    free(p);
    drafts_free(&P.ds);
    return SS_ENOMEM;
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
  /* resolve every draft even when some points already failed, so that the
   * trainer's problems, duplicates and the time check are reported too */
  for (size_t i = 0; i < P.ds.n; i++) {
    plan_run *r = &p->runs[p->n];
    if (!P.ds.d[i].failed && resolve(&P, &P.ds.d[i], r) == 0) {
      r->index = (int)p->n; /* creation order, the last sort key */
      p->n++;
    }
  }
  if (p->n == 0 && pr->n == before)
    spec_problem_add(pr, "$", "the spec plans no runs; expected at least one");

  if (p->n)
    qsort(p->runs, p->n, sizeof *p->runs, cmp_runs);
  for (size_t i = 0; i < p->n; i++)
    p->runs[i].index = (int)i;

  if (report_duplicates(p, pr) != 0) {
    drafts_free(&P.ds);
    plan_free(p);
    return SS_ENOMEM;
  }

  for (size_t i = 0; i < p->n; i++) {
    p->total_flops += p->runs[i].flops;
    p->total_seconds += p->runs[i].est_seconds;
  }
  p->wall_seconds = p->total_seconds / p->parallel_runs;
  if (s->max_hours > 0 && p->wall_seconds / 3600.0 > s->max_hours)
    spec_problem_add(pr, "$.max_hours",
                     "found %g, but the plan's estimated time is %.3g hours (%zu run%s, %.3g "
                     "FLOPs at throughput_flops %.3g FLOP/s per run, %d at a time); expected at "
                     "least %.3g, or a smaller sweep",
                     s->max_hours, p->wall_seconds / 3600.0, p->n, p->n == 1 ? "" : "s",
                     p->total_flops, s->throughput_flops, s->parallel_runs,
                     p->wall_seconds / 3600.0);
  drafts_free(&P.ds);
  if (pr->n > before) {
    plan_free(p);
    return SS_EINVAL;
  }

  /* warnings: the plan runs, but the user should know */
  char last_pattern[1024] = "";
  double last_tokens = -1;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    if (r->steps < PLAN_FEW_STEPS)
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
    /* the config text names its data; only shard runs can repeat data */
    json_t *c = json_loads(r->config, 0, NULL);
    const char *pattern = json_string_value(json_object_get(json_object_get(c, "data"), "train"));
    if (pattern) {
      if (strcmp(pattern, last_pattern)) {
        snprintf(last_pattern, sizeof last_pattern, "%s", pattern);
        last_tokens = shard_tokens(pattern);
        if (last_tokens < 0)
          add_warning(p,
                      "no file matches the training shards '%s' on this host: data reuse not "
                      "checked",
                      pattern);
      }
      if (last_tokens > 0) {
        double epochs = (double)r->tokens / last_tokens;
        double unique = fmin((double)r->tokens, last_tokens);
        double bound = 5e3 * pow((double)r->nonembedding_params, 0.74);
        if (epochs > 1)
          add_warning(p, "run %zu makes %.2f epochs over the %.4g tokens of '%s': data repeats", i,
                      epochs, last_tokens, pattern);
        if (unique < bound)
          add_warning(p,
                      "run %zu sees %.4g distinct tokens, below Kaplan's overfitting bound "
                      "5e3 * N^0.74 = %.4g for N = %lld",
                      i, unique, bound, (long long)r->nonembedding_params);
      }
    }
    json_decref(c);
  }
  *out = p;
  return 0;
}

/* ---- output ----------------------------------------------------------- */

static json_t *batch_rule_json(const spec_batch_rule *r) {
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:i, s:i, s:s}", "name", PLAN_BATCH_RULE_NAME,
                   "formula",
                   "B_opt = coef * C^exponent tokens; B = nearest power of two of B_opt / "
                   "seq_len sequences in [min_batch, max_batch], halved while D / (B * seq_len) "
                   "< min_steps",
                   "coef", r->coef, "exponent", r->exponent, "min_steps", r->min_steps, "min_batch",
                   r->min_batch, "max_batch", r->max_batch, "source",
                   "DeepSeek LLM (2024) B_opt(C); step floor from the synthetic-corpus "
                   "measurement (SCIENCE.md section 4)");
}

static json_t *lr_rule_json(const spec_lr_rule *r) {
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:s}", "name", PLAN_LR_RULE_NAME, "formula",
                   r->sqrt_batch ? "eta = clamp(coef * C^exponent * sqrt(B * seq_len / B_opt), "
                                   "min, max), 3 significant digits"
                                 : "eta = clamp(coef * C^exponent, min, max), 3 significant "
                                   "digits",
                   "coef", r->coef, "exponent", r->exponent, "min", r->min, "max", r->max,
                   "batch_scaling", r->sqrt_batch ? "sqrt" : "none");
}

json_t *plan_rules_json(const plan *p) {
  json_t *shape =
      json_pack("{s:s, s:f, s:f, s:f}", "name", "fixed_aspect_head", "aspect_ratio",
                p->aspect_ratio, "aspect_band", SHAPE_ASPECT_BAND, "slack", SHAPE_SLACK);
  if (p->head_size)
    json_object_set_new(shape, "head_size", json_integer(p->head_size));
  else
    json_object_set_new(shape, "head_size",
                        json_string("auto: the largest power of two leaving "
                                    "4 heads, within [8, 64]"));
  return json_pack("{s:o, s:o, s:o, s:f, s:i}", "batch", batch_rule_json(&p->batch_rule), "lr",
                   lr_rule_json(&p->lr_rule), "shape", shape, "throughput_flops",
                   p->throughput_flops, "parallel_runs", p->parallel_runs);
}

char *plan_run_json(const plan_run *r, const plan *p) {
  json_t *o = json_object();
  json_object_set_new(o, "index", json_integer(r->index));
  json_object_set_new(o, "part", json_string(r->part));
  json_object_set_new(o, "config_hash", json_string(r->config_hash));
  json_object_set_new(o, "params", json_integer(r->params));
  json_object_set_new(o, "nonembedding_params", json_integer(r->nonembedding_params));
  json_object_set_new(o, "tokens", json_integer(r->tokens));
  json_object_set_new(o, "batch_size", json_integer(r->batch_size));
  json_object_set_new(o, "lr", json_real(r->lr));
  json_object_set_new(o, "steps", json_integer(r->steps));
  json_object_set_new(o, "flops", json_real(r->flops));
  json_object_set_new(o, "flops_6nd", json_real(r->flops_6nd));
  json_object_set_new(o, "est_seconds", json_real(r->est_seconds));
  json_object_set_new(o, "seed", json_integer((json_int_t)r->seed));
  json_object_set_new(o, "target_params",
                      r->target_params > 0 ? json_real(r->target_params) : json_null());
  json_object_set_new(o, "budget", r->budget > 0 ? json_real(r->budget) : json_null());
  if (r->n_target_loss) {
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_target_loss; i++)
      json_array_append_new(a, json_real(r->target_loss[i]));
    json_object_set_new(o, "target_loss", a);
  }
  if (r->batch_from_rule) {
    json_t *b = batch_rule_json(&p->batch_rule);
    json_object_del(b, "formula");
    json_object_del(b, "source");
    json_object_set_new(b, "compute", json_real(r->rule_compute));
    json_object_set_new(b, "b_opt_tokens", json_real(r->b_opt_tokens));
    json_object_set_new(o, "batch_rule", b);
  } else {
    json_object_set_new(o, "batch_rule", json_string("spec"));
  }
  if (r->lr_from_rule) {
    json_t *l = lr_rule_json(&p->lr_rule);
    json_object_del(l, "formula");
    json_object_set_new(l, "compute", json_real(r->rule_compute));
    json_object_set_new(o, "lr_rule", l);
  } else {
    json_object_set_new(o, "lr_rule", json_string("spec"));
  }
  char *rest = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(o);
  if (!rest)
    return NULL;
  /* splice the canonical config in as the second key: {"index":..,"config":<text>,...} */
  size_t n = strlen(rest) + strlen(r->config) + 16;
  char *out = malloc(n);
  if (out) {
    const char *comma = strchr(rest, ',');
    size_t head = comma ? (size_t)(comma - rest) : 0;
    snprintf(out, n, "%.*s,\"config\":%s%s", (int)head, rest, r->config, comma ? comma : "}");
  }
  free(rest);
  return out;
}

char *plan_runs_json(const plan *p) {
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  out[len++] = '[';
  for (size_t i = 0; i < p->n; i++) {
    char *o = plan_run_json(&p->runs[i], p);
    if (!o) {
      free(out);
      return NULL;
    }
    size_t need = len + strlen(o) + 4;
    if (need > cap) {
      while (cap < need)
        cap *= 2;
      char *t = realloc(out, cap);
      if (!t) {
        free(o);
        free(out);
        return NULL;
      }
      out = t;
    }
    if (i)
      out[len++] = ',';
    memcpy(out + len, o, strlen(o));
    len += strlen(o);
    free(o);
  }
  out[len++] = ']';
  out[len] = 0;
  return out;
}

/* 12.8k, 1.31M, 2.5G */
static void si(double x, char *out, size_t n) {
  static const char *const u[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (fabs(x) >= 999.5 && i < 5) {
    x /= 1000;
    i++;
  }
  snprintf(out, n, "%.3g%s", x, u[i]);
}

static void duration(double s, char *out, size_t n) {
  if (s < 60)
    snprintf(out, n, "%.0fs", s < 1 ? 1 : s);
  else if (s < 3600)
    snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else if (s < 86400 * 3)
    snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else
    snprintf(out, n, "%.1fd", s / 86400);
}

void plan_write_table(const plan *p, FILE *f) {
  fprintf(f, "sweep \"%s\" (%s%s): %zu runs; spec digest %.16s\n\n", p->name,
          spec_method_name(p->method),
          p->has_ladder && p->method != SPEC_BATCH ? " + batch ladder" : "", p->n, p->spec_digest);
  fprintf(f, "%5s  %-7s %3s %5s %3s %8s %8s %5s %6s %8s %4s %9s %9s %8s\n", "#", "part", "L", "d",
          "h", "N", "D", "B", "steps", "lr", "seed", "C", "budget", "est.");
  size_t n_brule = 0, n_lrule = 0;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    char N[16], D[16], t[16], budget[16] = "-";
    si((double)r->nonembedding_params, N, sizeof N);
    si((double)r->tokens, D, sizeof D);
    duration(r->est_seconds, t, sizeof t);
    if (r->budget > 0)
      snprintf(budget, sizeof budget, "%.3g", r->budget);
    fprintf(f, "%5zu  %-7s %3d %5d %3d %8s %8s %5d %6lld %8.3g %4llu %9.3g %9s %8s\n", i, r->part,
            r->n_layer, r->d_model, r->n_head, N, D, r->batch_size, (long long)r->steps, r->lr,
            (unsigned long long)r->seed, r->flops, budget, t);
    n_brule += (size_t)r->batch_from_rule;
    n_lrule += (size_t)r->lr_from_rule;
  }
  char t[16], w[16];
  duration(p->total_seconds, t, sizeof t);
  duration(p->wall_seconds, w, sizeof w);
  fprintf(f, "\ntotal: %zu runs, %.3g FLOPs, estimated %s of training", p->n, p->total_flops, t);
  if (p->parallel_runs > 1)
    fprintf(f, " (%s with %d runs at a time)", w, p->parallel_runs);
  fprintf(f, " at %.3g FLOP/s per run", p->throughput_flops);
  if (p->max_hours > 0)
    fprintf(f, "; max_hours %g", p->max_hours);
  fprintf(f, "\n");
  fprintf(f, "N: non-embedding parameters; D: tokens trained; B: sequences per step; C: "
             "training FLOPs, exact count (SCIENCE.md section 1); budget: the isoflop budget "
             "(6ND, or exact with \"flops_count\": \"exact\")\n\n");
  const spec_batch_rule *b = &p->batch_rule;
  const spec_lr_rule *l = &p->lr_rule;
  fprintf(f,
          "batch rule %s (%zu of %zu runs): B_opt = %g * C^%g tokens (DeepSeek), in sequences, "
          "nearest power of two in [%d, %d], halved until D / (B * seq_len) >= %g steps\n",
          PLAN_BATCH_RULE_NAME, n_brule, p->n, b->coef, b->exponent, b->min_batch, b->max_batch,
          b->min_steps);
  fprintf(f,
          "lr rule %s (%zu of %zu runs): eta = %g * C^%g%s, clamped to [%g, %g], 3 "
          "significant digits\n",
          PLAN_LR_RULE_NAME, n_lrule, p->n, l->coef, l->exponent,
          l->sqrt_batch ? " * sqrt(B * seq_len / B_opt)" : "", l->min, l->max);
  if (p->head_size)
    fprintf(f,
            "shape rule: d_model / n_layer = %g (within x%g), head size %d, nearest N (within "
            "%g%% counts as equal)\n",
            p->aspect_ratio, SHAPE_ASPECT_BAND, p->head_size, (SHAPE_SLACK - 1) * 100);
  else
    fprintf(f,
            "shape rule: d_model / n_layer = %g (within x%g), head size the largest power of "
            "two leaving 4 heads in [8, 64], nearest N (within %g%% counts as equal)\n",
            p->aspect_ratio, SHAPE_ASPECT_BAND, (SHAPE_SLACK - 1) * 100);
  for (size_t i = 0; i < p->n_warnings; i++)
    fprintf(f, "warning: %s\n", p->warnings[i]);
}

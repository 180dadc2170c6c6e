/* Planning, drafting: the runs each method asks for, with the batch and
 * learning-rate rules and the shape rule, before they are resolved. */
#include "sweeps/plan_draft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runcfg/flops.h"
#include "runcfg/runcfg.h"
#include "sweeps/plan.h"

static plan__draft *draft_new(plan__drafts *ds, const char *part, int order) {
  if (ds->n == ds->cap) {
    size_t cap = ds->cap ? 2 * ds->cap : 64;
    plan__draft *d = realloc(ds->d, cap * sizeof *d);
    if (!d)
      return NULL;
    ds->d = d;
    ds->cap = cap;
  }
  plan__draft *d = &ds->d[ds->n++];
  memset(d, 0, sizeof *d);
  d->part = part;
  d->part_order = order;
  d->over = json_object();
  return d;
}

void plan__drafts_free(plan__drafts *ds) {
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

/* B_opt(C) in sequences, the nearest power of two within [min_batch,
 * max_batch]: the rule before its step floor. */
static int rule_batch_pow2(const spec_batch_rule *r, double C, int T) {
  double seqs = b_opt_tokens(r, C) / T;
  double e = round(log2(fmax(seqs, 1e-300)));
  int B = e < 0 ? 1 : e > 30 ? (1 << 30) : (1 << (int)e);
  if (B < r->min_batch)
    B = r->min_batch;
  if (B > r->max_batch)
    B = r->max_batch;
  return B;
}

/* Batch size in sequences from the rule (spec.h spec_batch_rule). */
static int rule_batch(const spec_batch_rule *r, double C, double D, int T) {
  int B = rule_batch_pow2(r, C, T);
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

/* A planned batch size of B sequences, with the micro-batch the spec asks
 * for at it (plan_memory.c decides it). */
static void put_batch(const plan__planner *P, plan__draft *d, int B) {
  put(d->over, "train", "batch_size", json_integer(B));
  int micro = plan__micro_batch(P, d, B);
  if (micro)
    put(d->over, "train", "micro_batch_size", json_integer(micro));
}

/* ---- drafting --------------------------------------------------------- */

/* Shape for target N, counted in base's model family; a problem at path
 * when below one head. */
static int plan_shape(plan__planner *P, double target, const char *path, const char *context,
                      rcfg_shape *sh) {
  rcfg_shape s = P->s->model;
  s.n_layer = s.d_model = s.n_head = 0;
  s.seq_len = P->T;
  s.vocab_size = P->V;
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
static int plan_train(plan__planner *P, plan__draft *d, double C, double D, int fixed_B,
                      double fixed_lr, const char *d_path, const char *what) {
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
  if (!P->base_batch || fixed_B)
    put_batch(P, d, B);
  if (fixed_lr > 0) {
    put(d->over, "train", "lr", json_real(fixed_lr));
  } else if (!s->base_sets_lr) {
    put(d->over, "train", "lr", json_real(rule_lr(&s->lr_rule, &s->batch_rule, C, B, T)));
    d->lr_from_rule = 1;
  }
  return 0;
}

static void put_shape(plan__draft *d, const rcfg_shape *sh) {
  put(d->over, "model", "n_layer", json_integer(sh->n_layer));
  put(d->over, "model", "d_model", json_integer(sh->d_model));
  put(d->over, "model", "n_head", json_integer(sh->n_head));
}

static void put_seed(plan__draft *d, const spec_values *seeds, size_t k) {
  if (seeds->n)
    put(d->over, "train", "seed", json_integer((json_int_t)seeds->v[k]));
}

static double fpt_of(const rcfg_shape *sh) { return rcfg_flops_per_token(sh); }

void plan__grid(plan__planner *P) {
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
            plan__draft *d = draft_new(&P->ds, "grid", 0);
            if (!d)
              return;
            double D = ts->v[j];
            d->target_params = ps->v[i];
            put_shape(d, &sh);
            put_seed(d, ss, k);
            char tpath[192], what[512];
            spec_values_path(ts, j, tpath, sizeof tpath);
            snprintf(d->fallback, sizeof d->fallback, "%s", tpath);
            snprintf(d->size_path, sizeof d->size_path, "%s", ppath);
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

void plan__isoflop(plan__planner *P) {
  const spec *s = P->s;
  const spec_values *fs = &s->isoflop.flops, *ss = &s->isoflop.seeds;
  size_t nseed = ss->n ? ss->n : 1;
  for (size_t i = 0; i < fs->n; i++) {
    double C = fs->v[i];
    char cpath[192];
    spec_values_path(fs, i, cpath, sizeof cpath);
    size_t nsz = s->isoflop.centred ? (size_t)s->isoflop.centre_points : s->isoflop.params.n;
    double nc = s->isoflop.centre_coef * pow(C, s->isoflop.centre_exponent);
    /* wsd: the sizes on one log grid for every budget (the first budget's
     * centre and the span's spacing), each budget's centred on the grid
     * point nearest its own centre, so that a size recurs across budgets
     * and its runs branch from one trunk (docs/sweeps.md, "WSD branches") */
    double gstep = nsz > 1 ? pow(s->isoflop.centre_span, 2.0 / (double)(nsz - 1)) : 1.0;
    double nc0 = s->isoflop.centre_coef * pow(fs->v[0], s->isoflop.centre_exponent);
    int shared = s->isoflop.centred && nsz > 1 && P->wsd;
    if (shared)
      nc = nc0 * pow(gstep, round(log(nc / nc0) / log(gstep)));
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
        plan__draft *d = draft_new(&P->ds, "isoflop", 1);
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
static int ladder_shape(plan__planner *P, rcfg_shape *sh) {
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
  *sh = rcfg_shape_of(&cfg);
  return 0;
}

/* A draft for value i of vals (its path, into path, is where its problems
 * fall back to) at seed k of ss, of shape sh where one is given; NULL where
 * memory ran out. */
static plan__draft *draft_value(plan__planner *P, const char *part, int order,
                                const spec_values *vals, size_t i, const spec_values *ss, size_t k,
                                const rcfg_shape *sh, char *path, size_t size) {
  plan__draft *d = draft_new(&P->ds, part, order);
  if (!d)
    return NULL;
  spec_values_path(vals, i, path, size);
  if (sh)
    put_shape(d, sh);
  put_seed(d, ss, k);
  snprintf(d->fallback, sizeof d->fallback, "%s", path);
  return d;
}

/* What every run of a branched ladder shares (ladder_branched). */
typedef struct {
  int b0;          /* the trunk's batch size: the smallest */
  int64_t lcm;     /* the batch sizes' least common multiple */
  double bt;       /* lcm x seq_len: every rung's start and length divide by it */
  double D, delta; /* the trunk's tokens; each branch's */
  double warmup;   /* the trunk's warmup, in tokens */
  json_t *ev;      /* base's eval.every_tokens, or NULL */
  int64_t every;   /* the evaluations' interval, in tokens */
} branched;

/* The batch sizes' least common multiple, capped at 2^40 (no point of a
 * spec is a multiple of that), and the smallest of them into *b0. */
static int64_t batch_lcm(const spec_values *bs, int *b0) {
  int64_t lcm = 1;
  *b0 = (int)bs->v[0];
  for (size_t i = 0; i < bs->n; i++) {
    int64_t x = lcm, y = (int64_t)bs->v[i];
    while (y) {
      int64_t t = x % y;
      x = y;
      y = t;
    }
    lcm = lcm / x * (int64_t)bs->v[i];
    if (lcm > (int64_t)1 << 40)
      lcm = (int64_t)1 << 40;
    *b0 = (int)bs->v[i] < *b0 ? (int)bs->v[i] : *b0;
  }
  return lcm;
}

/* The ladder's tokens and evaluations; whether its branch tokens and
 * base's eval.every_tokens fit them (problems added where not). Every rung
 * starts and ends on one of its own steps: the points and the branch
 * tokens are whole numbers of every batch size's tokens, the lcm times
 * seq_len. Evaluations come every eighth of the branch tokens, so that each
 * rung's steps to the target can be read off; a spec may ask for more
 * often. */
static int branched_of(plan__planner *P, branched *br) {
  const spec_ladder *b = &P->s->batch;
  int T = P->T, bad = 0;
  br->lcm = batch_lcm(&b->batch_size, &br->b0);
  br->bt = (double)br->lcm * T;
  br->D = b->tokens;
  br->delta = b->branch_tokens;
  json_t *wv = json_object_get(json_object_get(P->s->base, "train"), "warmup_tokens");
  br->warmup = json_is_number(wv) ? json_number_value(wv) : floor(0.05 * br->D);
  json_t *ev = json_object_get(json_object_get(P->s->base, "eval"), "every_tokens");
  br->ev = ev;
  br->every = (int64_t)(br->delta / 8) / T * T;
  if (br->every < T)
    br->every = T;
  if (json_is_number(ev) && (json_number_value(ev) <= 0 || json_number_value(ev) > br->delta / 8)) {
    spec_problem_add(P->pr, "$.base.eval.every_tokens",
                     "found %g with $.batch.branch.tokens %.0f; expected from 1 to %.0f (an "
                     "eighth of it), so that each rung's steps to its target can be read off its "
                     "evaluations (or leave it out: the planner sets it)",
                     json_number_value(ev), br->delta, floor(br->delta / 8));
    bad = 1;
  }
  if (json_is_number(ev))
    br->every = (int64_t)json_number_value(ev);
  if (fmod(br->delta, br->bt) != 0) {
    spec_problem_add(P->pr, "$.batch.branch.tokens",
                     "found %.0f tokens, not a whole number of every batch size's tokens (the "
                     "least common multiple of the batch sizes, %lld, x seq_len %d = %.0f "
                     "tokens); expected a multiple of it, so that every rung trains exactly as "
                     "many tokens",
                     br->delta, (long long)br->lcm, T, br->bt);
    bad = 1;
  }
  return bad ? -1 : 0;
}

/* Whether branch point j lies after the trunk's warmup and first
 * evaluation, on every batch size's step, and early enough for its branch
 * to end within the trunk's D (a problem added where not). */
static int branch_point_ok(plan__planner *P, const branched *br, size_t j) {
  const spec_values *at = &P->s->batch.branch_at;
  double x = at->v[j];
  char path[192];
  spec_values_path(at, j, path, sizeof path);
  if (x < br->warmup || x < (double)br->every) {
    int warm = x < br->warmup;
    spec_problem_add(
        P->pr, path, "found %.0f tokens, %s %.0f tokens; expected a branch point after it (%s)", x,
        warm ? "inside the trunk's warmup of" : "before the trunk's first evaluation, at",
        warm ? br->warmup : (double)br->every,
        warm ? "the rates are constant only then"
             : "the rungs' start is read off the trunk's evaluations");
    return 0;
  }
  if (fmod(x, br->bt) != 0) {
    spec_problem_add(P->pr, path,
                     "found %.0f tokens, not a whole number of every batch size's tokens (the "
                     "least common multiple of the batch sizes, %lld, x seq_len %d = %.0f "
                     "tokens); expected a multiple of it, so that every batch size starts on a "
                     "step",
                     x, (long long)br->lcm, P->T, br->bt);
    return 0;
  }
  if (x + br->delta > br->D) {
    spec_problem_add(P->pr, path,
                     "found %.0f tokens: with $.batch.branch.tokens %.0f it runs past the "
                     "trunk's D (%.0f); expected at most %.0f (the trunk is the smallest batch "
                     "size's rung)",
                     x, br->delta, br->D, br->D - br->delta);
    return 0;
  }
  return 1;
}

/* The run of batch size i at seed k: the trunk (j == branch_at.n) or the
 * branch from branch point j, at rate lr0 (the trunk's; from_rule where the
 * rule gave it) scaled to its batch size. 0, or -1 where memory ran out. */
static int branched_run(plan__planner *P, const rcfg_shape *sh, const branched *br, size_t k,
                        size_t j, size_t i, double lr0, int from_rule) {
  const spec *s = P->s;
  const spec_ladder *b = &s->batch;
  const spec_values *bs = &b->batch_size;
  int B = (int)bs->v[i], trunk = j == b->branch_at.n;
  char bpath[192], what[512];
  plan__draft *d = draft_value(P, "bcrit", 2, bs, i, &b->seeds, k, b->has_params ? sh : NULL, bpath,
                               sizeof bpath);
  if (!d)
    return -1;
  d->target_params = b->has_params ? b->params : 0;
  d->bcrit_at = trunk ? 0 : (int64_t)b->branch_at.v[j];
  put(d->over, "train", "schedule", json_string("constant"));
  put(d->over, "train", "warmup_tokens", json_real(br->warmup));
  if (!br->ev)
    put(d->over, "eval", "every_tokens", json_integer(br->every));
  snprintf(d->context, sizeof d->context,
           "branched batch ladder %s (%s = %d sequences, %d layers x d_model %d)",
           trunk ? "trunk" : "rung", bpath, B, sh->n_layer, sh->d_model);
  snprintf(what, sizeof what, "$.batch.tokens with %s = %d sequences", bpath, B);
  double lr = trunk || !s->lr_rule.sqrt_batch ? lr0 : lr0 * sqrt((double)B / br->b0);
  double D = trunk ? br->D : b->branch_at.v[j] + br->delta;
  d->failed = plan_train(P, d, fpt_of(sh) * br->D, D, B, round_sig3(lr), bpath, what) != 0;
  d->lr_from_rule = trunk && from_rule; /* the rungs: the trunk's, scaled */
  return 0;
}

/* The branched ladder (docs/sweeps.md "Critical batch size by branching"):
 * per seed a trunk at the smallest batch size trains D at a constant rate
 * after its warmup; from its checkpoint at each branch point every other
 * batch size trains branch.tokens more at its own rule's rate. All share
 * the warmup (in tokens) and evaluate every eighth of branch.tokens, so the
 * steps each needs to reach its trunk's loss can be read off. */
static void ladder_branched(plan__planner *P, const rcfg_shape *sh) {
  const spec *s = P->s;
  const spec_values *bs = &s->batch.batch_size, *at = &s->batch.branch_at;
  branched br;
  int bad = branched_of(P, &br) != 0;
  for (size_t j = 0; j < at->n; j++)
    bad |= !branch_point_ok(P, &br, j);
  if (bad)
    return;
  /* the trunk's rate (base's, or the rule's at its batch size), and each
   * rung's that times sqrt(B / B0) (Adam's square-root rule, Malladi et al.
   * 2022; "lr_rule": {"batch_scaling": "none"}: the trunk's), unclamped:
   * a larger batch at the same rate is a lower noise temperature, and its
   * loss drops at once like a decay's, which is not the speed-up measured */
  json_t *lv = json_object_get(json_object_get(s->base, "train"), "lr");
  double lr0 = json_is_number(lv)
                   ? json_number_value(lv)
                   : rule_lr(&s->lr_rule, &s->batch_rule, fpt_of(sh) * br.D, br.b0, P->T);
  size_t nseed = s->batch.seeds.n ? s->batch.seeds.n : 1;
  for (size_t k = 0; k < nseed; k++)
    for (size_t j = 0; j <= at->n; j++) /* j == at->n: the trunk */
      for (size_t i = 0; i < bs->n; i++)
        if ((j == at->n) == ((int)bs->v[i] == br.b0) &&
            branched_run(P, sh, &br, k, j, i, lr0, !json_is_number(lv)) != 0)
          return;
}

void plan__ladder(plan__planner *P) {
  const spec_ladder *b = &P->s->batch;
  rcfg_shape sh;
  if (ladder_shape(P, &sh))
    return;
  if (b->branched) {
    ladder_branched(P, &sh);
    return;
  }
  const spec_values *bs = &b->batch_size, *ss = &b->seeds;
  size_t nseed = ss->n ? ss->n : 1;
  double D = b->tokens;
  double C = fpt_of(&sh) * D;
  for (size_t i = 0; i < bs->n; i++)
    for (size_t k = 0; k < nseed; k++) {
      char bpath[192], what[512];
      plan__draft *d =
          draft_value(P, "batch", 2, bs, i, ss, k, b->has_params ? &sh : NULL, bpath, sizeof bpath);
      if (!d)
        return;
      d->target_params = b->has_params ? b->params : 0;
      d->target_loss = &b->target_loss;
      snprintf(d->context, sizeof d->context,
               "batch ladder run (%s = %d sequences, %d layers x d_model %d)", bpath, (int)bs->v[i],
               sh.n_layer, sh.d_model);
      snprintf(what, sizeof what, "$.batch.tokens with %s = %d sequences", bpath, (int)bs->v[i]);
      d->failed = plan_train(P, d, C, D, (int)bs->v[i], 0, bpath, what) != 0;
    }
}

/* The lr tune's runs (sweeps/lr_tune.h): the proxy, d_model =
 * base.model.base_width with the shape rule's head size and aspect ratio
 * (n_layer = d_model / aspect_ratio, rounded, at least 1), trained on D
 * tokens at each rate of the grid (and seed). D is $.lr_tune.tokens, or
 * SPEC_LR_TUNE_TOKENS_PER_PARAM tokens per non-embedding parameter and at
 * least the batch rule's min_steps steps at the rule's batch size (B_opt
 * before its step floor: base's batch size when it fixes one), so that the
 * proxy trains as long as a compute-optimal run, and never for only a few
 * steps. The batch size follows the rule (or base), as a study's runs'
 * does. */
void plan__lr_tune(plan__planner *P) {
  const spec *s = P->s;
  const spec_lr_tune *t = &s->lr_tune;
  int d = t->width;
  if (d <= 0)
    return; /* base_width missing or invalid: the run config's problem */
  int hs = shape_head_size(&P->shape, d);
  if (hs <= 0 || d % hs) {
    spec_problem_add(P->pr, "$.base.model.base_width",
                     "found %d, not a whole number of heads of %d channels (the shape rule's "
                     "head size at that width%s); expected a multiple of %d: the lr tune's "
                     "proxy has d_model = base_width",
                     d, hs, s->head_size ? ", $.shape.head_size" : "", hs);
    return;
  }
  int L = (int)lround(d / s->aspect_ratio);
  rcfg_shape sh = s->model; /* base's family and parametrisation: the proxy's counts */
  sh.n_layer = L < 1 ? 1 : L;
  sh.d_model = d;
  sh.n_head = d / hs;
  sh.seq_len = P->T;
  sh.vocab_size = P->V;
  double N = (double)rcfg_nonembedding_params(&sh), fpt = fpt_of(&sh);
  double D = t->tokens;
  const char *dpath = "$.lr_tune.tokens";
  if (!(D > 0)) {
    D = SPEC_LR_TUNE_TOKENS_PER_PARAM * N;
    int B0 = P->base_batch ? P->base_batch : rule_batch_pow2(&s->batch_rule, fpt * D, P->T);
    D = fmax(D, s->batch_rule.min_steps * B0 * (double)P->T);
    dpath = "$.lr_tune";
  }
  const spec_values *lrs = &t->lr, *ss = &t->seeds;
  size_t nseed = ss->n ? ss->n : 1;
  for (size_t i = 0; i < lrs->n; i++)
    for (size_t k = 0; k < nseed; k++) {
      char lpath[192], what[512];
      plan__draft *dr = draft_value(P, "lr_tune", 0, lrs, i, ss, k, &sh, lpath, sizeof lpath);
      if (!dr)
        return;
      snprintf(dr->size_path, sizeof dr->size_path, "$.base.model.base_width");
      snprintf(dr->context, sizeof dr->context,
               "lr tune run (the proxy: %d layer%s x d_model %d; rate %s)", sh.n_layer,
               sh.n_layer == 1 ? "" : "s", d, lpath);
      snprintf(what, sizeof what, "the lr tune's proxy (%d layer%s x d_model %d, N = %.0f)",
               sh.n_layer, sh.n_layer == 1 ? "" : "s", d, N);
      dr->failed = plan_train(P, dr, fpt * D, D, 0, lrs->v[i], dpath, what) != 0;
    }
}

void plan__explicit(plan__planner *P) {
  const spec *s = P->s;
  size_t i;
  json_t *run;
  json_array_foreach(s->runs, i, run) {
    plan__draft *d = draft_new(&P->ds, "runs", 3);
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
    rcfg_shape sh = rcfg_shape_of(&cfg);
    double D = (double)cfg.train.tokens;
    double C = fpt_of(&sh) * D;
    int T = cfg.model.seq_len;
    int B = has_B ? cfg.train.batch_size : rule_batch(&s->batch_rule, C, D, T);
    d->rule_compute = C;
    d->b_opt = b_opt_tokens(&s->batch_rule, C);
    if (!has_B) {
      d->batch_from_rule = 1;
      put_batch(P, d, B);
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
void plan__put_resources(const spec *s, plan__draft *d) {
  const json_t *r = d->run_layer;
  if (!sets(s->base, NULL, "backend") && !sets(r, NULL, "backend"))
    put(d->over, NULL, "backend", json_string(s->gpus > 0 ? "cuda" : "cpu"));
  if (!sets(s->base, NULL, "world_size") && !sets(r, NULL, "world_size"))
    put(d->over, NULL, "world_size", json_integer(s->gpus > 0 ? s->gpus : s->ranks));
  if (!sets(s->base, NULL, "threads") && !sets(r, NULL, "threads"))
    put(d->over, NULL, "threads", json_integer(s->gpus > 0 ? PLAN_GPU_HOST_THREADS : s->cpus));
}

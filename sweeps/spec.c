/* Sweep specs: Jansson parsing and validation, every problem at once. */
#include "sweeps/spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/err.h"
#include "common/fileio.h"
#include "common/names.h"
#include "runcfg/runcfg.h"
#include "sweeps/shapes.h"
#include "sweeps/spec_json.h"

/* ---- the spec --------------------------------------------------------- */

const char *spec_method_name(spec_method m) {
  switch (m) {
  case SPEC_GRID:
    return "grid";
  case SPEC_ISOFLOP:
    return "isoflop";
  case SPEC_BATCH:
    return "batch";
  default:
    return "runs";
  }
}

static const spec__kind K_PARAMS = {1, 1e13, 0, 1, "a target non-embedding parameter count"};
static const spec__kind K_TOKENS = {1, 9007199254740992.0, 0, 1, "a token count D"};
static const spec__kind K_FLOPS = {1, 1e30, 0, 1, "a compute budget in FLOPs"};
static const spec__kind K_BATCH = {1, 1 << 20, 1, 1, "a batch size in sequences"};
static const spec__kind K_LR = {1e-12, 10, 0, 1, "a learning rate"};
static const spec__kind K_SEED = {0, 9007199254740992.0, 1, 1, "a training seed"};
static const spec__kind K_LOSS = {1e-9, 100, 0, 1, "a target loss in nats per token"};

static void free_values(spec_values *v) {
  free(v->v);
  v->v = NULL;
  v->n = 0;
}

void spec_free(spec *s) {
  if (!s)
    return;
  free_values(&s->grid.params);
  free_values(&s->grid.tokens);
  free_values(&s->grid.batch_size);
  free_values(&s->grid.lr);
  free_values(&s->grid.seeds);
  free_values(&s->isoflop.flops);
  free_values(&s->isoflop.params);
  free_values(&s->isoflop.seeds);
  free_values(&s->batch.batch_size);
  free_values(&s->batch.target_loss);
  free_values(&s->batch.seeds);
  free_values(&s->batch.branch_at);
  free_values(&s->lr_tune.lr);
  free_values(&s->lr_tune.seeds);
  json_decref(s->base);
  json_decref(s->root);
  free(s->file);
  free(s);
}

/* Every number as a real, recursively (canonical form for the digest). */
static json_t *canon(const json_t *v) {
  if (json_is_integer(v))
    return json_real((double)json_integer_value(v));
  if (json_is_object(v)) {
    json_t *o = json_object();
    const char *k;
    json_t *e;
    json_object_foreach((json_t *)v, k, e) json_object_set_new(o, k, canon(e));
    return o;
  }
  if (json_is_array(v)) {
    json_t *a = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) json_array_append_new(a, canon(e));
    return a;
  }
  return json_deep_copy(v);
}

char *spec_canonical(const spec *s) {
  json_t *c = canon(s->root);
  char *t = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  json_decref(c);
  return t;
}

/* e as an integer where it is a real with a whole value below 2^53 (one a
 * double holds exactly), else NULL */
static json_t *as_integer(const json_t *e) {
  double x = json_real_value(e);
  if (json_is_real(e) && x == floor(x) && fabs(x) < 9007199254740992.0)
    return json_integer((json_int_t)x);
  return NULL;
}

/* spec_json.h */
void sweeps__integral(json_t *v) {
  const char *k;
  json_t *e, *n;
  size_t i;
  if (json_is_object(v)) {
    json_object_foreach(v, k, e) {
      if ((n = as_integer(e)) != NULL)
        json_object_set_new(v, k, n);
      else
        sweeps__integral(e);
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, e) {
      if ((n = as_integer(e)) != NULL)
        json_array_set_new(v, i, n);
      else
        sweeps__integral(e);
    }
  }
}

/* A key of base that the method plans: set there, it is a conflict. */
static void conflict(spec_problems *pr, const json_t *base, const char *key_path, const char *why) {
  if (!spec__sets_key(base, key_path))
    return;
  char full[160], f[64];
  snprintf(full, sizeof full, "$.base%s", key_path + 1);
  const json_t *at = base;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", key_path + 2);
  char *save = NULL;
  for (char *seg = strtok_r(buf, ".", &save); seg; seg = strtok_r(NULL, ".", &save))
    at = json_object_get(at, seg);
  spec__found(at, f, sizeof f);
  spec_problem_add(pr, full, "found %s, but %s; expected it left out of base", f, why);
}

/* $.batch.<key>, which must be one value (what: what it is, for the
 * message), into *out; 1 when it was, 0 when absent or refused. */
static int ladder_value(spec_problems *pr, json_t *sec, const char *key, const spec__kind *k,
                        int required, const char *what, double *out) {
  spec_values v;
  if (!spec__get_values(pr, sec, "$.batch", key, k, required, &v))
    return 0;
  int one = v.n == 1;
  if (one)
    *out = v.v[0];
  else
    spec_problem_add(
        pr, v.path, "found %zu values, expected one %s: a ladder runs at fixed N and D", v.n, what);
  free_values(&v);
  return one;
}

static void parse_ladder(spec_problems *pr, json_t *sec, spec_ladder *b) {
  static const char *const keys[] = {"params", "tokens", "batch_size", "target_loss",
                                     "seeds",  "branch", NULL};
  spec__check_keys(pr, sec, "$.batch", keys);
  b->present = 1;
  if (ladder_value(pr, sec, "params", &K_PARAMS, 0, "target N", &b->params))
    b->has_params = 1;
  ladder_value(pr, sec, "tokens", &K_TOKENS, 1, "D", &b->tokens);
  spec__kind ladder = K_BATCH;
  ladder.min_count = 4;
  ladder.what = "a ladder of batch sizes in sequences (the fit of S = S_min + E_min / B needs "
                "its 2 parameters plus 2)";
  spec__get_values(pr, sec, "$.batch", "batch_size", &ladder, 1, &b->batch_size);
  json_t *br = spec__get_object(pr, sec, "$.batch", "branch", 0,
                                "{\"at\": [tokens, ...], \"tokens\": tokens}");
  if (br) {
    /* the targets are the trunk's own losses: no target_loss */
    static const char *const bkeys[] = {"at", "tokens", NULL};
    spec__check_keys(pr, br, "$.batch.branch", bkeys);
    b->branched = 1;
    spec__kind at = K_TOKENS;
    at.what = "the trunk's token counts the other batch sizes branch from";
    spec__get_values(pr, br, "$.batch.branch", "at", &at, 1, &b->branch_at);
    spec__get_number(pr, br, "$.batch.branch", "tokens", &b->branch_tokens, 1, 9007199254740992.0,
                     1, 0, "the tokens each branch trains past its checkpoint");
    if (json_object_get(sec, "target_loss"))
      spec_problem_add(pr, "$.batch.target_loss",
                       "found target losses with $.batch.branch; expected none: a branched "
                       "ladder's target at each branch point is the loss its trunk reaches a "
                       "quarter of branch.tokens later");
  } else
    spec__get_values(pr, sec, "$.batch", "target_loss", &K_LOSS, 1, &b->target_loss);
  spec__get_values(pr, sec, "$.batch", "seeds", &K_SEED, 0, &b->seeds);
}

/* Resolves base alone through the trainer (train batch/tokens neutralised:
 * planning sets them) to learn seq_len, vocab_size and the model family, and
 * to report base's own problems with $.base paths. */
static void probe_base(spec *s, spec_problems *pr) {
  json_t *m = json_deep_copy(s->base);
  json_t *over = json_pack("{s:{s:i, s:i, s:I}}", "train", "batch_size", 1, "micro_batch_size", 1,
                           "tokens", (json_int_t)1 << 40);
  json_object_update_recursive(m, over);
  json_decref(over);
  rcfg cfg;
  const json_t *layers[] = {s->base};
  const char *paths[] = {"$.base"};
  if (spec_resolve_config(m, &cfg, layers, paths, 1, "$.base", "base", pr) == 0) {
    s->seq_len = cfg.model.seq_len;
    s->vocab_size = cfg.model.vocab_size;
    s->model = rcfg_shape_of(&cfg);
  }
  json_decref(m);
  json_t *train = json_object_get(s->base, "train");
  s->base_sets_batch = json_object_get(train, "batch_size") != NULL;
  s->base_sets_lr = json_object_get(train, "lr") != NULL;
  json_t *mb = json_object_get(train, "micro_batch_size");
  s->base_sets_micro = mb != NULL && json_is_integer(mb) && json_integer_value(mb) > 0;
  s->base_micro = s->base_sets_micro ? (int)json_integer_value(mb) : 0;
}

static void parse_resources(spec *s, json_t *root, spec_problems *pr) {
  json_t *res = spec__get_object(pr, root, "$", "resources", 0, "{\"gpus\": n} or {\"cpus\": n}");
  const char *backend = NULL;
  json_t *b = json_object_get(s->base, "backend");
  if (json_is_string(b))
    backend = json_string_value(b);
  s->max_memory_gib = SPEC_MAX_MEMORY_GIB;
  s->ranks = 1;
  if (res) {
    static const char *const keys[] = {"gpus", "cpus", "ranks", "max_memory_gib", NULL};
    spec__check_keys(pr, res, "$.resources", keys);
    spec__get_number(pr, res, "$.resources", "max_memory_gib", &s->max_memory_gib, 1.0 / 1024,
                     1 << 20, 0, 0, "a number of GiB per GPU (or per CPU run) from 1/1024 to 2^20");
    spec__get_int(pr, res, "$.resources", "gpus", &s->gpus, 1, 1024, 0);
    spec__get_int(pr, res, "$.resources", "cpus", &s->cpus, 1, 1024, 0);
    spec__get_int(pr, res, "$.resources", "ranks", &s->ranks, 1, 1024, 0);
    if (json_object_get(res, "gpus") && json_object_get(res, "ranks"))
      spec_problem_add(pr, "$.resources.ranks",
                       "found %d with \"gpus\": a GPU run has one rank per GPU; expected "
                       "\"ranks\" only with \"cpus\"",
                       s->ranks);
    int has_g = json_object_get(res, "gpus") != NULL, has_c = json_object_get(res, "cpus") != NULL;
    if (has_g == has_c)
      spec_problem_add(pr, "$.resources",
                       "found %s, expected exactly one of \"gpus\" (GPUs per "
                       "run) or \"cpus\" (CPU threads per run)",
                       has_g ? "both \"gpus\" and \"cpus\"" : "neither \"gpus\" nor \"cpus\"");
  } else if (backend && !strcmp(backend, "cuda")) {
    s->gpus = 1;
  } else {
    json_t *t = json_object_get(s->base, "threads");
    s->cpus = json_is_integer(t) && json_integer_value(t) > 0 && json_integer_value(t) <= 1024
                  ? (int)json_integer_value(t)
                  : 1;
  }
  if (s->gpus > 0 && backend && strcmp(backend, "cuda"))
    spec_problem_add(pr, "$.base.backend",
                     "found \"%s\", but $.resources.gpus asks for %d GPU%s per run; expected "
                     "\"cuda\" (or leave it out)",
                     backend, s->gpus, s->gpus == 1 ? "" : "s");
  if (s->cpus > 0 && backend && strcmp(backend, "cpu") && res)
    spec_problem_add(pr, "$.base.backend",
                     "found \"%s\", but $.resources.cpus asks for CPU threads; expected \"cpu\" "
                     "(or resources {\"gpus\": n})",
                     backend);
  json_t *ws = json_object_get(s->base, "world_size");
  int want_ws = s->gpus > 0 ? s->gpus : s->ranks;
  if (ws && json_is_integer(ws) && json_integer_value(ws) != want_ws)
    spec_problem_add(pr, "$.base.world_size",
                     "found %lld, but the run's resources give %d rank%s; expected %d (or leave "
                     "it out: it follows $.resources)",
                     (long long)json_integer_value(ws), want_ws, want_ws == 1 ? "" : "s", want_ws);
  json_t *th = json_object_get(s->base, "threads");
  if (res && s->cpus > 0 && th && json_is_integer(th) && json_integer_value(th) != s->cpus)
    spec_problem_add(pr, "$.base.threads",
                     "found %lld, but $.resources.cpus is %d; expected %d (or leave it out: it "
                     "follows $.resources.cpus)",
                     (long long)json_integer_value(th), s->cpus, s->cpus);
}

static void parse_rules(spec *s, json_t *root, spec_problems *pr) {
  spec_batch_rule *br = &s->batch_rule;
  br->coef = SPEC_BATCH_COEF;
  br->exponent = SPEC_BATCH_EXPONENT;
  br->min_steps = SPEC_BATCH_MIN_STEPS;
  br->min_batch = SPEC_BATCH_MIN;
  br->max_batch = SPEC_BATCH_MAX;
  json_t *o = spec__get_object(pr, root, "$", "batch_rule", 0, "an object");
  if (o) {
    static const char *const keys[] = {"coef",      "exponent",  "min_steps",
                                       "min_batch", "max_batch", NULL};
    spec__check_keys(pr, o, "$.batch_rule", keys);
    spec__get_number(pr, o, "$.batch_rule", "coef", &br->coef, 1e-12, 1e12, 0, 0,
                     "a positive number (B_opt = coef * C^exponent tokens)");
    spec__get_number(pr, o, "$.batch_rule", "exponent", &br->exponent, -2, 2, 0, 0,
                     "a number from -2 to 2");
    spec__get_number(pr, o, "$.batch_rule", "min_steps", &br->min_steps, 1, 1e9, 0, 0,
                     "a number of optimizer steps from 1 to 1e9");
    spec__get_int(pr, o, "$.batch_rule", "min_batch", &br->min_batch, 1, 1 << 20, 0);
    spec__get_int(pr, o, "$.batch_rule", "max_batch", &br->max_batch, 1, 1 << 20, 0);
    if (br->min_batch > br->max_batch)
      spec_problem_add(pr, "$.batch_rule.min_batch", "found %d, expected at most max_batch (%d)",
                       br->min_batch, br->max_batch);
  }
  spec_lr_rule *lr = &s->lr_rule;
  lr->coef = SPEC_LR_COEF;
  lr->exponent = SPEC_LR_EXPONENT;
  lr->min = SPEC_LR_MIN;
  lr->max = SPEC_LR_MAX;
  lr->sqrt_batch = 1;
  o = spec__get_object(pr, root, "$", "lr_rule", 0, "an object");
  if (o) {
    static const char *const keys[] = {"coef", "exponent", "min", "max", "batch_scaling", NULL};
    static const char *const scalings[] = {"sqrt", "none", NULL};
    spec__check_keys(pr, o, "$.lr_rule", keys);
    spec__get_number(pr, o, "$.lr_rule", "coef", &lr->coef, 1e-12, 1e6, 0, 0,
                     "a positive number (eta = coef * C^exponent)");
    spec__get_number(pr, o, "$.lr_rule", "exponent", &lr->exponent, -2, 2, 0, 0,
                     "a number from -2 to 2");
    spec__get_number(pr, o, "$.lr_rule", "min", &lr->min, 1e-12, 10, 0, 0,
                     "a learning rate in (0, 10]");
    spec__get_number(pr, o, "$.lr_rule", "max", &lr->max, 1e-12, 10, 0, 0,
                     "a learning rate in (0, 10]");
    const char *sc = spec__get_string(pr, o, "$.lr_rule", "batch_scaling", scalings, 0,
                                      "how the rate follows B / B_opt");
    if (sc)
      lr->sqrt_batch = !strcmp(sc, "sqrt");
    if (lr->min > lr->max)
      spec_problem_add(pr, "$.lr_rule.min", "found %g, expected at most max (%g)", lr->min,
                       lr->max);
  }
}

static void parse_isoflop(spec *s, json_t *sec, spec_problems *pr) {
  static const char *const keys[] = {"flops", "params", "centre", "flops_count", "seeds", NULL};
  static const char *const counts[] = {"6nd", "exact", NULL};
  spec__check_keys(pr, sec, "$.isoflop", keys);
  spec__get_values(pr, sec, "$.isoflop", "flops", &K_FLOPS, 1, &s->isoflop.flops);
  int has_p = json_object_get(sec, "params") != NULL;
  int has_c = json_object_get(sec, "centre") != NULL;
  if (has_p == has_c)
    spec_problem_add(pr, "$.isoflop",
                     "found %s; expected exactly one: \"params\" (the same sizes at every "
                     "budget) or \"centre\" (sizes around N_opt(C) at each budget)",
                     has_p ? "both \"params\" and \"centre\""
                           : "neither \"params\" nor \"centre\"");
  spec__kind kp = K_PARAMS;
  kp.min_count = 3;
  kp.what = "target non-embedding parameter counts, at least 3 per budget (a parabola in log N "
            "needs 3 points)";
  if (has_p)
    spec__get_values(pr, sec, "$.isoflop", "params", &kp, 1, &s->isoflop.params);
  json_t *c = has_c ? spec__get_object(pr, sec, "$.isoflop", "centre", 1,
                                       "{\"coef\", \"exponent\", \"span\", \"points\"}")
                    : NULL;
  if (c) {
    static const char *const ckeys[] = {"coef", "exponent", "span", "points", NULL};
    spec__check_keys(pr, c, "$.isoflop.centre", ckeys);
    s->isoflop.centred = 1;
    spec__get_number(pr, c, "$.isoflop.centre", "coef", &s->isoflop.centre_coef, 1e-30, 1e30, 0, 1,
                     "a positive number: the centre is N_c = coef * C^exponent");
    spec__get_number(pr, c, "$.isoflop.centre", "exponent", &s->isoflop.centre_exponent, 0, 1, 0, 1,
                     "a number from 0 to 1 (Chinchilla: about 0.5)");
    spec__get_number(pr, c, "$.isoflop.centre", "span", &s->isoflop.centre_span, 1.01, 1e4, 0, 1,
                     "a factor from 1.01 to 1e4: sizes run from N_c / span to N_c * span");
    spec__get_int(pr, c, "$.isoflop.centre", "points", &s->isoflop.centre_points, 3, 1000, 1);
  }
  const char *fc =
      spec__get_string(pr, sec, "$.isoflop", "flops_count", counts, 0, "how D follows from C");
  s->isoflop.exact = fc && !strcmp(fc, "exact");
  spec__get_values(pr, sec, "$.isoflop", "seeds", &K_SEED, 0, &s->isoflop.seeds);
}

static void parse_grid(spec *s, json_t *sec, spec_problems *pr) {
  static const char *const keys[] = {"params", "tokens", "batch_size", "lr", "seeds", NULL};
  spec__check_keys(pr, sec, "$.grid", keys);
  spec__get_values(pr, sec, "$.grid", "params", &K_PARAMS, 1, &s->grid.params);
  spec__get_values(pr, sec, "$.grid", "tokens", &K_TOKENS, 1, &s->grid.tokens);
  spec__get_values(pr, sec, "$.grid", "batch_size", &K_BATCH, 0, &s->grid.batch_size);
  spec__get_values(pr, sec, "$.grid", "lr", &K_LR, 0, &s->grid.lr);
  spec__get_values(pr, sec, "$.grid", "seeds", &K_SEED, 0, &s->grid.seeds);
}

static void parse_runs(spec *s, json_t *root, spec_problems *pr) {
  json_t *r = json_object_get(root, "runs");
  if (!json_is_array(r)) {
    char f[64];
    spec__found(r, f, sizeof f);
    spec_problem_add(pr, "$.runs", "found %s %s, expected a list of partial run configs",
                     spec__type_name(r), f);
    return;
  }
  if (json_array_size(r) == 0) {
    spec_problem_add(pr, "$.runs",
                     "found an empty list, expected at least one partial run "
                     "config");
    return;
  }
  if (json_array_size(r) > SPEC_MAX_RUNS)
    spec_problem_add(pr, "$.runs", "found %zu runs, expected at most %d", json_array_size(r),
                     SPEC_MAX_RUNS);
  size_t i;
  json_t *e;
  json_array_foreach(r, i, e) {
    if (!json_is_object(e)) {
      char p[64], f[64];
      snprintf(p, sizeof p, "$.runs[%zu]", i);
      spec__found(e, f, sizeof f);
      spec_problem_add(pr, p, "found %s %s, expected a partial run config (an object)",
                       spec__type_name(e), f);
    }
  }
  s->runs = r;
}

/* The text as a JSON object, or NULL with the problem. */
static json_t *load_root(const char *text, const char *name, spec_problems *pr) {
  json_error_t je;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    char where[600];
    snprintf(where, sizeof where, "%s:%d:%d", name, je.line, je.column);
    spec_problem_add(pr, where,
                     "malformed JSON: %s; expected a JSON object (RFC 8259: quoted "
                     "keys, no trailing commas, no comments)",
                     je.text);
    return NULL;
  }
  if (!json_is_object(root)) {
    spec_problem_add(pr, "$", "found %s, expected a JSON object", spec__type_name(root));
    json_decref(root);
    return NULL;
  }
  return root;
}

/* name, description, method; returns the method's name, NULL when invalid */
static const char *parse_header(spec *s, json_t *root, spec_problems *pr) {
  static const char *const top[] = {"name",
                                    "description",
                                    "method",
                                    "base",
                                    "grid",
                                    "isoflop",
                                    "batch",
                                    "runs",
                                    "resources",
                                    "priority",
                                    "max_attempts",
                                    "max_hours",
                                    "throughput_flops",
                                    "parallel_runs",
                                    "shape",
                                    "batch_rule",
                                    "lr_rule",
                                    "branches",
                                    "lr_tune",
                                    "adaptive",
                                    NULL};
  spec__check_keys(pr, root, "$", top);
  s->name = spec__get_string(pr, root, "$", "name", NULL, 1, "a sweep name (a string)");
  if (s->name) {
    /* a name is shown in tables (scalesweep status, the pages): a control
     * or format character in it (U+202E) would reorder or hide the line */
    size_t n = strlen(s->name), at;
    long cp;
    if (n == 0 || n > 128) {
      spec_problem_add(pr, "$.name",
                       "found a name of %zu bytes, expected 1 to 128 printable characters", n);
    } else if (ss_text_hidden(s->name, n, &at, &cp)) {
      char what[160];
      if (cp < 0)
        snprintf(what, sizeof what, "a byte that is not UTF-8 at byte %zu", at);
      else
        snprintf(what, sizeof what,
                 "U+%04lX at byte %zu (a control or Unicode format character, which reorders "
                 "or hides text where the name is shown)",
                 cp, at);
      spec_problem_add(pr, "$.name", "found %s, expected 1 to 128 printable characters", what);
    }
  }
  s->description = spec__get_string(pr, root, "$", "description", NULL, 0, "a string");
  static const char *const methods[] = {"grid", "isoflop", "batch", "runs", NULL};
  const char *m = spec__get_string(pr, root, "$", "method", methods, 1, "the planning method");
  s->method = !m                      ? SPEC_GRID
              : !strcmp(m, "grid")    ? SPEC_GRID
              : !strcmp(m, "isoflop") ? SPEC_ISOFLOP
              : !strcmp(m, "batch")   ? SPEC_BATCH
                                      : SPEC_RUNS;
  return m;
}

/* base, priority, attempts, time, resources, throughput, shape, rules */
static void parse_settings(spec *s, json_t *root, spec_problems *pr) {
  json_t *base = spec__get_object(pr, root, "$", "base", 0, "a partial run config (an object)");
  s->base = base ? json_incref(base) : json_object();
  s->priority = 0;
  spec__get_int(pr, root, "$", "priority", &s->priority, -1000000, 1000000, 0);
  s->max_attempts = 3;
  spec__get_int(pr, root, "$", "max_attempts", &s->max_attempts, 1, 100, 0);
  spec__get_number(pr, root, "$", "max_hours", &s->max_hours, 1e-6, 1e6, 0, 0,
                   "a number of hours in (0, 1e6]");
  s->parallel_runs = 1;
  spec__get_int(pr, root, "$", "parallel_runs", &s->parallel_runs, 1, 100000, 0);
  s->branches = 1;
  json_t *br = json_object_get(root, "branches");
  if (br && !json_is_boolean(br))
    spec_problem_add(pr, "$.branches",
                     "found %s, expected true or false (wsd runs branch from "
                     "longer ones: docs/sweeps.md, \"WSD branches\")",
                     spec__type_name(br));
  else if (br)
    s->branches = json_is_true(br);
  parse_resources(s, root, pr);
  s->throughput_flops = s->gpus > 0 ? SPEC_GPU_FLOPS * s->gpus : SPEC_CPU_FLOPS;
  spec__get_number(pr, root, "$", "throughput_flops", &s->throughput_flops, 1e3, 1e21, 0, 0,
                   "a training throughput per run in FLOP/s, from 1e3 to 1e21");
  s->aspect_ratio = SHAPE_ASPECT_DEFAULT;
  s->head_size = 0;
  json_t *sh = spec__get_object(pr, root, "$", "shape", 0, "{\"aspect_ratio\", \"head_size\"}");
  if (sh) {
    static const char *const keys[] = {"aspect_ratio", "head_size", NULL};
    spec__check_keys(pr, sh, "$.shape", keys);
    spec__get_number(pr, sh, "$.shape", "aspect_ratio", &s->aspect_ratio, 1, 1024, 0, 0,
                     "d_model / n_layer: a number from 1 to 1024");
    spec__get_int(pr, sh, "$.shape", "head_size", &s->head_size, 1, 4096, 0);
  }
  parse_rules(s, root, pr);
}

/* the method's section, and no other method's (a batch ladder may ride
 * along with any other method) */
static void parse_sections(spec *s, json_t *root, const char *m, spec_problems *pr) {
  static const char *const sections[] = {"grid", "isoflop", "batch", "runs"};
  for (int i = 0; i < 4; i++) {
    int mine = (int)s->method == i;
    int present = json_object_get(root, sections[i]) != NULL;
    char p[32];
    snprintf(p, sizeof p, "$.%s", sections[i]);
    if (mine && !present)
      spec_problem_add(pr, p, "missing; method \"%s\" needs a \"%s\" section", sections[i],
                       sections[i]);
    if (!mine && present && !(i == SPEC_BATCH && s->method != SPEC_BATCH)) {
      spec_problem_add(pr, p,
                       "found a \"%s\" section, but method is \"%s\"; expected only the "
                       "\"%s\" section (and optionally a \"batch\" ladder)",
                       sections[i], m, m);
    }
  }
  json_t *sec;
  if (s->method == SPEC_GRID && (sec = spec__get_object(pr, root, "$", "grid", 0, "an object")))
    parse_grid(s, sec, pr);
  if (s->method == SPEC_ISOFLOP &&
      (sec = spec__get_object(pr, root, "$", "isoflop", 0, "an object")))
    parse_isoflop(s, sec, pr);
  if ((sec = spec__get_object(pr, root, "$", "batch", 0, "an object")))
    parse_ladder(pr, sec, &s->batch);
  if (s->method == SPEC_RUNS && json_object_get(root, "runs"))
    parse_runs(s, root, pr);
}

/* $.lr_tune: the rates tried on the proxy, its D and seeds */
static void parse_lr_tune(spec *s, json_t *root, spec_problems *pr) {
  json_t *sec = spec__get_object(pr, root, "$", "lr_tune", 0,
                                 "{\"lr\": rates, \"tokens\": D, \"seeds\": seeds}");
  if (!sec)
    return;
  static const char *const keys[] = {"lr", "tokens", "seeds", NULL};
  spec__check_keys(pr, sec, "$.lr_tune", keys);
  spec_lr_tune *t = &s->lr_tune;
  t->present = 1;
  spec__kind k = K_LR;
  k.min_count = SPEC_LR_TUNE_MIN_RATES;
  k.what = "learning rates to try on the proxy, at least 3: a best rate inside the grid needs "
           "a rate on each side of it";
  spec__get_values(pr, sec, "$.lr_tune", "lr", &k, 1, &t->lr);
  spec__get_number(pr, sec, "$.lr_tune", "tokens", &t->tokens, 1, 9007199254740992.0, 0, 0,
                   "a token count D for each tune run, from 1 to 2^53 (or leave it out: 20 "
                   "tokens per non-embedding parameter of the proxy, and at least the batch "
                   "rule's min_steps steps)");
  spec__get_values(pr, sec, "$.lr_tune", "seeds", &K_SEED, 0, &t->seeds);
}

/* An lr tune carries its rate to every width only under muP, and it
 * chooses every run's rate: nothing else may set one. */
static void check_lr_tune(spec *s, spec_problems *pr) {
  json_t *model = json_object_get(s->base, "model");
  json_t *par = json_object_get(model, "parametrization");
  if (!json_is_string(par) || strcmp(json_string_value(par), "mup")) {
    char f[64] = "none (the default, \"sp\")";
    if (par)
      spec__found(par, f, sizeof f);
    spec_problem_add(pr, "$.base.model.parametrization",
                     "found %s, but $.lr_tune tunes the learning rate on a proxy of width "
                     "base_width to carry it to every width, which holds under muP only (in "
                     "standard parametrization the best rate falls as the model widens); "
                     "expected \"mup\", with base_width the proxy's d_model",
                     f);
  }
  json_t *bw = json_object_get(model, "base_width");
  if (json_is_integer(bw) && json_integer_value(bw) > 0 && json_integer_value(bw) <= 1 << 16)
    s->lr_tune.width = (int)json_integer_value(bw);
  conflict(pr, s->base, "$.train.lr", "$.lr_tune chooses the study's learning rate on the proxy");
  if (s->lr_tune.seeds.n)
    conflict(pr, s->base, "$.train.seed", "$.lr_tune.seeds sets it for the tune's runs");
  if (s->method == SPEC_GRID && s->grid.lr.n)
    spec_problem_add(pr, "$.grid.lr",
                     "found %zu rate%s, but $.lr_tune chooses the study's learning rate on the "
                     "proxy; expected it left out (or no $.lr_tune, for a grid over rates at "
                     "every size)",
                     s->grid.lr.n, s->grid.lr.n == 1 ? "" : "s");
  size_t i;
  json_t *run;
  if (s->method == SPEC_RUNS && json_is_array(s->runs))
    json_array_foreach(s->runs, i, run) {
      /* the proxy is base's: a run of another width or parametrization
       * would not train at the rate tuned for it */
      static const char *const proxy_keys[] = {"parametrization", "base_width"};
      for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(json_object_get(run, "model"), proxy_keys[k]);
        if (!v)
          continue;
        char path[96], f[64];
        snprintf(path, sizeof path, "$.runs[%zu].model.%s", i, proxy_keys[k]);
        spec__found(v, f, sizeof f);
        spec_problem_add(pr, path,
                         "found %s, but $.lr_tune tunes the rate on base's proxy (base.model's "
                         "parametrization and base_width); expected it left out of the run",
                         f);
      }
      json_t *lr = json_object_get(json_object_get(run, "train"), "lr");
      if (!lr)
        continue;
      char path[64], f[64];
      snprintf(path, sizeof path, "$.runs[%zu].train.lr", i);
      spec__found(lr, f, sizeof f);
      spec_problem_add(pr, path,
                       "found %s, but $.lr_tune chooses every run's learning rate on the proxy; "
                       "expected it left out",
                       f);
    }
}

/* base must not set what the method plans */
static void check_base(const spec *s, spec_problems *pr) {
  int shapes = s->method != SPEC_BATCH || s->batch.has_params;
  const char *planner = s->method == SPEC_GRID      ? "$.grid.params chooses the model shapes"
                        : s->method == SPEC_ISOFLOP ? "the isoflop method chooses the model "
                                                      "shapes (use $.shape to steer them)"
                                                    : "$.batch.params chooses the model shape";
  if (shapes) {
    conflict(pr, s->base, "$.model.n_layer", planner);
    conflict(pr, s->base, "$.model.d_model", planner);
    conflict(pr, s->base, "$.model.n_head", planner);
  }
  conflict(pr, s->base, "$.train.tokens",
           s->method == SPEC_ISOFLOP ? "the isoflop method sets D = C / (6 N)"
                                     : "the method's \"tokens\" sets D");
  if (s->method == SPEC_BATCH)
    conflict(pr, s->base, "$.train.batch_size", "$.batch.batch_size sets the ladder");
  if (s->method == SPEC_GRID && s->grid.batch_size.n)
    conflict(pr, s->base, "$.train.batch_size", "$.grid.batch_size sets it");
  if (s->method == SPEC_GRID && s->grid.lr.n)
    conflict(pr, s->base, "$.train.lr", "$.grid.lr sets it");
  int seeds = (s->method == SPEC_GRID && s->grid.seeds.n) ||
              (s->method == SPEC_ISOFLOP && s->isoflop.seeds.n) ||
              (s->method == SPEC_BATCH && s->batch.seeds.n);
  if (seeds)
    conflict(pr, s->base, "$.train.seed", "the method's \"seeds\" sets it");
}

int spec_parse(const char *text, const char *name, spec **out, spec_problems *pr) {
  *out = NULL;
  size_t before = pr->n;
  json_t *root = load_root(text, name, pr);
  if (!root)
    return SS_EINVAL;
  spec *s = calloc(1, sizeof *s);
  if (!s) {
    json_decref(root);
    return SS_ENOMEM;
  }
  s->root = root;
  s->file = spec__dupstr(name);
  const char *m = parse_header(s, root, pr);
  parse_settings(s, root, pr);
  if (m)
    parse_sections(s, root, m, pr);
  if (m && s->method != SPEC_RUNS)
    check_base(s, pr);
  parse_lr_tune(s, root, pr);
  if (s->lr_tune.present && json_is_object(s->base))
    check_lr_tune(s, pr);
  if (m)
    spec__parse_adaptive(&s->adaptive, root, (int)s->method, s->lr_tune.present,
                         s->isoflop.flops.n * (s->isoflop.centred ? (size_t)s->isoflop.centre_points
                                                                  : s->isoflop.params.n),
                         pr);
  /* base's own problems, with $.base paths */
  if (json_is_object(s->base))
    probe_base(s, pr);
  if (pr->n > before) {
    spec_free(s);
    return SS_EINVAL;
  }
  char *c = spec_canonical(s);
  if (!c) {
    spec_free(s);
    return SS_ENOMEM;
  }
  digest_sha256_hex(c, strlen(c), s->digest);
  free(c);
  *out = s;
  return 0;
}

int spec_load(const char *path, spec **out, spec_problems *pr) {
  *out = NULL;
  char *text, msg[512];
  int rc = fio_read_all(path, &text, NULL, msg, sizeof msg);
  if (rc) {
    /* the message starts with the path, which the problem names already */
    const char *m = strncmp(msg, path, strlen(path)) == 0 ? msg + strlen(path) : msg;
    spec_problem_add(pr, path, "%s", m[0] == ':' ? m + 2 : m);
    return rc;
  }
  rc = spec_parse(text, path, out, pr);
  free(text);
  return rc;
}

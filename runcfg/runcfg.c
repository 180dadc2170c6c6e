/* Run config: JSON (cJSON) -> rcfg, with defaults and validation; the
 * canonical text and its hash. */
#include "runcfg/runcfg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/err.h"
#include "common/fileio.h"

typedef rcfg_problems problems;

/* Adds a problem at path; past RCFG_PROBLEMS_MAX only counted. */
static void problem(problems *p, const char *path, const char *fmt, ...) {
  if (p->n++ >= RCFG_PROBLEMS_MAX)
    return;
  rcfg_problem *it = &p->items[p->n - 1];
  snprintf(it->path, sizeof it->path, "%s", path);
  it->line = it->col = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(it->message, sizeof it->message, fmt, ap);
  va_end(ap);
}

/* A short rendering of a JSON value for "found ..." messages: at most 40
 * characters, longer ones cut to 37 and "..." */
static void found(const cJSON *v, char *out, size_t n) {
  char *s = cJSON_PrintUnformatted(v);
  size_t len = s ? strlen(s) : 0;
  snprintf(out, n, "%.*s%s", len > 40 ? 37 : (int)len, s ? s : "?", len > 40 ? "..." : "");
  free(s);
}

static const char *type_name(const cJSON *v) {
  if (cJSON_IsNumber(v))
    return "a number";
  if (cJSON_IsString(v))
    return "a string";
  if (cJSON_IsBool(v))
    return "a boolean";
  if (cJSON_IsNull(v))
    return "null";
  if (cJSON_IsArray(v))
    return "an array";
  return "an object";
}

/* The NULL-terminated list as "a, b, c" (quoted: "\"a\", \"b\"") */
static void key_list(char *out, size_t n, const char *const *list, int quoted) {
  size_t at = 0;
  out[0] = 0;
  for (const char *const *a = list; a && *a && at < n; a++) {
    int w = snprintf(out + at, n - at, quoted ? "%s\"%s\"" : "%s%s", a == list ? "" : ", ", *a);
    at += w > 0 ? (size_t)w : 0;
  }
}

static int listed(const char *const *list, const char *s) {
  for (const char *const *a = list; *a; a++)
    if (strcmp(s, *a) == 0)
      return 1;
  return 0;
}

/* Flags keys of obj that are not in the NULL-terminated list allowed. */
static void check_keys(problems *p, const cJSON *obj, const char *path,
                       const char *const *allowed) {
  const cJSON *c;
  cJSON_ArrayForEach(c, obj) {
    if (listed(allowed, c->string))
      continue;
    char list[256], full[192];
    key_list(list, sizeof list, allowed, 0);
    snprintf(full, sizeof full, "%s.%s", path, c->string);
    problem(p, full, "unknown key; expected one of: %s", list);
  }
}

/* Section lookup: absent -> NULL; present but not an object -> problem. */
static const cJSON *section(problems *p, const cJSON *root, const char *key, const char *path) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, key);
  if (s && !cJSON_IsObject(s)) {
    problem(p, path, "expected an object, found %s", type_name(s));
    return NULL;
  }
  return s;
}

static void get_num(problems *p, const cJSON *obj, const char *path, const char *key, double *out,
                    double lo, double hi, const char *range) {
  const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!v)
    return;
  char full[128];
  snprintf(full, sizeof full, "%s.%s", path, key);
  if (!cJSON_IsNumber(v)) {
    char f[64];
    found(v, f, sizeof f);
    problem(p, full, "expected a number %s, found %s %s", range, type_name(v), f);
    return;
  }
  double x = v->valuedouble;
  if (!(x >= lo && x <= hi)) {
    problem(p, full, "found %.17g, expected a number %s", x, range);
    return;
  }
  *out = x;
}

static void get_i64(problems *p, const cJSON *obj, const char *path, const char *key, int64_t *out,
                    int64_t lo, int64_t hi) {
  const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!v)
    return;
  char full[128];
  snprintf(full, sizeof full, "%s.%s", path, key);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
    char f[64];
    found(v, f, sizeof f);
    problem(p, full, "expected an integer from %lld to %lld, found %s", (long long)lo,
            (long long)hi, f);
    return;
  }
  double x = v->valuedouble;
  if (!(x >= (double)lo && x <= (double)hi)) {
    problem(p, full, "found %.17g, expected an integer from %lld to %lld", x, (long long)lo,
            (long long)hi);
    return;
  }
  *out = (int64_t)x;
}

static void get_int(problems *p, const cJSON *obj, const char *path, const char *key, int *out,
                    int lo, int hi) {
  int64_t x = *out;
  get_i64(p, obj, path, key, &x, lo, hi);
  *out = (int)x;
}

static void get_str(problems *p, const cJSON *obj, const char *path, const char *key, char *out,
                    size_t n, const char *const *choices) {
  const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!v)
    return;
  char full[128];
  snprintf(full, sizeof full, "%s.%s", path, key);
  char allowed[160];
  key_list(allowed, sizeof allowed, choices, 1);
  if (!cJSON_IsString(v)) {
    char f[64];
    found(v, f, sizeof f);
    problem(p, full, "expected a string%s%s, found %s %s", choices ? " among " : "", allowed,
            type_name(v), f);
    return;
  }
  if (strlen(v->valuestring) >= n) {
    problem(p, full, "string too long (%zu bytes, at most %zu)", strlen(v->valuestring), n - 1);
    return;
  }
  if (choices && !listed(choices, v->valuestring)) {
    problem(p, full, "found \"%s\", expected one of %s", v->valuestring, allowed);
    return;
  }
  snprintf(out, n, "%s", v->valuestring);
}

static void get_bool(problems *p, const cJSON *obj, const char *path, const char *key, int *out) {
  const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!v)
    return;
  if (!cJSON_IsBool(v)) {
    char f[64], full[128];
    found(v, f, sizeof f);
    snprintf(full, sizeof full, "%s.%s", path, key);
    problem(p, full, "expected true or false, found %s", f);
    return;
  }
  *out = cJSON_IsTrue(v);
}

static int has(const cJSON *obj, const char *key) {
  return obj && cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
}

/* line and column (1-based) of a byte position in text */
static void line_col(const char *text, const char *pos, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (const char *c = text; c < pos && *c; c++) {
    if (*c == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

const char *rcfg_prec_name(rcfg_prec p) {
  return p == RCFG_BF16 ? "bf16" : p == RCFG_FP16 ? "fp16" : "fp32";
}

/* The root object of text, or NULL with the malformed-JSON (line and
 * column, no path) or not-an-object problem in p. */
static cJSON *parse_root(const char *text, problems *p) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    int line, col;
    line_col(text, at ? at : text, &line, &col);
    char near[16] = "";
    for (int i = 0; at && at[i] && i < 12; i++)
      near[i] = (at[i] == '\n' || at[i] == '\r' || at[i] == '\t') ? ' ' : at[i];
    problem(p, "",
            "malformed JSON near '%s'; expected a JSON object (RFC 8259: quoted keys, no "
            "trailing commas, no comments)",
            near);
    p->items[0].line = line;
    p->items[0].col = col;
    return NULL;
  }
  if (!cJSON_IsObject(root)) {
    problem(p, "$", "expected a JSON object, found %s", type_name(root));
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

static void parse_synth(problems *p, const cJSON *syn, rcfg_synth *sp) {
  static const char *const synth_keys[] = {"letters", "words", "min_len", "max_len",
                                           "zipf",    "seed",  NULL};
  static const char *const at = "$.data.synthetic";
  check_keys(p, syn, at, synth_keys);
  get_int(p, syn, at, "letters", &sp->letters, 1, 255);
  get_int(p, syn, at, "words", &sp->words, 1, 10000000);
  get_int(p, syn, at, "min_len", &sp->min_len, 1, 64);
  get_int(p, syn, at, "max_len", &sp->max_len, 1, 64);
  get_num(p, syn, at, "zipf", &sp->zipf, 1e-6, 100.0, "in (0, 100]");
  int64_t seed = (int64_t)sp->seed;
  get_i64(p, syn, at, "seed", &seed, 0, (int64_t)1 << 53);
  sp->seed = (uint64_t)seed;
  if (sp->min_len > sp->max_len)
    problem(p, "$.data.synthetic.min_len", "found %d, expected <= max_len (%d)", sp->min_len,
            sp->max_len);
}

/* data comes first: the vocabulary default depends on it */
static void parse_data(problems *p, const cJSON *data, rcfg *cfg) {
  static const char *const data_keys[] = {"train", "val", "synthetic", NULL};
  if (data)
    check_keys(p, data, "$.data", data_keys);
  cfg->data.synth = (rcfg_synth){26, 4096, 2, 8, 1.2, 1};
  int has_shards = has(data, "train") || has(data, "val");
  cfg->data.synthetic = !has_shards;
  if (has_shards && has(data, "synthetic"))
    problem(p, "$.data", "give either \"synthetic\" or \"train\"/\"val\" shards, not both");
  if (has_shards) {
    get_str(p, data, "$.data", "train", cfg->data.train, sizeof cfg->data.train, NULL);
    get_str(p, data, "$.data", "val", cfg->data.val, sizeof cfg->data.val, NULL);
    if (!has(data, "train"))
      problem(p, "$.data.train", "missing; expected a token shard path or glob");
    if (!has(data, "val"))
      problem(p, "$.data.val", "missing; expected a token shard path or glob");
    return;
  }
  const cJSON *syn = section(p, data, "synthetic", "$.data.synthetic");
  if (syn)
    parse_synth(p, syn, &cfg->data.synth);
}

static const char *const family_names[] = {"gpt2", "llama", NULL};
static const char *const param_names[] = {"sp", "mup", NULL};

/* The llama-only keys, refused in a gpt2 model. */
static const char *const llama_keys[] = {"rope_theta",     "mlp_ratio", "mlp_multiple_of",
                                         "tie_embeddings", "qk_norm",   NULL};

static void parse_model(problems *p, const cJSON *model, rcfg *cfg) {
  static const char *const model_keys[] = {
      "n_layer",         "d_model",         "n_head",     "seq_len",    "vocab_size",
      "family",          "parametrization", "base_width", "rope_theta", "mlp_ratio",
      "mlp_multiple_of", "tie_embeddings",  "qk_norm",    NULL};
  if (model)
    check_keys(p, model, "$.model", model_keys);
  int letters = cfg->data.synth.letters;
  cfg->model.n_layer = 2;
  cfg->model.d_model = 64;
  cfg->model.n_head = 4;
  cfg->model.seq_len = 64;
  cfg->model.vocab_size = cfg->data.synthetic ? letters + 1 : 256;
  get_int(p, model, "$.model", "n_layer", &cfg->model.n_layer, 1, 1024);
  get_int(p, model, "$.model", "d_model", &cfg->model.d_model, 1, 1 << 16);
  get_int(p, model, "$.model", "n_head", &cfg->model.n_head, 1, 1024);
  get_int(p, model, "$.model", "seq_len", &cfg->model.seq_len, 2, 1 << 16);
  get_int(p, model, "$.model", "vocab_size", &cfg->model.vocab_size, 2, 65536);
  if (cfg->model.d_model % cfg->model.n_head)
    problem(p, "$.model.d_model",
            "found %d, expected a multiple of n_head (%d): each head gets d_model / n_head "
            "channels",
            cfg->model.d_model, cfg->model.n_head);
  if (cfg->data.synthetic && cfg->model.vocab_size < letters + 1)
    problem(p, "$.model.vocab_size",
            "found %d, expected at least letters + 1 = %d for the synthetic corpus",
            cfg->model.vocab_size, letters + 1);

  char fam[16] = "gpt2", par[16] = "sp";
  int before = p->n;
  get_str(p, model, "$.model", "family", fam, sizeof fam, family_names);
  int fam_bad = p->n > before; /* said once: its keys are not flagged as gpt2's too */
  get_str(p, model, "$.model", "parametrization", par, sizeof par, param_names);
  cfg->model.family = strcmp(fam, "llama") == 0 ? RCFG_LLAMA : RCFG_GPT2;
  cfg->model.parametrization = strcmp(par, "mup") == 0 ? RCFG_MUP : RCFG_SP;
  cfg->model.base_width = 0;
  if (cfg->model.parametrization == RCFG_MUP) {
    if (!has(model, "base_width"))
      problem(p, "$.model.base_width",
              "missing; parametrization \"mup\" needs the d_model of the proxy its learning "
              "rate was tuned at (docs/models.md, \"muP\")");
    get_int(p, model, "$.model", "base_width", &cfg->model.base_width, 1, 1 << 16);
  } else if (has(model, "base_width")) {
    problem(p, "$.model.base_width", "only with \"parametrization\": \"mup\" (found \"%s\")", par);
  }
  if (cfg->model.family == RCFG_LLAMA) {
    cfg->model.rope_theta = 10000.0;
    cfg->model.mlp_ratio = 8.0 / 3.0;
    cfg->model.mlp_multiple_of = 32;
    cfg->model.tie_embeddings = 0;
    cfg->model.qk_norm = 0;
    get_num(p, model, "$.model", "rope_theta", &cfg->model.rope_theta, 1.0, 1e12, "from 1 to 1e12");
    get_num(p, model, "$.model", "mlp_ratio", &cfg->model.mlp_ratio, 0.125, 64.0,
            "from 0.125 to 64");
    get_int(p, model, "$.model", "mlp_multiple_of", &cfg->model.mlp_multiple_of, 1, 4096);
    get_bool(p, model, "$.model", "tie_embeddings", &cfg->model.tie_embeddings);
    get_bool(p, model, "$.model", "qk_norm", &cfg->model.qk_norm);
    int hs = cfg->model.n_head > 0 ? cfg->model.d_model / cfg->model.n_head : 0;
    /* a d_model that n_head does not divide is reported where it is checked */
    if (hs % 2 && cfg->model.n_head > 0 && cfg->model.d_model % cfg->model.n_head == 0)
      problem(p, "$.model.n_head",
              "found %d, expected a head count that leaves an even head size (d_model / n_head "
              "= %d): rotary embeddings turn channel pairs",
              cfg->model.n_head, hs);
  } else {
    cfg->model.rope_theta = cfg->model.mlp_ratio = 0.0;
    cfg->model.mlp_multiple_of = cfg->model.tie_embeddings = cfg->model.qk_norm = 0;
    for (const char *const *k = llama_keys; *k && !fam_bad; k++)
      if (has(model, *k)) {
        char full[64];
        snprintf(full, sizeof full, "$.model.%s", *k);
        problem(p, full, "only with \"family\": \"llama\" (found \"%s\")", fam);
      }
  }
}

/* train.batch_size, micro_batch_size and tokens (the defaults of the rest
 * follow from tokens) */
static void parse_batch(problems *p, const cJSON *train, rcfg *cfg) {
  cfg->train.batch_size = 8;
  get_int(p, train, "$.train", "batch_size", &cfg->train.batch_size, 1, 1 << 20);
  cfg->train.micro_batch_size = cfg->train.batch_size;
  get_int(p, train, "$.train", "micro_batch_size", &cfg->train.micro_batch_size, 1, 1 << 20);
  if (cfg->train.batch_size % cfg->train.micro_batch_size)
    problem(p, "$.train.micro_batch_size", "found %d, expected a divisor of batch_size (%d)",
            cfg->train.micro_batch_size, cfg->train.batch_size);
  int64_t step_tokens = (int64_t)cfg->train.batch_size * cfg->model.seq_len;
  cfg->train.tokens = step_tokens * 100;
  get_i64(p, train, "$.train", "tokens", &cfg->train.tokens, 1, (int64_t)1 << 53);
  if (cfg->train.tokens < step_tokens)
    problem(p, "$.train.tokens",
            "found %lld, expected at least one batch: batch_size x seq_len = %lld",
            (long long)cfg->train.tokens, (long long)step_tokens);
}

static void parse_train(problems *p, const cJSON *train, rcfg *cfg) {
  static const char *const train_keys[] = {
      "batch_size",   "micro_batch_size", "tokens",    "lr",   "warmup_tokens", "schedule",
      "min_lr_ratio", "weight_decay",     "grad_clip", "seed", "decay_frac",    NULL};
  static const char *const schedules[] = {"cosine", "constant", "wsd", NULL};
  if (train)
    check_keys(p, train, "$.train", train_keys);
  parse_batch(p, train, cfg);
  cfg->train.lr = 1e-3;
  get_num(p, train, "$.train", "lr", &cfg->train.lr, 1e-12, 10.0, "in (0, 10]");
  cfg->train.warmup_tokens = floor(0.05 * (double)cfg->train.tokens);
  get_num(p, train, "$.train", "warmup_tokens", &cfg->train.warmup_tokens, 0.0, 1e18, ">= 0");
  snprintf(cfg->train.schedule, sizeof cfg->train.schedule, "cosine");
  get_str(p, train, "$.train", "schedule", cfg->train.schedule, sizeof cfg->train.schedule,
          schedules);
  cfg->train.min_lr_ratio = 0.1;
  get_num(p, train, "$.train", "min_lr_ratio", &cfg->train.min_lr_ratio, 0.0, 1.0, "in [0, 1]");
  /* wsd: the last decay_frac of the steps decay; only wsd has the key */
  cfg->train.decay_frac = 0.0;
  if (strcmp(cfg->train.schedule, "wsd") == 0) {
    cfg->train.decay_frac = 0.2;
    get_num(p, train, "$.train", "decay_frac", &cfg->train.decay_frac, 1e-9, 1.0, "in (0, 1]");
  } else if (train && cJSON_GetObjectItemCaseSensitive(train, "decay_frac")) {
    problem(p, "$.train.decay_frac",
            "found a decay fraction with schedule \"%s\", expected it "
            "only with \"wsd\"",
            cfg->train.schedule);
  }
  cfg->train.weight_decay = 0.1;
  get_num(p, train, "$.train", "weight_decay", &cfg->train.weight_decay, 0.0, 10.0, "in [0, 10]");
  cfg->train.grad_clip = 1.0;
  get_num(p, train, "$.train", "grad_clip", &cfg->train.grad_clip, 0.0, 1e9,
          ">= 0 (0 turns clipping off)");
  int64_t seed = 1;
  get_i64(p, train, "$.train", "seed", &seed, 0, (int64_t)1 << 53);
  cfg->train.seed = (uint64_t)seed;
}

static void parse_optimizer(problems *p, const cJSON *opt, rcfg *cfg) {
  static const char *const opt_keys[] = {"name", "beta1", "beta2", "eps", "zero", NULL};
  static const char *const opt_names[] = {"adamw", "adamw8bit", NULL};
  if (opt)
    check_keys(p, opt, "$.optimizer", opt_keys);
  snprintf(cfg->optimizer.name, sizeof cfg->optimizer.name, "adamw");
  get_str(p, opt, "$.optimizer", "name", cfg->optimizer.name, sizeof cfg->optimizer.name,
          opt_names);
  cfg->optimizer.beta1 = 0.9;
  cfg->optimizer.beta2 = 0.95;
  cfg->optimizer.eps = 1e-8;
  get_num(p, opt, "$.optimizer", "beta1", &cfg->optimizer.beta1, 0.0, 0.999999, "in [0, 1)");
  get_num(p, opt, "$.optimizer", "beta2", &cfg->optimizer.beta2, 0.0, 0.999999, "in [0, 1)");
  get_num(p, opt, "$.optimizer", "eps", &cfg->optimizer.eps, 1e-30, 1.0, "in (0, 1]");
  get_int(p, opt, "$.optimizer", "zero", &cfg->optimizer.zero, 0, 1);
}

/* memory, eval and checkpoint */
static void parse_schedule(problems *p, const cJSON *mem, const cJSON *eval, const cJSON *ckpt,
                           rcfg *cfg) {
  static const char *const mem_keys[] = {"recompute", NULL};
  static const char *const eval_keys[] = {"every_tokens", "tokens", NULL};
  static const char *const ckpt_keys[] = {"dir", "every_tokens", NULL};
  if (mem)
    check_keys(p, mem, "$.memory", mem_keys);
  get_bool(p, mem, "$.memory", "recompute", &cfg->memory.recompute);
  if (eval)
    check_keys(p, eval, "$.eval", eval_keys);
  cfg->eval.every_tokens = cfg->train.tokens / 10;
  get_i64(p, eval, "$.eval", "every_tokens", &cfg->eval.every_tokens, 0, (int64_t)1 << 53);
  cfg->eval.tokens = (int64_t)cfg->model.seq_len * 64;
  get_i64(p, eval, "$.eval", "tokens", &cfg->eval.tokens, 1, (int64_t)1 << 40);
  if (cfg->eval.tokens < cfg->model.seq_len)
    problem(p, "$.eval.tokens", "found %lld, expected at least one window (seq_len = %d)",
            (long long)cfg->eval.tokens, cfg->model.seq_len);
  if (ckpt)
    check_keys(p, ckpt, "$.checkpoint", ckpt_keys);
  get_str(p, ckpt, "$.checkpoint", "dir", cfg->checkpoint.dir, sizeof cfg->checkpoint.dir, NULL);
  get_i64(p, ckpt, "$.checkpoint", "every_tokens", &cfg->checkpoint.every_tokens, 0,
          (int64_t)1 << 53);
}

static void parse_precision(problems *p, const cJSON *root, rcfg *cfg) {
  static const char *const precs[] = {"fp32", "bf16", "fp16", NULL};
  char prec[8] = "fp32";
  get_str(p, root, "$", "precision", prec, sizeof prec, precs);
  cfg->precision = strcmp(prec, "bf16") == 0   ? RCFG_BF16
                   : strcmp(prec, "fp16") == 0 ? RCFG_FP16
                                               : RCFG_FP32;
}

/* backend, world_size, threads */
static void parse_device(problems *p, const cJSON *root, rcfg *cfg) {
  static const char *const backends[] = {"cpu", "cuda", NULL};
  snprintf(cfg->backend, sizeof cfg->backend, "cpu");
  get_str(p, root, "$", "backend", cfg->backend, sizeof cfg->backend, backends);
  cfg->world_size = 1;
  get_int(p, root, "$", "world_size", &cfg->world_size, 1, 1024);
  /* each rank takes an equal share of every step's micro-batches */
  int ws = cfg->world_size, B = cfg->train.batch_size;
  const cJSON *train = cJSON_GetObjectItemCaseSensitive(root, "train");
  if (ws > 1 && !cJSON_GetObjectItemCaseSensitive(train, "micro_batch_size") && B % ws == 0)
    cfg->train.micro_batch_size = B / ws;
  if (ws > 1 && B % ((int64_t)cfg->train.micro_batch_size * ws))
    problem(p, "$.world_size",
            "found %d: batch_size %d is not a multiple of micro_batch_size %d x world_size", ws, B,
            cfg->train.micro_batch_size);
  if (cfg->optimizer.zero && ws == 1)
    problem(p, "$.optimizer.zero", "found 1, expected 0 with world_size 1 (nothing to shard)");
  cfg->threads = omp_get_num_procs();
  get_int(p, root, "$", "threads", &cfg->threads, 1, 1024);
  /* TF32 only means something for cuBLAS's fp32 products: on there unless
   * switched off, and a true elsewhere is a mistake worth saying */
  int applies = strcmp(cfg->backend, "cuda") == 0 && cfg->precision == RCFG_FP32;
  int tf32 = applies;
  get_bool(p, root, "$", "tf32", &tf32);
  if (tf32 && !applies)
    problem(p, "$.tf32",
            "found true with backend \"%s\" and precision \"%s\", expected false or no key: "
            "TF32 applies to backend \"cuda\" at precision \"fp32\" only",
            cfg->backend, rcfg_prec_name(cfg->precision));
  cfg->tf32 = tf32 && applies;
}

/* trainer: a name a worker declares (the scheduler places the run only on a
 * worker that offers it) */
static void parse_trainer(problems *p, const cJSON *root, rcfg *cfg) {
  snprintf(cfg->trainer, sizeof cfg->trainer, "builtin");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "trainer");
  if (!v)
    return;
  if (!cJSON_IsString(v) || !ss_trainer_name_ok(v->valuestring)) {
    char f[64];
    found(v, f, sizeof f);
    problem(p, "$.trainer",
            "found %s, expected a trainer's name: 1 to %d letters, digits, '_', '-' or '.' "
            "(\"builtin\", the default, is scalesweep train; others are the names workers "
            "declare with --trainer NAME=COMMAND)",
            f, SS_TRAINER_NAME_MAX);
    return;
  }
  snprintf(cfg->trainer, sizeof cfg->trainer, "%s", v->valuestring);
}

/* reproducible: "machine" (the default) or "portable" */
static void parse_reproducible(problems *p, const cJSON *root, rcfg *cfg) {
  static const char *const modes[] = {"machine", "portable", NULL};
  char mode[16] = "machine";
  get_str(p, root, "$", "reproducible", mode, sizeof mode, modes);
  cfg->reproducible = strcmp(mode, "portable") == 0 ? RCFG_REPRO_PORTABLE : RCFG_REPRO_MACHINE;
}

int rcfg_parse_problems(const char *text, rcfg *cfg, rcfg_problems *out) {
  problems *p = out;
  p->n = 0;
  cJSON *root = parse_root(text, p);
  if (!root)
    return SS_EINVAL;
  static const char *const top_keys[] = {"model",     "data",         "train",   "optimizer",
                                         "precision", "memory",       "eval",    "checkpoint",
                                         "backend",   "world_size",   "threads", "tf32",
                                         "trainer",   "reproducible", NULL};
  check_keys(p, root, "$", top_keys);
  memset(cfg, 0, sizeof *cfg);
  /* sections in this order, so their problems come in this order */
  static const char *const keys[] = {"model",  "data", "train",     "optimizer",
                                     "memory", "eval", "checkpoint"};
  const cJSON *sec[7];
  for (int i = 0; i < 7; i++) {
    char path[32];
    snprintf(path, sizeof path, "$.%s", keys[i]);
    sec[i] = section(p, root, keys[i], path);
  }
  parse_data(p, sec[1], cfg);
  parse_model(p, sec[0], cfg);
  parse_train(p, sec[2], cfg);
  parse_optimizer(p, sec[3], cfg);
  parse_precision(p, root, cfg);
  parse_schedule(p, sec[4], sec[5], sec[6], cfg);
  parse_device(p, root, cfg);
  parse_trainer(p, root, cfg);
  parse_reproducible(p, root, cfg);
  cJSON_Delete(root);
  return p->n ? SS_EINVAL : 0;
}

void rcfg_problems_text(const rcfg_problems *pr, const char *name, char *err, size_t errlen) {
  size_t at = 0;
  if (errlen)
    err[0] = 0;
  int n = pr->n < RCFG_PROBLEMS_MAX ? pr->n : RCFG_PROBLEMS_MAX;
  for (int i = 0; i < n && at + 1 < errlen; i++) {
    const rcfg_problem *it = &pr->items[i];
    int w = it->line ? snprintf(err + at, errlen - at, "%s%s:%d:%d: %s", at ? "\n" : "", name,
                                it->line, it->col, it->message)
                     : snprintf(err + at, errlen - at, "%s%s: %s: %s", at ? "\n" : "", name,
                                it->path, it->message);
    if (w < 0)
      break;
    at = at + (size_t)w < errlen ? at + (size_t)w : errlen - 1;
  }
}

int rcfg_parse(const char *text, const char *name, rcfg *cfg, char *err, size_t errlen) {
  rcfg_problems pr;
  int rc = rcfg_parse_problems(text, cfg, &pr);
  rcfg_problems_text(&pr, name, err, errlen);
  return rc;
}

int rcfg_load(const char *path, rcfg *cfg, char *err, size_t errlen) {
  char *text;
  int rc = fio_read_all(path, &text, NULL, err, errlen);
  if (rc)
    return rc;
  rc = rcfg_parse(text, path, cfg, err, errlen);
  free(text);
  return rc;
}

/* The canonical config as a cJSON tree: every key rcfg_schema lists that
 * applies to c, in the fixed order of the text (NULL when out of memory). */
cJSON *rcfg_to_tree(const rcfg *c) {
  cJSON *root = cJSON_CreateObject();
  cJSON *m = cJSON_AddObjectToObject(root, "model");
  cJSON_AddNumberToObject(m, "n_layer", c->model.n_layer);
  cJSON_AddNumberToObject(m, "d_model", c->model.d_model);
  cJSON_AddNumberToObject(m, "n_head", c->model.n_head);
  cJSON_AddNumberToObject(m, "seq_len", c->model.seq_len);
  cJSON_AddNumberToObject(m, "vocab_size", c->model.vocab_size);
  /* the family's and parametrisation's keys only where they are not gpt2's
   * and sp's: configs from before them keep their text and hash */
  if (c->model.family == RCFG_LLAMA) {
    cJSON_AddStringToObject(m, "family", "llama");
    cJSON_AddNumberToObject(m, "rope_theta", c->model.rope_theta);
    cJSON_AddNumberToObject(m, "mlp_ratio", c->model.mlp_ratio);
    cJSON_AddNumberToObject(m, "mlp_multiple_of", c->model.mlp_multiple_of);
    cJSON_AddBoolToObject(m, "tie_embeddings", c->model.tie_embeddings);
    cJSON_AddBoolToObject(m, "qk_norm", c->model.qk_norm);
  }
  if (c->model.parametrization == RCFG_MUP) {
    cJSON_AddStringToObject(m, "parametrization", "mup");
    cJSON_AddNumberToObject(m, "base_width", c->model.base_width);
  }
  cJSON *d = cJSON_AddObjectToObject(root, "data");
  if (c->data.synthetic) {
    cJSON *s = cJSON_AddObjectToObject(d, "synthetic");
    cJSON_AddNumberToObject(s, "letters", c->data.synth.letters);
    cJSON_AddNumberToObject(s, "words", c->data.synth.words);
    cJSON_AddNumberToObject(s, "min_len", c->data.synth.min_len);
    cJSON_AddNumberToObject(s, "max_len", c->data.synth.max_len);
    cJSON_AddNumberToObject(s, "zipf", c->data.synth.zipf);
    cJSON_AddNumberToObject(s, "seed", (double)c->data.synth.seed);
  } else {
    cJSON_AddStringToObject(d, "train", c->data.train);
    cJSON_AddStringToObject(d, "val", c->data.val);
  }
  cJSON *t = cJSON_AddObjectToObject(root, "train");
  cJSON_AddNumberToObject(t, "batch_size", c->train.batch_size);
  cJSON_AddNumberToObject(t, "micro_batch_size", c->train.micro_batch_size);
  cJSON_AddNumberToObject(t, "tokens", (double)c->train.tokens);
  cJSON_AddNumberToObject(t, "lr", c->train.lr);
  cJSON_AddNumberToObject(t, "warmup_tokens", c->train.warmup_tokens);
  cJSON_AddStringToObject(t, "schedule", c->train.schedule);
  cJSON_AddNumberToObject(t, "min_lr_ratio", c->train.min_lr_ratio);
  if (strcmp(c->train.schedule, "wsd") == 0) /* absent otherwise: other configs keep their hash */
    cJSON_AddNumberToObject(t, "decay_frac", c->train.decay_frac);
  cJSON_AddNumberToObject(t, "weight_decay", c->train.weight_decay);
  cJSON_AddNumberToObject(t, "grad_clip", c->train.grad_clip);
  cJSON_AddNumberToObject(t, "seed", (double)c->train.seed);
  cJSON *o = cJSON_AddObjectToObject(root, "optimizer");
  cJSON_AddStringToObject(o, "name", c->optimizer.name);
  cJSON_AddNumberToObject(o, "beta1", c->optimizer.beta1);
  cJSON_AddNumberToObject(o, "beta2", c->optimizer.beta2);
  cJSON_AddNumberToObject(o, "eps", c->optimizer.eps);
  if (c->optimizer.zero) /* absent when off: the configs before it keep their hash */
    cJSON_AddNumberToObject(o, "zero", c->optimizer.zero);
  cJSON_AddStringToObject(root, "precision", rcfg_prec_name(c->precision));
  cJSON *me = cJSON_AddObjectToObject(root, "memory");
  cJSON_AddBoolToObject(me, "recompute", c->memory.recompute);
  cJSON *e = cJSON_AddObjectToObject(root, "eval");
  cJSON_AddNumberToObject(e, "every_tokens", (double)c->eval.every_tokens);
  cJSON_AddNumberToObject(e, "tokens", (double)c->eval.tokens);
  cJSON *k = cJSON_AddObjectToObject(root, "checkpoint");
  cJSON_AddStringToObject(k, "dir", c->checkpoint.dir);
  cJSON_AddNumberToObject(k, "every_tokens", (double)c->checkpoint.every_tokens);
  cJSON_AddStringToObject(root, "backend", c->backend);
  cJSON_AddNumberToObject(root, "world_size", c->world_size);
  cJSON_AddNumberToObject(root, "threads", c->threads);
  /* only where it applies (cuda at fp32): other configs keep their hash */
  if (strcmp(c->backend, "cuda") == 0 && c->precision == RCFG_FP32)
    cJSON_AddBoolToObject(root, "tf32", c->tf32);
  /* only for another trainer than the built-in: the configs before the key
   * keep their hash, and two trainers' runs of one config differ in it */
  if (strcmp(c->trainer, "builtin") != 0)
    cJSON_AddStringToObject(root, "trainer", c->trainer);
  /* only when portable: the configs before the key keep their hash, and a
   * portable run's numbers differ from the machine's own */
  if (c->reproducible == RCFG_REPRO_PORTABLE)
    cJSON_AddStringToObject(root, "reproducible", "portable");
  return root;
}

char *rcfg_to_json(const rcfg *c) {
  cJSON *root = rcfg_to_tree(c);
  char *s = root ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return s;
}

void rcfg_hash_text(const char *text, char out[65]) { digest_sha256_hex(text, strlen(text), out); }

int rcfg_hash(const rcfg *cfg, char out[65]) {
  char *text = rcfg_to_json(cfg);
  if (!text)
    return SS_ENOMEM;
  rcfg_hash_text(text, out);
  free(text);
  return 0;
}

/* ---- the schema: which keys define a trajectory ------------------------ */

/* Every key of the canonical text. A key not listed here is
 * RCFG_TRAJ_DEFINES (rcfg_key_traj): a new key keeps runs that differ in it
 * apart until someone marks it, which costs at most a branch not taken,
 * where the other default would train one run's decay from another's
 * weights. test_runcfg checks that every key rcfg_to_json writes is
 * listed. */
static const rcfg_key schema[] = {
    {"model.n_layer", RCFG_TRAJ_DEFINES},
    {"model.d_model", RCFG_TRAJ_DEFINES},
    {"model.n_head", RCFG_TRAJ_DEFINES},
    {"model.seq_len", RCFG_TRAJ_DEFINES},
    {"model.vocab_size", RCFG_TRAJ_DEFINES},
    {"model.family", RCFG_TRAJ_DEFINES},
    {"model.rope_theta", RCFG_TRAJ_DEFINES},
    {"model.mlp_ratio", RCFG_TRAJ_DEFINES},
    {"model.mlp_multiple_of", RCFG_TRAJ_DEFINES},
    {"model.tie_embeddings", RCFG_TRAJ_DEFINES},
    {"model.qk_norm", RCFG_TRAJ_DEFINES},
    {"model.parametrization", RCFG_TRAJ_DEFINES},
    {"model.base_width", RCFG_TRAJ_DEFINES},
    {"data.synthetic.letters", RCFG_TRAJ_DEFINES},
    {"data.synthetic.words", RCFG_TRAJ_DEFINES},
    {"data.synthetic.min_len", RCFG_TRAJ_DEFINES},
    {"data.synthetic.max_len", RCFG_TRAJ_DEFINES},
    {"data.synthetic.zipf", RCFG_TRAJ_DEFINES},
    {"data.synthetic.seed", RCFG_TRAJ_DEFINES},
    {"data.train", RCFG_TRAJ_DEFINES},
    {"data.val", RCFG_TRAJ_DEFINES},
    {"train.batch_size", RCFG_TRAJ_RULED},
    {"train.micro_batch_size", RCFG_TRAJ_RULED},
    {"train.tokens", RCFG_TRAJ_ALONG},
    {"train.lr", RCFG_TRAJ_RULED},
    {"train.warmup_tokens", RCFG_TRAJ_LENGTH_DEFAULT},
    {"train.schedule", RCFG_TRAJ_DEFINES},
    {"train.min_lr_ratio", RCFG_TRAJ_DEFINES},
    {"train.decay_frac", RCFG_TRAJ_DEFINES},
    {"train.weight_decay", RCFG_TRAJ_DEFINES},
    {"train.grad_clip", RCFG_TRAJ_DEFINES},
    {"train.seed", RCFG_TRAJ_DEFINES},
    {"optimizer.name", RCFG_TRAJ_DEFINES},
    {"optimizer.beta1", RCFG_TRAJ_DEFINES},
    {"optimizer.beta2", RCFG_TRAJ_DEFINES},
    {"optimizer.eps", RCFG_TRAJ_DEFINES},
    {"optimizer.zero", RCFG_TRAJ_DEFINES},
    {"precision", RCFG_TRAJ_DEFINES},
    {"memory.recompute", RCFG_TRAJ_DEFINES},
    {"eval.every_tokens", RCFG_TRAJ_ALONG},
    {"eval.tokens", RCFG_TRAJ_ALONG},
    {"checkpoint.dir", RCFG_TRAJ_ALONG},
    {"checkpoint.every_tokens", RCFG_TRAJ_ALONG},
    {"backend", RCFG_TRAJ_DEFINES},
    {"world_size", RCFG_TRAJ_DEFINES},
    {"threads", RCFG_TRAJ_DEFINES},
    {"tf32", RCFG_TRAJ_DEFINES},
    {"trainer", RCFG_TRAJ_DEFINES},
    {"reproducible", RCFG_TRAJ_DEFINES},
};

const rcfg_key *rcfg_schema(size_t *n) {
  *n = sizeof schema / sizeof schema[0];
  return schema;
}

rcfg_traj rcfg_key_traj(const char *path) {
  for (size_t i = 0; i < sizeof schema / sizeof schema[0]; i++)
    if (!strcmp(schema[i].path, path))
      return schema[i].traj;
  return RCFG_TRAJ_DEFINES;
}

/* Drops from obj (at dotted path prefix) every key the trajectory key
 * leaves out: the ones along a trajectory and those of a class in shared. */
static void drop_keys(cJSON *obj, const char *prefix, unsigned shared) {
  cJSON *c = obj->child;
  while (c) {
    cJSON *next = c->next;
    char path[128];
    snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", c->string);
    if (cJSON_IsObject(c)) {
      drop_keys(c, path, shared);
    } else {
      rcfg_traj t = rcfg_key_traj(path);
      if (t == RCFG_TRAJ_ALONG || (t != RCFG_TRAJ_DEFINES && (shared & RCFG_SHARES(t))))
        cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
    }
    c = next;
  }
}

char *rcfg_trajectory_key(const rcfg *c, unsigned shared) {
  cJSON *root = rcfg_to_tree(c);
  if (!root)
    return NULL;
  drop_keys(root, "", shared);
  /* what the group shares, named: a run that set such a value itself
   * keeps it in its key and so never groups with runs that share one */
  if (shared & RCFG_SHARES(RCFG_TRAJ_RULED))
    cJSON_AddTrueToObject(root, "shares ruled");
  if (shared & RCFG_SHARES(RCFG_TRAJ_LENGTH_DEFAULT))
    cJSON_AddTrueToObject(root, "shares length default");
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

int64_t rcfg_wsd_stable_steps(const rcfg *c) {
  int64_t step_tokens = (int64_t)c->train.batch_size * c->model.seq_len;
  int64_t steps = c->train.tokens / step_tokens;
  if (strcmp(c->train.schedule, "wsd") != 0)
    return steps;
  /* at least one decay step; 1e-9 absorbs a fraction like 0.2 * 50 that
   * lands a rounding error above a whole number */
  int64_t decay = (int64_t)ceil(c->train.decay_frac * (double)steps - 1e-9);
  if (decay < 1)
    decay = 1;
  return decay > steps ? 0 : steps - decay;
}

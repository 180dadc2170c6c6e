/* The planner (sweeps/plan.h) and the shape rule (sweeps/shapes.h):
 * determinism, the FLOP accounting of SCIENCE.md section 1, isoflop runs on
 * their budgets, shapes on their targets, the batch rule's step floor,
 * smallest-first order, refusals with paths, and every example; and that
 * the trainer reports the planner's config_hash for a planned run. */
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/err.h"
#include "runcfg/flops.h"
#include "runcfg/memory.h"
#include "runcfg/runcfg.h"
#include "sweeps/plan.h"
#include "sweeps/shapes.h"
#include "sweeps/spec.h"
#include "trainer/ckpt.h"
#include "trainer/train.h"

#ifndef SS_SOURCE_DIR
#define SS_SOURCE_DIR "."
#endif

static const char *const examples[] = {"quickstart.json", "text.json",  "gpu-cluster.json",
                                       "grid.json",       "batch.json", "runs.json",
                                       "wsd-grid.json",   "bcrit.json"};

static void show(const spec_problems *pr) {
  for (size_t i = 0; i < pr->n; i++)
    fprintf(stderr, "  %s: %s\n", pr->items[i].path, pr->items[i].message);
}

static plan *plan_text(const char *text, spec **sp) {
  spec_problems pr = {0};
  spec *s = NULL;
  plan *p = NULL;
  int rc = spec_parse(text, "t.json", &s, &pr);
  if (rc == 0)
    rc = plan_spec(s, &p, &pr);
  if (rc)
    show(&pr);
  CHECK(rc == 0);
  spec_problems_free(&pr);
  if (sp)
    *sp = s;
  else
    spec_free(s);
  return p;
}

static plan *plan_file(const char *name, spec **sp) {
  char path[1024];
  snprintf(path, sizeof path, "%s/sweeps/examples/%s", SS_SOURCE_DIR, name);
  spec_problems pr = {0};
  spec *s = NULL;
  plan *p = NULL;
  int rc = plan_load(path, &s, &p, &pr);
  if (rc) {
    fprintf(stderr, "%s:\n", path);
    show(&pr);
  }
  CHECK(rc == 0);
  spec_problems_free(&pr);
  if (sp)
    *sp = s;
  else
    spec_free(s);
  return p;
}

/* Plans text expecting refusal; returns the problems. */
static spec_problems refused(const char *text) {
  spec_problems pr = {0};
  spec *s = NULL;
  plan *p = NULL;
  int rc = spec_parse(text, "t.json", &s, &pr);
  CHECK(rc == 0);
  if (rc == 0) {
    rc = plan_spec(s, &p, &pr);
    CHECK(rc == SS_EINVAL);
    CHECK(p == NULL);
  }
  plan_free(p);
  spec_free(s);
  return pr;
}

static int has(const spec_problems *pr, const char *path, const char *needle) {
  for (size_t i = 0; i < pr->n; i++)
    if (!strcmp(pr->items[i].path, path) && (!needle || strstr(pr->items[i].message, needle)))
      return 1;
  fprintf(stderr, "  no problem at %s with '%s'; problems:\n", path, needle ? needle : "");
  show(pr);
  return 0;
}

static void sha256_hex(const char *text, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text, strlen(text), md, &len, EVP_sha256(), NULL);
  for (unsigned i = 0; i < len; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Checks that hold for every planned run of every plan. */
static void check_invariants(const plan *p, const spec *s) {
  double prev = 0;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    CHECK_INT_EQ(r->index, i);
    /* the config is the trainer's canonical text of itself: exactly what
     * `scalesweep train` resolves and runs */
    rcfg cfg;
    char err[4096];
    CHECK(rcfg_parse(r->config, "planned", &cfg, err, sizeof err) == 0);
    char *again = rcfg_to_json(&cfg);
    CHECK(again && !strcmp(again, r->config));
    free(again);
    char h[65];
    sha256_hex(r->config, h);
    CHECK(!strcmp(h, r->config_hash));
    /* FLOP accounting (SCIENCE.md section 1) */
    rcfg_shape sh = {.n_layer = r->n_layer,
                     .d_model = r->d_model,
                     .n_head = r->n_head,
                     .seq_len = r->seq_len,
                     .vocab_size = r->vocab_size};
    CHECK_INT_EQ(cfg.model.n_layer, r->n_layer);
    CHECK_INT_EQ(cfg.train.batch_size, r->batch_size);
    CHECK_INT_EQ(r->params, rcfg_params(&sh));
    CHECK_INT_EQ(r->nonembedding_params, rcfg_nonembedding_params(&sh));
    double fpt = 6.0 * (12.0 * r->n_layer * (double)r->d_model * r->d_model +
                        (double)r->d_model * r->vocab_size) +
                 6.0 * r->n_layer * (double)r->seq_len * r->d_model;
    CHECK_NEAR(r->flops_per_token, fpt, 0, 1e-12);
    CHECK(r->flops == r->flops_per_token * (double)r->tokens);
    CHECK(r->flops_6nd == 6.0 * (double)r->nonembedding_params * (double)r->tokens);
    /* tokens are what the trainer trains: whole batches */
    int64_t bt = (int64_t)r->batch_size * r->seq_len;
    CHECK_INT_EQ(r->tokens % bt, 0);
    CHECK_INT_EQ(r->steps * bt, r->tokens);
    CHECK(r->steps >= 1);
    if (strcmp(r->part, "runs") != 0)
      CHECK_INT_EQ(cfg.train.tokens, r->tokens);
    /* estimated time: training FLOPs plus the evaluation passes, at the
     * stated throughput */
    /* (a wsd branch trains from its branch point) */
    CHECK(r->est_seconds >=
          (r->flops - r->flops_per_token * (double)(r->branch_step * bt)) / s->throughput_flops);
    CHECK(r->est_seconds <= 1.5 * r->flops / s->throughput_flops);
    /* threads never left to the planning machine */
    CHECK(cfg.threads == (s->gpus ? PLAN_GPU_HOST_THREADS : s->cpus) ||
          json_object_get(s->base, "threads"));
    /* the batch rule: a power of two, at most B_opt rounded, and the step
     * floor holds unless the batch hit its minimum */
    if (r->batch_from_rule) {
      CHECK((r->batch_size & (r->batch_size - 1)) == 0);
      CHECK(r->batch_size <=
            fmax(p->batch_rule.min_batch, r->b_opt_tokens / r->seq_len * sqrt(2.0) * 1.0001));
      CHECK(r->steps >= p->batch_rule.min_steps - 1 || r->batch_size == p->batch_rule.min_batch);
      /* a doubled batch would have broken the floor (or rounding capped it);
       * a wsd run sharing its group's smallest run's batch: that run's */
      const plan_run *own = r->rules_from >= 0 ? &p->runs[r->rules_from] : r;
      CHECK_INT_EQ(own->batch_size, r->batch_size);
      CHECK((double)own->tokens / (2.0 * bt) < p->batch_rule.min_steps + 1 ||
            2.0 * r->batch_size > exp2(round(log2(r->b_opt_tokens / r->seq_len))));
    }
    if (r->lr_from_rule) {
      CHECK(r->lr >= p->lr_rule.min && r->lr <= p->lr_rule.max);
      double eta = p->lr_rule.coef * pow(r->rule_compute, p->lr_rule.exponent) *
                   sqrt((double)bt / r->b_opt_tokens);
      eta = fmin(fmax(eta, p->lr_rule.min), p->lr_rule.max);
      CHECK_NEAR(r->lr, eta, 0, 0.006); /* 3 significant digits */
    }
    /* smallest first */
    double c = r->budget > 0 ? r->budget : r->flops;
    CHECK(c >= prev);
    prev = c;
    /* distinct runs */
    for (size_t j = 0; j < i; j++)
      CHECK(strcmp(p->runs[j].config_hash, r->config_hash) != 0);
  }
}

static void test_examples(void) {
  for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
    spec *s = NULL;
    plan *p = plan_file(examples[i], &s);
    if (p && s) {
      CHECK(p->n > 0);
      check_invariants(p, s);
      CHECK(!strcmp(p->spec_digest, s->digest));
    }
    plan_free(p);
    spec_free(s);
  }
}

static void test_determinism(void) {
  for (size_t e = 0; e < sizeof examples / sizeof *examples; e++) {
    plan *a = plan_file(examples[e], NULL);
    plan *b = plan_file(examples[e], NULL);
    if (!a || !b) {
      plan_free(a);
      plan_free(b);
      continue;
    }
    CHECK_INT_EQ(a->n, b->n);
    for (size_t i = 0; i < a->n && i < b->n; i++) {
      CHECK(!strcmp(a->runs[i].config, b->runs[i].config));
      CHECK(!strcmp(a->runs[i].config_hash, b->runs[i].config_hash));
    }
    char *ja = plan_runs_json(a), *jb = plan_runs_json(b);
    CHECK(ja && jb && !strcmp(ja, jb));
    /* the --json list parses, and each config in it is the canonical text */
    json_error_t je;
    json_t *list = ja ? json_loads(ja, 0, &je) : NULL;
    CHECK(json_is_array(list) && json_array_size(list) == a->n);
    for (size_t i = 0; list && i < json_array_size(list); i++) {
      json_t *o = json_array_get(list, i);
      static const char *const keys[] = {"config", "config_hash", "params", "nonembedding_params",
                                         "tokens", "batch_size",  "flops",  "est_seconds"};
      for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CHECK(json_object_get(o, keys[k]) != NULL);
      CHECK(!strcmp(json_string_value(json_object_get(o, "config_hash")), a->runs[i].config_hash));
      CHECK(json_integer_value(json_object_get(o, "tokens")) == a->runs[i].tokens);
    }
    if (ja && a->n) {
      char *first = plan_run_json(&a->runs[0], a);
      CHECK(first && strstr(first, a->runs[0].config) != NULL); /* spliced verbatim */
      free(first);
    }
    json_decref(list);
    free(ja);
    free(jb);
    plan_free(a);
    plan_free(b);
  }
}

/* isoflop runs sit on their budget: 6ND within the rounding of D to whole
 * batches, or the exact count when asked */
static void test_isoflop_budgets(void) {
  spec *s = NULL;
  plan *p = plan_file("gpu-cluster.json", &s); /* 6ND */
  if (p && s) {
    CHECK(!s->isoflop.exact);
    CHECK_INT_EQ(p->n, 35);
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < p->n; i++) {
      const plan_run *r = &p->runs[i];
      double bt = (double)r->batch_size * r->seq_len;
      CHECK(r->budget > 0);
      /* |D - C/(6N)| <= B*T/2 */
      CHECK(fabs(r->flops_6nd - r->budget) <= 6.0 * r->nonembedding_params * bt / 2 + 1);
      CHECK_NEAR(r->flops_6nd, r->budget, 0, 1e-3);
      lo = fmin(lo, (double)r->nonembedding_params);
      hi = fmax(hi, (double)r->nonembedding_params);
      /* GPT-2 style: head size 64, bf16, CUDA, one GPU */
      CHECK_INT_EQ(r->d_model / r->n_head, 64);
      CHECK(strstr(r->config, "\"precision\":\"bf16\"") != NULL);
      CHECK(strstr(r->config, "\"backend\":\"cuda\"") != NULL);
      CHECK(strstr(r->config, "\"world_size\":1") != NULL);
      CHECK(strstr(r->config, "\"micro_batch_size\":16") != NULL);
    }
    /* spans about 10M to 400M non-embedding parameters */
    CHECK(lo >= 8e6 && lo <= 1.2e7);
    CHECK(hi >= 3.5e8 && hi <= 4.5e8);
  }
  plan_free(p);
  spec_free(s);

  /* exact count, a grid of WSD branches, plus a ladder: a size's runs
   * share its smallest run's batch size, and a branch's decay starts at one
   * of its trunk's checkpoints, so D is rounded more coarsely than to whole
   * batches: within 0.25% of the budget */
  p = plan_file("quickstart.json", &s);
  if (p && s) {
    CHECK(s->isoflop.exact);
    size_t n_iso = 0, n_ladder = 0, n_branches = 0;
    double budgets[16];
    size_t nb = 0;
    for (size_t i = 0; i < p->n; i++) {
      const plan_run *r = &p->runs[i];
      if (!strcmp(r->part, "batch")) {
        n_ladder++;
        CHECK(r->n_target_loss == 3);
        CHECK(!r->batch_from_rule);
        continue;
      }
      n_iso++;
      CHECK_NEAR(r->flops, r->budget, 0, 2.5e-3);
      if (r->branch_of >= 0) { /* a branch of the same size's run at the largest budget */
        const plan_run *t = &p->runs[r->branch_of];
        n_branches++;
        CHECK_INT_EQ(t->nonembedding_params, r->nonembedding_params);
        CHECK_INT_EQ(t->batch_size, r->batch_size);
        CHECK(t->budget > r->budget && t->branch_of < 0);
      }
      size_t k = 0;
      while (k < nb && budgets[k] != r->budget)
        k++;
      if (k == nb && nb < 16)
        budgets[nb++] = r->budget;
    }
    /* >= 4 budgets over >= 1.5 decades, >= 5 sizes each, a ladder */
    CHECK(nb >= 4);
    CHECK(log10(budgets[nb - 1] / budgets[0]) >= 1.5 - 1e-9);
    CHECK(n_iso >= 5 * nb);
    CHECK_INT_EQ(n_branches, n_iso - n_iso / nb); /* all but the largest budget's */
    CHECK(n_ladder >= 4);
    /* sized for about 6 minutes on 2 cores */
    CHECK(p->total_flops > 1e13 && p->total_flops < 6e13);
  }
  plan_free(p);
  spec_free(s);
}

/* The shape rule: stated tolerances (shapes.h) over the whole range */
static void test_shapes(void) {
  shape_rule r = shape_rule_default();
  struct {
    double lo, hi, tol;
  } bands[] = {{1.3e4, 3e4, 1.25}, {3e4, 1e6, 1.17}, {1e6, 1e7, 1.08}, {1e7, 2e9, 1.05}};
  for (size_t b = 0; b < sizeof bands / sizeof *bands; b++)
    for (double t = bands[b].lo; t < bands[b].hi; t *= 1.01) {
      rcfg_shape s = {.seq_len = 64, .vocab_size = 27};
      CHECK(shape_for_params(&r, t, &s) == 0);
      double n = (double)rcfg_nonembedding_params(&s);
      if (!(fabs(log(n / t)) <= log(bands[b].tol))) {
        fprintf(stderr, "  target %g -> %d x %d: N = %g\n", t, s.n_layer, s.d_model, n);
        CHECK(0);
      }
      int h = shape_head_size(&r, s.d_model);
      CHECK(s.d_model % h == 0 && s.n_head == s.d_model / h && s.n_head >= 1);
      double a = (double)s.d_model / s.n_layer;
      CHECK(a >= r.aspect_ratio / SHAPE_ASPECT_BAND - 1e-9 &&
            a <= r.aspect_ratio * SHAPE_ASPECT_BAND + 1e-9);
    }
  /* known shapes */
  rcfg_shape s = {.seq_len = 64, .vocab_size = 27};
  CHECK(shape_for_params(&r, 1e5, &s) == 0);
  CHECK(s.n_layer == 2 && s.d_model == 64 && s.n_head == 4);
  shape_rule g = {64, 64};
  CHECK(shape_for_params(&g, 85e6, &s) == 0); /* GPT-2 small: 85M non-embedding, 12 x 768 */
  CHECK(s.n_layer == 12 && s.d_model == 768 && s.n_head == 12);
  /* the head-size rule */
  CHECK(shape_head_size(&r, 16) == 8 && shape_head_size(&r, 64) == 16);
  CHECK(shape_head_size(&r, 128) == 32 && shape_head_size(&r, 768) == 64);
  /* below one head: refused, with the smallest shape reported */
  CHECK(shape_for_params(&r, 100, &s) == SS_ERANGE);
  rcfg_shape small = {.seq_len = 64, .vocab_size = 27};
  shape_smallest(&r, &small);
  CHECK(s.n_layer == 1 && s.d_model == small.d_model);
  CHECK(shape_for_params(&g, 1e4, &s) == SS_ERANGE); /* one head of 64 is 50k */
}

/* The measurement: at 6e11 FLOPs a 2-layer d=64 model did far
 * better with 8-sequence batches than with 32; the rule picks 8. */
static void test_batch_rule(void) {
  plan *p = plan_text("{\"name\": \"b\", \"method\": \"grid\", \"grid\": {"
                      "\"params\": [1e5], \"tokens\": [999000]}}",
                      NULL);
  if (p && p->n == 1) {
    const plan_run *r = &p->runs[0];
    CHECK(r->n_layer == 2 && r->d_model == 64);
    CHECK_NEAR(r->flops, 6.5e11, 0, 0.01);
    CHECK_INT_EQ(r->batch_size, 8); /* B_opt ~ 33 sequences -> 32, halved to reach 1000 steps */
    CHECK(r->steps >= 1000);
    CHECK(r->batch_from_rule && r->lr_from_rule);
  }
  plan_free(p);
  /* large budgets: the floor does not bind, B is B_opt rounded */
  p = plan_text("{\"name\": \"b\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": "
                "1024}}, \"grid\": {\"params\": [1e8], \"tokens\": [2e9]},"
                " \"shape\": {\"aspect_ratio\": 64, \"head_size\": 64}}",
                NULL);
  if (p && p->n == 1) {
    const plan_run *r = &p->runs[0];
    double bopt = 0.292 * pow(r->flops, 0.3271) / 1024;
    CHECK_INT_EQ(r->batch_size, (int)exp2(round(log2(bopt))));
    CHECK(r->steps > 1000);
  }
  plan_free(p);
  /* fixed batch and lr are kept; base's micro_batch_size caps micro-batches */
  spec *s = NULL;
  p = plan_text("{\"name\": \"b\", \"method\": \"grid\", \"base\": {\"train\": "
                "{\"micro_batch_size\": 6}}, \"grid\": {\"params\": [5e4], \"tokens\": [1e6], "
                "\"batch_size\": [12, 32], \"lr\": [0.002]}}",
                &s);
  if (p && s) {
    CHECK_INT_EQ(p->n, 2);
    check_invariants(p, s);
    for (size_t i = 0; i < p->n; i++) {
      CHECK(!p->runs[i].batch_from_rule && !p->runs[i].lr_from_rule);
      CHECK(p->runs[i].lr == 0.002);
    }
    for (size_t i = 0; i < p->n; i++) {
      const plan_run *r = &p->runs[i];
      CHECK(r->batch_size == 12 || r->batch_size == 32);
      if (r->batch_size == 12) /* largest divisor of 12 not above 6 */
        CHECK(strstr(r->config, "\"micro_batch_size\":6") != NULL);
      else
        CHECK(strstr(r->config, "\"micro_batch_size\":4") != NULL);
    }
  }
  plan_free(p);
  spec_free(s);
}

static void test_order_and_resources(void) {
  spec *s = NULL;
  plan *p = plan_text("{\"name\": \"o\", \"method\": \"grid\", \"grid\": {"
                      "\"params\": [2e5, 3e4], \"tokens\": [4e6, 1e6], \"seeds\": [2, 1]},"
                      " \"resources\": {\"gpus\": 2}, \"base\": {\"precision\": \"bf16\"}}",
                      &s);
  if (p && s) {
    CHECK_INT_EQ(p->n, 8);
    check_invariants(p, s);
    /* smallest first; equal runs but the seed, seed order */
    CHECK(p->runs[0].nonembedding_params < 5e4 && p->runs[0].tokens < 2e6);
    CHECK(p->runs[0].seed == 1 && p->runs[1].seed == 2);
    for (size_t i = 1; i < p->n; i++)
      CHECK(p->runs[i].flops >= p->runs[i - 1].flops);
    CHECK(strstr(p->runs[0].config, "\"backend\":\"cuda\",\"world_size\":2,\"threads\":4"));
  }
  plan_free(p);
  spec_free(s);
}

static void test_runs_method(void) {
  spec *s = NULL;
  plan *p = plan_file("runs.json", &s);
  if (p && s) {
    CHECK_INT_EQ(p->n, 3);
    int fixed = 0;
    for (size_t i = 0; i < p->n; i++)
      if (p->runs[i].batch_size == 32 && p->runs[i].lr == 0.003 && !p->runs[i].batch_from_rule)
        fixed++;
    CHECK_INT_EQ(fixed, 1);
  }
  plan_free(p);
  spec_free(s);

  /* the trainer's problems with a run are reported at that run's paths */
  spec_problems pr = refused("{\"name\": \"r\", \"method\": \"runs\","
                             " \"base\": {\"train\": {\"tokens\": 1048576}},"
                             " \"runs\": [{\"model\": {\"n_layer\": 2}},"
                             "  {\"model\": {\"d_model\": 60, \"n_head\": 8}},"
                             "  {\"train\": {\"batch_size\": 4, \"schedule\": \"linear\"}},"
                             "  {\"train\": {\"tokens\": null}}]}");
  CHECK(has(&pr, "$.runs[1].model.d_model", "multiple of n_head"));
  CHECK(has(&pr, "$.runs[2].train.schedule", "\"linear\""));
  CHECK(has(&pr, "$.runs[3].train.tokens", NULL));
  spec_problems_free(&pr);
}

/* Plans that cannot run are refused, every problem at once, with paths. */
static void test_refusals(void) {
  spec_problems pr = refused("{\"name\": \"x\", \"method\": \"grid\", \"grid\": {"
                             "\"params\": [100, 1e5], \"tokens\": [1e6, 100],"
                             " \"batch_size\": [4]}, \"max_hours\": 1e-5}");
  /* a model too small for one head */
  CHECK(has(&pr, "$.grid.params[0]", "below the smallest model"));
  CHECK(has(&pr, "$.grid.params[0]", "head"));
  /* D smaller than one batch */
  CHECK(has(&pr, "$.grid.tokens[1]", "smaller than one batch of 4 x 64 = 256 tokens"));
  /* and, over the runs that do plan, the time limit: all in one answer */
  CHECK(has(&pr, "$.max_hours", "estimated time"));
  CHECK_INT_EQ(pr.n, 3);
  spec_problems_free(&pr);

  /* one plan each, refused with a problem at every path given */
  static const struct {
    const char *text;
    const char *path[2], *needle[2];
  } cases[] = {
      /* isoflop: a budget too small for its largest model */
      {"{\"name\": \"x\", \"method\": \"isoflop\", \"isoflop\": {"
       "\"flops\": [1e9, 1e12], \"params\": [2e4, 5e4, 3e6]}}",
       {"$.isoflop.flops[0]"},
       {"smaller than one batch"}},
      /* isoflop: centred targets too small */
      {"{\"name\": \"x\", \"method\": \"isoflop\", \"isoflop\": {"
       "\"flops\": [1e7], \"centre\": {\"coef\": 0.0913, \"exponent\": 0.5, \"span\": 3,"
       " \"points\": 3}}}",
       {"$.isoflop.centre"},
       {"budget $.isoflop.flops[0]"}},
      /* over max_hours at the stated throughput */
      {"{\"name\": \"x\", \"method\": \"grid\", \"grid\": {"
       "\"params\": [1e6], \"tokens\": [1e9]}, \"max_hours\": 1,"
       " \"throughput_flops\": 1e10}",
       {"$.max_hours"},
       {"estimated time"}},
      /* two targets that round to the same shape plan the same run */
      {"{\"name\": \"x\", \"method\": \"grid\", \"grid\": {"
       "\"params\": [1e5, 1.01e5], \"tokens\": [1e6]}}",
       {"$"},
       {"identical"}},
      /* too many runs */
      {"{\"name\": \"x\", \"method\": \"grid\", \"grid\": {"
       "\"params\": {\"from\": 1e4, \"to\": 1e8, \"points\": 200},"
       " \"tokens\": {\"from\": 1e6, \"to\": 1e9, \"points\": 100}}}",
       {"$"},
       {"at most 10000"}},
      /* a ladder too long for its D */
      {"{\"name\": \"x\", \"method\": \"batch\", \"batch\": {\"params\": 5e4,"
       " \"tokens\": 10000, \"batch_size\": [16, 64, 256, 1024], \"target_loss\": 1.5}}",
       {"$.batch.batch_size[2]", "$.batch.batch_size[3]"},
       {"smaller than one batch", "smaller than one batch"}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    pr = refused(cases[c].text);
    for (size_t k = 0; k < 2 && cases[c].path[k]; k++)
      CHECK(has(&pr, cases[c].path[k], cases[c].needle[k]));
    spec_problems_free(&pr);
  }
}

/* Runs that cannot fit the memory the spec asks for (runcfg/memory.h) are
 * refused at the path their size comes from, with the figures. */
static void test_memory_limits(void) {
  /* the shape, on one 80 GiB GPU (the default) */
  spec_problems pr =
      refused("{\"name\": \"m\", \"method\": \"runs\", \"resources\": {\"gpus\": 1},"
              " \"base\": {\"train\": {\"tokens\": 1e12, \"batch_size\": 1}},"
              " \"runs\": [{\"model\": {\"n_layer\": 1024, \"d_model\": 65536, \"n_head\": 512,"
              " \"seq_len\": 65536}}]}");
  CHECK(has(&pr, "$.runs[0].model", "n_layer 1024, d_model 65536"));
  CHECK(has(&pr, "$.runs[0].model", "PiB (parameters 192 TiB"));
  CHECK(has(&pr, "$.runs[0].model", "more than the 80 GiB of one GPU"));
  CHECK(has(&pr, "$.runs[0].model", "default 80"));
  spec_problems_free(&pr);
  /* a grid point over a small CPU limit: at its params value */
  pr =
      refused("{\"name\": \"m\", \"method\": \"grid\", \"resources\": {\"cpus\": 1,"
              " \"max_memory_gib\": 0.01}, \"grid\": {\"params\": [2e4, 3e6], \"tokens\": [1e6]}}");
  CHECK(has(&pr, "$.grid.params[1]", "more than the 0.01 GiB a CPU run may use"));
  CHECK_INT_EQ(pr.n, 1);
  spec_problems_free(&pr);
  /* the same grid with room plans */
  spec *s = NULL;
  plan *p = plan_text("{\"name\": \"m\", \"method\": \"grid\", \"resources\": {\"cpus\": 1,"
                      " \"max_memory_gib\": 4}, \"grid\": {\"params\": [2e4, 3e6], \"tokens\": "
                      "[1e6]}}",
                      &s);
  CHECK(p != NULL && p->n == 2);
  plan_free(p);
  spec_free(s);
  /* a micro-batch the spec leaves open shrinks to fit (the batch accumulates) */
  p = plan_text("{\"name\": \"b\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": "
                "1024}}, \"grid\": {\"params\": [1e8], \"tokens\": [2e9]},"
                " \"shape\": {\"aspect_ratio\": 64, \"head_size\": 64}}",
                NULL);
  CHECK(p != NULL && p->n == 1);
  if (p && p->n == 1) {
    rcfg c, whole;
    char err[512];
    CHECK_INT_EQ(rcfg_parse(p->runs[0].config, "plan", &c, err, sizeof err), 0);
    whole = c;
    whole.train.micro_batch_size = whole.train.batch_size;
    double got = rcfg_memory(&c).total, all = rcfg_memory(&whole).total;
    printf("1e8 params, batch %d x 1024: micro-batch %d, %.3g GiB (whole batch: %.3g GiB)\n",
           c.train.batch_size, c.train.micro_batch_size, got / 1073741824.0, all / 1073741824.0);
    CHECK(c.train.micro_batch_size < c.train.batch_size);
    CHECK(c.train.batch_size % c.train.micro_batch_size == 0);
    CHECK(got <= 80.0 * 1073741824.0 && all > 80.0 * 1073741824.0);
    whole.train.micro_batch_size = c.train.micro_batch_size * 2; /* the largest that fits */
    CHECK(c.train.batch_size % whole.train.micro_batch_size != 0 ||
          rcfg_memory(&whole).total > 80.0 * 1073741824.0);
  }
  plan_free(p);
  pr = (spec_problems){0};
  s = NULL;
  CHECK(spec_parse("{\"name\": \"m\", \"method\": \"grid\", \"resources\": {\"cpus\": 1,"
                   " \"max_memory_gib\": \"lots\"}, \"grid\": {\"params\": [2e4], \"tokens\": "
                   "[1e6]}}",
                   "t.json", &s, &pr) != 0);
  spec_free(s);
  CHECK(has(&pr, "$.resources.max_memory_gib", "expected a number of GiB"));
  spec_problems_free(&pr);
}

/* A planned run, trained as the worker trains it (its checkpoint directory
 * a flag, not in the config), reports the planner's config_hash: the hash
 * is of the config that trains. Fails if either side hashes anything else
 * (the interval the planner sets, a directory the worker adds). */
static void test_trainer_hash(void) {
  plan *p = plan_text("{\"name\": \"h\", \"method\": \"grid\", \"grid\": {\"params\": [1e4],"
                      " \"tokens\": [256], \"batch_size\": [2]}, \"base\": {\"model\":"
                      " {\"seq_len\": 16}, \"eval\": {\"tokens\": 16}}}",
                      NULL);
  CHECK(p && p->n == 1);
  if (!p || p->n != 1)
    return;
  const plan_run *r = &p->runs[0];
  rcfg cfg;
  char err[4096], dir[] = "/tmp/test_plan_ckXXXXXX";
  CHECK(rcfg_parse(r->config, "planned", &cfg, err, sizeof err) == 0);
  CHECK(cfg.checkpoint.every_tokens > 0 && !cfg.checkpoint.dir[0]);
  CHECK(mkdtemp(dir) != NULL);
  FILE *out = tmpfile();
  trn_train_opts opts = {.resume_dir = NULL, .resume_max_step = -1, .checkpoint_dir = dir};
  CHECK(trn_train(&cfg, &opts, out, err, sizeof err) == 0);
  rewind(out);
  char line[65536];
  CHECK(fgets(line, sizeof line, out) != NULL);
  json_t *ev = json_loads(line, 0, NULL);
  const char *hash = json_string_value(json_object_get(ev, "config_hash"));
  CHECK(hash && !strcmp(hash, r->config_hash));
  CHECK(!strcmp(json_string_value(json_object_get(ev, "checkpoint_dir")), dir));
  char *given = json_dumps(json_object_get(ev, "config"), JSON_COMPACT);
  CHECK(given && !strstr(given, dir)); /* the config is reported as given */
  free(given);
  json_decref(ev);
  fclose(out);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, TRN_CKPT_FILE);
  CHECK(access(path, F_OK) == 0); /* the checkpoints went under the flag's directory */
  unlink(path);
  snprintf(path, sizeof path, "%s/%s", dir, TRN_CKPT_PREV_FILE);
  unlink(path);
  rmdir(dir);
  plan_free(p);
}

/* the runs' config text has key at its train section's value */
static double train_num(const plan_run *r, const char *key) {
  rcfg c;
  char err[512];
  if (rcfg_parse(r->config, "plan", &c, err, sizeof err) != 0)
    return NAN;
  if (!strcmp(key, "warmup_tokens"))
    return c.train.warmup_tokens;
  if (!strcmp(key, "stable"))
    return (double)rcfg_wsd_stable_steps(&c);
  return !strcmp(key, "batch_size") ? c.train.batch_size : c.train.lr;
}

/* The batch ladder by branching (docs/sweeps.md "Critical batch size by
 * branching"): one trunk at the smallest batch size trains D, and from its
 * checkpoint at each branch point every other batch size trains
 * branch.tokens more at a constant rate, with the trunk's warmup and the
 * rule's rate for its own batch size; branch points inside the warmup, off
 * the largest batch or too late for the trunk are refused where they are. */
static void test_bcrit_branches(void) {
  static const char *spec_fmt =
      "{\"name\": \"b\", \"method\": \"batch\", \"base\": {\"model\": {\"seq_len\": 64},"
      " \"data\": {\"synthetic\": {\"words\": 512}}, \"train\": {\"micro_batch_size\": 4}},"
      " \"batch\": {\"params\": 2.5e4, \"tokens\": 1048576, \"batch_size\": [4, 8, 16, 32],"
      " \"branch\": {\"at\": [%s], \"tokens\": 262144}%s}, \"resources\": {\"cpus\": 1}}";
  char text[1024];
  snprintf(text, sizeof text, spec_fmt, "131072, 524288", "");
  plan *p = plan_text(text, NULL);
  if (p) {
    CHECK_INT_EQ(p->n, 1 + 3 * 2);
    CHECK_INT_EQ(p->n_rungs, 6);
    CHECK_INT_EQ(p->n_rung_trunks, 1);
    const plan_run *t = NULL;
    for (size_t i = 0; i < p->n; i++)
      if (p->runs[i].branch_of < 0)
        t = &p->runs[i];
    CHECK(t && t->batch_size == 4 && t->tokens == 1048576 && t->n_branch_points == 6);
    for (size_t i = 0; t && i < p->n; i++) {
      const plan_run *r = &p->runs[i];
      CHECK(!strcmp(r->part, "bcrit"));
      CHECK(strstr(r->config, "\"schedule\":\"constant\""));
      /* the trunk's warmup, 5% of its D, for all */
      CHECK(train_num(r, "warmup_tokens") == floor(0.05 * 1048576));
      if (r == t)
        continue;
      CHECK_INT_EQ(r->branch_of, t->index);
      CHECK(r->bcrit_at == 131072 || r->bcrit_at == 524288);
      /* the trunk's step there, and the rung's own D: the point + 262144 */
      CHECK_INT_EQ(r->branch_step, r->bcrit_at / (4 * 64));
      CHECK_INT_EQ(r->tokens, r->bcrit_at + 262144);
      CHECK(r->batch_size > 4);
      /* the trunk's rate times sqrt(B / B0), unclamped (3 significant digits) */
      double want = train_num(t, "lr") * sqrt(r->batch_size / 4.0);
      CHECK(fabs(train_num(r, "lr") - want) <= 0.005 * want);
    }
    char *js = plan_runs_json(p);
    CHECK(js && strstr(js, "\"part\":\"bcrit\"") && strstr(js, "\"branch_step\":512"));
    free(js);
  }
  plan_free(p);

  snprintf(text, sizeof text, spec_fmt, "32768, 133000, 917504", "");
  spec_problems pr = refused(text);
  CHECK(has(&pr, "$.batch.branch.at[0]", "inside the trunk's warmup of 52428 tokens"));
  CHECK(has(&pr, "$.batch.branch.at[1]",
            "least common multiple of the batch sizes, 32, x seq_len 64 = 2048 tokens"));
  CHECK(has(&pr, "$.batch.branch.at[2]", "expected at most 786432"));
  spec_problems_free(&pr);
  snprintf(text, sizeof text, spec_fmt, "131072", "");
  char *t2 = strstr(text, "\"tokens\": 262144");
  if (t2)
    memcpy(t2, "\"tokens\": 262000", 16);
  pr = refused(text);
  CHECK(has(&pr, "$.batch.branch.tokens", "found 262000 tokens, not a whole number"));
  spec_problems_free(&pr);
  /* batch sizes that are not powers of two: the points are whole numbers
   * of every one's batches (6 and 16: 48 sequences), not just the largest's */
  snprintf(text, sizeof text, spec_fmt, "131072", "");
  char *bl = strstr(text, "[4, 8, 16, 32]");
  if (bl)
    memcpy(bl, "[4, 6, 16, 32]", 14);
  pr = refused(text);
  CHECK(has(&pr, "$.batch.branch.at[0]", "least common multiple of the batch sizes, 96"));
  CHECK(has(&pr, "$.batch.branch.tokens", "least common multiple of the batch sizes, 96"));
  spec_problems_free(&pr);
  /* evaluations too rare to read the rungs' steps off */
  snprintf(text, sizeof text, spec_fmt, "131072", "");
  char *mb = strstr(text, "\"micro_batch_size\": 4}");
  if (mb) {
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", mb + strlen("\"micro_batch_size\": 4}"));
    snprintf(mb, sizeof text - (size_t)(mb - text),
             "\"micro_batch_size\": 4}, \"eval\": {\"every_tokens\": 65536}%s", rest);
  }
  pr = refused(text);
  CHECK(has(&pr, "$.base.eval.every_tokens", "found 65536 with $.batch.branch.tokens 262144"));
  spec_problems_free(&pr);
  snprintf(text, sizeof text, spec_fmt, "131072", ", \"target_loss\": [1.2]");
  spec_problems pr2 = {0};
  spec *s = NULL;
  CHECK(spec_parse(text, "t.json", &s, &pr2) == SS_EINVAL);
  CHECK(has(&pr2, "$.batch.target_loss", "a branched ladder's target"));
  spec_problems_free(&pr2);
  spec_free(s);
}

/* WSD branches (docs/sweeps.md): a wsd grid of 2 sizes x 4 token counts is 2
 * trunks (each size's longest) and 6 branches at their own stable steps,
 * every run of a size with the smallest run's rule-chosen batch size, lr and
 * defaulted warmup; the saved FLOPs are the branches' shared phases; other
 * schedules, "branches": false, or warmups the spec set apart plan none. */
static void test_wsd_branches(void) {
  static const char *grid =
      "{\"name\": \"w\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": 64},"
      " \"data\": {\"synthetic\": {\"words\": 512}}, \"train\": {\"schedule\": \"%s\"}},"
      " \"grid\": {\"params\": [2e4, 5e4],"
      " \"tokens\": {\"from\": 5e5, \"to\": 4e6, \"points\": 4}},"
      " \"resources\": {\"cpus\": 1}%s}";
  char text[1024];
  snprintf(text, sizeof text, grid, "wsd", "");
  plan *p = plan_text(text, NULL);
  if (!p)
    return;
  CHECK_INT_EQ(p->n, 8);
  CHECK_INT_EQ(p->n_branches, 6);
  CHECK_INT_EQ(p->n_trunks, 2);
  double saved = 0, total = 0;
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i], *t = r->branch_of >= 0 ? &p->runs[r->branch_of] : r;
    total += r->flops;
    /* the trunk is the size's longest run, itself no branch */
    CHECK(t->branch_of < 0);
    CHECK_INT_EQ(t->nonembedding_params, r->nonembedding_params);
    CHECK(t->tokens >= r->tokens);
    /* one batch size, lr and warmup per size: the smallest run's (5% of its D) */
    CHECK_INT_EQ((int)train_num(r, "batch_size"), (int)train_num(t, "batch_size"));
    CHECK(train_num(r, "lr") == train_num(t, "lr"));
    CHECK(train_num(r, "warmup_tokens") == train_num(t, "warmup_tokens"));
    CHECK(fabs(train_num(r, "warmup_tokens") - 0.05 * 500000) <= 0.05 * 256 * 4 + 1);
    if (r->branch_of < 0) {
      CHECK_INT_EQ(r->n_branch_points, 3);
      continue;
    }
    /* its own stable steps: steps - ceil(0.2 steps) */
    CHECK_INT_EQ(r->branch_step, r->steps - (int64_t)ceil(0.2 * (double)r->steps - 1e-9));
    CHECK_INT_EQ(r->branch_step, (int64_t)train_num(r, "stable"));
    saved += r->flops_per_token * (double)(r->branch_step * r->batch_size * r->seq_len);
  }
  CHECK_NEAR(p->branch_flops_saved, saved, 0, 1e-12);
  CHECK_NEAR(p->total_flops, total, 0, 1e-12);
  CHECK(p->branch_flops_saved > 0.3 * total && p->branch_flops_saved < 0.5 * total);
  /* the plan's JSON names the trunk and the step */
  char *js = plan_runs_json(p);
  CHECK(js && strstr(js, "\"branch_of\":") && strstr(js, "\"branch_step\":"));
  free(js);
  plan_free(p);

  snprintf(text, sizeof text, grid, "cosine", "");
  p = plan_text(text, NULL);
  if (p) {
    CHECK_INT_EQ(p->n_branches, 0);
    for (size_t i = 0; i < p->n; i++)
      CHECK_INT_EQ(p->runs[i].branch_of, -1);
    char *j = plan_runs_json(p);
    CHECK(j && !strstr(j, "branch_of"));
    free(j);
  }
  plan_free(p);
  /* "branches": false: the same runs, each from scratch */
  snprintf(text, sizeof text, grid, "wsd", "");
  p = plan_text(text, NULL);
  snprintf(text, sizeof text, grid, "wsd", ", \"branches\": false");
  plan *q = plan_text(text, NULL);
  if (p && q) {
    CHECK_INT_EQ(q->n_branches, 0);
    CHECK_INT_EQ(q->n, p->n);
    for (size_t i = 0; i < q->n && i < p->n; i++) {
      CHECK_INT_EQ(q->runs[i].branch_of, -1);
      CHECK(!strcmp(q->runs[i].config_hash, p->runs[i].config_hash));
    }
  }
  plan_free(p);
  plan_free(q);
  /* a wsd isoflop: every budget's sizes on the first budget's log grid
   * (centre 2.54 C^0.35, span 3, 5 points: a step of sqrt(3)), centred on
   * the grid point nearest its own centre; sizes recur across budgets */
  p = plan_text(
      "{\"name\": \"w\", \"method\": \"isoflop\", \"base\": {\"model\": {\"seq_len\": 64},"
      " \"data\": {\"synthetic\": {\"words\": 512}}, \"train\": {\"schedule\": \"wsd\"}},"
      " \"isoflop\": {\"flops\": {\"from\": 1e11, \"to\": 3.2e12, \"points\": 4},"
      " \"centre\": {\"coef\": 2.54, \"exponent\": 0.35, \"span\": 3, \"points\": 5}},"
      " \"resources\": {\"cpus\": 1}}",
      NULL);
  if (p) {
    double nc0 = 2.54 * pow(1e11, 0.35), step = sqrt(3.0);
    for (size_t i = 0; i < p->n; i++) {
      double k = log(p->runs[i].target_params / nc0) / log(step);
      CHECK_NEAR(k, round(k), 1e-9, 0);
      double own = log(2.54 * pow(p->runs[i].budget, 0.35) / nc0) / log(step);
      CHECK(fabs(k - round(own)) <= 2 + 1e-9); /* within the 5 points around its centre */
    }
    CHECK(p->n_branches >= 8);
  }
  plan_free(p);

  /* warmups the spec set apart share no phase: no branch */
  p = plan_text("{\"name\": \"w\", \"method\": \"runs\", \"base\": {\"model\": {\"n_layer\": 1,"
                " \"d_model\": 32, \"n_head\": 2, \"seq_len\": 32}, \"train\": {\"batch_size\": 8,"
                " \"lr\": 0.003, \"schedule\": \"wsd\"}}, \"runs\": ["
                "{\"train\": {\"tokens\": 25600, \"warmup_tokens\": 1024}},"
                "{\"train\": {\"tokens\": 51200, \"warmup_tokens\": 2048}},"
                "{\"train\": {\"tokens\": 102400, \"warmup_tokens\": 2048}}]}",
                NULL);
  if (p) {
    CHECK_INT_EQ(p->n_branches, 1); /* 51200 from 102400; 25600 alone */
    for (size_t i = 0; i < p->n; i++)
      CHECK_INT_EQ(p->runs[i].branch_of >= 0, p->runs[i].tokens == 51200);
  }
  plan_free(p);
  spec_problems pr = {0};
  spec *bad = NULL;
  CHECK(spec_parse("{\"name\": \"w\", \"method\": \"grid\", \"branches\": 1,"
                   " \"grid\": {\"params\": [2e4], \"tokens\": [1e6]}}",
                   "t.json", &bad, &pr) != 0);
  CHECK(has(&pr, "$.branches", "expected true or false"));
  spec_free(bad);
  spec_problems_free(&pr);
}

int main(void) {
  test_wsd_branches();
  test_bcrit_branches();
  test_shapes();
  test_examples();
  test_determinism();
  test_isoflop_budgets();
  test_batch_rule();
  test_order_and_resources();
  test_runs_method();
  test_refusals();
  test_memory_limits();
  test_trainer_hash();
  CHECK_DONE();
}

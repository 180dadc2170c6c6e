/* Tuning the learning rate on a muP proxy (sweeps/lr_tune.h; docs/sweeps.md
 * "Tuning the learning rate on a muP proxy"): the spec's "lr_tune" and its
 * refusals (path, found vs expected), the tune's runs on the proxy and the
 * study at its placeholder rate, the study's spec and plan from a stored
 * spec (the same configs as the user's spec at that rate), and the decision:
 * the argmin, ties to the smaller rate, the edge flag, seeds averaged,
 * failed runs left out, too few finished, still running. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "sweeps/lr_tune.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"
#include "unit/spec_check.h"

/* A spec: a grid study with an lr tune; base_model and tune are spliced in. */
static char *spec_text(const char *base_model, const char *base_train, const char *tune,
                       const char *extra) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "{\"name\": \"tune\", \"method\": \"grid\", "
           "\"base\": {\"model\": {\"seq_len\": 16%s}, \"data\": {\"synthetic\": {\"words\": "
           "256}}%s}, "
           "\"grid\": {\"params\": [2e4, 5e4], \"tokens\": [2e5]}, "
           "\"lr_tune\": %s, \"resources\": {\"cpus\": 1}%s}",
           base_model, base_train, tune, extra);
  return t;
}

/* bad() of spec_text(...) */
static spec_problems bad_spec(const char *base_model, const char *base_train, const char *tune,
                              const char *extra) {
  char *t = spec_text(base_model, base_train, tune, extra);
  spec_problems pr = bad(t);
  free(t);
  return pr;
}

/* good() of spec_text(...) */
static spec *good_spec(const char *base_model, const char *base_train, const char *tune,
                       const char *extra) {
  char *t = spec_text(base_model, base_train, tune, extra);
  spec *s = good(t);
  free(t);
  return s;
}

#define MUP ", \"parametrization\": \"mup\", \"base_width\": 32"
#define RATES "{\"lr\": [0.001, 0.003, 0.01, 0.03]}"

static void test_spec(void) {
  spec *s = good_spec(MUP, "", RATES, "");
  if (s) {
    CHECK(s->lr_tune.present);
    CHECK_INT_EQ(s->lr_tune.lr.n, 4);
    CHECK_INT_EQ(s->lr_tune.width, 32);
    CHECK(s->lr_tune.tokens == 0);
    CHECK_INT_EQ(s->lr_tune.seeds.n, 0);
  }
  spec_free(s);
  /* a range of rates, tokens and seeds */
  s = good_spec(MUP, "",
                "{\"lr\": {\"from\": 1e-3, \"to\": 1e-1, \"points\": 5}, \"tokens\": 65536, "
                "\"seeds\": [1, 2]}",
                "");
  if (s) {
    CHECK_INT_EQ(s->lr_tune.lr.n, 5);
    CHECK_NEAR(s->lr_tune.lr.v[2], 1e-2, 0, 1e-12);
    CHECK(s->lr_tune.tokens == 65536);
    CHECK_INT_EQ(s->lr_tune.seeds.n, 2);
  }
  spec_free(s);

  /* standard parametrization, by default or said: the rate would not carry */
  spec_problems pr = bad_spec(", \"base_width\": 32", "", RATES, "");
  CHECK(has(&pr, "$.base.model.parametrization", "found none (the default, \"sp\")",
            "expected \"mup\""));
  spec_problems_free(&pr);
  pr = bad_spec(", \"parametrization\": \"sp\"", "", RATES, "");
  CHECK(has(&pr, "$.base.model.parametrization", "found \"sp\"", "holds under muP only"));
  spec_problems_free(&pr);

  /* base fixes the rate */
  pr = bad_spec(MUP, ", \"train\": {\"lr\": 0.01}", RATES, "");
  CHECK(has(&pr, "$.base.train.lr", "found 0.01",
            "$.lr_tune chooses the study's learning rate on the proxy; expected it left out"));
  spec_problems_free(&pr);

  /* fewer than 3 rates, a repeated rate, a rate out of range */
  pr = bad_spec(MUP, "", "{\"lr\": [0.001, 0.01]}", "");
  CHECK(has(&pr, "$.lr_tune.lr", "found 2 values, expected at least 3", "a rate on each side"));
  spec_problems_free(&pr);
  pr = bad_spec(MUP, "", "{\"lr\": [0.001, 0.01, 0.001, 20]}", "");
  CHECK(has(&pr, "$.lr_tune.lr[2]", "found 0.001 again", "distinct"));
  CHECK(has(&pr, "$.lr_tune.lr[3]", "found 20", "a number from 1e-12 to 10"));
  spec_problems_free(&pr);

  /* the section's keys and values */
  pr = bad_spec(MUP, "", "{\"lr\": [1e-3, 1e-2, 1e-1], \"tokens\": -4, \"steps\": 3}", "");
  CHECK(has(&pr, "$.lr_tune.steps", "unknown key", "lr, tokens, seeds"));
  CHECK(has(&pr, "$.lr_tune.tokens", "found -4", "a token count D"));
  spec_problems_free(&pr);
  pr = bad_spec(MUP, "", "[0.001, 0.01, 0.1]", "");
  CHECK(has(&pr, "$.lr_tune", "found a list", NULL));
  spec_problems_free(&pr);
  pr = bad_spec(MUP, "", "{\"tokens\": 1e5}", "");
  CHECK(has(&pr, "$.lr_tune.lr", "missing", "learning rates to try"));
  spec_problems_free(&pr);

  /* seeds of the tune with base's seed */
  pr = bad_spec(MUP, ", \"train\": {\"seed\": 4}",
                "{\"lr\": [1e-3, 1e-2, 1e-1], \"seeds\": [1, 2]}", "");
  CHECK(has(&pr, "$.base.train.seed", "found 4", "$.lr_tune.seeds sets it"));
  spec_problems_free(&pr);

  /* a grid over rates, or a run that sets its own */
  pr = bad("{\"name\": \"t\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": 16" MUP
           "}}, \"grid\": {\"params\": [2e4], \"tokens\": [2e5], \"lr\": [1e-3, 1e-2]}, "
           "\"lr_tune\": " RATES "}");
  CHECK(has(&pr, "$.grid.lr", "found 2 rates", "$.lr_tune chooses the study's learning rate"));
  spec_problems_free(&pr);
  pr = bad("{\"name\": \"t\", \"method\": \"runs\", \"base\": {\"model\": {\"seq_len\": 16" MUP
           "}, \"train\": {\"tokens\": 65536}}, \"runs\": [{\"model\": {\"d_model\": 64}}, "
           "{\"train\": {\"lr\": 0.02}}, {\"model\": {\"base_width\": 64}}], "
           "\"lr_tune\": " RATES "}");
  CHECK(has(&pr, "$.runs[1].train.lr", "found 0.02", "every run's learning rate"));
  CHECK(has(&pr, "$.runs[2].model.base_width", "found 64", "base's proxy"));
  spec_problems_free(&pr);
}

/* The runs of p (JSON) and their number. */
static json_t *plan_json(const plan *p) {
  char *t = plan_runs_json(p);
  json_t *j = t ? json_loads(t, 0, NULL) : NULL;
  free(t);
  return j;
}

static plan *planned(const char *text, spec **sp) {
  spec_problems pr = {0};
  plan *p = NULL;
  *sp = good(text);
  if (*sp && plan_spec(*sp, &p, &pr) != 0) {
    char *m = spec_problems_format(&pr, "t.json");
    fprintf(stderr, "unexpected plan problems:\n%s\n", m);
    free(m);
  }
  CHECK(p != NULL);
  spec_problems_free(&pr);
  return p;
}

static void test_plan(void) {
  char *t = spec_text(MUP, "", RATES, "");
  spec *s;
  plan *p = planned(t, &s);
  free(t);
  if (p) {
    /* the tune's 4 runs, on the proxy: d_model 32, 1 layer (32 / 32), 4
     * heads of 8, at each rate */
    CHECK_INT_EQ(p->n, 4);
    const double want[4] = {0.001, 0.003, 0.01, 0.03};
    int64_t N = p->runs[0].nonembedding_params;
    for (size_t i = 0; i < p->n && i < 4; i++) {
      const plan_run *r = &p->runs[i];
      CHECK(!strcmp(r->part, "lr_tune"));
      CHECK_INT_EQ(r->d_model, 32);
      CHECK_INT_EQ(r->n_layer, 1);
      CHECK_INT_EQ(r->n_head, 4);
      CHECK(r->lr == want[i]);
      CHECK(!r->lr_from_rule);
      CHECK(r->batch_from_rule);
      CHECK(strstr(r->config, "\"parametrization\":\"mup\"") != NULL);
      /* D: 20 N, or the rule's min_steps (1000) steps at the rule's
       * batch size, whichever is more */
      CHECK(r->tokens >= 20 * N);
      CHECK(r->steps >= 1000);
    }
    CHECK_INT_EQ(N, 12 * 32 * 32 + 13 * 32 + 2 * 32);
    /* the study, at the grid's middle rate (the lower of the two middle
     * ones): the grid's 2 runs */
    CHECK(p->study != NULL);
    if (p->study) {
      CHECK(p->study_lr == 0.003);
      CHECK_INT_EQ(p->study->n, 2);
      for (size_t i = 0; i < p->study->n; i++) {
        CHECK(!strcmp(p->study->runs[i].part, "grid"));
        CHECK(p->study->runs[i].lr == 0.003);
      }
      CHECK_NEAR(p->total_flops, p->tune_flops + p->study->total_flops, 0, 1e-12);
    }
    /* what is submitted: the tune's runs only */
    json_t *j = plan_json(p);
    CHECK_INT_EQ(json_array_size(j), 4);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "part")), "lr_tune"));
    json_decref(j);
    /* the table shows both */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    plan_write_table(p, f);
    fclose(f);
    CHECK(strstr(buf, "4 lr tune runs, then 2 study runs at the best rate") != NULL);
    CHECK(strstr(buf, "the proxy: 1 layer x d_model 32 (base_width), 4 heads") != NULL);
    CHECK(strstr(buf, "planned here at lr = 0.003 (the grid's middle rate") != NULL);
    CHECK(strstr(buf, "total: 6 runs (lr tune and study)") != NULL);
    CHECK(strstr(buf, LR_TUNE_EDGE_WARNING) != NULL);
    free(buf);
  }
  plan_free(p);
  spec_free(s);

  /* tokens given, seeds, a wider proxy (64: 2 layers of 4 heads of 16) */
  t = spec_text(", \"parametrization\": \"mup\", \"base_width\": 64", "",
                "{\"lr\": [0.001, 0.01, 0.1], \"tokens\": 65536, \"seeds\": [3, 4]}", "");
  p = planned(t, &s);
  free(t);
  if (p) {
    CHECK_INT_EQ(p->n, 6);
    for (size_t i = 0; i < p->n; i++) {
      CHECK_INT_EQ(p->runs[i].n_layer, 2);
      CHECK_INT_EQ(p->runs[i].n_head, 4);
      CHECK_INT_EQ(p->runs[i].tokens, 65536);
      CHECK(p->runs[i].seed == 3 || p->runs[i].seed == 4);
    }
  }
  plan_free(p);
  spec_free(s);

  /* a proxy width that is not a whole number of heads */
  spec_problems pr = {0};
  s = good_spec(", \"parametrization\": \"mup\", \"base_width\": 36", "", RATES, "");
  p = NULL;
  CHECK(s && plan_spec(s, &p, &pr) == SS_EINVAL);
  CHECK(has(&pr, "$.base.model.base_width", "found 36, not a whole number of heads of 8",
            "expected a multiple of 8"));
  spec_problems_free(&pr);
  spec_free(s);

  /* the study's own problems are the spec's, and max_hours holds for both */
  s = good_spec(MUP, "", RATES, ", \"max_hours\": 1e-6");
  pr = (spec_problems){0};
  CHECK(s && plan_spec(s, &p, &pr) == SS_EINVAL);
  CHECK(has(&pr, "$.max_hours", "(6 runs, the lr tune's and the study's", NULL));
  spec_problems_free(&pr);
  spec_free(s);
  s = good("{\"name\": \"t\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": 16" MUP
           "}, \"train\": {\"batch_size\": 8}}, \"grid\": {\"params\": [2e4], \"tokens\": [64]}, "
           "\"lr_tune\": " RATES "}");
  pr = (spec_problems){0};
  CHECK(s && plan_spec(s, &p, &pr) == SS_EINVAL);
  CHECK(has(&pr, "$.grid.tokens[0]", "smaller than one batch", NULL));
  spec_problems_free(&pr);
  spec_free(s);
}

/* The study planned from the stored (canonical) spec at a rate is the
 * user's spec planned with that rate in base, config for config. */
static void test_study(void) {
  spec *s = good_spec(MUP, "", RATES, ", \"max_hours\": 5");
  if (!s)
    return;
  char *canon = spec_canonical(s);
  json_t *stored = json_loads(canon, 0, NULL);
  json_t *root = lr_tune_study_root(stored, 0.01, 1);
  CHECK(root && !json_object_get(root, "lr_tune") && !json_object_get(root, "max_hours"));
  json_t *train = json_object_get(json_object_get(root, "base"), "train");
  CHECK(json_real_value(json_object_get(train, "lr")) == 0.01);
  CHECK(json_is_integer(json_object_get(json_object_get(json_object_get(root, "base"), "model"),
                                        "seq_len"))); /* whole numbers as integers again */
  json_decref(root);
  spec *ss = NULL;
  plan *from_stored = NULL;
  spec_problems pr = {0};
  CHECK(lr_tune_plan_study(stored, 0.01, 1, &ss, &from_stored, &pr) == 0);
  spec_free(ss);
  /* the user's study at 0.01 */
  spec *u = good("{\"name\": \"tune\", \"method\": \"grid\", \"base\": {\"model\": {\"seq_len\": "
                 "16" MUP "}, \"data\": {\"synthetic\": {\"words\": 256}}, \"train\": {\"lr\": "
                 "0.01}}, \"grid\": {\"params\": [2e4, 5e4], \"tokens\": [2e5]}, "
                 "\"resources\": {\"cpus\": 1}}");
  plan *direct = NULL;
  CHECK(u && plan_spec(u, &direct, &pr) == 0);
  CHECK(from_stored && direct && from_stored->n == direct->n);
  for (size_t i = 0; from_stored && direct && i < direct->n; i++)
    CHECK(!strcmp(from_stored->runs[i].config_hash, direct->runs[i].config_hash));
  plan_free(from_stored);
  plan_free(direct);
  spec_free(u);
  spec_problems_free(&pr);
  json_decref(stored);
  free(canon);
  spec_free(s);
}

#define OK LR_TUNE_SUCCEEDED

static void test_decide(void) {
  /* the argmin; the grid in any order comes back ascending */
  const double grid[4] = {0.01, 0.001, 0.03, 0.003};
  lr_tune_obs o[4] = {{0.001, OK, 3.0}, {0.003, OK, 2.5}, {0.01, OK, 2.7}, {0.03, OK, 3.5}};
  lr_tune_decision d;
  CHECK(lr_tune_decide(grid, 4, o, 4, &d) == 0);
  CHECK(d.state == LR_TUNE_DECIDED);
  CHECK(d.lr == 0.003);
  CHECK_INT_EQ(d.chosen, 1);
  CHECK_INT_EQ(d.edge, 0);
  CHECK(d.rates[0].lr == 0.001 && d.rates[3].lr == 0.03);
  CHECK(d.rates[2].loss == 2.7);
  json_t *j = lr_tune_decision_json(&d);
  CHECK(!strcmp(json_string_value(json_object_get(j, "status")), "decided"));
  CHECK(json_real_value(json_object_get(j, "lr")) == 0.003);
  CHECK(json_is_null(json_object_get(j, "at_edge")));
  CHECK_INT_EQ(json_array_size(json_object_get(j, "warnings")), 0);
  CHECK(json_is_true(json_object_get(json_array_get(json_object_get(j, "rates"), 1), "chosen")));
  CHECK(json_is_null(json_object_get(j, "reason")));
  json_decref(j);
  lr_tune_decision_free(&d);

  /* a tie: the smaller rate, whatever order the runs come in */
  lr_tune_obs tie[4] = {{0.01, OK, 2.5}, {0.001, OK, 3.0}, {0.003, OK, 2.5}, {0.03, OK, 3.5}};
  CHECK(lr_tune_decide(grid, 4, tie, 4, &d) == 0);
  CHECK(d.state == LR_TUNE_DECIDED && d.lr == 0.003);
  lr_tune_decision_free(&d);

  /* at the edges: flagged, with the warning */
  lr_tune_obs low[4] = {{0.001, OK, 2.0}, {0.003, OK, 2.5}, {0.01, OK, 2.7}, {0.03, OK, 3.5}};
  CHECK(lr_tune_decide(grid, 4, low, 4, &d) == 0);
  CHECK(d.lr == 0.001 && d.edge == -1);
  j = lr_tune_decision_json(&d);
  CHECK(!strcmp(json_string_value(json_object_get(j, "at_edge")), "low"));
  const char *w = json_string_value(json_array_get(json_object_get(j, "warnings"), 0));
  CHECK(w && !strncmp(w, LR_TUNE_EDGE_WARNING, strlen(LR_TUNE_EDGE_WARNING)));
  CHECK(w && strstr(w, "smallest rate") != NULL);
  json_decref(j);
  lr_tune_decision_free(&d);
  lr_tune_obs high[4] = {{0.001, OK, 3.0}, {0.003, OK, 2.5}, {0.01, OK, 2.2}, {0.03, OK, 2.1}};
  CHECK(lr_tune_decide(grid, 4, high, 4, &d) == 0);
  CHECK(d.lr == 0.03 && d.edge == 1);
  j = lr_tune_decision_json(&d);
  CHECK(!strcmp(json_string_value(json_object_get(j, "at_edge")), "high"));
  json_decref(j);
  lr_tune_decision_free(&d);

  /* seeds: the mean of a rate's runs; failed runs left out, a rate of
   * failed runs only has no loss (and cannot win, however good the rest) */
  lr_tune_obs seeds[8] = {{0.001, OK, 3.0},
                          {0.001, OK, 2.0}, /* mean 2.5 */
                          {0.003, OK, 2.4},
                          {0.003, LR_TUNE_FAILED, NAN},
                          {0.01, OK, 2.6},
                          {0.01, OK, 2.6},
                          {0.03, LR_TUNE_FAILED, NAN},
                          {0.03, LR_TUNE_CANCELLED, NAN}};
  CHECK(lr_tune_decide(grid, 4, seeds, 8, &d) == 0);
  CHECK(d.state == LR_TUNE_DECIDED && d.lr == 0.003);
  CHECK_NEAR(d.rates[0].loss, 2.5, 1e-15, 0);
  CHECK_INT_EQ(d.rates[1].failed, 1);
  CHECK_INT_EQ(d.rates[1].succeeded, 1);
  CHECK(isnan(d.rates[3].loss));
  CHECK_INT_EQ(d.rates[3].failed, 1);
  CHECK_INT_EQ(d.rates[3].cancelled, 1);
  CHECK_INT_EQ(d.with_loss, 3);
  CHECK_INT_EQ(d.edge, 0); /* the grid's edge, not the finished rates' */
  lr_tune_decision_free(&d);

  /* too few finished: undecided, with the reason */
  lr_tune_obs few[4] = {{0.001, OK, 3.0},
                        {0.003, LR_TUNE_FAILED, NAN},
                        {0.01, OK, 2.7},
                        {0.03, LR_TUNE_SUCCEEDED, NAN}}; /* no loss: as failed */
  CHECK(lr_tune_decide(grid, 4, few, 4, &d) == 0);
  CHECK(d.state == LR_TUNE_UNDECIDED);
  CHECK(isnan(d.lr) && d.chosen == -1);
  CHECK(strstr(d.reason, "only 2 of the grid's 4 rates have a finished tune run (2 runs failed") !=
        NULL);
  CHECK(strstr(d.reason, "at least 3") != NULL);
  j = lr_tune_decision_json(&d);
  CHECK(!strcmp(json_string_value(json_object_get(j, "status")), "undecided"));
  CHECK(json_is_null(json_object_get(j, "lr")));
  CHECK(json_is_string(json_object_get(j, "reason")));
  json_decref(j);
  lr_tune_decision_free(&d);

  /* still running: waits, even with enough finished */
  lr_tune_obs running[4] = {
      {0.001, OK, 3.0}, {0.003, OK, 2.5}, {0.01, OK, 2.7}, {0.03, LR_TUNE_ACTIVE, NAN}};
  CHECK(lr_tune_decide(grid, 4, running, 4, &d) == 0);
  CHECK(d.state == LR_TUNE_WAITING);
  CHECK(strstr(d.reason, "1 of 4 tune runs still queued or running") != NULL);
  lr_tune_decision_free(&d);

  /* a rate through the config's text matches (1e-9); one off the grid is
   * left out and said */
  lr_tune_obs odd[5] = {{0.001 * (1 + 1e-13), OK, 3.0},
                        {0.003, OK, 2.5},
                        {0.01, OK, 2.7},
                        {0.03, OK, 3.5},
                        {0.005, OK, 1.0}};
  CHECK(lr_tune_decide(grid, 4, odd, 5, &d) == 0);
  CHECK(d.lr == 0.003 && d.rates[0].succeeded == 1);
  CHECK_INT_EQ(d.unmatched, 1);
  j = lr_tune_decision_json(&d);
  CHECK(strstr(json_string_value(json_array_get(json_object_get(j, "warnings"), 0)),
               "outside the grid") != NULL);
  json_decref(j);
  lr_tune_decision_free(&d);

  CHECK(lr_tune_decide(grid, 0, o, 4, &d) == SS_EINVAL);
}

/* The scheduler's step from a stored spec: decided (the study's runs at
 * the rate, the decision with the proxy), undecided ("[]"), waiting. */
static void test_conclude(void) {
  spec *s = good_spec(MUP, "", RATES, "");
  if (!s)
    return;
  char *canon = spec_canonical(s);
  json_t *proxy = json_pack("{s:i,s:i}", "d_model", 32, "n_layer", 1);
  lr_tune_obs o[4] = {{0.001, OK, 3.0}, {0.003, OK, 2.9}, {0.01, OK, 2.7}, {0.03, OK, 3.5}};
  lr_tune_outcome out;
  CHECK(lr_tune_conclude(canon, o, 4, proxy, &out) == 0);
  CHECK(out.d.state == LR_TUNE_DECIDED && out.d.lr == 0.01 && !out.failed);
  CHECK_INT_EQ(out.study_runs, 2);
  CHECK_INT_EQ(out.gpus, 0);
  CHECK_INT_EQ(out.max_attempts, 3);
  json_t *runs = json_loads(out.runs_json, 0, NULL), *dec = json_loads(out.decision_json, 0, NULL);
  CHECK_INT_EQ(json_array_size(runs), 2);
  for (size_t i = 0; i < json_array_size(runs); i++) {
    json_t *r = json_array_get(runs, i);
    CHECK(json_real_value(json_object_get(r, "lr")) == 0.01);
    CHECK(!strcmp(json_string_value(json_object_get(r, "part")), "grid"));
    CHECK(json_real_value(json_object_get(json_object_get(json_object_get(r, "config"), "train"),
                                          "lr")) == 0.01);
  }
  CHECK(!strcmp(json_string_value(json_object_get(dec, "status")), "decided"));
  CHECK_INT_EQ(json_integer_value(json_object_get(dec, "study_runs")), 2);
  CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(dec, "proxy"), "d_model")), 32);
  json_decref(runs);
  json_decref(dec);
  lr_tune_outcome_free(&out);

  lr_tune_obs failed[4] = {{0.001, LR_TUNE_FAILED, NAN},
                           {0.003, LR_TUNE_FAILED, NAN},
                           {0.01, OK, 2.7},
                           {0.03, LR_TUNE_CANCELLED, NAN}};
  CHECK(lr_tune_conclude(canon, failed, 4, NULL, &out) == 0);
  CHECK(out.d.state == LR_TUNE_UNDECIDED);
  CHECK(!strcmp(out.runs_json, "[]"));
  CHECK(strstr(out.decision_json, "\"undecided\"") != NULL);
  lr_tune_outcome_free(&out);

  lr_tune_obs active[1] = {{0.001, LR_TUNE_ACTIVE, NAN}};
  CHECK(lr_tune_conclude(canon, active, 1, NULL, &out) == 0);
  CHECK(out.d.state == LR_TUNE_WAITING && !out.decision_json);
  lr_tune_outcome_free(&out);

  /* a spec without a tune */
  CHECK(lr_tune_conclude("{\"name\": \"x\"}", o, 4, NULL, &out) == SS_EINVAL);
  json_decref(proxy);
  free(canon);
  spec_free(s);
}

int main(void) {
  test_spec();
  test_plan();
  test_study();
  test_decide();
  test_conclude();
  CHECK_DONE();
}

/* Sweep spec parsing and validation (sweeps/spec.h): every kind of problem is
 * reported, all at once, each with its JSON path, the value found and what is
 * allowed; malformed JSON with line and column; the examples parse; the
 * digest ignores formatting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "sweeps/spec.h"
#include "unit/spec_check.h"

#ifndef SS_SOURCE_DIR
#define SS_SOURCE_DIR "."
#endif

static void test_malformed(void) {
  /* a doubled comma on line 3 */
  spec_problems pr = bad("{\n  \"name\": \"x\",\n  \"method\": \"grid\",,\n  \"grid\": {}\n}\n");
  CHECK_INT_EQ(pr.n, 1);
  CHECK(!strncmp(pr.items[0].path, "t.json:3:", 9));
  CHECK(strstr(pr.items[0].message, "malformed JSON") != NULL);
  char *m = spec_problems_format(&pr, "t.json");
  CHECK(m && !strncmp(m, "t.json:3:", 9)); /* FILE:line:column: message */
  free(m);
  spec_problems_free(&pr);

  /* duplicate keys are refused (Jansson JSON_REJECT_DUPLICATES) */
  pr = bad("{\"name\": \"x\",\n \"name\": \"y\", \"method\": \"runs\", \"runs\": [{}]}");
  CHECK_INT_EQ(pr.n, 1);
  CHECK(!strncmp(pr.items[0].path, "t.json:2:", 9));
  CHECK(strstr(pr.items[0].message, "duplicate") != NULL);
  spec_problems_free(&pr);

  pr = bad("[1, 2]");
  CHECK(has(&pr, "$", "found a list", "expected a JSON object"));
  spec_problems_free(&pr);
}

/* One spec with one problem of every kind: all of them come back together. */
static void test_all_at_once(void) {
  spec_problems pr = bad("{\n"
                         "  \"name\": \"all\",\n"
                         "  \"method\": \"isoflop\",\n"
                         "  \"colour\": \"blue\",\n"
                         "  \"priority\": \"high\",\n"
                         "  \"max_attempts\": 0,\n"
                         "  \"base\": {\"model\": {\"d_model\": 64, \"nlayer\": 2},\n"
                         "           \"precision\": \"fp8\"},\n"
                         "  \"isoflop\": {\n"
                         "    \"flops\": [1e12, 3e12, \"1e13\", -5],\n"
                         "    \"params\": {\"from\": 1e6, \"to\": 1e4, \"points\": 7},\n"
                         "    \"flops_count\": \"approx\",\n"
                         "    \"flop\": 1\n"
                         "  },\n"
                         "  \"grid\": {\"params\": [1e5]},\n"
                         "  \"resources\": {\"gpus\": 1, \"cpus\": 2},\n"
                         "  \"shape\": {\"aspect_ratio\": 0.1}\n"
                         "}\n");
  /* unknown keys, at the top and in a section */
  CHECK(has(&pr, "$.colour", "unknown key", "expected one of"));
  CHECK(has(&pr, "$.isoflop.flop", "unknown key", "flops"));
  /* wrong types, at a key and at a list element */
  CHECK(has(&pr, "$.priority", "found a string \"high\"", "integer"));
  CHECK(has(&pr, "$.isoflop.flops[2]", "found a string \"1e13\"", "compute budget"));
  /* out of range */
  CHECK(has(&pr, "$.isoflop.flops[3]", "found -5", "from 1"));
  CHECK(has(&pr, "$.max_attempts", "found 0", "from 1 to 100"));
  CHECK(has(&pr, "$.shape.aspect_ratio", "found 0.1", "from 1 to 1024"));
  /* a bad range */
  CHECK(has(&pr, "$.isoflop.params", "from 1e+06 and to 10000", "from < to"));
  /* a bad choice */
  CHECK(has(&pr, "$.isoflop.flops_count", "found \"approx\"", "\"6nd\", \"exact\""));
  /* a section for another method */
  CHECK(has(&pr, "$.grid", "method is \"isoflop\"", NULL));
  /* resources: exactly one kind */
  CHECK(has(&pr, "$.resources", "both", "exactly one"));
  /* base: what the method plans, and the trainer's own checks, at $.base paths */
  CHECK(has(&pr, "$.base.model.d_model", "found 64", "left out of base"));
  CHECK(has(&pr, "$.base.model.nlayer", "unknown key", "n_layer"));
  CHECK(has(&pr, "$.base.precision", "\"fp8\"", "bf16"));
  CHECK(pr.n >= 14);
  /* the formatted text names the file, the path and the problem, one a line */
  char *m = spec_problems_format(&pr, "t.json");
  CHECK(m && strstr(m, "t.json: $.isoflop.flops[2]: found a string") != NULL);
  CHECK(m && strstr(m, "t.json: $.colour: unknown key") != NULL);
  CHECK(m && strchr(m, '\n') != NULL); /* one problem a line */
  free(m);
  json_t *j = spec_problems_to_json(&pr);
  CHECK(json_array_size(j) == pr.n);
  CHECK(
      !strcmp(json_string_value(json_object_get(json_array_get(j, 0), "path")), pr.items[0].path));
  json_decref(j);
  spec_problems_free(&pr);
}

/* One spec each, refused with a problem at every path given, its message
 * holding both fragments (the second may be NULL). */
static void test_missing_and_unknown(void) {
  static const struct {
    const char *text;
    struct {
      const char *path, *needle1, *needle2;
    } want[2];
  } cases[] = {
      {"{\"method\": \"isoflop\"}",
       {{"$.name", "missing", NULL}, {"$.isoflop", "missing", "needs a \"isoflop\" section"}}},
      {"{\"name\": \"x\", \"method\": \"sweep\"}",
       {{"$.method", "found \"sweep\"", "\"grid\", \"isoflop\", \"batch\", \"runs\""}}},
      {"{\"name\": \"x\"}", {{"$.method", "missing", NULL}}},
      {"{\"name\": \"x\", \"method\": \"grid\", \"grid\": {\"tokens\": [1e6]}}",
       {{"$.grid.params", "missing", "target non-embedding"}}},
      {"{\"name\": \"x\", \"method\": \"isoflop\", \"isoflop\": {\"flops\": [1e12]}}",
       {{"$.isoflop", "neither", "\"centre\""}}},
      {"{\"name\": \"x\", \"method\": \"runs\", \"runs\": []}", {{"$.runs", "empty list", NULL}}},
      {"{\"name\": \"x\", \"method\": \"runs\", \"runs\": [{}, 3]}",
       {{"$.runs[1]", "found a number 3", "partial run config"}}},
      {"{\"name\": \"\", \"method\": \"runs\", \"runs\": [{}], \"base\": [1]}",
       {{"$.name", "0 bytes", NULL}, {"$.base", "found a list", "partial run config"}}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    spec_problems pr = bad(cases[c].text);
    for (size_t k = 0; k < 2 && cases[c].want[k].path; k++)
      CHECK(has(&pr, cases[c].want[k].path, cases[c].want[k].needle1, cases[c].want[k].needle2));
    spec_problems_free(&pr);
  }
}

/* A name is shown in tables and pages: control and Unicode format
 * characters (a right-to-left override would reorder the status line) are
 * refused with their code point and byte offset; other text is welcome. */
static void test_names(void) {
  static const struct {
    const char *json_name, *found;
  } refused[] = {
      {"ab\\u202ecd", "found U+202E at byte 2"},     /* right-to-left override */
      {"\\u2066x\\u2069", "found U+2066 at byte 0"}, /* left-to-right isolate */
      {"a\\u200bb", "found U+200B at byte 1"},       /* zero width space */
      {"\\ufeffname", "found U+FEFF at byte 0"},     /* byte order mark */
      {"soft\\u00adhyphen", "found U+00AD at byte 4"},
      {"x\\u061cy", "found U+061C at byte 1"},        /* Arabic letter mark */
      {"x\\u180e", "found U+180E at byte 1"},         /* Mongolian vowel separator */
      {"x\\u2064", "found U+2064 at byte 1"},         /* invisible plus */
      {"x\\ufffb", "found U+FFFB at byte 1"},         /* interlinear annotation */
      {"x\\udb40\\udc01", "found U+E0001 at byte 1"}, /* language tag */
      {"x\\udb40\\udc7f", "found U+E007F at byte 1"}, /* cancel tag */
      {"tab\\there", "found U+0009 at byte 3"},
      {"del\\u007f", "found U+007F at byte 3"},
      {"c1\\u0085", "found U+0085 at byte 2"},   /* next line */
      {"line\\u2028", "found U+2028 at byte 4"}, /* line separator */
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"name\": \"%s\", \"method\": \"runs\", \"runs\": [{}]}",
             refused[i].json_name);
    spec_problems pr = bad(text);
    CHECK(has(&pr, "$.name", refused[i].found, "expected 1 to 128 printable characters"));
    spec_problems_free(&pr);
  }
  /* invalid UTF-8 never becomes a name: the JSON is refused where it is */
  spec_problems pr = bad("{\"name\": \"a\xff\", \"method\": \"runs\", \"runs\": [{}]}");
  CHECK(pr.n == 1 && strstr(pr.items[0].message, "malformed JSON") != NULL);
  spec_problems_free(&pr);
  spec *s = good("{\"name\": \"r\u00e9sum\u00e9 \u6570\u636e \U0001F600 a\\\\b\", "
                 "\"method\": \"runs\", \"runs\": [{}]}");
  spec_free(s);
}

static void test_values(void) {
  /* empty list, duplicates, too few, bad range keys, rounding collisions */
  spec_problems pr = bad("{\"name\": \"v\", \"method\": \"grid\", \"grid\": {"
                         "\"params\": [],"
                         "\"tokens\": [1e6, 2e6, 1e6],"
                         "\"batch_size\": {\"from\": 1, \"to\": 4, \"points\": 7},"
                         "\"lr\": {\"from\": 1e-3, \"to\": 1e-2},"
                         "\"seeds\": [1.5]}}");
  CHECK(has(&pr, "$.grid.params", "empty list", NULL));
  CHECK(has(&pr, "$.grid.tokens[2]", "again (also at [0])", "distinct"));
  CHECK(has(&pr, "$.grid.batch_size", "repeats", "fewer points"));
  CHECK(has(&pr, "$.grid.lr.points", "missing", NULL));
  CHECK(has(&pr, "$.grid.seeds[0]", "found 1.5", "integer"));
  spec_problems_free(&pr);

  pr = bad("{\"name\": \"v\", \"method\": \"grid\", \"grid\": {"
           "\"params\": {\"from\": 1e4, \"to\": 1e6, \"points\": 1},"
           "\"tokens\": {\"from\": 0, \"to\": 1e6, \"points\": 3, \"step\": 2}}}");
  CHECK(has(&pr, "$.grid.params", "1 point", "from = to"));
  CHECK(has(&pr, "$.grid.tokens.from", "found 0", NULL));
  CHECK(has(&pr, "$.grid.tokens.step", "unknown key", "from, to, points"));
  spec_problems_free(&pr);

  pr = bad("{\"name\": \"v\", \"method\": \"batch\", \"batch\": {"
           "\"params\": [1e5, 2e5], \"tokens\": 1e6, \"batch_size\": [8, 16],"
           "\"target_loss\": []}}");
  CHECK(has(&pr, "$.batch.params", "2 values", "one target N"));
  CHECK(has(&pr, "$.batch.batch_size", "found 2 values", "at least 4"));
  CHECK(has(&pr, "$.batch.target_loss", "empty list", NULL));
  spec_problems_free(&pr);

  /* a valid range expands log-spaced, endpoints exact */
  spec *s = good("{\"name\": \"v\", \"method\": \"grid\", \"grid\": {"
                 "\"params\": {\"from\": 1e4, \"to\": 1e6, \"points\": 3},"
                 "\"tokens\": 1e6,"
                 "\"batch_size\": {\"from\": 4, \"to\": 64, \"points\": 5}}}");
  if (s) {
    CHECK_INT_EQ(s->grid.params.n, 3);
    CHECK(s->grid.params.v[0] == 1e4 && s->grid.params.v[2] == 1e6);
    CHECK_NEAR(s->grid.params.v[1], 1e5, 0, 1e-12);
    CHECK_INT_EQ(s->grid.tokens.n, 1);
    CHECK(s->grid.tokens.scalar);
    CHECK_INT_EQ(s->grid.batch_size.n, 5);
    CHECK(s->grid.batch_size.v[1] == 8 && s->grid.batch_size.v[4] == 64);
    char p[192];
    spec_values_path(&s->grid.params, 1, p, sizeof p);
    CHECK(!strcmp(p, "$.grid.params (point 2 of 3)"));
    spec_values_path(&s->grid.tokens, 0, p, sizeof p);
    CHECK(!strcmp(p, "$.grid.tokens"));
  }
  spec_free(s);
}

static void test_conflicts(void) {
  spec_problems pr = bad("{\"name\": \"c\", \"method\": \"grid\","
                         "\"base\": {\"train\": {\"tokens\": 1000, \"lr\": 0.01, \"seed\": 3},"
                         "           \"backend\": \"cpu\", \"world_size\": 2},"
                         "\"grid\": {\"params\": [1e5], \"tokens\": [1e6], \"lr\": [1e-3],"
                         "           \"seeds\": [1, 2]},"
                         "\"resources\": {\"gpus\": 2}}");
  CHECK(has(&pr, "$.base.train.tokens", "found 1000", "\"tokens\" sets D"));
  CHECK(has(&pr, "$.base.train.lr", "found 0.01", "$.grid.lr"));
  CHECK(has(&pr, "$.base.train.seed", "found 3", "seeds"));
  CHECK(has(&pr, "$.base.backend", "found \"cpu\"", "\"cuda\""));
  spec_problems_free(&pr);

  pr = bad("{\"name\": \"c\", \"method\": \"runs\", \"runs\": [{}],"
           "\"base\": {\"threads\": 8}, \"resources\": {\"cpus\": 2},"
           "\"batch_rule\": {\"min_batch\": 8, \"max_batch\": 4, \"floor\": 1},"
           "\"lr_rule\": {\"batch_scaling\": \"linear\", \"min\": 0.1, \"max\": 0.01}}");
  CHECK(has(&pr, "$.base.threads", "found 8", "resources.cpus is 2"));
  CHECK(has(&pr, "$.batch_rule.min_batch", "found 8", "at most max_batch"));
  CHECK(has(&pr, "$.batch_rule.floor", "unknown key", NULL));
  CHECK(has(&pr, "$.lr_rule.batch_scaling", "found \"linear\"", "\"sqrt\", \"none\""));
  CHECK(has(&pr, "$.lr_rule.min", "found 0.1", "at most max"));
  spec_problems_free(&pr);
}

static void test_defaults_and_digest(void) {
  spec *a = good("{\"name\": \"d\", \"method\": \"isoflop\","
                 " \"isoflop\": {\"flops\": [1e12, 1e13], \"params\": [1e4, 3e4, 1e5]}}");
  spec *b = good("{\"isoflop\": {\"params\": [10000, 30000, 100000],"
                 "  \"flops\": [1000000000000, 10000000000000]},\n"
                 "  \"method\": \"isoflop\", \"name\": \"d\"}");
  spec *c = good("{\"name\": \"d\", \"method\": \"isoflop\","
                 " \"isoflop\": {\"flops\": [1e12, 2e13], \"params\": [1e4, 3e4, 1e5]}}");
  if (a && b && c) {
    CHECK(strlen(a->digest) == 64);
    CHECK(!strcmp(a->digest, b->digest)); /* key order and number spelling do not matter */
    CHECK(strcmp(a->digest, c->digest) != 0);
    /* defaults (docs/sweeps.md) */
    CHECK_INT_EQ(a->cpus, 1);
    CHECK_INT_EQ(a->gpus, 0);
    CHECK_INT_EQ(a->max_attempts, 3);
    CHECK_INT_EQ(a->priority, 0);
    CHECK(a->max_hours == 0);
    CHECK(a->throughput_flops == SPEC_CPU_FLOPS);
    CHECK(a->batch_rule.coef == SPEC_BATCH_COEF && a->batch_rule.min_steps == 1000);
    CHECK(a->lr_rule.coef == SPEC_LR_COEF && a->lr_rule.sqrt_batch == 1);
    CHECK_INT_EQ(a->seq_len, 64);
    CHECK_INT_EQ(a->vocab_size, 27);
    CHECK(!a->isoflop.exact);
  }
  spec_free(a);
  spec_free(b);
  spec_free(c);
  spec *g = good("{\"name\": \"g\", \"method\": \"runs\", \"runs\": [{}],"
                 " \"base\": {\"backend\": \"cuda\"}}");
  if (g) {
    CHECK_INT_EQ(g->gpus, 1);
    CHECK(g->throughput_flops == SPEC_GPU_FLOPS);
  }
  spec_free(g);
}

static void test_examples(void) {
  static const char *const names[] = {"quickstart.json", "gpu-cluster.json", "grid.json",
                                      "batch.json",      "runs.json",        "mup-tune.json"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/sweeps/examples/%s", SS_SOURCE_DIR, names[i]);
    spec_problems pr = {0};
    spec *s = NULL;
    int rc = spec_load(path, &s, &pr);
    if (rc) {
      char *m = spec_problems_format(&pr, path);
      fprintf(stderr, "%s\n", m);
      free(m);
    }
    CHECK(rc == 0);
    CHECK(s && s->description && strlen(s->description) > 40);
    spec_free(s);
    spec_problems_free(&pr);
  }
  spec_problems pr = {0};
  spec *s = NULL;
  CHECK(spec_load("/nonexistent/spec.json", &s, &pr) == SS_ENOENT);
  CHECK(pr.n == 1 && strstr(pr.items[0].message, "cannot open"));
  spec_problems_free(&pr);
}

/* spec_walk: every member at any depth, with its JSON path, a member
 * before what it holds; a visit may replace members of the value it gets. */
static void walk_visit(void *ud, const char *path, const char *key, json_t *value) {
  char *seen = ud;
  size_t n = strlen(seen);
  snprintf(seen + n, 1024 - n, "%s%s", n ? " " : "", path);
  if (!strcmp(key, "data") && json_is_object(value))
    json_object_set_new(value, "train", json_string("/abs/train.bin"));
}

static void test_walk(void) {
  json_t *j = json_loads("{\"base\": {\"data\": {\"train\": \"t.bin\"}}, "
                         "\"runs\": [{\"data\": {\"train\": \"u.bin\"}}, 3, [{\"k\": 1}]]}",
                         JSON_PRESERVE_ORDER, NULL);
  CHECK(j != NULL);
  char seen[1024] = "";
  spec_walk(j, "$", walk_visit, seen);
  CHECK(!strcmp(seen, "$.base $.base.data $.base.data.train $.runs $.runs[0].data "
                      "$.runs[0].data.train $.runs[2][0].k"));
  json_t *base = json_object_get(j, "base");
  const char *t = json_string_value(json_object_get(json_object_get(base, "data"), "train"));
  CHECK(t && !strcmp(t, "/abs/train.bin"));
  json_t *r0 = json_array_get(json_object_get(j, "runs"), 0);
  t = json_string_value(json_object_get(json_object_get(r0, "data"), "train"));
  CHECK(t && !strcmp(t, "/abs/train.bin"));
  json_decref(j);
}

int main(void) {
  test_malformed();
  test_all_at_once();
  test_missing_and_unknown();
  test_names();
  test_values();
  test_conflicts();
  test_defaults_and_digest();
  test_examples();
  test_walk();
  CHECK_DONE();
}

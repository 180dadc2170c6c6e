/* runcfg/runcfg.c: the wsd schedule's decay_frac and stable steps; the "tf32" key (on by default
 * for backend cuda at fp32, switched off by false, a true elsewhere rejected with file, path, found
 * and expected) and what it does to the resolved JSON and so to the hash (the key appears only
 * where it applies, so configs of other backends and precisions keep theirs); the "reproducible"
 * key ("machine", the default, keeps every config's hash; "portable" is in the resolved JSON and
 * so in the hash, and survives a round trip; anything else is refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "common/err.h"
#include "runcfg/runcfg.h"

/* the quickstart config with `extra` (a ",\"key\": value" tail) at the top level */
static int parse(const char *extra, rcfg *c, char *err, size_t errlen) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"model\": {\"n_layer\": 2, \"d_model\": 96, \"n_head\": 4, \"seq_len\": 64},"
           "\"data\": {\"synthetic\": {\"letters\": 26, \"words\": 4096, \"min_len\": 2,"
           " \"max_len\": 8, \"zipf\": 1.2, \"seed\": 1}},"
           "\"train\": {\"batch_size\": 32, \"micro_batch_size\": 8, \"tokens\": 2097152}%s}",
           extra);
  return rcfg_parse(text, "run.json", c, err, errlen);
}

/* the resolved JSON has `"tf32":` (1), has it with value `want`, or not (0) */
static int json_tf32(const rcfg *c, int *value) {
  char *s = rcfg_to_json(c);
  CHECK(s != NULL);
  const char *k = s ? strstr(s, "\"tf32\":") : NULL;
  if (k)
    *value = strncmp(k + 7, "true", 4) == 0;
  free(s);
  return k != NULL;
}

/* the stable steps of a run of `steps` steps (batch 1 x seq_len 2) and
 * train_tail; -1 when the config is refused */
static int64_t stable(int64_t steps, const char *train_tail) {
  char text[512], err[1024];
  rcfg c;
  snprintf(text, sizeof text,
           "{\"model\": {\"n_layer\": 1, \"d_model\": 8, \"n_head\": 1, \"seq_len\": 2},"
           "\"train\": {\"batch_size\": 1, \"tokens\": %lld%s}}",
           (long long)(2 * steps), train_tail);
  if (rcfg_parse(text, "run.json", &c, err, sizeof err) != 0)
    return -1;
  return rcfg_wsd_stable_steps(&c);
}

static void test_wsd(void) {
  /* steps - ceil(decay_frac x steps), at least one decay step */
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"wsd\""), 80);
  CHECK_INT_EQ(stable(50, ",\"schedule\": \"wsd\""), 40); /* 0.2 x 50 is 10, not 11 */
  CHECK_INT_EQ(stable(7, ",\"schedule\": \"wsd\""), 5);
  CHECK_INT_EQ(stable(1, ",\"schedule\": \"wsd\""), 0);
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"wsd\", \"decay_frac\": 0.001"), 99);
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"wsd\", \"decay_frac\": 1"), 0);
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"cosine\""), 100); /* all of them */
  /* decay_frac only with wsd, in (0, 1]; in the JSON only for wsd, so other
   * schedules keep their hashes */
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"wsd\", \"decay_frac\": 0"), -1);
  CHECK_INT_EQ(stable(100, ",\"schedule\": \"wsd\", \"decay_frac\": 1.5"), -1);
  CHECK_INT_EQ(stable(100, ",\"decay_frac\": 0.2"), -1);
  rcfg c;
  char err[1024];
  CHECK_INT_EQ(parse("", &c, err, sizeof err), 0);
  char *s = rcfg_to_json(&c);
  CHECK(s && !strstr(s, "decay_frac"));
  free(s);
  CHECK_INT_EQ(rcfg_parse("{\"train\": {\"schedule\": \"wsd\"}}", "w.json", &c, err, sizeof err),
               0);
  s = rcfg_to_json(&c);
  CHECK(s && strstr(s, "\"decay_frac\":0.2"));
  free(s);
}

/* Counts the leaves of obj (dotted below prefix) that rcfg_schema does not
 * list. */
static int unlisted(const cJSON *obj, const char *prefix) {
  size_t n;
  const rcfg_key *k = rcfg_schema(&n);
  int missing = 0;
  for (const cJSON *c = obj->child; c; c = c->next) {
    char path[128];
    snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", c->string);
    if (cJSON_IsObject(c)) {
      missing += unlisted(c, path);
      continue;
    }
    size_t i = 0;
    while (i < n && strcmp(k[i].path, path))
      i++;
    if (i == n) {
      fprintf(stderr, "key %s of the canonical config is not in rcfg_schema\n", path);
      missing++;
    }
  }
  return missing;
}

/* Every key the canonical text can hold is marked in the schema (a llama
 * muP wsd config on cuda with every optional key, and a shard one), so a
 * new key must be placed; tokens, eval and checkpoint differ along a
 * trajectory, a key the schema does not know defines one. */
static void test_schema(void) {
  const char *configs[] = {
      "{\"model\": {\"family\": \"llama\", \"parametrization\": \"mup\", \"base_width\": 64},"
      "\"train\": {\"schedule\": \"wsd\"}, \"optimizer\": {\"zero\": 1}, \"world_size\": 2,"
      "\"backend\": \"cuda\", \"trainer\": \"torch\", \"reproducible\": \"portable\"}",
      "{\"data\": {\"train\": \"t_*.bin\", \"val\": \"v_*.bin\"}}"};
  char err[2048];
  for (int i = 0; i < 2; i++) {
    rcfg c;
    CHECK_INT_EQ(rcfg_parse(configs[i], "schema.json", &c, err, sizeof err), 0);
    char *text = rcfg_to_json(&c);
    cJSON *tree = text ? cJSON_Parse(text) : NULL;
    CHECK(tree != NULL);
    if (tree)
      CHECK_INT_EQ(unlisted(tree, ""), 0);
    cJSON_Delete(tree);
    free(text);
  }
  CHECK_INT_EQ(rcfg_key_traj("train.tokens"), RCFG_TRAJ_ALONG);
  CHECK_INT_EQ(rcfg_key_traj("eval.every_tokens"), RCFG_TRAJ_ALONG);
  CHECK_INT_EQ(rcfg_key_traj("checkpoint.every_tokens"), RCFG_TRAJ_ALONG);
  CHECK_INT_EQ(rcfg_key_traj("train.lr"), RCFG_TRAJ_RULED);
  CHECK_INT_EQ(rcfg_key_traj("train.warmup_tokens"), RCFG_TRAJ_LENGTH_DEFAULT);
  CHECK_INT_EQ(rcfg_key_traj("train.schedule"), RCFG_TRAJ_DEFINES);
  CHECK_INT_EQ(rcfg_key_traj("train.a_key_from_next_year"), RCFG_TRAJ_DEFINES);
}

/* the trajectory key of the wsd config with train tail `tail`, sharing `shared` */
static char *traj_key(const char *tail, unsigned shared) {
  char text[512], err[1024];
  snprintf(text, sizeof text,
           "{\"model\": {\"n_layer\": 1, \"d_model\": 8, \"n_head\": 1, \"seq_len\": 2},"
           "\"train\": {\"schedule\": \"wsd\", \"batch_size\": 4%s}}",
           tail);
  rcfg c;
  if (rcfg_parse(text, "traj.json", &c, err, sizeof err) != 0)
    return NULL;
  return rcfg_trajectory_key(&c, shared);
}

static int same_trajectory(const char *a, const char *b, unsigned shared) {
  char *x = traj_key(a, shared), *y = traj_key(b, shared);
  CHECK(x && y);
  int same = x && y && !strcmp(x, y);
  free(x);
  free(y);
  return same;
}

static void test_trajectory_key(void) {
  const unsigned ruled = RCFG_SHARES(RCFG_TRAJ_RULED);
  const unsigned dflt = RCFG_SHARES(RCFG_TRAJ_LENGTH_DEFAULT);
  /* the length and the evaluations differ along one trajectory */
  CHECK(same_trajectory(",\"tokens\": 800, \"warmup_tokens\": 8",
                        ",\"tokens\": 1600, \"warmup_tokens\": 8", 0));
  /* the defaulted warmup (5% of tokens) only when the group shares it */
  CHECK(!same_trajectory(",\"tokens\": 800", ",\"tokens\": 1600", 0));
  CHECK(same_trajectory(",\"tokens\": 800", ",\"tokens\": 1600", dflt));
  /* a rate splits trajectories unless the rules chose it and it is shared;
   * a run that shares never groups with one that set its own */
  CHECK(!same_trajectory(",\"lr\": 0.01, \"warmup_tokens\": 8",
                         ",\"lr\": 0.02, \"warmup_tokens\": 8", 0));
  CHECK(same_trajectory(",\"lr\": 0.01, \"warmup_tokens\": 8",
                        ",\"lr\": 0.02, \"warmup_tokens\": 8", ruled));
  char *a = traj_key(",\"lr\": 0.01, \"warmup_tokens\": 8", ruled);
  char *b = traj_key(",\"lr\": 0.01, \"warmup_tokens\": 8", 0);
  CHECK(a && b && strcmp(a, b) != 0);
  free(a);
  free(b);
  /* what defines the trajectory: the seed, the decay's share */
  CHECK(!same_trajectory(",\"seed\": 1, \"warmup_tokens\": 8", ",\"seed\": 2, \"warmup_tokens\": 8",
                         ruled | dflt));
  CHECK(!same_trajectory(",\"decay_frac\": 0.1", ",\"decay_frac\": 0.2", ruled | dflt));
}

/* Problems carry their path as data: the planner maps them onto spec
 * paths without reading the text. */
static void test_problems(void) {
  rcfg c;
  rcfg_problems pr;
  CHECK_INT_EQ(rcfg_parse_problems("{\"train\": {\"batch_size\": 8, \"micro_batch_size\": 3},"
                                   " \"precision\": \"fp8\"}",
                                   &c, &pr),
               SS_EINVAL);
  CHECK_INT_EQ(pr.n, 2);
  CHECK(!strcmp(pr.items[0].path, "$.train.micro_batch_size"));
  CHECK(strstr(pr.items[0].message, "found 3") != NULL);
  CHECK(!strcmp(pr.items[1].path, "$.precision"));
  CHECK_INT_EQ(pr.items[0].line, 0);
  char err[512];
  rcfg_problems_text(&pr, "run.json", err, sizeof err);
  CHECK(!strncmp(err, "run.json: $.train.micro_batch_size: found 3", 43));
  CHECK(strstr(err, "\nrun.json: $.precision: found \"fp8\"") != NULL);
  /* malformed JSON: line and column, no path */
  CHECK_INT_EQ(rcfg_parse_problems("{\n  \"train\": {,}\n}", &c, &pr), SS_EINVAL);
  CHECK_INT_EQ(pr.n, 1);
  CHECK(!strcmp(pr.items[0].path, ""));
  CHECK_INT_EQ(pr.items[0].line, 2);
  rcfg_problems_text(&pr, "run.json", err, sizeof err);
  CHECK(!strncmp(err, "run.json:2:", 11));
}

int main(void) {
  rcfg c;
  char err[2048];
  int v = -1;
  test_wsd();
  test_schema();
  test_trajectory_key();
  test_problems();

  /* cuda at fp32: on by default, in the JSON; it parses back the same */
  CHECK_INT_EQ(parse(",\"backend\": \"cuda\"", &c, err, sizeof err), 0);
  CHECK_INT_EQ(c.tf32, 1);
  CHECK(json_tf32(&c, &v) && v == 1);
  char *s = rcfg_to_json(&c);
  rcfg back;
  CHECK_INT_EQ(rcfg_parse(s, "resolved", &back, err, sizeof err), 0);
  CHECK_INT_EQ(back.tf32, 1);
  free(s);

  /* switched off */
  CHECK_INT_EQ(parse(",\"backend\": \"cuda\", \"tf32\": false", &c, err, sizeof err), 0);
  CHECK_INT_EQ(c.tf32, 0);
  CHECK(json_tf32(&c, &v) && v == 0);
  char h_on[65], h_off[65];
  rcfg on;
  CHECK_INT_EQ(parse(",\"backend\": \"cuda\", \"tf32\": true", &on, err, sizeof err), 0);
  CHECK_INT_EQ(on.tf32, 1);
  CHECK_INT_EQ(rcfg_hash(&on, h_on), 0);
  CHECK_INT_EQ(rcfg_hash(&c, h_off), 0);
  CHECK(strcmp(h_on, h_off) != 0); /* the two train differently */

  /* where it does not apply: off, absent from the JSON; false is accepted */
  CHECK_INT_EQ(parse("", &c, err, sizeof err), 0);
  CHECK_INT_EQ(c.tf32, 0);
  CHECK(!json_tf32(&c, &v));
  CHECK_INT_EQ(parse(",\"backend\": \"cuda\", \"precision\": \"bf16\"", &c, err, sizeof err), 0);
  CHECK_INT_EQ(c.tf32, 0);
  CHECK(!json_tf32(&c, &v));
  CHECK_INT_EQ(parse(",\"tf32\": false", &c, err, sizeof err), 0);
  CHECK_INT_EQ(c.tf32, 0);

  /* a true where it cannot apply, and a non-boolean: file, path, found, expected */
  CHECK_INT_EQ(parse(",\"tf32\": true", &c, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "run.json: $.tf32: found true with backend \"cpu\"") != NULL);
  CHECK(strstr(err, "expected false or no key") != NULL);
  CHECK_INT_EQ(
      parse(",\"backend\": \"cuda\", \"precision\": \"fp16\", \"tf32\": true", &c, err, sizeof err),
      SS_EINVAL);
  CHECK(strstr(err, "precision \"fp16\"") != NULL);
  CHECK_INT_EQ(parse(",\"backend\": \"cuda\", \"tf32\": 1", &c, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "run.json: $.tf32: expected true or false, found 1") != NULL);

  /* reproducible */
  rcfg plain, machine, portable;
  char h_plain[65], h_machine[65], h_portable[65];
  CHECK_INT_EQ(parse("", &plain, err, sizeof err), 0);
  CHECK_INT_EQ(plain.reproducible, RCFG_REPRO_MACHINE);
  CHECK_INT_EQ(parse(",\"reproducible\": \"machine\"", &machine, err, sizeof err), 0);
  CHECK_INT_EQ(parse(",\"reproducible\": \"portable\"", &portable, err, sizeof err), 0);
  CHECK_INT_EQ(portable.reproducible, RCFG_REPRO_PORTABLE);
  CHECK_INT_EQ(rcfg_hash(&plain, h_plain), 0);
  CHECK_INT_EQ(rcfg_hash(&machine, h_machine), 0);
  CHECK_INT_EQ(rcfg_hash(&portable, h_portable), 0);
  CHECK(strcmp(h_plain, h_machine) == 0);
  CHECK(strcmp(h_plain, h_portable) != 0);
  char *pj = rcfg_to_json(&portable), *mj = rcfg_to_json(&machine);
  CHECK(pj && strstr(pj, ",\"reproducible\":\"portable\"}") != NULL);
  CHECK(mj && strstr(mj, "reproducible") == NULL);
  rcfg again;
  CHECK_INT_EQ(rcfg_parse(pj, "resolved.json", &again, err, sizeof err), 0);
  CHECK_INT_EQ(again.reproducible, RCFG_REPRO_PORTABLE);
  free(pj);
  free(mj);
  CHECK_INT_EQ(parse(",\"reproducible\": \"exact\"", &c, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "run.json: $.reproducible: found \"exact\", expected one of") != NULL);
  CHECK(strstr(err, "portable") != NULL);
  CHECK_INT_EQ(parse(",\"reproducible\": true", &c, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "$.reproducible: expected a string") != NULL);
  if (check__failures)
    fprintf(stderr, "last error: %s\n", err);
  CHECK_DONE();
}

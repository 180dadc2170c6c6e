#include "scheduler/submit.h"

#include <inttypes.h>
#include <malloc.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

static void problems_answer(http_request *r, const spec_problems *pr) {
  json_t *probs = spec_problems_to_json(pr);
  char msg[128];
  snprintf(msg, sizeof msg, "invalid sweep spec: %zu problem(s)", pr->n);
  json_t *e = json_pack("{s:{s:s,s:s?,s:o}}", "error", "message", msg, "path",
                        pr->n ? pr->items[0].path : NULL, "problems", probs);
  char *text = json_dumps(e, JSON_COMPACT);
  json_decref(e);
  http_respond_json(r, 400, text);
  free(text);
}

/* Paths in a spec (DESIGN.md, issue "Reliability and security"): token
 * shards only under the directories the operator allowed (--data-dir),
 * given as absolute paths without "." or ".." components (so no prefix
 * trick escapes them); checkpoint directories are the scheduler's choice
 * (--checkpoints), never the spec's. Every "data" and "checkpoint" object
 * anywhere in the spec is checked, wherever the method puts it. */
static int under_allowed(const sched *s, const char *path) {
  if (path[0] != '/')
    return 0;
  for (const char *c = path; *c;) { /* components */
    while (*c == '/')
      c++;
    size_t n = strcspn(c, "/");
    if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      return 0;
    c += n;
  }
  for (int i = 0; i < s->o.ndata_dirs; i++) {
    const char *d = s->o.data_dirs[i];
    size_t n = strlen(d);
    if (!strcmp(d, "/") || (!strncmp(path, d, n) && path[n] == '/'))
      return 1;
  }
  return 0;
}

typedef struct paths_ctx {
  const sched *s;
  spec_problems *pr;
} paths_ctx;

/* spec_walk's visit: no checkpoint directories, shards only under --data-dir */
static void check_path(void *ud, const char *path, const char *key, json_t *e) {
  paths_ctx *x = ud;
  const sched *s = x->s;
  char where[600];
  if (!strcmp(key, "checkpoint") && json_object_get(e, "dir")) {
    snprintf(where, sizeof where, "%s.dir", path);
    spec_problem_add(x->pr, where,
                     "a spec may not choose checkpoint directories; the scheduler keeps "
                     "them under its --checkpoints directory");
  }
  if (strcmp(key, "data") || !json_is_object(e))
    return;
  static const char *const shard_keys[] = {"train", "val"};
  for (int k = 0; k < 2; k++) {
    const char *p = json_string_value(json_object_get(e, shard_keys[k]));
    if (!p || under_allowed(s, p))
      continue;
    snprintf(where, sizeof where, "%s.%s", path, shard_keys[k]);
    if (!s->o.ndata_dirs)
      spec_problem_add(x->pr, where,
                       "found '%.200s', but this scheduler allows no token shards (start "
                       "it with --data-dir DIR to allow those under DIR)",
                       p);
    else
      spec_problem_add(x->pr, where,
                       "found '%.200s', expected an absolute path without . or .. under "
                       "an allowed data directory (%s%s)",
                       p, s->o.data_dirs[0], s->o.ndata_dirs > 1 ? ", ..." : "");
  }
}

typedef struct sub_ctx {
  sched *s;
  http_request *r;
  char hash[65];
} sub_ctx;

static void on_existing(void *ud, int status, PGresult *res, const char *errmsg) {
  sub_ctx *x = ud;
  if (status != 0 || PQntuples(res) != 1) {
    http_respond_error(x->r, status == SS_ECONN ? 503 : 500,
                       status == 0 ? "sweep vanished" : errmsg, NULL);
    return;
  }
  char body[512];
  snprintf(body, sizeof body,
           "{\"error\":{\"message\":\"an identical spec was already submitted as sweep %s; "
           "change the spec (for instance its name or seeds) to run it again\",\"path\":null},"
           "\"id\":%s}",
           PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 0));
  http_respond_json(x->r, 409, body);
}

static void on_inserted(void *ud, int status, PGresult *res, const char *errmsg) {
  sub_ctx *x = ud;
  if (status != 0) {
    http_respond_error(x->r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
    return;
  }
  if (PQgetisnull(res, 0, 0)) { /* ON CONFLICT: the spec is there already */
    const char *p[1] = {x->hash};
    db_query(x->s->db, "SELECT id FROM sweeps WHERE spec_hash = $1", 1, p, on_existing, x);
    return;
  }
  char body[256];
  snprintf(body, sizeof body, "{\"id\":%s,\"runs\":%s,\"spec_hash\":\"%s\"}", PQgetvalue(res, 0, 0),
           PQgetvalue(res, 0, 1), x->hash);
  sched *s = x->s; /* x lives in the request's arena, freed by the answer */
  http_respond_json(x->r, 201, body);
  sched__emit(s, "sweep",
              json_pack("{s:I,s:s}", "id", (json_int_t)strtoll(PQgetvalue(res, 0, 0), NULL, 10),
                        "status", "queued"));
  sched__place(s);
}

void sched__submit(sched *s, http_request *r, const char *body, size_t len) {
  char *text = http_alloc(r, len + 1);
  memcpy(text, body, len);
  text[len] = 0;
  spec_problems pr = {0};
  spec *sp = NULL;
  plan *p = NULL;
  if (spec_parse(text, "request body", &sp, &pr) != 0 || plan_spec(sp, &p, &pr) != 0) {
    if (!pr.n)
      spec_problem_add(&pr, "$", "the spec could not be planned");
    problems_answer(r, &pr);
    spec_problems_free(&pr);
    spec_free(sp);
    return;
  }
  json_t *raw = json_loads(text, 0, NULL); /* parsed once already: valid */
  paths_ctx pc = {s, &pr};
  spec_walk(raw, "$", check_path, &pc);
  json_decref(raw);
  if (pr.n) {
    problems_answer(r, &pr);
    spec_problems_free(&pr);
    plan_free(p);
    spec_free(sp);
    return;
  }
  spec_problems_free(&pr);
  sub_ctx *x = http_alloc(r, sizeof *x);
  x->s = s;
  x->r = r;
  snprintf(x->hash, sizeof x->hash, "%s", sp->digest);
  char *canon = spec_canonical(sp);
  char *runs = plan_runs_json(p);
  char gpus[16], prio[16], maxa[16];
  snprintf(gpus, sizeof gpus, "%d", sp->gpus);
  snprintf(prio, sizeof prio, "%d", sp->priority);
  snprintf(maxa, sizeof maxa, "%d", sp->max_attempts > 0 ? sp->max_attempts : 3);
  const char *params[7] = {sp->name ? sp->name : "unnamed", canon, x->hash, prio, gpus, maxa, runs};
  /* one statement: the sweep and all its runs, or nothing */
  db_query(s->db,
           "WITH sw AS (INSERT INTO sweeps (name, spec, spec_hash, priority) "
           "VALUES ($1, $2::jsonb, $3, $4::int) ON CONFLICT (spec_hash) DO NOTHING "
           "RETURNING id), "
           "ins AS (INSERT INTO runs (sweep_id, config, config_hash, gpus, priority, "
           "max_attempts, params, nonembedding_params, tokens, batch_size, flops, part, "
           "target_loss) "
           "SELECT sw.id, e->'config', e->>'config_hash', $5::int, $4::int, $6::int, "
           "(e->>'params')::bigint, (e->>'nonembedding_params')::bigint, "
           "(e->>'tokens')::bigint, (e->>'batch_size')::int, (e->>'flops')::float8, "
           "e->>'part', e->'target_loss' "
           "FROM sw, jsonb_array_elements($7::jsonb) WITH ORDINALITY AS t(e, i) "
           "ORDER BY t.i RETURNING 1) "
           "SELECT (SELECT id FROM sw), (SELECT count(*) FROM ins)",
           7, params, on_inserted, x);
  free(canon);
  free(runs);
  plan_free(p);
  spec_free(sp);
  /* a large sweep's spec, plan and run list were tens of MB of small
   * blocks: give the freed memory back instead of keeping it resident */
  if (len > (1u << 20))
    malloc_trim(0);
}

typedef struct fit_ctx {
  http_request *r;
} fit_ctx;

static void on_fit(void *ud, int status, PGresult *res, const char *errmsg) {
  fit_ctx *x = ud;
  if (status != 0)
    http_respond_error(x->r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  else if (PQntuples(res) == 0)
    http_respond_error(x->r, 404, "no such sweep", NULL);
  else
    http_respond_json(x->r, 200, PQgetvalue(res, 0, 0));
}

void sched__get_fit(sched *s, http_request *r, int64_t sweep_id) {
  fit_ctx *x = http_alloc(r, sizeof *x);
  x->r = r;
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  const char *p[1] = {id};
  db_query(s->db,
           "SELECT coalesce((SELECT json_object_agg(law, params) FROM (SELECT DISTINCT ON "
           "(law) law, params FROM fits WHERE sweep_id = $1 ORDER BY law, created_at DESC) f), "
           "'{}') FROM sweeps WHERE id = $1",
           1, p, on_fit, x);
}

#include "scheduler/submit.h"
#include "scheduler/spec_paths.h"

#include <inttypes.h>
#include <malloc.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/fits.h"
#include "store/sweeps.h"
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

typedef struct sub_ctx {
  sched *s;
  http_request *r;
  char hash[65];
} sub_ctx;

static void answer_store_error(http_request *r, int status, const char *errmsg) {
  http_respond_error(r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
}

static void on_existing(void *ud, int status, int64_t sweep_id, const char *errmsg) {
  sub_ctx *x = ud;
  if (status != 0 || sweep_id == 0) {
    answer_store_error(x->r, status, status == 0 ? "sweep vanished" : errmsg);
    return;
  }
  char body[512];
  snprintf(body, sizeof body,
           "{\"error\":{\"message\":\"an identical spec was already submitted as sweep %" PRId64
           "; change the spec (for instance its name or seeds) to run it again\",\"path\":null},"
           "\"id\":%" PRId64 "}",
           sweep_id, sweep_id);
  http_respond_json(x->r, 409, body);
}

static void on_inserted(void *ud, int status, int64_t sweep_id, int64_t runs, const char *errmsg) {
  sub_ctx *x = ud;
  if (status != 0) {
    answer_store_error(x->r, status, errmsg);
    return;
  }
  if (sweep_id == 0) { /* the spec is there already */
    store_sweeps_find_by_hash(x->s->db, x->hash, on_existing, x);
    return;
  }
  char body[256];
  snprintf(body, sizeof body, "{\"id\":%" PRId64 ",\"runs\":%" PRId64 ",\"spec_hash\":\"%s\"}",
           sweep_id, runs, x->hash);
  sched *s = x->s; /* x lives in the request's arena, freed by the answer */
  http_respond_json(x->r, 201, body);
  sched__events_emit(&s->ev, "sweep",
                     json_pack("{s:I,s:s}", "id", (json_int_t)sweep_id, "status", "queued"));
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
  sched__spec_paths_check(s->o.data_dirs, s->o.ndata_dirs, raw, &pr);
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
  store_sweep_new sw = {.name = sp->name ? sp->name : "unnamed",
                        .spec_json = canon,
                        .spec_hash = x->hash,
                        .priority = sp->priority,
                        .gpus = sp->gpus,
                        .max_attempts = sp->max_attempts > 0 ? sp->max_attempts : 3,
                        .runs_json = runs};
  store_sweeps_insert(s->db, &sw, on_inserted, x);
  free(canon);
  free(runs);
  plan_free(p);
  spec_free(sp);
  /* a large sweep's spec, plan and run list were tens of MB of small
   * blocks: give the freed memory back instead of keeping it resident */
  if (len > (1u << 20))
    malloc_trim(0);
}

static void on_fit(void *ud, int status, const char *json, const char *errmsg) {
  http_request *r = ud;
  if (status != 0)
    answer_store_error(r, status, errmsg);
  else if (!json)
    http_respond_error(r, 404, "no such sweep", NULL);
  else
    http_respond_json(r, 200, json);
}

void sched__get_fit(sched *s, http_request *r, int64_t sweep_id) {
  store_fits_latest(db_pool_get(s->reads, 0), sweep_id, on_fit, r);
}

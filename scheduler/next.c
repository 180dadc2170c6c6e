/* GET and POST /api/sweeps/{id}/next: the next compute budget designed from
 * a sweep's fits (next.h; sweeps/next.h does the science).
 *
 * Three reads (the sweep's spec, its loss laws' points, its latest fits)
 * feed a job on libuv's thread pool, which fits the surface with its
 * bootstrap and plans the budget. At most SCHED_DESIGN_JOBS designs are
 * under way at once, counted apart from submissions (s->designs), so that
 * readers asking for designs (GET is a read: open by default) can neither
 * hold back submissions nor take every thread of the pool. GET answers the design; POST also adds
 * its runs to the sweep (store_sweeps_extend, on the control connection), each with what was
 * predicted for it, and answers 201. The request stays valid until answered even if its client goes
 * away (http.h). */
#include "scheduler/next.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/spec_paths.h"
#include "scheduler/submit.h"
#include "scheduler/usage.h"
#include "scheduler/fit_points.h"
#include "store/fits.h"
#include "store/sweeps.h"
#include "sweeps/next.h"

typedef struct next_job {
  uv_work_t work;
  sched *s;
  http_request *r;
  int64_t sweep_id;
  int add; /* POST: add the runs to the sweep */
  next_options o;
  /* in: the sweep's spec, points and bopt fit (owned) */
  char *spec;
  fit_point *pts;
  int n;
  json_t *bopt;
  /* out: the design's JSON (or the 400 body) and, POST, the runs to add */
  sched__spec_out out;
} next_job;

/* The design is answered: its job freed, its slot given back. */
static void job_end(next_job *j) {
  j->s->designs--;
  free(j->spec);
  free(j->pts);
  json_decref(j->bopt);
  sched__spec_out_free(&j->out);
  free(j);
}

static void answer_store_error(next_job *j, int status, const char *errmsg) {
  http_respond_error(j->r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  job_end(j);
}

static void work(uv_work_t *w) {
  next_job *j = w->data;
  spec_problems pr = {0};
  next_design d;
  json_t *raw = json_loads(j->spec, 0, NULL);
  /* the shards the budget's runs would read: still only under --data-dir */
  sched__spec_paths_check(j->s->o.data_dirs, j->s->o.ndata_dirs, raw, &pr);
  json_decref(raw);
  int rc = SS_EINVAL;
  sched__spec_out *o = &j->out;
  if (!pr.n && (rc = next_design_make(j->spec, j->pts, j->n, j->bopt, &j->o, &d, &pr)) == 0) {
    o->answer = next_design_json(&d);
    if (j->add)
      o->runs = next_runs_json(&d);
    o->gpus = d.gpus;
    o->priority = d.priority;
    o->max_attempts = d.max_attempts;
    next_design_free(&d);
    o->status = o->answer && (!j->add || o->runs) ? 0 : 500;
  } else if (rc == SS_ENOMEM) {
    o->status = 500;
  } else {
    o->status = 400;
    o->answer = spec_problems_answer(&pr, "the next budget cannot be designed");
    if (!o->answer)
      o->status = 500;
  }
  spec_problems_free(&pr);
}

static void on_extended(void *ud, int status, int64_t sweep_id, int64_t added, const char *errmsg) {
  next_job *j = ud;
  sched *s = j->s;
  if (status == SCHED__ANSWERED) /* over its owner's limits */
    return job_end(j);
  if (status != 0)
    return answer_store_error(j, status, errmsg);
  if (sweep_id == 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "sweep %" PRId64 " is cancelled (or gone): no runs were added",
             j->sweep_id);
    http_respond_error(j->r, 409, msg, NULL);
  } else {
    /* {"sweep", "added", "design": {...}} around the design's text */
    size_t len = strlen(j->out.answer) + 128;
    char *body = malloc(len);
    if (!body) {
      http_respond_error(j->r, 500, "out of memory", NULL);
    } else {
      snprintf(body, len, "{\"sweep\":%" PRId64 ",\"added\":%" PRId64 ",\"design\":%s}", sweep_id,
               added, j->out.answer);
      http_respond_json(j->r, 201, body);
      free(body);
    }
    if (added > 0) {
      sched__logf("sweep %" PRId64 ": %" PRId64 " run(s) added for the next budget, %.3g FLOPs",
                  sweep_id, added, j->o.flops);
      sched__events_emit(&s->ev, "sweep",
                         json_pack("{s:I,s:s,s:I,s:f}", "id", (json_int_t)sweep_id, "change",
                                   "extended", "added", (json_int_t)added, "flops", j->o.flops));
      sched__sweep_status(s, sweep_id);
      sched__place(s);
    }
  }
  job_end(j);
}

static void after_work(uv_work_t *w, int status) {
  next_job *j = w->data;
  sched *s = j->s;
  if (sched__spec_out_answered(s, j->r, status, &j->out, "ask", "designing the next budget"))
    return job_end(j);
  if (!j->add) {
    http_respond_json(j->r, 200, j->out.answer);
    return job_end(j);
  }
  store_sweep_new sw = sched__spec_out_runs(&j->out);
  /* within the sweep's owner's queued limits; stored on the control
   * connection, where a cancel of the sweep also goes: the two never
   * overlap, so a cancel sees every run an extend added */
  sched__usage_add(s, j->r, j->sweep_id, &sw, on_extended, j);
}

static void on_fits(void *ud, int status, const char *json, const char *errmsg) {
  next_job *j = ud;
  if (status != 0)
    return answer_store_error(j, status, errmsg);
  json_t *all = json ? json_loads(json, 0, NULL) : NULL;
  json_t *bopt = json_object_get(all, "bopt");
  j->bopt = json_is_object(bopt) ? json_incref(bopt) : NULL;
  json_decref(all);
  j->work.data = j;
  int rc = uv_queue_work(j->s->loop, &j->work, work, after_work);
  if (rc) {
    http_respond_error(j->r, 500, uv_strerror(rc), NULL);
    job_end(j);
  }
}

static void on_points(void *ud, int status, const store_fit_point *pts, int n,
                      const store_corpus *corpus, const char *errmsg) {
  next_job *j = ud;
  (void)corpus;
  if (status != 0)
    return answer_store_error(j, status, errmsg);
  j->pts = calloc(n ? (size_t)n : 1, sizeof *j->pts);
  if (!j->pts)
    return answer_store_error(j, SS_ENOMEM, "out of memory");
  for (int k = 0; k < n; k++) /* as the refits pass them: one group per run */
    j->pts[k] = sched__fit_point(&pts[k], k);
  j->n = n;
  store_fits_latest(db_pool_get(j->s->reads, 0), j->sweep_id, on_fits, j);
}

static void on_spec(void *ud, int status, const char *spec_json, const char *sweep_status,
                    const char *errmsg) {
  next_job *j = ud;
  if (status != 0)
    return answer_store_error(j, status, errmsg);
  if (!spec_json) {
    http_respond_error(j->r, 404, "no such sweep", NULL);
    return job_end(j);
  }
  if (j->add && sweep_status && !strcmp(sweep_status, "cancelled")) {
    char msg[160];
    snprintf(msg, sizeof msg, "sweep %" PRId64 " is cancelled: no runs can be added", j->sweep_id);
    http_respond_error(j->r, 409, msg, NULL);
    return job_end(j);
  }
  /* a decided lr tune's sweep gives its study's spec; one still tuning has
   * no study to design the next budget of yet */
  json_t *root = json_loads(spec_json, 0, NULL);
  int tuning = json_object_get(root, "lr_tune") != NULL;
  json_decref(root);
  if (tuning) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "sweep %" PRId64 "'s learning rate is still being tuned on its muP proxy (or "
             "the tune could not decide): a next budget can be designed once its study's runs "
             "are added",
             j->sweep_id);
    http_respond_error(j->r, 409, msg, NULL);
    return job_end(j);
  }
  if (!(j->spec = strdup(spec_json)))
    return answer_store_error(j, SS_ENOMEM, "out of memory");
  store_fits_points(db_pool_get(j->s->reads, 1), j->sweep_id, on_points, j);
}

/* 1 with *v set from text (a number, whole when whole); 0 when it is not one */
static int number(const char *text, double *v) {
  char *end;
  *v = strtod(text, &end);
  return *text && !*end && isfinite(*v);
}

/* points beyond this are refused here with the value given, which a cast
 * to int would change; next_design_make says what is wrong with others */
#define POINTS_CAST_MAX 1e6

/* The request's flops and points: the query's (GET) or the body's (POST);
 * 0, or answered 400 (-1). */
static int request_options(http_request *r, int add, next_options *o) {
  double flops = NAN, points = 0;
  if (add) {
    size_t len;
    const char *body = http_body(r, &len);
    json_error_t e;
    json_t *b = json_loadb(body ? body : "", len, 0, &e);
    if (!json_is_object(b)) {
      char msg[256];
      if (b)
        snprintf(msg, sizeof msg, "request body: not an object (expected {\"flops\": C})");
      else
        snprintf(msg, sizeof msg, "request body: line %d, column %d: %s (expected {\"flops\": C})",
                 e.line, e.column, e.text);
      json_decref(b);
      http_respond_error(r, 400, msg, "$");
      return -1;
    }
    json_t *f = json_object_get(b, "flops"), *p = json_object_get(b, "points");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
      if (strcmp(key, "flops") && strcmp(key, "points")) {
        char msg[160], at[80];
        snprintf(msg, sizeof msg, "unknown key \"%.40s\" (expected flops, points)", key);
        snprintf(at, sizeof at, "$.%.60s", key);
        json_decref(b);
        http_respond_error(r, 400, msg, at);
        return -1;
      }
    }
    int bad_f = !json_is_number(f), bad_p = p && !json_is_integer(p);
    if (bad_f || bad_p) {
      json_decref(b);
      http_respond_error(r, 400,
                         bad_f ? "flops: expected a number, the budget in FLOPs"
                               : "points: expected a whole number of model sizes",
                         bad_f ? "$.flops" : "$.points");
      return -1;
    }
    flops = json_number_value(f);
    points = p ? (double)json_integer_value(p) : 0;
    if (fabs(points) > POINTS_CAST_MAX) {
      char msg[160];
      snprintf(msg, sizeof msg, "points = %" JSON_INTEGER_FORMAT ": expected 3 to %d model sizes",
               json_integer_value(p), NEXT_MAX_POINTS);
      json_decref(b);
      http_respond_error(r, 400, msg, "$.points");
      return -1;
    }
    json_decref(b);
  } else {
    const char *v;
    int got = http_query_param(r, "flops", &v);
    if (got != 1 || !number(v, &flops)) {
      http_respond_error(r, 400,
                         "query parameter flops: expected the budget in FLOPs, such as 1e13 "
                         "(a + in a query is a space: write 1e13 or 1e%2B13)",
                         "flops");
      return -1;
    }
    got = http_query_param(r, "points", &v);
    if (got == -1 || (got == 1 && (!number(v, &points) || points != floor(points)))) {
      http_respond_error(r, 400, "query parameter points: expected a whole number of model sizes",
                         "points");
      return -1;
    }
    if (got == 1 && fabs(points) > POINTS_CAST_MAX) {
      char msg[160];
      snprintf(msg, sizeof msg, "query parameter points = '%.40s': expected 3 to %d model sizes", v,
               NEXT_MAX_POINTS);
      http_respond_error(r, 400, msg, "points");
      return -1;
    }
  }
  o->flops = flops;
  o->points = (int)points;
  return 0;
}

void sched__next(sched *s, http_request *r, int64_t sweep_id, int add) {
  next_options o = {0};
  if (request_options(r, add, &o))
    return;
  if (s->designs >= SCHED_DESIGN_JOBS) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "%d design(s) of a next budget under way already; ask again in a second",
             SCHED_DESIGN_JOBS);
    return sched__spec_busy(r, msg);
  }
  next_job *j = calloc(1, sizeof *j);
  if (!j) {
    http_respond_error(r, 500, "out of memory", NULL);
    return;
  }
  o.seed = (uint64_t)sweep_id; /* the same design for the same sweep and points */
  o.threads = 1;
  *j = (next_job){.s = s, .r = r, .sweep_id = sweep_id, .add = add, .o = o};
  s->designs++;
  store_sweeps_spec(db_pool_get(s->reads, 0), sweep_id, on_spec, j);
}

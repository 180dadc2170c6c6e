/* The HTTP API (docs/design.md#the-http-api): JSON in and out, keys
 * named as the table columns, errors as {"error": {"message", "path"}}.
 * Reads are the store's typed rows written by pages_json.c, or JSON
 * documents from the store (store/pages.h); changes are store/actions.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/internal.h"
#include "scheduler/audit.h"
#include "scheduler/route.h"
#include "scheduler/users.h"
#include "scheduler/next.h"
#include "scheduler/pages_json.h"
#include "scheduler/submit.h"
#include "scheduler/usage.h"
#include "scheduler/web.h"
#include "store/actions.h"
#include "store/pages.h"

typedef struct req_ctx {
  sched *s;
  http_request *r;
  int created; /* answer 201 instead of 200 */
  int64_t id;
  int sweep;    /* cancel: a sweep's (else a run's); next: add its runs */
  int priority; /* POST /api/sweeps/{id}/priority */
  sched__who who;
  char *on; /* reproduce's worker, in the request's arena */
} req_ctx;

static req_ctx *rctx(sched *s, http_request *r) {
  req_ctx *x = http_alloc(r, sizeof *x);
  memset(x, 0, sizeof *x);
  x->s = s;
  x->r = r;
  return x;
}

static void record_latency(sched *s, http_request *r) {
  double ms = (double)(uv_hrtime() - http_request_start_ns(r)) / 1e6;
  static const double le[12] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
  for (int i = 0; i < 12; i++)
    if (ms <= le[i])
      s->lat_buckets[i]++;
  s->lat_count++;
  s->lat_sum_s += ms / 1e3;
}

static void answer_json(req_ctx *x, int status, const char *json) {
  record_latency(x->s, x->r);
  http_respond_json(x->r, status, json);
}

static void answer_error(req_ctx *x, int status, const char *msg, const char *path) {
  record_latency(x->s, x->r);
  http_respond_error(x->r, status, msg, path);
}

/* A store read answered by one JSON document; none is 404. */
static void on_json(void *ud, int status, const char *json, const char *errmsg) {
  req_ctx *x = ud;
  record_latency(x->s, x->r);
  sched__route_answer_read(x->r, x->created ? 201 : 200, status, json, errmsg);
}

/* ---- reads ---------------------------------------------------------------------- */

/* reads go to the read connections (light: the cost does not grow with a
 * run's curve; heavy: it does), changes to the control connection */
/* A typed read (store/pages.h) answered with what pages_json.c wrote of
 * it into b (freed here); found 0: no such object. */
static void answer_written(req_ctx *x, int status, int found, sched__buf *b, const char *errmsg) {
  if (status == 0 && found && b->oom)
    answer_error(x, 500, "out of memory", NULL);
  else
    on_json(x, status, status == 0 && found ? b->p : NULL, errmsg);
  free(b->p);
}

/* The sweeps with their "waiting" (the connected workers are in memory, not
 * in the database). */
static void on_sweeps(void *ud, int status, const store_sweep *sweeps, int n, const char *errmsg) {
  req_ctx *x = ud;
  sched__buf b = {0};
  if (status == 0)
    sched__json_sweeps(&b, x->s, sweeps, n);
  answer_written(x, status, 1, &b, errmsg);
}

static void on_sweep(void *ud, int status, const store_sweep *sw, const store_runs *runs,
                     const char *errmsg) {
  req_ctx *x = ud;
  sched__buf b = {0};
  if (status == 0 && sw)
    sched__json_sweep(&b, x->s, sw, runs);
  answer_written(x, status, sw != NULL, &b, errmsg);
}

static void on_runs(void *ud, int status, const store_runs *runs, const char *errmsg) {
  req_ctx *x = ud;
  sched__buf b = {0};
  if (status == 0 && runs)
    sched__json_runs(&b, runs);
  answer_written(x, status, runs != NULL, &b, errmsg);
}

static void get_sweeps(sched *s, req_ctx *x) {
  store_pages_sweeps(db_pool_get(s->reads, 0), on_sweeps, x);
}

/* Paging of a sweep's runs: ?limit= (default 500, at most 10000), ?offset=,
 * ?status= (one run status), ?sort= (a column of sort_columns) and
 * ?order=asc|desc. A bad value answers 400 naming the parameter. */
/* A query parameter, or a 400 naming it when its encoding is bad. */
static int query_param(req_ctx *x, const char *name, const char **value) {
  if (http_query_param(x->r, name, value) >= 0)
    return 0;
  char msg[96];
  snprintf(msg, sizeof msg, "query parameter %s: invalid percent-encoding", name);
  answer_error(x, 400, msg, name);
  return -1;
}

/* A whole-number query parameter in [0, max] into *out (dflt when absent),
 * or a 400 naming it, the value found and the range. */
static int count_param(req_ctx *x, const char *name, long long dflt, long long max,
                       long long *out) {
  const char *v;
  if (query_param(x, name, &v))
    return -1;
  *out = dflt;
  if (!v)
    return 0;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n < 0 || n > max) {
    char msg[160];
    snprintf(msg, sizeof msg, "query parameter %s = '%.40s': expected an integer in [0, %lld]",
             name, v, max);
    answer_error(x, 400, msg, name);
    return -1;
  }
  *out = n;
  return 0;
}

static int parse_page(req_ctx *x, store_runs_page *pg) {
  long long limit, offset;
  if (count_param(x, "limit", 500, 10000, &limit) ||
      count_param(x, "offset", 0, INT64_MAX, &offset))
    return -1;
  pg->limit = limit;
  pg->offset = offset;
  if (query_param(x, "status", &pg->status))
    return -1;
  if (pg->status && !sched__route_status(pg->status)) {
    answer_error(x, 400,
                 "query parameter status: expected queued, running, succeeded, failed or "
                 "cancelled",
                 "status");
    return -1;
  }
  const char *sort, *order;
  if (query_param(x, "sort", &sort) || query_param(x, "order", &order))
    return -1;
  pg->sort = sort ? store_pages_sort_column(sort) : "id";
  if (!pg->sort) {
    answer_error(x, 400,
                 "query parameter sort: expected one of id, status, attempt, params, "
                 "nonembedding_params, tokens, batch_size, flops, final_val_loss, started_at, "
                 "finished_at, worker",
                 "sort");
    return -1;
  }
  if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
    answer_error(x, 400, "query parameter order: expected asc or desc", "order");
    return -1;
  }
  pg->desc = order && !strcmp(order, "desc");
  return 0;
}

/* GET /api/sweeps/{id} (header, counts and one page of runs) and
 * GET /api/sweeps/{id}/runs (the page alone). */
static void get_sweep(sched *s, req_ctx *x, int64_t id, int runs_only) {
  store_runs_page pg;
  if (parse_page(x, &pg))
    return;
  if (runs_only)
    store_pages_sweep_runs(db_pool_get(s->reads, 0), id, &pg, on_runs, x);
  else
    store_pages_sweep_doc(db_pool_get(s->reads, 0), id, &pg, on_sweep, x);
}

/* GET /api/runs/{id}: the run and a page of its metric rows
 * (?metrics_limit=, default 10000, at most 100000; ?metrics_offset=), so
 * that one request never builds a whole long run's rows at once. */
/* the connected workers, "NAME (host HOST), ..." (for a refusal) */
static void connected_names(sched *s, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  for (sched__wconn *c = s->wp.conns; c && off < len; c = c->next)
    if (c->authed && !c->closing)
      off += (size_t)snprintf(buf + off, len - off, "%s%s (host %s)", off ? ", " : "", c->name,
                              c->host);
  if (!off)
    snprintf(buf, len, "none");
}

/* Why a queued run that must run on one worker (reproduce --on) cannot
 * start: that worker is not connected (written into why); 0 when it can. */
static int waiting_for_worker(sched *s, const store_run *r, char *why, size_t len) {
  if (!r->on_worker || strcmp(r->status, "queued") != 0)
    return 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    if (c->authed && !c->closing &&
        (!strcmp(c->name, r->on_worker) || !strcmp(c->host, r->on_worker)))
      return 0;
  char names[768];
  connected_names(s, names, sizeof names);
  snprintf(why, len,
           "it runs only on worker \"%s\" (by name or host), which is not connected "
           "(connected now: %s)",
           r->on_worker, names);
  return 1;
}

/* The run's document, with "waiting" for a queued run that waits for its
 * one worker. */
static void on_run_doc(void *ud, int status, const store_run_doc *doc, const char *errmsg) {
  req_ctx *x = ud;
  sched__buf b = {0};
  char why[1024];
  if (status == 0 && doc)
    sched__json_run_doc(&b, doc, waiting_for_worker(x->s, &doc->run, why, sizeof why) ? why : NULL);
  answer_written(x, status, doc != NULL, &b, errmsg);
}

static void get_run(sched *s, req_ctx *x, int64_t id) {
  long long limit, offset;
  if (count_param(x, "metrics_limit", 10000, 100000, &limit) ||
      count_param(x, "metrics_offset", 0, INT64_MAX, &offset))
    return;
  store_pages_run(db_pool_get(s->reads, 1), id, limit, offset, on_run_doc, x);
}

static void get_workers(sched *s, req_ctx *x) {
  /* connected workers from memory, with their busy slots */
  json_t *arr = json_array();
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    json_t *runs = json_array();
    for (sched__wrun *w = c->runs; w; w = w->next)
      json_array_append_new(runs, json_integer(w->run_id));
    int busy = 0;
    for (int g = 0; g < c->ngpus; g++)
      busy += c->gpu_busy[g];
    json_array_append_new(arr, json_pack("{s:I,s:s,s:s,s:O,s:i,s:i,s:i,s:o}", "id",
                                         (json_int_t)c->worker_id, "name", c->name, "host", c->host,
                                         "gpus", c->gpus_json ? c->gpus_json : json_null(),
                                         "gpus_busy", busy, "cpu_slots", c->cpu_slots, "cpu_busy",
                                         c->cpu_busy, "runs", runs));
  }
  char *text = json_dumps(arr, JSON_COMPACT);
  json_decref(arr);
  answer_json(x, 200, text);
  free(text);
}

/* ---- mutations ------------------------------------------------------------------------ */

static void on_cancelled(void *ud, int status, int found, const store_cancelled *runs, int n,
                         const char *errmsg) {
  req_ctx *x = ud;
  if (status != 0) {
    answer_error(x, status == SS_ECONN ? 503 : 500, errmsg, NULL);
    return;
  }
  if (!found) {
    answer_error(x, 404, "no such object", NULL);
    return;
  }
  int stopped = 0;
  for (int i = 0; i < n; i++) {
    if (runs[i].running) {
      sched__wport_cancel(&x->s->wp, runs[i].run_id);
      stopped++;
    } else {
      sched__events_emit(
          &x->s->ev, "run",
          json_pack("{s:I,s:s}", "id", (json_int_t)runs[i].run_id, "status", "cancelled"));
    }
  }
  char body[128];
  snprintf(body, sizeof body, "{\"id\":%" PRId64 ",\"cancelling_running\":%d}", x->id, stopped);
  answer_json(x, 200, body);
}

static void cancel_allowed(sched *s, http_request *r, void *arg) {
  (void)r;
  req_ctx *x = arg;
  if (x->sweep)
    store_actions_cancel_sweep(s->db, x->id, on_cancelled, x);
  else
    store_actions_cancel_run(s->db, x->id, on_cancelled, x);
}

static void cancel(sched *s, req_ctx *x, int sweep, int64_t id) {
  x->id = id;
  x->sweep = sweep;
  sched__auth_gate(s, x->r, &x->who, SS_ACT_CANCEL, !sweep, id, cancel_allowed, x);
}

static void next_allowed(sched *s, http_request *r, void *arg) {
  req_ctx *x = arg;
  sched__next(s, r, x->id, 1);
}

/* POST /api/sweeps/{id}/next: the design's runs added, by the sweep's
 * owner or an admin */
static void next_add(sched *s, req_ctx *x, int64_t id) {
  x->id = id;
  sched__auth_gate(s, x->r, &x->who, SS_ACT_NEXT, 0, id, next_allowed, x);
}

static void on_priority_set(void *ud, int status, int64_t rows, const char *errmsg) {
  req_ctx *x = ud;
  sched *s = x->s; /* x lives in the request's arena, freed by the answer */
  if (status != 0)
    return answer_error(x, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  if (!rows)
    return answer_error(x, 404, "no such sweep", NULL);
  char body[128];
  snprintf(body, sizeof body, "{\"id\":%" PRId64 ",\"priority\":%d}", x->id, x->priority);
  answer_json(x, 200, body);
  sched__place(s);
}

static void priority_allowed(sched *s, http_request *r, void *arg) {
  (void)r;
  req_ctx *x = arg;
  const sched__user *u = sched__auth_user(&s->auth, x->who.user_id);
  if (x->who.role != SS_ROLE_ADMIN &&
      (!u || x->priority < u->priority_min || x->priority > u->priority_max)) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "priority of sweep %" PRId64 " refused for %s: %d is outside the range %d..%d an "
             "admin allows them",
             x->id, x->who.name, x->priority, u ? u->priority_min : 0, u ? u->priority_max : 0);
    return answer_error(x, 403, msg, "$.priority");
  }
  store_actions_set_priority(s->db, x->id, x->priority, on_priority_set, x);
}

/* POST /api/sweeps/{id}/priority {"priority": N}: the sweep's and its
 * queued runs' priority, within the user's range (an admin's: any) */
static void set_priority(sched *s, req_ctx *x, int64_t id) {
  size_t len;
  const char *body = http_body(x->r, &len);
  json_t *b = json_loadb(body, len, 0, NULL);
  json_t *p = json_object_get(b, "priority");
  int ok = json_is_object(b) && json_object_size(b) == 1 && json_is_integer(p) &&
           json_integer_value(p) >= -1000000 && json_integer_value(p) <= 1000000;
  x->priority = ok ? (int)json_integer_value(p) : 0;
  json_decref(b);
  if (!ok)
    return answer_error(x, 400,
                        "request body: expected {\"priority\": N}, N an integer in "
                        "[-1000000, 1000000]",
                        "$.priority");
  x->id = id;
  sched__auth_gate(s, x->r, &x->who, SS_ACT_PRIORITY, 0, id, priority_allowed, x);
}

static void on_reproduced(void *ud, int status, const char *original_status, const char *json,
                          int worker_known, const char *errmsg) {
  req_ctx *x = ud;
  sched *s = x->s; /* x lives in the request's arena, freed by the answer */
  if (status != 0)
    return on_json(ud, status, NULL, errmsg);
  if (!original_status)
    return answer_error(x, 404, "no such run", NULL);
  if (!worker_known) {
    char msg[1024], names[768];
    connected_names(s, names, sizeof names);
    snprintf(msg, sizeof msg,
             "no worker named \"%s\" or on host \"%s\" has connected to this scheduler "
             "(connected now: %s)",
             x->on, x->on, names);
    return answer_error(x, 404, msg, "$.on");
  }
  if (!json) {
    char msg[160];
    snprintf(msg, sizeof msg, "run %" PRId64 " is %s: a run can be reproduced once it has finished",
             x->id, original_status);
    return answer_error(x, 409, msg, NULL);
  }
  answer_json(x, 201, json);
  sched__place(s);
}

/* POST /api/runs/{id}/reproduce [{"on": WORKER}]: an empty body or {} is
 * any worker; "on" a worker's name or host (1 to 127 bytes, no control
 * characters) */
static void reproduce(sched *s, req_ctx *x, int64_t id) {
  x->id = id;
  char target[48];
  snprintf(target, sizeof target, "run %" PRId64, id);
  if (sched__auth_refuse(s, x->r, &x->who, SS_ACT_REPRODUCE, 0, target))
    return;
  size_t len;
  const char *body = http_body(x->r, &len);
  json_error_t e;
  json_t *b = len ? json_loadb(body, len, 0, &e) : json_object();
  char msg[256];
  if (!json_is_object(b)) {
    if (b)
      snprintf(msg, sizeof msg, "request body: not an object (expected {} or {\"on\": WORKER})");
    else
      snprintf(msg, sizeof msg,
               "request body: line %d, column %d: %s (expected {} or "
               "{\"on\": WORKER})",
               e.line, e.column, e.text);
    json_decref(b);
    return answer_error(x, 400, msg, "$");
  }
  const char *key;
  json_t *v;
  json_object_foreach(b, key, v) {
    if (strcmp(key, "on") != 0) {
      char at[80];
      snprintf(msg, sizeof msg, "unknown key \"%.40s\" (expected on)", key);
      snprintf(at, sizeof at, "$.%.60s", key);
      json_decref(b);
      return answer_error(x, 400, msg, at);
    }
  }
  v = json_object_get(b, "on");
  if (v) {
    const char *on = json_string_value(v);
    size_t n = on ? strlen(on) : 0;
    int ok = n >= 1 && n <= 127 && n == json_string_length(v);
    for (size_t i = 0; ok && i < n; i++)
      ok = (unsigned char)on[i] >= 0x20 && on[i] != 0x7f;
    if (!ok) {
      json_decref(b);
      return answer_error(x, 400,
                          "expected a worker's name or host: a string of 1 to 127 bytes "
                          "without control characters",
                          "$.on");
    }
    if (!(x->on = http_alloc(x->r, n + 1))) {
      json_decref(b);
      return answer_error(x, 500, "out of memory", NULL);
    }
    memcpy(x->on, on, n + 1);
  }
  json_decref(b);
  store_actions_reproduce(s->db, id, x->on, on_reproduced, x);
}

/* ---- /metrics (Prometheus text format) ----------------------------------------------------- */

/* The connected workers' GPUs and CPU slots, and how many are busy. */
typedef struct capacity {
  int gpus, gpus_busy, cpu, cpu_busy, workers;
} capacity;

static capacity capacity_of(sched *s) {
  capacity cp = {0};
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    cp.workers++;
    cp.gpus += c->ngpus;
    for (int g = 0; g < c->ngpus; g++)
      cp.gpus_busy += c->gpu_busy[g];
    cp.cpu += c->cpu_slots;
    cp.cpu_busy += c->cpu_busy;
  }
  return cp;
}

static void on_counts(void *ud, int status, const store_run_counts *rc, const char *errmsg) {
  req_ctx *x = ud;
  sched *s = x->s;
  (void)errmsg;
  long long queued = -1, running = -1, succeeded = -1, failed = -1;
  if (status == 0) {
    queued = rc->queued;
    running = rc->running;
    succeeded = rc->succeeded;
    failed = rc->failed;
  }
  capacity cp = capacity_of(s);
  int gpus = cp.gpus, gpus_busy = cp.gpus_busy, cpu = cp.cpu, cpu_busy = cp.cpu_busy;
  int workers = cp.workers;
  http_stats hs;
  http_server_stats(s->http, &hs);
  size_t cap = 8192, len = 0;
  char *b = http_alloc(x->r, cap);
#define OUT(...) len += (size_t)snprintf(b + len, cap - len, __VA_ARGS__)
  OUT("# HELP scalesweep_runs Runs by status (from the database; -1 when unavailable).\n"
      "# TYPE scalesweep_runs gauge\n");
  OUT("scalesweep_runs{status=\"queued\"} %lld\n", queued);
  OUT("scalesweep_runs{status=\"running\"} %lld\n", running);
  OUT("scalesweep_runs{status=\"succeeded\"} %lld\n", succeeded);
  OUT("scalesweep_runs{status=\"failed\"} %lld\n", failed);
  OUT("# TYPE scalesweep_queue_length gauge\nscalesweep_queue_length %lld\n", queued);
  OUT("# TYPE scalesweep_workers gauge\nscalesweep_workers %d\n", workers);
  OUT("# TYPE scalesweep_gpu_slots gauge\nscalesweep_gpu_slots{state=\"busy\"} %d\n"
      "scalesweep_gpu_slots{state=\"free\"} %d\n",
      gpus_busy, gpus - gpus_busy);
  OUT("# TYPE scalesweep_cpu_slots gauge\nscalesweep_cpu_slots{state=\"busy\"} %d\n"
      "scalesweep_cpu_slots{state=\"free\"} %d\n",
      cpu_busy, cpu - cpu_busy);
  OUT("# TYPE scalesweep_runs_finished_total counter\nscalesweep_runs_finished_total %llu\n",
      (unsigned long long)s->n.runs_finished);
  OUT("# TYPE scalesweep_runs_failed_total counter\nscalesweep_runs_failed_total %llu\n",
      (unsigned long long)s->n.runs_failed);
  OUT("# TYPE scalesweep_runs_requeued_total counter\nscalesweep_runs_requeued_total %llu\n",
      (unsigned long long)s->n.runs_requeued);
  OUT("# TYPE scalesweep_metric_rows_stored_total counter\n"
      "scalesweep_metric_rows_stored_total %llu\n",
      (unsigned long long)s->n.metric_rows);
  size_t mq = 0;
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    mq += db_queue_length(s->wp.db_metrics[i]);
  OUT("# TYPE scalesweep_db_queue_length gauge\nscalesweep_db_queue_length{conn=\"main\"} %zu\n"
      "scalesweep_db_queue_length{conn=\"metrics\"} %zu\n"
      "scalesweep_db_queue_length{conn=\"read\"} %zu\n",
      db_queue_length(s->db), mq, db_pool_queue_length(s->reads));
  OUT("# TYPE scalesweep_db_up gauge\nscalesweep_db_up %d\n",
      sched__wport_db_up(&s->wp) && db_pool_ready(s->reads));
  OUT("# HELP scalesweep_http_request_duration_seconds API request latency.\n"
      "# TYPE scalesweep_http_request_duration_seconds histogram\n");
  static const char *const le[12] = {"0.001", "0.002", "0.005", "0.01", "0.02", "0.05",
                                     "0.1",   "0.2",   "0.5",   "1",    "2",    "5"};
  for (int i = 0; i < 12; i++)
    OUT("scalesweep_http_request_duration_seconds_bucket{le=\"%s\"} %llu\n", le[i],
        (unsigned long long)s->lat_buckets[i]);
  OUT("scalesweep_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
      (unsigned long long)s->lat_count);
  OUT("scalesweep_http_request_duration_seconds_sum %.6f\n", s->lat_sum_s);
  OUT("scalesweep_http_request_duration_seconds_count %llu\n", (unsigned long long)s->lat_count);
  OUT("# TYPE scalesweep_http_connections gauge\nscalesweep_http_connections %d\n", hs.connections);
  OUT("# TYPE scalesweep_http_event_streams gauge\nscalesweep_http_event_streams %d\n",
      hs.sse_streams);
  OUT("# HELP scalesweep_http_refused_total Requests refused for want of slots.\n"
      "# TYPE scalesweep_http_refused_total counter\n"
      "scalesweep_http_refused_total{reason=\"reserve\"} %llu\n"
      "scalesweep_http_refused_total{reason=\"streams\"} %llu\n",
      (unsigned long long)hs.refused_reserve, (unsigned long long)hs.refused_streams);
  OUT("# TYPE scalesweep_http_evicted_total counter\nscalesweep_http_evicted_total %llu\n",
      (unsigned long long)hs.evicted);
  OUT("# TYPE scalesweep_http_stalled_streams_total counter\n"
      "scalesweep_http_stalled_streams_total %llu\n",
      (unsigned long long)hs.stalled_streams);
#undef OUT
  http_respond(x->r, 200, "text/plain; version=0.0.4", b, len < cap ? len : cap - 1, "");
}

static void get_metrics(sched *s, req_ctx *x) {
  if (!db_pool_ready(s->reads)) /* the rest is still worth answering, at once */
    on_counts(x, SS_ECONN, NULL, "database unavailable");
  else
    store_pages_run_counts(db_pool_get(s->reads, 0), on_counts, x);
}

/* ---- SSE ------------------------------------------------------------------------------------ */

static void on_sse_closed(http_sse *st, void *ud) {
  sched *s = ud;
  for (sched__sse **pp = &s->ev.sse; *pp; pp = &(*pp)->next)
    if ((*pp)->stream == st) {
      sched__sse *dead = *pp;
      *pp = dead->next;
      free(dead);
      return;
    }
}

static void events(sched *s, http_request *r, int64_t user_id) {
  http_sse *st = http_sse_start(r);
  if (!st)
    return;
  sched__sse *c = calloc(1, sizeof *c);
  c->stream = st;
  c->user_id = user_id;
  c->next = s->ev.sse;
  s->ev.sse = c;
  http_sse_on_close(st, on_sse_closed, s);
  /* resume: replay what the ring still holds after Last-Event-ID */
  uint64_t last = http_sse_last_id(st);
  if (last && last < s->ev.next_id) {
    uint64_t from = last + 1;
    if (s->ev.next_id - from >= SCHED__EVENT_RING)
      from = s->ev.next_id - SCHED__EVENT_RING + 1;
    for (uint64_t id = from; id <= s->ev.next_id; id++) {
      sched__event *e = &s->ev.ring[id % SCHED__EVENT_RING];
      if (e->id == id)
        http_sse_send(st, id, e->name, e->data);
    }
  }
}

/* ---- the HTTP server's limits and hooks ----------------------------------------------------- */

void sched__http_limits(const sched_options *o, http_limits *lim) {
  memset(lim, 0, sizeof *lim); /* zero fields: http's defaults */
  lim->max_connections = o->http_connections;
  lim->reserve_connections = o->http_reserve;
  lim->max_streams = o->max_streams;
  lim->max_streams_per_addr = o->max_streams_per_addr;
  lim->header_timeout_ms = o->header_timeout_s > 0 ? o->header_timeout_s * 1000 : 0;
}

/* The reserved slots serve the API token and liveness probes. */
static int http_reserved(http_request *r, void *ud) {
  sched *s = ud;
  sched__who who;
  sched__who_of(s, r, &who);
  return !strcmp(http_path(r), "/healthz") || who.user_id != 0;
}

static void http_log(const char *line, void *ud) {
  (void)ud;
  sched__logf("http: %s", line);
}

void sched__http_hooks(sched *s, http_hooks *h) {
  *h = (http_hooks){.reserved = http_reserved, .log = http_log, .ud = s};
}

/* ---- routing ------------------------------------------------------------------------------------
 */

/* /healthz and /metrics, outside /api/ */
static void probe(sched *s, req_ctx *x, const char *path, int get) {
  if (!get)
    return answer_error(x, 405, "method not allowed: use GET", NULL);
  if (!strcmp(path, "/healthz")) {
    /* control: what workers need (their messages, placement, leases);
     * reads: what the API and the page need */
    int control = sched__wport_db_up(&s->wp), reads = db_pool_ready(s->reads);
    char body[96];
    snprintf(body, sizeof body, "{\"ok\":%s,\"control\":%s,\"reads\":%s}",
             control && reads ? "true" : "false", control ? "true" : "false",
             reads ? "true" : "false");
    return answer_json(x, control && reads ? 200 : 503, body);
  }
  /* /metrics tells the queue, the workers and the traffic: a read */
  if (!s->o.open_metrics && !sched__auth_may_read(s, x->r))
    return answer_error(x, 401,
                        "/metrics needs the API token under --closed-reads (Authorization: "
                        "Bearer ...; a Prometheus scrape can send it), unless the scheduler "
                        "runs with --open-metrics",
                        NULL);
  get_metrics(s, x);
}

/* /api/sweeps/{id}REST; 0 when no route matches */
static int sweep_route(sched *s, req_ctx *x, int64_t id, const char *rest, int get, int post) {
  if (!*rest || !strcmp(rest, "/runs")) {
    if (!get)
      answer_error(x, 405, "method not allowed: use GET", NULL);
    else
      get_sweep(s, x, id, *rest != 0);
  } else if (!strcmp(rest, "/cancel") || !strcmp(rest, "/priority")) {
    if (!post)
      answer_error(x, 405, "method not allowed: use POST", NULL);
    else if (rest[1] == 'c')
      cancel(s, x, 1, id);
    else
      set_priority(s, x, id);
  } else if (!strcmp(rest, "/fit")) {
    if (!get)
      answer_error(x, 405, "method not allowed: use GET", NULL);
    else
      sched__get_fit(s, x->r, id);
  } else if (!strcmp(rest, "/next")) {
    if (!get && !post)
      answer_error(x, 405, "method not allowed: use GET or POST", NULL);
    else if (post)
      next_add(s, x, id);
    else
      sched__next(s, x->r, id, 0);
  } else {
    return 0;
  }
  return 1;
}

/* /api/runs/{id}REST; 0 when no route matches */
static int run_route(sched *s, req_ctx *x, int64_t id, const char *rest, int get, int post) {
  if (!*rest) {
    if (!get)
      answer_error(x, 405, "method not allowed: use GET", NULL);
    else
      get_run(s, x, id);
  } else if (!strcmp(rest, "/cancel") || !strcmp(rest, "/reproduce")) {
    if (!post)
      answer_error(x, 405, "method not allowed: use POST", NULL);
    else if (rest[1] == 'c')
      cancel(s, x, 0, id);
    else
      reproduce(s, x, id);
  } else {
    return 0;
  }
  return 1;
}

/* /api/sweeps: the list, or a submission */
static void sweeps_route(sched *s, req_ctx *x, int get, int post) {
  if (get)
    return get_sweeps(s, x);
  if (!post)
    return answer_error(x, 405, "method not allowed: use GET or POST", NULL);
  size_t len;
  const char *body = http_body(x->r, &len);
  if (!sched__auth_refuse(s, x->r, &x->who, SS_ACT_SUBMIT, 1, NULL))
    sched__submit(s, x->r, &x->who, body, len);
}

/* Who asks, and whether a token is needed and good: 1 when answered
 * (users' and the audit trail's routes, or a 401). */
static int identify(sched *s, req_ctx *x, const char *path, int get) {
  http_request *r = x->r;
  sched__who *who = &x->who;
  sched__who_of(s, r, who);
  if (sched__users_route(s, r, who, path) || sched__audit_route(s, r, who, path))
    return 1;
  if (!get)
    sched__audit_watch(s, r, who);
  if (sched__auth_bad_token(r, who))
    answer_error(x, 401, "the token is not known, or it was revoked", NULL);
  else if (get && !s->o.open_reads && !who->user_id)
    answer_error(x, 401, "reads need a token (Authorization: Bearer ...)", NULL);
  else if (!get && !who->user_id)
    answer_error(x, 401, "changes need a token (Authorization: Bearer ...)", NULL);
  else
    return 0;
  return 1;
}

void sched__http(http_request *r, void *ud) {
  sched *s = ud;
  req_ctx *x = rctx(s, r);
  const char *m = http_method(r), *path = http_path(r);
  int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST");
  int64_t id;
  const char *rest;

  if (sched__usage_route(s, r, path)) /* accounting and limits (usage.c) */
    return;
  if (sched__web(s, r)) /* the status page and its JSON (web.c) */
    return;
  if (!strcmp(path, "/metrics") || !strcmp(path, "/healthz"))
    return probe(s, x, path, get);
  if (strncmp(path, "/api/", 5) != 0)
    return answer_error(x, 404, "not found", NULL);
  if (identify(s, x, path, get))
    return;
  if (!strcmp(path, "/api/events") || !strcmp(path, "/api/workers")) {
    if (!get)
      return answer_error(x, 405, "method not allowed: use GET", NULL);
    return path[5] == 'e' ? events(s, r, x->who.user_id) : get_workers(s, x);
  }
  if (get ? !db_pool_ready(s->reads) : !db_ready(s->db))
    return answer_error(x, 503, "database unavailable; try again", NULL);
  if (!strcmp(path, "/api/sweeps"))
    return sweeps_route(s, x, get, post);
  if (sched__route_id(path, "/api/sweeps/", &id, &rest) && sweep_route(s, x, id, rest, get, post))
    return;
  if (sched__route_id(path, "/api/runs/", &id, &rest) && run_route(s, x, id, rest, get, post))
    return;
  answer_error(x, 404, "not found", NULL);
}

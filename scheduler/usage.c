/* Compute accounting and limits over HTTP (usage.h): GET /api/usage, a
 * sweep's GET /api/sweeps/{id}/usage, the usage page (/usage) and an
 * admin's POST /api/limits/{name}. */
#include "scheduler/usage.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/audit.h"
#include "scheduler/auth.h"
#include "scheduler/internal.h"
#include "scheduler/route.h"
#include "scheduler/web.h"
#include "store/sweeps.h"
#include "store/usage.h"

typedef struct usage_req {
  sched *s;
  http_request *r;
  int page; /* answer with the usage page, not JSON */
  const char *by;
  /* a limits change: who asks, of whom, and what was set (the audit's) */
  sched__who who;
  const char *name;
  char detail[160];
} usage_req;

/* 1 when v is a date YYYY-MM-DD, optionally followed by T or a space and
 * HH:MM[:SS] and Z: what ?since= and `usage --since` take */
static int is_date(const char *v) {
  static const char form[] = "dddd-dd-dd";
  size_t n = strlen(v);
  if (n < 10)
    return 0;
  for (int i = 0; i < 10; i++)
    if (form[i] == 'd' ? (v[i] < '0' || v[i] > '9') : v[i] != form[i])
      return 0;
  if (n == 10)
    return 1;
  if (v[10] != 'T' && v[10] != ' ')
    return 0;
  for (const char *p = v + 11; *p; p++)
    if (!strchr("0123456789:Z", *p))
      return 0;
  return n >= 16;
}

static void usage_page(usage_req *u, json_t *doc);

/* The person whose usage alone who may read (0: everyone's), or -1 when
 * they may read none (answered: without a token, the page asks for it). */
static int64_t readable(usage_req *u, const sched__who *who) {
  if (!ss_perm_refusal(who->role, 0, SS_ACT_USAGE_ALL, !u->s->o.open_reads))
    return 0;
  if (who->user_id && !ss_perm_refusal(who->role, 1, SS_ACT_READ, !u->s->o.open_reads))
    return who->user_id;
  if (u->page && !who->user_id)
    usage_page(u, NULL);
  else
    http_respond_error(u->r, who->user_id ? 403 : 401,
                       "usage needs your token (Authorization: Bearer ...): a person sees "
                       "their own, an admin everyone's",
                       NULL);
  return -1;
}

void sched__usage_sweep_line(sched__buf *b, const char *usage) {
  json_t *u = sched__web_doc(usage);
  if (!u || sched__jnum(u, "attempts") == 0) {
    json_decref(u);
    return;
  }
  double trained = sched__jnum(u, "flops_trained"), lost = sched__jnum(u, "flops_lost");
  sched__b_section(b, "cost", "Cost and waste");
  sched__b_puts(b, "<p>Cost: ");
  sched__b_num(b, sched__jnum(u, "gpu_s") / 3600, "%.3g");
  sched__b_puts(b, " GPU-hours and ");
  sched__b_num(b, sched__jnum(u, "cpu_slot_s") / 3600, "%.3g");
  sched__b_printf(b, " CPU-slot-hours over %.0f attempts ended, ", sched__jnum(u, "attempts"));
  sched__b_num(b, trained, "%.3g");
  sched__b_puts(b, " FLOPs trained. Wasted: ");
  sched__b_num(b, lost, "%.3g");
  sched__b_printf(b, " FLOPs lost (%.0f steps trained again after failures, fences and restarts",
                  sched__jnum(u, "steps_lost"));
  if (trained + lost > 0)
    sched__b_printf(b, ", %.1f%%", 100 * lost / (trained + lost));
  sched__b_printf(b, "); %.0f attempts retried, ", sched__jnum(u, "retried_attempts"));
  sched__b_num(b, sched__jnum(u, "retried_device_s") / 3600, "%.3g");
  sched__b_puts(b, " device-hours (<a href=\"/usage?by=sweep\">usage</a>).</p></section>\n");
  json_decref(u);
}

/* ---- the usage page ------------------------------------------------------------------ */

static void page_row(sched__buf *b, json_t *row, int by_sweep) {
  sched__b_puts(b, "<tr>");
  if (by_sweep) {
    sched__b_printf(
        b, "<td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">%" JSON_INTEGER_FORMAT "</a></td><td>",
        sched__jint(row, "sweep_id"), sched__jint(row, "sweep_id"));
    sched__b_esc(b, sched__jstr(row, "name"));
    sched__b_puts(b, "</td>");
  }
  sched__b_puts(b, "<td>");
  sched__b_esc(b, sched__jstr(row, "person"));
  sched__b_puts(b, "</td>");
  static const char *const cols[] = {"attempts",   "gpu_s",      "cpu_slot_s", "flops_trained",
                                     "flops_lost", "steps_lost", NULL};
  for (int i = 0; cols[i]; i++) {
    sched__b_puts(b, "<td class=\"num\">");
    sched__b_num(b, sched__jnum(row, cols[i]), "%.4g");
    sched__b_puts(b, "</td>");
  }
  if (!by_sweep) {
    sched__b_puts(b, "<td class=\"num\">");
    sched__b_num(b, sched__jnum(row, "effective_usage_s"), "%.4g");
    sched__b_puts(b, "</td><td class=\"num\">");
    json_t *st = json_object_get(row, "standing");
    if (json_is_number(st))
      sched__b_printf(b, "%.0f", json_number_value(st));
    sched__b_puts(b, "</td>");
  }
  sched__b_puts(b, "</tr>\n");
}

/* The usage page of doc; NULL: a page that asks for the reader's token
 * (the page's script fetches it again with the token, web/status.js). */
static void usage_page(usage_req *u, json_t *doc) {
  int by_sweep = !strcmp(u->by, "sweep");
  sched__buf b = {0};
  sched__page_start(&b, u->s, "usage", 0, "Usage");
  if (!doc) {
    sched__b_section(&b, "usage", "Usage");
    sched__b_puts(&b, "<p id=\"usage-token\">Usage needs your API token (the form at the top): "
                      "a person sees their own, an admin everyone's.</p></section>\n");
    sched__page_end(&b);
    sched__web_req w = {.s = u->s, .r = u->r};
    sched__respond_page(&w, 200, &b);
    return;
  }
  sched__b_puts(&b, "<h1>Usage</h1>\n<p>Device-seconds (GPUs, or CPU slots, x wall time) and "
                    "FLOPs per ");
  sched__b_puts(&b, by_sweep ? "sweep (<a href=\"/usage\">per person</a>)"
                             : "person (<a href=\"/usage?by=sweep\">per sweep</a>)");
  sched__b_printf(&b,
                  "; placement serves the people with queued runs by effective usage, least "
                  "first (standing 1), its half-life %.3g days.</p>\n",
                  sched__jnum(doc, "half_life_s") / 86400);
  sched__b_section(&b, "usage", by_sweep ? "Per sweep" : "Per person");
  sched__b_puts(&b, "<table><thead><tr>");
  if (by_sweep)
    sched__b_puts(&b, "<th>sweep</th><th>name</th>");
  sched__b_puts(&b, "<th>person</th><th>attempts</th><th>GPU-s</th><th>CPU-slot-s</th>"
                    "<th>FLOPs trained</th><th>FLOPs lost</th><th>steps lost</th>");
  if (!by_sweep)
    sched__b_puts(&b, "<th>effective usage (device-s)</th><th>standing</th>");
  sched__b_puts(&b, "</tr></thead><tbody>\n");
  json_t *rows = json_object_get(doc, "rows");
  for (size_t i = 0; i < json_array_size(rows); i++)
    page_row(&b, json_array_get(rows, i), by_sweep);
  sched__b_puts(&b, "</tbody></table></section>\n");
  sched__page_end(&b);
  sched__web_req w = {.s = u->s, .r = u->r};
  sched__respond_page(&w, 200, &b);
}

static void on_usage(void *ud, int status, const char *json, const char *errmsg) {
  usage_req *u = ud;
  if (!u->page)
    return sched__route_answer_read(u->r, 200, status, json, errmsg);
  const char *msg;
  int code = sched__route_read_status(status, json, errmsg, &msg);
  json_t *doc = code ? NULL : sched__web_doc(json);
  sched__web_req w = {.s = u->s, .r = u->r};
  if (!doc)
    sched__respond_message(&w, code ? code : 500, "Usage", code ? msg : "a bad usage document");
  else
    usage_page(u, doc);
  json_decref(doc);
}

/* GET /api/usage and /usage: ?since=DATE, ?by=person|sweep */
static void get_usage(usage_req *u) {
  const char *since = NULL, *by = NULL;
  if (http_query_param(u->r, "since", &since) < 0 || http_query_param(u->r, "by", &by) < 0)
    return http_respond_error(u->r, 400, "a query parameter has a bad percent-encoding", NULL);
  if (since && !is_date(since)) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "query parameter since = '%.40s': expected a date YYYY-MM-DD or a time "
             "YYYY-MM-DDTHH:MM:SSZ",
             since);
    return http_respond_error(u->r, 400, msg, "since");
  }
  if (by && strcmp(by, "person") && strcmp(by, "sweep"))
    return http_respond_error(u->r, 400, "query parameter by: expected person or sweep", "by");
  u->by = by ? by : "person";
  sched__who who;
  sched__who_of(u->s, u->r, &who);
  int64_t only = readable(u, &who);
  if (only >= 0)
    store_usage_json(db_pool_get(u->s->reads, 1), since, u->by, only, on_usage, u);
}

/* GET /api/sweeps/{id}/usage: what the sweep cost and wasted */
static void get_sweep_usage(usage_req *u, int64_t id) {
  sched__who who;
  sched__who_of(u->s, u->r, &who);
  const char *why = ss_perm_refusal(who.role, 0, SS_ACT_READ, !u->s->o.open_reads);
  if (why)
    return http_respond_error(u->r, who.user_id ? 403 : 401, why, NULL);
  store_usage_sweep(db_pool_get(u->s->reads, 1), id, on_usage, u);
}

/* ---- limits ---------------------------------------------------------------------------- */

/* Answers a limits change and writes its audit row (scheduler/audit.h):
 * status, the error's message (NULL: done) and its JSON path. */
static void limits_answer(usage_req *u, int status, const char *msg, const char *path) {
  char target[64];
  snprintf(target, sizeof target, "user %.40s", u->name);
  sched__audit(u->s, u->r, &u->who, "limits", target, status, msg ? msg : u->detail);
  if (msg)
    http_respond_error(u->r, status, msg, path);
  else
    http_respond_json(u->r, status, "{\"ok\":true}");
}

static void on_limits_set(void *ud, int status, int64_t rows, const char *errmsg) {
  usage_req *u = ud;
  if (status != 0)
    limits_answer(u, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  else if (rows == 0)
    limits_answer(u, 404, "no such person (or they are revoked)", NULL);
  else
    limits_answer(u, 200, NULL, NULL);
}

/* One limit of the body: absent or null (no limit) leaves *out NULL; a
 * number >= 0 (a whole one unless real) is written to buf; else 1 with a
 * 400 answered. */
static int limit_of(usage_req *u, json_t *body, const char *key, int real, char *buf, size_t len,
                    const char **out) {
  json_t *v = json_object_get(body, key);
  *out = NULL;
  if (!v || json_is_null(v))
    return 0;
  double x = json_number_value(v);
  if (!json_is_number(v) || !(x >= 0) || !isfinite(x) || (!real && !json_is_integer(v)) ||
      (!real && x > 1e9)) {
    char msg[160], path[48];
    snprintf(msg, sizeof msg, "$.%s: expected %s >= 0 or null (no limit)", key,
             real ? "a number" : "a whole number");
    snprintf(path, sizeof path, "$.%s", key);
    limits_answer(u, 400, msg, path);
    return 1;
  }
  snprintf(buf, len, real ? "%.17g" : "%.0f", x);
  *out = buf;
  return 0;
}

/* POST /api/limits/{name} {"max_gpus", "max_queued_runs", "max_queued_flops"}:
 * an admin sets a person's limits (each absent or null: none). */
static void set_limits(usage_req *u) {
  sched__who_of(u->s, u->r, &u->who);
  const char *why = ss_perm_refusal(u->who.role, 0, SS_ACT_LIMITS, !u->s->o.open_reads);
  if (why) {
    char msg[256];
    snprintf(msg, sizeof msg, "setting the limits of %.40s refused: %s", u->name, why);
    return limits_answer(u, u->who.user_id ? 403 : 401, msg, NULL);
  }
  size_t len;
  const char *text = http_body(u->r, &len);
  json_error_t je;
  json_t *body = json_loadb(text ? text : "", len, 0, &je);
  if (!json_is_object(body)) {
    json_decref(body);
    return limits_answer(u, 400, "the body: expected a JSON object of limits", "$");
  }
  char g[32], r[32], f[32];
  store_limits l;
  if (!limit_of(u, body, "max_gpus", 0, g, sizeof g, &l.max_gpus) &&
      !limit_of(u, body, "max_queued_runs", 0, r, sizeof r, &l.max_queued_runs) &&
      !limit_of(u, body, "max_queued_flops", 1, f, sizeof f, &l.max_queued_flops)) {
    snprintf(u->detail, sizeof u->detail, "max_gpus %s, max_queued_runs %s, max_queued_flops %s",
             l.max_gpus ? g : "none", l.max_queued_runs ? r : "none",
             l.max_queued_flops ? f : "none");
    store_usage_set_limits(u->s->db, u->name, &l, on_limits_set, u);
  }
  json_decref(body);
}

/* ---- a submission's limits -------------------------------------------------------------- */

/* A change that adds queued runs (a sweep's insert, or runs added to one),
 * waiting its turn: one at a time from the check of its owner's limits to
 * its store's answer, so that two submissions cannot both pass the check
 * before either is stored. */
typedef struct sched__add {
  struct sched__add *next;
  sched *s;
  http_request *r;
  int64_t extend;     /* the sweep the runs are added to; 0: sw is a new sweep */
  store_sweep_new sw; /* its strings in text, one allocation */
  char *text;
  store_sweeps_inserted_cb cb;
  void *ud;
} sched__add;

static void add_next(sched *s);

static void add_done(sched__add *x) {
  sched *s = x->s;
  free(x->text);
  free(x);
  s->adding = 0;
  add_next(s);
}

static void on_added(void *ud, int status, int64_t sweep_id, int64_t runs, const char *errmsg) {
  sched__add *x = ud;
  x->cb(x->ud, status, sweep_id, runs, errmsg);
  add_done(x);
}

static void on_add_checked(void *ud, int status, const char *json, const char *errmsg) {
  sched__add *x = ud;
  json_t *over = status == 0 && json ? json_loads(json, JSON_DECODE_ANY, NULL) : NULL;
  if (status != 0) {
    http_respond_error(x->r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  } else if (sched__jstr(over, "limit")) {
    char msg[400];
    snprintf(msg, sizeof msg,
             "%s refused: it would take %s over %s limit %s = %.6g (queued now: %.6g, this "
             "%s adds %.6g); see `scalesweep usage`, or ask an admin (`scalesweep limits`)",
             x->extend ? "adding runs" : "submission", x->extend ? "the sweep's owner" : "you",
             x->extend ? "their" : "your",
             sched__jstr(over, "limit"), json_number_value(json_object_get(over, "max")),
             json_number_value(json_object_get(over, "queued")), x->extend ? "design" : "sweep",
             json_number_value(json_object_get(over, "adding")));
    http_respond_error(x->r, 403, msg, NULL);
  } else {
    json_decref(over);
    if (x->extend) /* on the control connection, as next.c says why */
      store_sweeps_extend(x->s->db, x->extend, &x->sw, on_added, x);
    else
      store_sweeps_insert(x->s->db_submit, &x->sw, on_added, x);
    return;
  }
  json_decref(over);
  x->cb(x->ud, SCHED__ANSWERED, 0, 0, NULL);
  add_done(x);
}

static void add_next(sched *s) {
  sched__add *x = s->adds;
  if (s->adding || !x)
    return;
  s->adds = x->next;
  if (!s->adds)
    s->adds_tail = &s->adds;
  s->adding = 1;
  store_usage_check_submit(s->db_submit, x->extend ? 0 : x->sw.owner_id, x->extend,
                           x->sw.runs_json, on_add_checked, x);
}

/* a copy of src at *at in buf; *at moves past it */
static const char *put(char *buf, size_t *at, const char *src) {
  if (!src)
    return NULL;
  size_t n = strlen(src) + 1;
  memcpy(buf + *at, src, n);
  *at += n;
  return buf + *at - n;
}

void sched__usage_add(sched *s, http_request *r, int64_t extend, const store_sweep_new *sw,
                      store_sweeps_inserted_cb cb, void *ud) {
  const char *parts[4] = {sw->name, sw->spec_json, sw->spec_hash, sw->runs_json};
  size_t len = 0;
  for (int i = 0; i < 4; i++)
    len += parts[i] ? strlen(parts[i]) + 1 : 0;
  if (s->stopping) { /* its connections are closing */
    http_respond_error(r, 503, "the scheduler is stopping; try again", NULL);
    cb(ud, SCHED__ANSWERED, 0, 0, NULL);
    return;
  }
  sched__add *x = calloc(1, sizeof *x);
  char *text = malloc(len ? len : 1);
  if (!x || !text) {
    free(x);
    free(text);
    http_respond_error(r, 500, "out of memory", NULL);
    cb(ud, SCHED__ANSWERED, 0, 0, NULL);
    return;
  }
  *x = (sched__add){.s = s, .r = r, .extend = extend, .sw = *sw, .text = text, .cb = cb, .ud = ud};
  size_t at = 0;
  x->sw.name = put(text, &at, sw->name);
  x->sw.spec_json = put(text, &at, sw->spec_json);
  x->sw.spec_hash = put(text, &at, sw->spec_hash);
  x->sw.runs_json = put(text, &at, sw->runs_json);
  if (!s->adds_tail)
    s->adds_tail = &s->adds;
  *s->adds_tail = x;
  s->adds_tail = &x->next;
  add_next(s);
}

/* ---- routing --------------------------------------------------------------------------- */

int sched__usage_route(sched *s, http_request *r, const char *path) {
  int64_t id;
  const char *rest;
  int page = !strcmp(path, "/usage");
  int sweep = sched__route_id(path, "/api/sweeps/", &id, &rest) && !strcmp(rest, "/usage");
  int limits = !strncmp(path, "/api/limits/", 12) && path[12];
  if (!page && !sweep && strcmp(path, "/api/usage") && !limits)
    return 0;
  const char *m = http_method(r);
  int get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
  if (limits ? strcmp(m, "POST") : !get) {
    http_respond_error(
        r, 405, limits ? "method not allowed: use POST" : "method not allowed: use GET", NULL);
    return 1;
  }
  if (limits ? !db_ready(s->db) : !db_pool_ready(s->reads)) {
    http_respond_error(r, 503, "database unavailable; try again", NULL);
    return 1;
  }
  usage_req *u = http_alloc(r, sizeof *u);
  *u = (usage_req){.s = s, .r = r, .page = page, .by = "person"};
  u->name = limits ? path + 12 : "";
  if (limits)
    set_limits(u);
  else if (sweep)
    get_sweep_usage(u, id);
  else
    get_usage(u);
  return 1;
}

/* The status page (DESIGN.md "Data flow", step 4): server-rendered HTML for
 * the overview (/), a sweep (/sweeps/ID) and a run (/runs/ID), readable
 * without JavaScript; the embedded assets under /static/ (web/ and uPlot);
 * and the page's own JSON: curves sampled on the server and a sweep's fit
 * points. The JavaScript (web/status.js) refreshes these pages on the event
 * stream by fetching them again, so all HTML comes from here and every value
 * from a run or a spec goes through one escaping function.
 *
 * Reads follow the API's rule (open unless --closed-reads; then the page
 * shell renders without data and the script fetches with the token).
 * Changes are never made here: the page's buttons call the API with the
 * token as a header. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/token.h"
#include "scheduler/internal.h"
#include "store/db.h"
#include "sweeps/fit.h"

#define RUNS_PER_PAGE 100
#define CURVE_POINTS 100 /* default samples per curve */
#define CURVE_POINTS_MAX 2000
#define CURVE_RUNS 200 /* default runs per curves request */
#define CURVE_RUNS_MAX 1000
#define PF_DAY 8.64e19 /* FLOPs (SCIENCE.md) */

/* Every answer the page gets: scripts only from /static/, no inline code,
 * no framing, no sniffing. */
#define SECURITY_HEADERS                                                       \
  "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src " \
  "'self'; "                                                                   \
  "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action "    \
  "'self'; "                                                                   \
  "frame-ancestors 'none'\r\n"                                                 \
  "X-Content-Type-Options: nosniff\r\n"                                        \
  "X-Frame-Options: DENY\r\n"                                                  \
  "Referrer-Policy: no-referrer\r\n"

/* ---- text buffers
 * -------------------------------------------------------------------- */

/* A growing string; after an allocation failure it stays empty and oom is set.
 */
typedef struct buf {
  char *p;
  size_t len, cap;
  int oom;
} buf;

static void b_add(buf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      free(b->p);
      b->p = NULL;
      b->len = b->cap = 0;
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void b_puts(buf *b, const char *s) { b_add(b, s, strlen(s)); }

static void b_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void b_printf(buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof small) {
    b_add(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->oom = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b_add(b, big, (size_t)n);
  free(big);
}

/* Text as HTML: the one place where values from runs and specs enter a page. */
static void b_esc(buf *b, const char *s) {
  if (!s)
    return;
  const char *run = s;
  for (; *s; s++) {
    const char *ref;
    switch (*s) {
    case '&':
      ref = "&amp;";
      break;
    case '<':
      ref = "&lt;";
      break;
    case '>':
      ref = "&gt;";
      break;
    case '"':
      ref = "&quot;";
      break;
    case '\'':
      ref = "&#39;";
      break;
    default:
      continue;
    }
    b_add(b, run, (size_t)(s - run));
    b_puts(b, ref);
    run = s + 1;
  }
  b_add(b, run, (size_t)(s - run));
}

char *sched__html_escape(const char *text) {
  buf b = {0};
  b_add(&b, "", 0);
  b_esc(&b, text);
  return b.oom ? NULL : b.p;
}

/* ---- assets
 * -------------------------------------------------------------------------- */

const sched__asset *sched__asset_find(const char *name) {
  for (int i = 0; i < sched__nassets; i++)
    if (!strcmp(sched__assets[i].name, name))
      return &sched__assets[i];
  return NULL;
}

/* If-None-Match holds tag (alone, in a list, weak or strong, or "*"). */
static int etag_matches(const char *inm, const char *tag) {
  if (!inm)
    return 0;
  size_t tl = strlen(tag);
  for (const char *p = inm; *p;) {
    p += strspn(p, " \t,");
    if (!strncmp(p, "W/", 2))
      p += 2;
    size_t n = strcspn(p, " \t,");
    if ((n == 1 && *p == '*') || (n == tl && !strncmp(p, tag, tl)))
      return 1;
    p += n;
  }
  return 0;
}

static void serve_asset(http_request *r, const char *name) {
  const sched__asset *a = sched__asset_find(name);
  if (!a) {
    http_respond(r, 404, "text/plain; charset=utf-8", "not found\n", 10, SECURITY_HEADERS);
    return;
  }
  /* names are not fingerprinted: revalidate each time, cheaply (304) */
  char headers[1024];
  snprintf(headers, sizeof headers, "%sETag: %s\r\nCache-Control: no-cache\r\n", SECURITY_HEADERS,
           a->etag);
  if (etag_matches(http_header(r, "if-none-match"), a->etag))
    http_respond(r, 304, NULL, NULL, 0, headers);
  else
    http_respond(r, 200, a->type, (const char *)a->data, a->len, headers);
}

/* ---- requests
 * ------------------------------------------------------------------------ */

typedef enum { PAGE_OVERVIEW, PAGE_SWEEP, PAGE_RUN, PAGE_CONFIG } page_kind;

typedef struct web_req {
  sched *s;
  http_request *r;
  page_kind kind;
  int64_t id;
  int64_t offset;
  const char *status; /* run status filter of the sweep page, or NULL */
} web_req;

static int has_token(sched *s, http_request *r) {
  const char *h = http_header(r, "authorization");
  return h && !strncasecmp(h, "Bearer ", 7) && token_equal(s->api_token, h + 7);
}

static const char *const run_statuses[] = {"queued", "running",   "succeeded",
                                           "failed", "cancelled", NULL};

static const char *known_status(const char *v) {
  for (int i = 0; v && run_statuses[i]; i++)
    if (!strcmp(v, run_statuses[i]))
      return run_statuses[i];
  return NULL;
}

/* "/runs/12" with prefix "/runs/" -> 12 and rest ""; 0 when no id follows */
static int path_id(const char *path, const char *prefix, int64_t *id, const char **rest) {
  size_t pl = strlen(prefix);
  if (strncmp(path, prefix, pl) || path[pl] < '1' || path[pl] > '9')
    return 0;
  char *end;
  long long v = strtoll(path + pl, &end, 10);
  if (v <= 0 || v == LLONG_MAX)
    return 0;
  *id = v;
  *rest = end;
  return 1;
}

/* A non-negative integer query parameter (absent: dflt; bad: -1). */
static long long query_count(http_request *r, const char *name, long long dflt, long long max) {
  const char *v;
  int found = http_query_param(r, name, &v);
  if (found == 0)
    return dflt;
  if (found < 0)
    return -1;
  char *end;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || n < 0 || n > max)
    return -1;
  return n;
}

/* ---- page frame
 * ---------------------------------------------------------------------- */

static void page_start(buf *b, sched *s, const char *page, int64_t id, const char *title) {
  b_puts(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>");
  b_esc(b, title);
  b_puts(b, " \xc2\xb7 scalesweep</title><link rel=\"icon\" href=\"data:,\">"
            "<link rel=\"stylesheet\" href=\"/static/uPlot.min.css\">"
            "<link rel=\"stylesheet\" href=\"/static/status.css\">"
            "<script src=\"/static/uPlot.iife.min.js\" defer></script>"
            "<script type=\"module\" src=\"/static/status.js\"></script></head>\n");
  b_printf(b, "<body data-page=\"%s\" data-id=\"%" PRId64 "\" data-open-reads=\"%d\">\n", page, id,
           s->o.open_reads ? 1 : 0);
  b_puts(b, "<header class=\"top\"><nav aria-label=\"site\"><a href=\"/\" class=\"brand\">"
            "scalesweep</a></nav><form id=\"token-form\" class=\"token\" hidden>"
            "<label for=\"token\">API token</label>"
            "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" "
            "placeholder=\"to make changes\" size=\"18\"><button type=\"submit\">Use</button>"
            "<button type=\"button\" id=\"token-forget\" hidden>Forget</button></form>"
            "<span id=\"live\" class=\"live\" role=\"status\" aria-live=\"polite\">"
            "static page: live updates need JavaScript</span></header>\n<main>\n");
}

static void page_end(buf *b) {
  b_puts(b, "</main>\n<p id=\"notice\" class=\"notice\" role=\"alert\" hidden></p>\n"
            "</body></html>\n");
}

static void respond_page(web_req *w, int status, buf *b) {
  static const char oom[] = "out of memory\n";
  char headers[1024];
  snprintf(headers, sizeof headers, "%sCache-Control: no-store\r\n", SECURITY_HEADERS);
  if (b->oom)
    http_respond(w->r, 500, "text/plain; charset=utf-8", oom, sizeof oom - 1, headers);
  else
    http_respond(w->r, status, "text/html; charset=utf-8", b->p, b->len, headers);
  free(b->p);
}

static void respond_message(web_req *w, int status, const char *title, const char *msg) {
  buf b = {0};
  page_start(&b, w->s, "message", 0, title);
  b_puts(&b, "<h1>");
  b_esc(&b, title);
  b_puts(&b, "</h1><p>");
  b_esc(&b, msg);
  b_puts(&b, "</p>\n");
  page_end(&b);
  respond_page(w, status, &b);
}

/* ---- formatting
 * ---------------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static double jnum(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static json_int_t jint(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? json_integer_value(v)
                            : (json_is_real(v) ? (json_int_t)json_real_value(v) : 0);
}

/* a cell: "%.3g" (or fmt) of a number, "" when unknown */
static void b_num(buf *b, double v, const char *fmt) {
  if (isfinite(v))
    b_printf(b, fmt ? fmt : "%.3g", v);
}

/* like b_num, but "n/a" when v is unknown (a sentence needs a word there) */
static void b_num_na(buf *b, double v, const char *fmt) {
  if (isfinite(v))
    b_printf(b, fmt, v);
  else
    b_puts(b, "n/a");
}

static void b_duration(buf *b, double s) {
  if (!isfinite(s) || s < 0)
    return;
  if (s < 120)
    b_printf(b, "%.0f s", s);
  else if (s < 7200)
    b_printf(b, "%.1f min", s / 60);
  else
    b_printf(b, "%.1f h", s / 3600);
}

static void b_status(buf *b, const char *st) {
  const char *k = known_status(st);
  b_printf(b, "<span class=\"st st-%s\">", k ? k : "other");
  b_esc(b, st ? st : "?");
  b_puts(b, "</span>");
}

/* runs: a progress element with its numbers beside it */
static void b_progress(buf *b, const char *label, double done, double total, const char *unit,
                       double scale) {
  double d = isfinite(done) ? done / scale : 0, t = isfinite(total) ? total / scale : 0;
  b_printf(b, "<div class=\"prog\"><progress max=\"%.6g\" value=\"%.6g\" aria-label=\"",
           t > 0 ? t : 1, d);
  b_esc(b, label);
  b_printf(b, "\"></progress> <span>%.3g / %.3g %s</span></div>", d, t, unit);
}

/* ---- overview
 * ------------------------------------------------------------------------ */

/* compute a run has spent: all of it when it succeeded, else the share of
 * its tokens its last stored step reached */
#define SPENT_SQL                                                              \
  "CASE WHEN r.status = 'succeeded' THEN r.flops WHEN r.attempt > 0 THEN "     \
  "r.flops * "                                                                 \
  "least(1.0, coalesce((SELECT m.tokens FROM metrics m WHERE m.run_id = r.id " \
  "ORDER BY "                                                                  \
  "m.step DESC LIMIT 1), 0)::float8 / greatest(r.tokens, 1)) ELSE 0 END"

#define TS_SQL(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"

static void render_workers(buf *b, sched *s) {
  b_puts(b, "<section id=\"workers\" aria-labelledby=\"h-workers\"><h2 id=\"h-workers\">"
            "Workers</h2>");
  int n = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    n += c->authed && !c->closing;
  if (!n) {
    b_puts(b, "<p class=\"empty\">No worker is connected.</p></section>\n");
    return;
  }
  b_puts(b, "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">Worker</th>"
            "<th scope=\"col\">Host</th><th scope=\"col\">GPUs</th><th scope=\"col\">CPU slots</th>"
            "</tr></thead><tbody>");
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    b_puts(b, "<tr><td>");
    b_esc(b, c->name);
    b_puts(b, "</td><td>");
    b_esc(b, c->host);
    b_puts(b, "</td><td><ul class=\"gpus\">");
    for (int g = 0; g < c->ngpus; g++) {
      const sched__wrun *on = NULL;
      for (const sched__wrun *w = c->runs; w && !on; w = w->next)
        for (int k = 0; k < w->ngpus && k < 8; k++)
          if (w->gpus[k] == g)
            on = w;
      if (on)
        b_printf(b,
                 "<li class=\"busy\">GPU %d: busy, <a href=\"/runs/%" PRId64 "\">run %" PRId64
                 "</a></li>",
                 g, on->run_id, on->run_id);
      else
        b_printf(b, "<li class=\"%s\">GPU %d: %s</li>", c->gpu_busy[g] ? "busy" : "free", g,
                 c->gpu_busy[g] ? "busy" : "free");
    }
    if (!c->ngpus)
      b_puts(b, "<li>none</li>");
    b_printf(b, "</ul></td><td>%d of %d busy", c->cpu_busy, c->cpu_slots);
    for (const sched__wrun *w = c->runs; w; w = w->next)
      if (!w->ngpus)
        b_printf(b, " <a href=\"/runs/%" PRId64 "\">run %" PRId64 "</a>", w->run_id, w->run_id);
    b_puts(b, "</td></tr>");
  }
  b_puts(b, "</tbody></table></div></section>\n");
}

static void render_overview(buf *b, sched *s, json_t *d) {
  render_workers(b, s);

  json_t *q = json_object_get(d, "queue");
  b_printf(b,
           "<section id=\"queue\" aria-labelledby=\"h-queue\"><h2 id=\"h-queue\">Queue</h2>"
           "<p>%" JSON_INTEGER_FORMAT " run%s queued (%" JSON_INTEGER_FORMAT
           " on CPU slots, %" JSON_INTEGER_FORMAT " GPUs asked for).</p>",
           jint(q, "runs"), jint(q, "runs") == 1 ? "" : "s", jint(q, "cpu"), jint(q, "gpus"));
  json_t *next = json_object_get(d, "next");
  if (json_array_size(next)) {
    b_puts(b, "<div class=\"scroll\"><table><caption>Next to start</caption><thead><tr>"
              "<th scope=\"col\">Run</th><th scope=\"col\">Sweep</th><th scope=\"col\">N</th>"
              "<th scope=\"col\">C (FLOPs)</th><th scope=\"col\">GPUs</th>"
              "<th scope=\"col\">Attempts so far</th></tr></thead><tbody>");
    size_t i;
    json_t *r;
    json_array_foreach(next, i, r) {
      b_printf(b,
               "<tr><td><a href=\"/runs/%" JSON_INTEGER_FORMAT "\">%" JSON_INTEGER_FORMAT
               "</a></td><td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">",
               jint(r, "id"), jint(r, "id"), jint(r, "sweep_id"));
      b_esc(b, jstr(r, "sweep"));
      b_puts(b, "</a></td><td>");
      b_num(b, jnum(r, "nonembedding_params"), NULL);
      b_puts(b, "</td><td>");
      b_num(b, jnum(r, "flops"), NULL);
      b_printf(b, "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%" JSON_INTEGER_FORMAT "</td></tr>",
               jint(r, "gpus"), jint(r, "attempt"));
    }
    b_puts(b, "</tbody></table></div>");
  }
  b_puts(b, "</section>\n");

  json_t *sweeps = json_object_get(d, "sweeps");
  b_puts(b, "<section id=\"sweeps\" aria-labelledby=\"h-sweeps\"><h2 "
            "id=\"h-sweeps\">Sweeps</h2>");
  if (!json_array_size(sweeps)) {
    b_puts(b, "<p class=\"empty\">No sweep yet: <code>scalesweep submit "
              "spec.json</code>.</p>");
  } else {
    b_puts(b, "<div class=\"scroll\"><table class=\"sweeps\"><thead><tr>"
              "<th scope=\"col\">Sweep</th><th scope=\"col\">Status</th>"
              "<th scope=\"col\">Runs done</th><th scope=\"col\">Compute spent</th>"
              "<th scope=\"col\">Running</th><th scope=\"col\">Queued</th>"
              "<th scope=\"col\">Failed</th></tr></thead><tbody>");
    size_t i;
    json_t *sw;
    json_array_foreach(sweeps, i, sw) {
      json_int_t id = jint(sw, "id");
      b_printf(b, "<tr><td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">#%" JSON_INTEGER_FORMAT " ",
               id, id);
      b_esc(b, jstr(sw, "name"));
      b_puts(b, "</a></td><td>");
      b_status(b, jstr(sw, "status"));
      b_puts(b, "</td><td>");
      b_progress(b, "runs done", jnum(sw, "done"), jnum(sw, "total"), "runs", 1);
      b_puts(b, "</td><td>");
      b_progress(b, "compute spent", jnum(sw, "flops_spent"), jnum(sw, "flops_planned"), "PF-days",
                 PF_DAY);
      b_printf(b,
               "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%" JSON_INTEGER_FORMAT
               "</td><td>%" JSON_INTEGER_FORMAT "</td></tr>",
               jint(sw, "running"), jint(sw, "queued"), jint(sw, "failed"));
    }
    b_puts(b, "</tbody></table></div>");
    if (jint(d, "sweeps_total") > (json_int_t)json_array_size(sweeps))
      b_printf(b, "<p>The newest %zu of %" JSON_INTEGER_FORMAT " sweeps.</p>",
               json_array_size(sweeps), jint(d, "sweeps_total"));
  }
  b_puts(b, "</section>\n");

  json_t *fails = json_object_get(d, "failures");
  b_puts(b, "<section id=\"failures\" aria-labelledby=\"h-failures\"><h2 id=\"h-failures\">"
            "Recent failures</h2>");
  if (!json_array_size(fails)) {
    b_puts(b, "<p class=\"empty\">None.</p>");
  } else {
    b_puts(b, "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">Run</th>"
              "<th scope=\"col\">Sweep</th><th scope=\"col\">Attempts</th>"
              "<th scope=\"col\">Ended (UTC)</th><th "
              "scope=\"col\">Error</th></tr></thead><tbody>");
    size_t i;
    json_t *r;
    json_array_foreach(fails, i, r) {
      b_printf(b,
               "<tr><td><a href=\"/runs/%" JSON_INTEGER_FORMAT "\">%" JSON_INTEGER_FORMAT
               "</a></td><td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">",
               jint(r, "id"), jint(r, "id"), jint(r, "sweep_id"));
      b_esc(b, jstr(r, "sweep"));
      b_printf(b, "</a></td><td>%" JSON_INTEGER_FORMAT "</td><td>", jint(r, "attempt"));
      b_esc(b, jstr(r, "finished_at"));
      b_puts(b, "</td><td class=\"err\">");
      b_esc(b, jstr(r, "error"));
      b_puts(b, "</td></tr>");
    }
    b_puts(b, "</tbody></table></div>");
  }
  b_puts(b, "</section>\n");

  b_puts(b, "<section id=\"submit\" class=\"needs-token\" aria-labelledby=\"h-submit\" hidden>"
            "<h2 id=\"h-submit\">Submit a sweep</h2><form id=\"submit-form\">"
            "<label for=\"spec\">Sweep spec (JSON)</label>"
            "<textarea id=\"spec\" name=\"spec\" rows=\"8\" spellcheck=\"false\"></textarea>"
            "<button type=\"submit\">Submit</button></form></section>\n");
}

static const char overview_sql[] =
    "SELECT json_build_object("
    "'sweeps', (SELECT coalesce(json_agg(t ORDER BY t.id DESC), '[]') FROM ("
    "SELECT sw.id, sw.name, sw.status, count(r.id) AS total, "
    "count(r.id) FILTER (WHERE r.status IN ('succeeded', 'failed', 'cancelled')) AS done, "
    "count(r.id) FILTER (WHERE r.status = 'running') AS running, "
    "count(r.id) FILTER (WHERE r.status = 'queued') AS queued, "
    "count(r.id) FILTER (WHERE r.status = 'failed') AS failed, "
    "coalesce(sum(r.flops), 0) AS flops_planned, "
    "coalesce(sum(" SPENT_SQL "), 0) AS flops_spent "
    "FROM sweeps sw LEFT JOIN runs r ON r.sweep_id = sw.id "
    "GROUP BY sw.id ORDER BY sw.id DESC LIMIT 50) t), "
    "'sweeps_total', (SELECT count(*) FROM sweeps), "
    "'queue', (SELECT json_build_object('runs', count(*), 'gpus', coalesce(sum(gpus), 0), "
    "'cpu', count(*) FILTER (WHERE gpus = 0)) FROM runs WHERE status = 'queued'), "
    "'next', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, r.sweep_id, sw.name AS "
    "sweep, r.gpus, r.nonembedding_params, r.flops, r.attempt FROM runs r JOIN sweeps sw ON "
    "sw.id = r.sweep_id WHERE r.status = 'queued' ORDER BY greatest(r.priority, sw.priority) "
    "DESC, r.sweep_id, r.flops NULLS LAST, r.id LIMIT 10) t), "
    "'failures', (SELECT coalesce(json_agg(t), '[]') FROM (SELECT r.id, r.sweep_id, sw.name AS "
    "sweep, r.attempt, r.error, " TS_SQL(
        "r.finished_at") " AS finished_at FROM runs r "
                         "JOIN sweeps sw ON sw.id = r.sweep_id WHERE r.status = 'failed' "
                         "ORDER BY r.finished_at DESC NULLS LAST, r.id DESC "
                         "LIMIT 10) t))";

/* ---- sweep
 * ---------------------------------------------------------------------------
 */

static void render_fit_params(buf *b, const char *law, json_t *fit) {
  json_t *ci = json_object_get(fit, "ci95");
  b_puts(b, "<div class=\"fit\"><h3>");
  b_esc(b, law);
  b_printf(b, " <small>(%" JSON_INTEGER_FORMAT " points%s)</small></h3>", jint(fit, "n_points"),
           json_is_false(json_object_get(fit, "converged")) ? ", not converged" : "");
  b_puts(b, "<table class=\"params\"><thead><tr><th scope=\"col\">Parameter</th>"
            "<th scope=\"col\">Value</th><th scope=\"col\">95% "
            "interval</th></tr></thead><tbody>");
  static const char *const groups[2] = {"params", "derived"};
  for (int g = 0; g < 2; g++) {
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(fit, groups[g]), k, v) {
      json_t *iv = json_object_get(ci, k);
      b_puts(b, "<tr><th scope=\"row\">");
      b_esc(b, k);
      b_puts(b, "</th><td>");
      b_num(b, json_is_number(v) ? json_number_value(v) : NAN, "%.4g");
      b_puts(b, "</td><td>");
      if (json_array_size(iv) == 2) {
        b_puts(b, "[");
        b_num(b, json_number_value(json_array_get(iv, 0)), "%.4g");
        b_puts(b, ", ");
        b_num(b, json_number_value(json_array_get(iv, 1)), "%.4g");
        b_puts(b, "]");
      }
      b_puts(b, "</td></tr>");
    }
  }
  b_puts(b, "</tbody></table>");
  size_t i;
  json_t *wn;
  json_array_foreach(json_object_get(fit, "warnings"), i, wn) {
    b_puts(b, "<p class=\"warn\">");
    b_esc(b, json_string_value(wn));
    b_puts(b, "</p>");
  }
  b_puts(b, "</div>");
}

/* "NAME = V [LO, HI]" of a fit's parameter or derived value (n/a when the
 * fit lacks it): the summary's numbers. */
static void b_fit_value(buf *b, const char *name, json_t *fit, const char *key) {
  json_t *v = fit_json_get(fit, key);
  json_t *ci = json_object_get(json_object_get(fit, "ci95"), key);
  b_esc(b, name);
  if (!json_is_number(v)) {
    b_puts(b, " = n/a");
    return;
  }
  b_puts(b, " = ");
  b_num(b, json_number_value(v), "%.4g");
  if (json_array_size(ci) == 2) {
    b_puts(b, " [");
    b_num(b, json_number_value(json_array_get(ci, 0)), "%.4g");
    b_puts(b, ", ");
    b_num(b, json_number_value(json_array_get(ci, 1)), "%.4g");
    b_puts(b, "]");
  }
}

/* " (every budget: V)": the full fit's value of key, for comparison. */
static void b_was(buf *b, json_t *fit, const char *key) {
  json_t *v = fit_json_get(fit, key);
  b_puts(b, " (every budget: ");
  if (json_is_number(v) && isfinite(json_number_value(v)))
    b_num(b, json_number_value(v), "%.4g");
  else
    b_puts(b, "n/a");
  b_puts(b, ")");
}

/* The study's result in sentences, what `scalesweep up --wait` prints at the
 * end: L(N, D) with E next to the corpus's truth, the compute-optimal
 * exponents both ways, the critical batch size both ways, the extrapolation
 * and stability checks. Everything from the fits' objects (refit.c). */
static void render_result(buf *b, json_t *fits) {
  json_t *ch = json_object_get(fits, "chinchilla"), *iso = json_object_get(fits, "isoflop"),
         *bat = json_object_get(fits, "batch");
  if (!ch && !iso && !bat)
    return;
  b_puts(b, "<div class=\"result\"><h3>The result <small>(95% bootstrap intervals)</small>"
            "</h3><ul>");
  if (ch) {
    b_puts(b, "<li>L(N, D) = E + A/N<sup>&alpha;</sup> + B/D<sup>&beta;</sup>: ");
    b_fit_value(b, "E", ch, "E");
    b_puts(b, " nats/token");
    json_t *corpus = json_object_get(ch, "corpus");
    if (json_is_object(corpus)) {
      b_puts(b, "; the corpus: entropy rate ");
      b_num(b, jnum(corpus, "entropy_rate"), "%.4f");
      b_puts(b, ", window floor ");
      b_num(b, jnum(corpus, "window_floor"), "%.4f");
      b_printf(b,
               " (the best loss on windows of %" JSON_INTEGER_FORMAT " tokens), E &minus; "
               "floor = ",
               jint(corpus, "seq_len"));
      b_num_na(b, jnum(json_object_get(ch, "params"), "E") - jnum(corpus, "window_floor"), "%+.4f");
    }
    b_puts(b, "; ");
    b_fit_value(b, "alpha", ch, "alpha");
    b_puts(b, ", ");
    b_fit_value(b, "beta", ch, "beta");
    b_printf(b, " (%" JSON_INTEGER_FORMAT " runs)</li>", jint(ch, "n_points"));
  }
  if (ch || iso) {
    b_puts(b, "<li>Compute-optimal N<sub>opt</sub>(C) &prop; C<sup>a</sup>, D<sub>opt</sub>(C) "
              "&prop; C<sup>b</sup>: ");
    if (ch) {
      b_puts(b, "from L(N, D) ");
      b_fit_value(b, "a", ch, "a");
      b_puts(b, ", ");
      b_fit_value(b, "b", ch, "b");
    }
    if (iso) {
      int nu, nb = fit_json_budgets(iso, &nu);
      b_puts(b, ch ? "; from the IsoFLOP minima " : "from the IsoFLOP minima ");
      b_fit_value(b, "a", iso, "a");
      b_puts(b, ", ");
      b_fit_value(b, "b", iso, "b");
      b_printf(b, " (%d of %d budgets with an interior minimum)", nu, nb);
    }
    b_puts(b, "</li>");
  }
  if (bat) {
    b_puts(b, "<li>Critical batch size (tokens): from the ladder ");
    const char *k;
    json_t *v;
    int any = 0;
    json_object_foreach(json_object_get(bat, "derived"), k, v) {
      if (strncmp(k, "B_crit(L=", 9))
        continue;
      if (any++)
        b_puts(b, ", ");
      b_fit_value(b, k, bat, k);
    }
    if (!any)
      b_puts(b, "n/a");
    b_puts(b, "; from the gradient noise scale ");
    b_fit_value(b, "B_noise", bat, "B_noise");
    b_puts(b, " (median over the ladder)</li>");
  }
  json_t *ex = json_object_get(ch, "extrapolation");
  if (json_is_object(ex)) {
    b_puts(b, "<li>Extrapolation: fitted without the largest budget (C = ");
    b_num(b, jnum(ex, "held_out_flops"), "%.3g");
    b_puts(b, "), L(N, D) predicts its runs' mean loss ");
    b_num(b, jnum(ex, "predicted_loss"), "%.4f");
    b_puts(b, "; measured ");
    b_num(b, jnum(ex, "measured_loss"), "%.4f");
    b_puts(b, " (mean relative error ");
    b_num(b, 100 * jnum(ex, "rel_err"), "%.2f");
    b_puts(b, "%)</li>");
  }
  json_t *wi = json_object_get(iso, "without_smallest_budget"),
         *wc = json_object_get(ch, "without_smallest_budget");
  if (json_is_object(wi) || json_is_object(wc)) {
    double c_iso = jnum(wi, "dropped_flops"), c_ch = jnum(wc, "dropped_flops");
    b_puts(b, "<li>Stability: fitted without the smallest budget (C = ");
    b_num(b, json_is_object(wi) ? c_iso : c_ch, "%.3g");
    b_puts(b, "): ");
    if (json_is_object(wi)) {
      b_puts(b, "from the IsoFLOP minima ");
      b_fit_value(b, "a", wi, "a");
      b_was(b, iso, "a");
    }
    if (json_is_object(wc)) {
      b_puts(b, json_is_object(wi) ? "; from L(N, D) " : "from L(N, D) ");
      if (json_is_object(wi) && c_ch != c_iso) { /* its smallest run is not an isoflop one */
        b_puts(b, "(without C = ");
        b_num(b, c_ch, "%.3g");
        b_puts(b, ") ");
      }
      static const char *const names[] = {"E", "alpha", "beta"};
      for (int i = 0; i < 3; i++) {
        b_puts(b, i ? ", " : "");
        b_fit_value(b, names[i], wc, names[i]);
        b_was(b, ch, names[i]);
      }
    }
    b_puts(b, "</li>");
  }
  b_puts(b, "</ul></div>");
}

/* A link to this sweep page with another status filter or offset. */
static void b_sweep_link(buf *b, int64_t id, const char *status, long long offset) {
  b_printf(b, "/sweeps/%" PRId64, id);
  const char *sep = "?";
  if (status) {
    b_printf(b, "%sstatus=%s", sep, status); /* a known status: nothing to escape */
    sep = "&amp;";
  }
  if (offset > 0)
    b_printf(b, "%soffset=%lld", sep, offset);
}

static void render_runs_table(buf *b, web_req *w, json_t *d) {
  json_t *runs = json_object_get(d, "runs");
  long long total = jint(d, "runs_total");
  b_puts(b, "<div class=\"scroll\"><table class=\"runs\" "
            "id=\"runs-table\"><thead><tr>");
  static const char *const heads[] = {"Run",           "Status",    "N",          "D (tokens)",
                                      "B (sequences)", "C (FLOPs)", "Final loss", "Attempt",
                                      "Worker",        "Duration",  NULL};
  for (int i = 0; heads[i]; i++)
    b_printf(b, "<th scope=\"col\">%s</th>", heads[i]);
  b_puts(b, "</tr></thead><tbody>");
  size_t i;
  json_t *r;
  json_array_foreach(runs, i, r) {
    b_printf(b,
             "<tr><td><a href=\"/runs/%" JSON_INTEGER_FORMAT "\">%" JSON_INTEGER_FORMAT
             "</a></td><td>",
             jint(r, "id"), jint(r, "id"));
    b_status(b, jstr(r, "status"));
    b_puts(b, "</td><td>");
    b_num(b, jnum(r, "nonembedding_params"), NULL);
    b_puts(b, "</td><td>");
    b_num(b, jnum(r, "tokens"), NULL);
    b_puts(b, "</td><td>");
    b_num(b, jnum(r, "batch_size"), "%.0f");
    b_puts(b, "</td><td>");
    b_num(b, jnum(r, "flops"), NULL);
    b_puts(b, "</td><td>");
    b_num(b, jnum(r, "final_val_loss"), "%.4f");
    b_printf(b, "</td><td>%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT "</td><td>",
             jint(r, "attempt"), jint(r, "max_attempts"));
    b_esc(b, jstr(r, "worker"));
    b_puts(b, "</td><td>");
    b_duration(b, jnum(r, "duration_s"));
    b_puts(b, "</td></tr>");
  }
  if (!json_array_size(runs))
    b_puts(b, "<tr><td colspan=\"10\" class=\"empty\">No runs.</td></tr>");
  b_puts(b, "</tbody></table></div>");
  long long shown = (long long)json_array_size(runs);
  long long first = shown ? (long long)w->offset + 1 : 0, last = (long long)w->offset + shown;
  b_printf(b,
           "<nav class=\"pager\" aria-label=\"run pages\"><span>Runs %lld\xe2\x80\x93%lld of %lld"
           "</span>",
           first, last, total);
  if (w->offset > 0) {
    b_puts(b, " <a rel=\"prev\" href=\"");
    long long prev = w->offset - RUNS_PER_PAGE;
    b_sweep_link(b, w->id, w->status, prev > 0 ? prev : 0);
    b_puts(b, "\">Previous</a>");
  }
  if (w->offset + shown < total) {
    b_puts(b, " <a rel=\"next\" href=\"");
    b_sweep_link(b, w->id, w->status, w->offset + RUNS_PER_PAGE);
    b_puts(b, "\">Next</a>");
  }
  b_puts(b, "</nav>");
}

static void render_sweep(buf *b, web_req *w, json_t *d) {
  json_t *sw = json_object_get(d, "sweep"), *c = json_object_get(d, "counts");
  b_puts(b, "<section id=\"summary\" aria-labelledby=\"h-sweep\"><h1 "
            "id=\"h-sweep\">");
  b_printf(b, "Sweep #%" PRId64 " <span class=\"name\">", w->id);
  b_esc(b, jstr(sw, "name"));
  b_puts(b, "</span></h1><p>");
  b_status(b, jstr(sw, "status"));
  b_puts(b, " \xc2\xb7 method ");
  b_esc(b, jstr(sw, "method"));
  b_puts(b, " \xc2\xb7 submitted ");
  b_esc(b, jstr(sw, "created_at"));
  b_puts(b, " UTC</p>");
  if (jstr(sw, "description")) {
    b_puts(b, "<p class=\"desc\">");
    b_esc(b, jstr(sw, "description"));
    b_puts(b, "</p>");
  }
  b_progress(b, "runs done", jnum(c, "done"), jnum(c, "total"), "runs", 1);
  b_progress(b, "compute spent", jnum(c, "flops_spent"), jnum(c, "flops_planned"), "PF-days",
             PF_DAY);
  b_puts(b, "<nav class=\"filters\" aria-label=\"runs by status\"><a href=\"");
  b_sweep_link(b, w->id, NULL, 0);
  b_printf(b, "\"%s>all %" JSON_INTEGER_FORMAT "</a>", w->status ? "" : " aria-current=\"page\"",
           jint(c, "total"));
  for (int i = 0; run_statuses[i]; i++) {
    b_puts(b, " <a href=\"");
    b_sweep_link(b, w->id, run_statuses[i], 0);
    b_printf(b, "\"%s>%s %" JSON_INTEGER_FORMAT "</a>",
             w->status == run_statuses[i] ? " aria-current=\"page\"" : "", run_statuses[i],
             jint(c, run_statuses[i]));
  }
  b_puts(b, "</nav><p class=\"needs-token\" hidden><button type=\"button\" id=\"cancel-sweep\">"
            "Cancel this sweep</button></p></section>\n");

  json_t *fits = json_object_get(d, "fits");
  b_puts(b, "<section id=\"fits\" aria-labelledby=\"h-fits\"><h2 "
            "id=\"h-fits\">Fits</h2>");
  if (!json_object_size(fits)) {
    b_puts(b, "<p class=\"empty\">No fit yet: the laws are fitted when enough runs have "
              "succeeded.</p>");
  } else {
    render_result(b, fits);
    const char *law;
    json_t *fit;
    json_object_foreach(fits, law, fit) render_fit_params(b, law, fit);
  }
  b_puts(b, "</section>\n");
  b_puts(b, "<section id=\"plots\" aria-labelledby=\"h-plots\"><h2 id=\"h-plots\">Plots</h2>"
            "<p class=\"js-only\">The plots need JavaScript.</p><div class=\"charts\">"
            "<figure id=\"chart-curves\" class=\"chart\"><figcaption>Loss curves (training "
            "and validation, log-log, colour by N) of the runs listed below</figcaption></figure>"
            "<figure id=\"chart-frontier\" class=\"chart\"><figcaption>Final loss against "
            "compute, with the fitted frontier</figcaption></figure>"
            "<figure id=\"chart-isoflop\" class=\"chart\"><figcaption>IsoFLOP profiles and "
            "their minima</figcaption></figure>"
            "<figure id=\"chart-nopt\" class=\"chart\"><figcaption>N_opt(C) and "
            "D_opt(C)</figcaption></figure>"
            "<figure id=\"chart-batch\" class=\"chart\"><figcaption>Critical batch size"
            "</figcaption></figure></div></section>\n");
  b_puts(b, "<section id=\"runs\" aria-labelledby=\"h-runs\"><h2 id=\"h-runs\">Runs</h2>"
            "<div id=\"runs-static\">");
  render_runs_table(b, w, d);
  b_puts(b, "</div></section>\n");
}

static const char sweep_sql[] =
    "SELECT json_build_object('sweep', (SELECT json_build_object('id', id, 'name', name, 'status', "
    "status, 'method', spec->>'method', 'description', spec->>'description', "
    "'created_at', " TS_SQL("created_at") ") FROM sweeps WHERE id = $1), "
                                          "'counts', (SELECT json_build_object('total', count(*), "
                                          "'done', count(*) FILTER (WHERE r.status IN "
                                          "('succeeded', 'failed', 'cancelled')), "
                                          "'queued', count(*) FILTER (WHERE r.status = 'queued'), "
                                          "'running', count(*) FILTER (WHERE r.status = "
                                          "'running'), "
                                          "'succeeded', count(*) FILTER (WHERE r.status = "
                                          "'succeeded'), "
                                          "'failed', count(*) FILTER (WHERE r.status = 'failed'), "
                                          "'cancelled', count(*) FILTER (WHERE r.status = "
                                          "'cancelled'), "
                                          "'flops_planned', coalesce(sum(r.flops), 0), "
                                          "'flops_spent', coalesce(sum(" SPENT_SQL
                                          "), 0)) FROM runs r WHERE r.sweep_id = $1), "
                                          "'fits', (SELECT coalesce(json_object_agg(law, params), "
                                          "'{}') FROM (SELECT DISTINCT ON "
                                          "(law) law, params FROM fits WHERE sweep_id = $1 ORDER "
                                          "BY law, created_at DESC) f), "
                                          "'runs_total', (SELECT count(*) FROM runs WHERE sweep_id "
                                          "= $1 AND ($2::run_status IS NULL OR status = $2)), "
                                          "'runs', (SELECT coalesce(json_agg(t), '[]') FROM "
                                          "(SELECT r.id, r.status, "
                                          "r.nonembedding_params, r.tokens, r.batch_size, r.flops, "
                                          "r.final_val_loss, r.attempt, "
                                          "r.max_attempts, wk.name AS worker, "
                                          "extract(epoch FROM coalesce(r.finished_at, now()) - "
                                          "r.started_at)::float8 AS duration_s "
                                          "FROM runs r LEFT JOIN workers wk ON wk.id = r.worker "
                                          "WHERE r.sweep_id = $1 "
                                          "AND ($2::run_status IS NULL OR r.status = $2) ORDER BY "
                                          "r.id LIMIT $4 OFFSET $3) t)) "
                                          "WHERE EXISTS (SELECT 1 FROM sweeps WHERE id = $1)";

/* ---- run
 * -----------------------------------------------------------------------------
 */

static void b_row(buf *b, const char *name) {
  b_puts(b, "<tr><th scope=\"row\">");
  b_puts(b, name);
  b_puts(b, "</th><td>");
}

/* The row of a run that reproduces run `of`: once both have finished, whether
 * its curve matches the original's exactly (SCHED__REPRODUCTION_SQL), as far
 * as both went when one was cancelled, else the largest difference and its
 * step. */
static void b_reproduction(buf *b, json_int_t of, json_t *rep) {
  b_row(b, "Reproduces");
  b_printf(b, "<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT "</a>", of,
           of);
  if (!json_is_object(rep)) {
    b_puts(b, "; the curves are compared when both runs have finished</td></tr>");
    return;
  }
  if (json_is_true(json_object_get(rep, "identical"))) {
    b_printf(b,
             ": <strong class=\"identical\">identical</strong>, every training and validation "
             "loss of %" JSON_INTEGER_FORMAT " steps and the final loss to the last bit</td></tr>",
             jint(rep, "steps_compared"));
    return;
  }
  const char *so = jstr(rep, "status_original"), *sr = jstr(rep, "status_reproduced");
  int cut_o = so && !strcmp(so, "cancelled"), cut_r = sr && !strcmp(sr, "cancelled");
  if ((cut_o || cut_r) && !jint(rep, "steps_compared")) {
    b_printf(b, ": not compared, %s was cancelled before it stored a step</td></tr>",
             cut_r ? "this run" : "the original");
    return;
  }
  if ((cut_o || cut_r) && json_is_true(json_object_get(rep, "identical_where_both"))) {
    /* a cancelled run stored a prefix of the curve: the prefix is what can match */
    b_printf(b,
             ": <strong class=\"identical\">identical as far as both went</strong>, every "
             "training and validation loss of the %" JSON_INTEGER_FORMAT " steps both stored",
             jint(rep, "steps_compared"));
    if (cut_o)
      b_printf(b, "; the original was cancelled after %" JSON_INTEGER_FORMAT " steps",
               jint(rep, "steps_original"));
    if (cut_r)
      b_printf(b, "; this run was cancelled after %" JSON_INTEGER_FORMAT " steps",
               jint(rep, "steps_reproduced"));
    b_puts(b, "</td></tr>");
    return;
  }
  b_puts(b, ": <strong class=\"flag\">differs</strong>, largest difference ");
  b_num_na(b, jnum(rep, "max_abs_diff"), "%.3g");
  b_printf(b,
           " at step %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT
           " steps compared; %" JSON_INTEGER_FORMAT
           " stored for the original, %" JSON_INTEGER_FORMAT " for this run); final loss ",
           jint(rep, "at_step"), jint(rep, "steps_compared"), jint(rep, "steps_original"),
           jint(rep, "steps_reproduced"));
  b_num_na(b, jnum(rep, "final_val_loss_original"), "%.6f");
  b_puts(b, " then, ");
  b_num_na(b, jnum(rep, "final_val_loss_reproduced"), "%.6f");
  b_puts(b, " now</td></tr>");
}
static void render_run(buf *b, web_req *w, json_t *r) {
  json_int_t sweep = jint(r, "sweep_id");
  b_printf(b,
           "<section id=\"summary\" aria-labelledby=\"h-run\"><h1 "
           "id=\"h-run\">Run #%" PRId64 "</h1><p>of <a href=\"/sweeps/%" JSON_INTEGER_FORMAT
           "\">sweep #%" JSON_INTEGER_FORMAT " <span class=\"name\">",
           w->id, sweep, sweep);
  b_esc(b, jstr(r, "sweep"));
  b_puts(b, "</span></a> \xc2\xb7 ");
  b_status(b, jstr(r, "status"));
  b_puts(b, "</p><table class=\"kv\"><tbody>");
  b_row(b, "Attempt");
  b_printf(b, "%" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT "</td></tr>", jint(r, "attempt"),
           jint(r, "max_attempts"));
  b_row(b, "Worker");
  b_esc(b, jstr(r, "worker"));
  b_puts(b, "</td></tr>");
  b_row(b, "N (non-embedding)");
  b_num(b, jnum(r, "nonembedding_params"), "%.4g");
  b_puts(b, "</td></tr>");
  b_row(b, "Parameters");
  b_num(b, jnum(r, "params"), "%.4g");
  b_puts(b, "</td></tr>");
  b_row(b, "D (tokens)");
  b_num(b, jnum(r, "tokens"), "%.4g");
  b_puts(b, "</td></tr>");
  b_row(b, "B (sequences)");
  b_num(b, jnum(r, "batch_size"), "%.0f");
  b_puts(b, "</td></tr>");
  b_row(b, "C (FLOPs)");
  b_num(b, jnum(r, "flops"), "%.4g");
  b_puts(b, "</td></tr>");
  b_row(b, "Final validation loss");
  b_num(b, jnum(r, "final_val_loss"), "%.6f");
  b_puts(b, "</td></tr>");
  b_row(b, "Started (UTC)");
  b_esc(b, jstr(r, "started_at"));
  b_puts(b, "</td></tr>");
  b_row(b, "Ended (UTC)");
  b_esc(b, jstr(r, "finished_at"));
  b_puts(b, "</td></tr>");
  b_row(b, "Duration");
  b_duration(b, jnum(r, "duration_s"));
  b_puts(b, "</td></tr>");
  json_t *pred = json_object_get(r, "prediction");
  const char *status = jstr(r, "status");
  if (json_is_object(pred) && status && !strcmp(status, "running")) {
    /* predict.c: the final loss from the curve so far, against the fit */
    b_row(b, "Predicted final loss");
    b_num(b, jnum(pred, "predicted"), "%.4f");
    b_puts(b, " (95% ");
    b_num(b, jnum(pred, "lo"), "%.4f");
    b_puts(b, " to ");
    b_num(b, jnum(pred, "hi"), "%.4f");
    b_printf(b, "; from %" JSON_INTEGER_FORMAT " evaluations to step %" JSON_INTEGER_FORMAT ")",
             jint(pred, "evals"), jint(pred, "at_step"));
    if (json_is_number(json_object_get(pred, "surface"))) {
      b_puts(b, "; the sweep's fit says ");
      b_num(b, jnum(pred, "surface"), "%.4f");
    }
    if (json_is_true(json_object_get(pred, "flagged")))
      b_puts(b, " <strong class=\"flag\">far off the fit: worth a look</strong>");
    b_puts(b, "</td></tr>");
  }
  if (jint(r, "reproduces"))
    b_reproduction(b, jint(r, "reproduces"), json_object_get(r, "reproduction"));
  json_t *by = json_object_get(r, "reproduced_by");
  if (json_array_size(by) > 0) {
    b_row(b, "Reproduced by");
    size_t i;
    json_t *x;
    json_array_foreach(by, i, x) {
      b_printf(b, "%s<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT "</a> (",
               i ? ", " : "", jint(x, "id"), jint(x, "id"));
      b_esc(b, jstr(x, "status"));
      b_puts(b, ")");
    }
    b_puts(b, "</td></tr>");
  }
  b_row(b, "Config hash");
  b_puts(b, "<code>");
  b_esc(b, jstr(r, "config_hash"));
  b_puts(b, "</code></td></tr>");
  b_row(b, "Code version");
  b_esc(b, jstr(r, "code_version"));
  b_puts(b, "</td></tr></tbody></table></section>\n");

  if (jstr(r, "error") || jstr(r, "log_tail")) {
    b_puts(b, "<section id=\"failure\" aria-labelledby=\"h-failure\"><h2 id=\"h-failure\">"
              "What went wrong</h2>");
    if (jstr(r, "error")) {
      b_puts(b, "<p class=\"err\">");
      b_esc(b, jstr(r, "error"));
      b_puts(b, "</p>");
    }
    if (jstr(r, "log_tail") && *jstr(r, "log_tail")) {
      b_puts(b, "<h3>Log tail</h3><pre class=\"log\" tabindex=\"0\">");
      b_esc(b, jstr(r, "log_tail"));
      b_puts(b, "</pre>");
    }
    b_puts(b, "</section>\n");
  }

  b_puts(b, "<section id=\"curves\" aria-labelledby=\"h-curves\"><h2 id=\"h-curves\">Curves"
            "</h2><p class=\"js-only\">The curves need JavaScript; the numbers are at "
            "<a href=\"");
  b_printf(b, "/api/runs/%" PRId64 "\">/api/runs/%" PRId64 "</a>.</p>", w->id, w->id);
  b_puts(b, "<div class=\"charts\"><figure id=\"chart-run\" class=\"chart\"><figcaption>Training "
            "and validation loss (log-log)</figcaption></figure></div></section>\n");

  b_printf(b,
           "<section id=\"reproduce\" aria-labelledby=\"h-reproduce\"><h2 id=\"h-reproduce\">"
           "Reproduce</h2><p>Through the scheduler (a new run of the same config):</p>"
           "<pre><code>scalesweep reproduce %" PRId64 "</code></pre>"
           "<p>Alone, on any machine (<a href=\"/runs/%" PRId64 "/config.json\" download>the "
           "resolved config</a>):</p><pre><code>scalesweep train --config "
           "run-%" PRId64 ".json</code></pre>"
           "<p class=\"needs-token\" hidden><button type=\"button\" id=\"reproduce-run\">"
           "Reproduce this run</button> <button type=\"button\" id=\"cancel-run\">Cancel "
           "this run</button></p></section>\n",
           w->id, w->id, w->id);

  b_puts(b, "<section id=\"config\" aria-labelledby=\"h-config\"><h2 id=\"h-config\">Resolved "
            "config</h2><pre class=\"config\" tabindex=\"0\">");
  char *cfg = json_dumps(json_object_get(r, "config"), JSON_INDENT(2) | JSON_SORT_KEYS);
  b_esc(b, cfg ? cfg : "");
  free(cfg);
  b_puts(b, "</pre></section>\n");
}

static const char run_sql[] =
    "SELECT json_build_object('id', r.id, 'sweep_id', r.sweep_id, 'sweep', sw.name, "
    "'status', r.status, 'attempt', r.attempt, 'max_attempts', r.max_attempts, "
    "'worker', wk.name, 'params', r.params, 'nonembedding_params', r.nonembedding_params, "
    "'tokens', r.tokens, 'batch_size', r.batch_size, 'flops', r.flops, "
    "'final_val_loss', r.final_val_loss, 'started_at', " TS_SQL(
        "r.started_at") ", "
                        "'finished_at', " TS_SQL(
                            "r.finished_at") ", 'duration_s', extract(epoch FROM "
                                             "coalesce(r.finished_at, now()) - "
                                             "r.started_at)::float8, 'reproduces', r.reproduces, "
                                             "'config_hash', r.config_hash, "
                                             "'code_version', r.code_version, "
                                             "'error', r.error, 'log_tail', "
                                             "r.log_tail, 'prediction', r.prediction, "
                                             "'reproduction', " SCHED__REPRODUCTION_SQL ", "
                                             "'reproduced_by', (SELECT json_agg(json_build_"
                                             "object('id', x.id, 'status', x.status) ORDER BY "
                                             "x.id) FROM runs x WHERE x.reproduces = r.id), "
                                             "'config', r.config) "
                                             "FROM runs r JOIN sweeps sw ON "
                                             "sw.id = r.sweep_id LEFT JOIN "
                                             "workers wk ON wk.id = r.worker "
                                             "WHERE r.id = $1";

/* ---- pages: query, then render
 * --------------------------------------------------------- */

static void on_page_row(void *ud, int status, PGresult *res, const char *errmsg) {
  web_req *w = ud;
  if (status == SS_ECONN) {
    respond_message(w, 503, "Database unavailable", "The database is unavailable; try again.");
    return;
  }
  if (status != 0) {
    respond_message(w, 500, "Error", errmsg ? errmsg : "query failed");
    return;
  }
  if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
    respond_message(w, 404, "Not found", w->kind == PAGE_SWEEP ? "No such sweep." : "No such run.");
    return;
  }
  json_error_t je;
  /* jsonb writes 1e19 FLOPs as a 20-digit integer: reals, not Jansson's ints */
  json_t *d = json_loads(PQgetvalue(res, 0, 0), JSON_DECODE_INT_AS_REAL, &je);
  if (!d) {
    respond_message(w, 500, "Error", je.text);
    return;
  }
  buf b = {0};
  char title[96];
  switch (w->kind) {
  case PAGE_OVERVIEW:
    page_start(&b, w->s, "overview", 0, "Status");
    render_overview(&b, w->s, d);
    break;
  case PAGE_SWEEP:
    snprintf(title, sizeof title, "Sweep %" PRId64 " %.60s", w->id,
             jstr(json_object_get(d, "sweep"), "name") ? jstr(json_object_get(d, "sweep"), "name")
                                                       : "");
    page_start(&b, w->s, "sweep", w->id, title);
    render_sweep(&b, w, d);
    break;
  case PAGE_RUN:
    snprintf(title, sizeof title, "Run %" PRId64, w->id);
    page_start(&b, w->s, "run", w->id, title);
    render_run(&b, w, d);
    break;
  case PAGE_CONFIG: {
    char *text = json_dumps(json_object_get(d, "config"), JSON_INDENT(2) | JSON_SORT_KEYS);
    char headers[1200];
    snprintf(headers, sizeof headers,
             "%sCache-Control: no-store\r\n"
             "Content-Disposition: attachment; filename=\"run-%" PRId64 ".json\"\r\n",
             SECURITY_HEADERS, w->id);
    if (text)
      http_respond(w->r, 200, "application/json", text, strlen(text), headers);
    else
      http_respond_error(w->r, 500, "out of memory", NULL);
    free(text);
    json_decref(d);
    return;
  }
  }
  page_end(&b);
  json_decref(d);
  respond_page(w, 200, &b);
}

/* The page shell without data, for a reader without the token when reads
 * are closed: the script fetches the page again with the token. */
static void respond_shell(web_req *w) {
  buf b = {0};
  static const char *const names[] = {"overview", "sweep", "run", "run"};
  page_start(&b, w->s, names[w->kind], w->id, "Status");
  b_puts(&b, "<section id=\"summary\"><h1>Reads need the API token</h1><p>This scheduler "
             "was started with <code>--closed-reads</code>: enter the API token above "
             "(JavaScript needed).</p></section>\n");
  page_end(&b);
  respond_page(w, 401, &b);
}

static void page(web_req *w) {
  sched *s = w->s;
  if (!s->o.open_reads && !has_token(s, w->r)) {
    if (w->kind == PAGE_CONFIG)
      http_respond_error(w->r, 401, "reads need the API token (Authorization: Bearer ...)", NULL);
    else
      respond_shell(w);
    return;
  }
  if (!db_ready(s->db)) {
    respond_message(w, 503, "Database unavailable", "The database is unavailable; try again.");
    return;
  }
  char id[32], off[32], lim[16];
  snprintf(id, sizeof id, "%" PRId64, w->id);
  snprintf(off, sizeof off, "%" PRId64, w->offset);
  snprintf(lim, sizeof lim, "%d", RUNS_PER_PAGE);
  switch (w->kind) {
  case PAGE_OVERVIEW:
    db_query(s->db, overview_sql, 0, NULL, on_page_row, w);
    break;
  case PAGE_SWEEP: {
    const char *p[4] = {id, w->status, off, lim};
    db_query(s->db, sweep_sql, 4, p, on_page_row, w);
    break;
  }
  case PAGE_RUN:
  case PAGE_CONFIG: {
    const char *p[1] = {id};
    db_query(s->db, run_sql, 1, p, on_page_row, w);
    break;
  }
  }
}

/* ---- the page's JSON
 * ------------------------------------------------------------------ */

static void on_json(void *ud, int status, PGresult *res, const char *errmsg) {
  http_request *r = ud;
  if (status == SS_ECONN)
    http_respond_error(r, 503, "database unavailable; try again", NULL);
  else if (status != 0)
    http_respond_error(r, 500, errmsg, NULL);
  else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0))
    http_respond_error(r, 404, "no such object", NULL);
  else
    http_respond_json(r, 200, PQgetvalue(res, 0, 0));
}

/* Curves sampled on the server: per run, up to $2 + 1 steps spaced evenly in
 * log(step) (what log-log axes show), each found by an index seek, so the
 * cost does not grow with the curve's length; evaluations likewise (the
 * metrics_evals index). The last step is always included. Runs: those of
 * sweep $1 (id order, $4 of them from offset $5) or the ids in $3. */
static const char curves_sql[] =
    "SELECT coalesce(json_agg(json_build_object('run_id', mx.id, 'status', mx.status, "
    "'nonembedding_params', mx.n, 'steps', mx.smax, 'tokens', c.tokens, 'train_loss', "
    "c.loss, 'val_tokens', v.tokens, 'val_loss', v.loss) ORDER BY mx.id), '[]') "
    "FROM (SELECT r.id, r.status, r.nonembedding_params AS n, "
    "(SELECT max(m.step) FROM metrics m WHERE m.run_id = r.id) AS smax FROM runs r "
    "WHERE ($1::bigint IS NULL OR r.sweep_id = $1) AND ($3::bigint[] IS NULL OR r.id = ANY($3)) "
    "ORDER BY r.id LIMIT $4 OFFSET $5) mx "
    "CROSS JOIN LATERAL (SELECT array_agg(p.tokens ORDER BY p.step) AS tokens, "
    "array_agg(p.train_loss ORDER BY p.step) AS loss FROM (SELECT DISTINCT q.* "
    "FROM generate_series(0, $2::int) g CROSS JOIN LATERAL (SELECT m.step, m.tokens, "
    "m.train_loss FROM metrics m WHERE m.run_id = mx.id AND m.train_loss IS NOT NULL AND "
    "m.step >= ceil(exp(ln(greatest(mx.smax, 1)) * g::float8 / $2::int) - 1e-6) "
    "ORDER BY m.step LIMIT 1) q) p) c "
    "CROSS JOIN LATERAL (SELECT array_agg(p.tokens ORDER BY p.step) AS tokens, "
    "array_agg(p.val_loss ORDER BY p.step) AS loss FROM (SELECT DISTINCT q.* "
    "FROM generate_series(0, $2::int) g CROSS JOIN LATERAL (SELECT m.step, m.tokens, "
    "m.val_loss FROM metrics m WHERE m.run_id = mx.id AND m.val_loss IS NOT NULL AND "
    "m.step >= ceil(exp(ln(greatest(mx.smax, 1)) * g::float8 / $2::int) - 1e-6) "
    "ORDER BY m.step LIMIT 1) q) p) v";

/* "1,2,3" -> "{1,2,3}" (request memory); NULL when malformed or too long */
static const char *id_array(http_request *r, const char *list, int max) {
  size_t n = strlen(list);
  if (!n || n > (size_t)max * 21)
    return NULL;
  int count = 1;
  for (const char *p = list; *p; p++) {
    if (*p == ',') {
      if (p == list || !p[1] || p[1] == ',')
        return NULL;
      count++;
    } else if (*p < '0' || *p > '9') {
      return NULL;
    }
  }
  if (count > max)
    return NULL;
  char *out = http_alloc(r, n + 3);
  if (!out)
    return NULL;
  snprintf(out, n + 3, "{%s}", list);
  return out;
}

static void get_curves(sched *s, http_request *r, int64_t sweep_id, int64_t run_id) {
  long long points = query_count(r, "points", CURVE_POINTS, CURVE_POINTS_MAX);
  long long limit = query_count(r, "limit", CURVE_RUNS, CURVE_RUNS_MAX);
  long long offset = query_count(r, "offset", 0, INT32_MAX);
  if (points < 1) {
    http_respond_error(r, 400, "query parameter points: expected an integer in [1, 2000]",
                       "points");
    return;
  }
  if (limit < 0 || offset < 0) {
    http_respond_error(r, 400,
                       "query parameters limit and offset: expected integers in "
                       "[0, 1000] and [0, 2^31)",
                       limit < 0 ? "limit" : "offset");
    return;
  }
  const char *ids = NULL, *list;
  char one[32];
  int has_list = http_query_param(r, "runs", &list);
  if (run_id) {
    snprintf(one, sizeof one, "{%" PRId64 "}", run_id);
    ids = one;
  } else if (has_list) {
    ids = has_list > 0 ? id_array(r, list, CURVE_RUNS_MAX) : NULL;
    if (!ids) {
      http_respond_error(r, 400,
                         "query parameter runs: expected up to 1000 run ids, "
                         "comma-separated",
                         "runs");
      return;
    }
  }
  char sid[32], pts[24], lim[24], off[24];
  snprintf(sid, sizeof sid, "%" PRId64, sweep_id);
  snprintf(pts, sizeof pts, "%lld", points);
  snprintf(lim, sizeof lim, "%lld", limit);
  snprintf(off, sizeof off, "%lld", offset);
  const char *p[5] = {sweep_id ? sid : NULL, pts, ids, lim, off};
  db_query(s->db, curves_sql, 5, p, on_json, r);
}

/* A sweep's succeeded runs as columns: what the fit plots draw. */
static void get_points(sched *s, http_request *r, int64_t sweep_id) {
  char sid[32];
  snprintf(sid, sizeof sid, "%" PRId64, sweep_id);
  const char *p[1] = {sid};
  db_query(s->db,
           "SELECT json_build_object('run_id', coalesce(json_agg(id ORDER BY id), '[]'), "
           "'nonembedding_params', coalesce(json_agg(nonembedding_params ORDER BY id), '[]'), "
           "'tokens', coalesce(json_agg(tokens ORDER BY id), '[]'), "
           "'flops', coalesce(json_agg(flops ORDER BY id), '[]'), "
           "'batch_size', coalesce(json_agg(batch_size ORDER BY id), '[]'), "
           "'final_val_loss', coalesce(json_agg(final_val_loss ORDER BY id), '[]'), "
           "'part', coalesce(json_agg(part ORDER BY id), '[]')) "
           "FROM runs WHERE sweep_id = $1 AND status = 'succeeded' AND final_val_loss > 0 "
           "AND reproduces IS NULL "
           "AND EXISTS (SELECT 1 FROM sweeps WHERE id = $1)",
           1, p, on_json, r);
}

/* The page's JSON under /api/; 0: not the page's (the API answers). */
static int web_api(sched *s, http_request *r, const char *path) {
  int64_t id;
  const char *rest;
  int sweep = 0, run = 0, points = 0;
  if (path_id(path, "/api/sweeps/", &id, &rest)) {
    sweep = !strcmp(rest, "/curves");
    points = !strcmp(rest, "/points");
  } else if (path_id(path, "/api/runs/", &id, &rest)) {
    run = !strcmp(rest, "/curves");
  }
  if (!sweep && !run && !points)
    return 0;
  const char *m = http_method(r);
  if (strcmp(m, "GET") && strcmp(m, "HEAD"))
    http_respond_error(r, 405, "method not allowed: use GET", NULL);
  else if (!s->o.open_reads && !has_token(s, r))
    http_respond_error(r, 401, "reads need the API token (Authorization: Bearer ...)", NULL);
  else if (!db_ready(s->db))
    http_respond_error(r, 503, "database unavailable; try again", NULL);
  else if (points)
    get_points(s, r, id);
  else
    get_curves(s, r, sweep ? id : 0, run ? id : 0);
  return 1;
}

/* ---- routing
 * ------------------------------------------------------------------------- */

int sched__web(sched *s, http_request *r) {
  const char *path = http_path(r);
  if (!strcmp(path, "/metrics") || !strcmp(path, "/healthz"))
    return 0;
  if (!strncmp(path, "/api/", 5))
    return web_api(s, r, path);

  const char *m = http_method(r);
  web_req *w = http_alloc(r, sizeof *w);
  if (!w) {
    http_respond_error(r, 500, "out of memory", NULL);
    return 1;
  }
  memset(w, 0, sizeof *w);
  w->s = s;
  w->r = r;
  if (strcmp(m, "GET") && strcmp(m, "HEAD")) {
    http_respond(r, 405, "text/plain; charset=utf-8", "method not allowed: use GET\n", 28,
                 SECURITY_HEADERS "Allow: GET, HEAD\r\n");
    return 1;
  }
  if (!strncmp(path, "/static/", 8)) {
    serve_asset(r, path + 8);
    return 1;
  }
  const char *rest;
  if (!strcmp(path, "/")) {
    w->kind = PAGE_OVERVIEW;
  } else if (path_id(path, "/sweeps/", &w->id, &rest) && !*rest) {
    w->kind = PAGE_SWEEP;
    long long off = query_count(r, "offset", 0, INT32_MAX);
    const char *st;
    int has_st = http_query_param(r, "status", &st);
    w->status = has_st > 0 ? known_status(st) : NULL;
    if (off < 0 || has_st < 0 || (has_st > 0 && *st && !w->status)) {
      respond_message(w, 400, "Bad request",
                      "offset is a whole number; status is queued, running, succeeded, failed "
                      "or cancelled.");
      return 1;
    }
    w->offset = off;
  } else if (path_id(path, "/runs/", &w->id, &rest) && (!*rest || !strcmp(rest, "/config.json"))) {
    w->kind = *rest ? PAGE_CONFIG : PAGE_RUN;
  } else {
    respond_message(w, 404, "Not found", "There is no such page.");
    return 1;
  }
  page(w);
  return 1;
}

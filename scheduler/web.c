/* The status page (docs/design.md#the-status-page): server-rendered HTML for
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/audit.h"
#include "scheduler/route.h"
#include "scheduler/web.h"
#include "store/pages.h"

/* ---- pages: query, then render
 * --------------------------------------------------------- */

/* A failed read, or a missing sweep or run, answered as a page: 1 when
 * answered. */
static int page_failed(sched__web_req *w, int status, int found, const char *errmsg) {
  const char *msg;
  int code = sched__route_read_status(status, found ? "" : NULL, errmsg, &msg);
  if (code == 503) {
    if (status == SS_ETIMEOUT)
      sched__respond_message(w, 503, "Too slow", msg);
    else
      sched__respond_message(w, 503, "Database unavailable",
                             "The database is unavailable; try again.");
  } else if (code == 500) {
    sched__respond_message(w, 500, "Error", msg);
  } else if (code == 404) {
    sched__respond_message(w, 404, "Not found",
                           w->kind == SCHED__PAGE_SWEEP ? "No such sweep." : "No such run.");
  }
  return code != 0;
}

/* The overview (o) or a sweep's page (p) as HTML. */
static void respond_rendered(sched__web_req *w, const store_overview *o,
                             const store_sweep_page *p) {
  sched__buf b = {0};
  char title[96] = "Status";
  if (p)
    snprintf(title, sizeof title, "Sweep %" PRId64 " %.60s", w->id, p->sweep.name);
  sched__page_start(&b, w->s, p ? "sweep" : "overview", p ? w->id : 0, title);
  if (p)
    sched__web_sweep(&b, w, p);
  else
    sched__web_overview(&b, w->s, o);
  sched__page_end(&b);
  sched__respond_page(w, 200, &b);
}

static void on_overview(void *ud, int status, const store_overview *o, const char *errmsg) {
  if (!page_failed(ud, status, 1, errmsg))
    respond_rendered(ud, o, NULL);
}

static void on_sweep_page(void *ud, int status, const store_sweep_page *p, const char *errmsg) {
  if (!page_failed(ud, status, p != NULL, errmsg))
    respond_rendered(ud, NULL, p);
}

/* The run page and its config.json, from the store's rows. */
static void on_run_page(void *ud, int status, const store_run_page *p, const char *errmsg) {
  sched__web_req *w = ud;
  if (page_failed(w, status, p != NULL, errmsg))
    return;
  json_error_t je;
  /* jsonb writes 1e19 FLOPs as a 20-digit integer: reals, not Jansson's ints */
  json_t *config = json_loads(p->config, JSON_DECODE_INT_AS_REAL, &je);
  if (!config) {
    sched__respond_message(w, 500, "Error", je.text);
    return;
  }
  if (w->kind == SCHED__PAGE_CONFIG) {
    char *text = json_dumps(config, JSON_INDENT(2) | JSON_SORT_KEYS);
    char headers[1200];
    snprintf(headers, sizeof headers,
             "%sCache-Control: no-store\r\n"
             "Content-Disposition: attachment; filename=\"run-%" PRId64 ".json\"\r\n",
             SCHED__WEB_SECURITY_HEADERS, w->id);
    if (text)
      http_respond(w->r, 200, "application/json", text, strlen(text), headers);
    else
      http_respond_error(w->r, 500, "out of memory", NULL);
    free(text);
    json_decref(config);
    return;
  }
  sched__buf b = {0};
  char title[96];
  snprintf(title, sizeof title, "Run %" PRId64, w->id);
  sched__page_start(&b, w->s, "run", w->id, title);
  sched__web_run(&b, w, p, config);
  sched__page_end(&b);
  json_decref(config);
  sched__respond_page(w, 200, &b);
}

/* The page shell without data, for a reader without the token when reads
 * are closed: the script fetches the page again with the token. */
static void respond_shell(sched__web_req *w) {
  sched__buf b = {0};
  static const char *const names[] = {"overview", "sweep", "run", "run"};
  sched__page_start(&b, w->s, names[w->kind], w->id, "Status");
  sched__b_puts(&b, "<section id=\"summary\"><h1>Reads need the API token</h1><p>This scheduler "
                    "was started with <code>--closed-reads</code>: enter the API token above "
                    "(JavaScript needed).</p></section>\n");
  sched__page_end(&b);
  sched__respond_page(w, 401, &b);
}

static void page(sched__web_req *w) {
  sched *s = w->s;
  if (!sched__auth_may_read(s, w->r)) {
    if (w->kind == SCHED__PAGE_CONFIG)
      http_respond_error(w->r, 401, "reads need the API token (Authorization: Bearer ...)", NULL);
    else
      respond_shell(w);
    return;
  }
  if (!db_pool_ready(s->reads)) {
    sched__respond_message(w, 503, "Database unavailable",
                           "The database is unavailable; try again.");
    return;
  }
  switch (w->kind) {
  case SCHED__PAGE_OVERVIEW:
    store_pages_overview(db_pool_get(s->reads, 0), on_overview, w);
    break;
  case SCHED__PAGE_SWEEP:
    store_pages_sweep_page(db_pool_get(s->reads, 0), w->id, w->status, w->offset,
                           SCHED__WEB_RUNS_PER_PAGE, on_sweep_page, w);
    break;
  case SCHED__PAGE_RUN:
  case SCHED__PAGE_CONFIG:
    store_pages_run_page(db_pool_get(s->reads, 1), w->id, on_run_page, w);
    break;
  }
}

/* ---- routing
 * ------------------------------------------------------------------------- */

int sched__web(sched *s, http_request *r) {
  const char *path = http_path(r);
  if (!strcmp(path, "/metrics") || !strcmp(path, "/healthz"))
    return 0;
  if (!strncmp(path, "/api/", 5))
    return sched__web_api(s, r, path);

  const char *m = http_method(r);
  sched__web_req *w = http_alloc(r, sizeof *w);
  if (!w) {
    http_respond_error(r, 500, "out of memory", NULL);
    return 1;
  }
  memset(w, 0, sizeof *w);
  w->s = s;
  w->r = r;
  if (strcmp(m, "GET") && strcmp(m, "HEAD")) {
    http_respond(r, 405, "text/plain; charset=utf-8", "method not allowed: use GET\n", 28,
                 SCHED__WEB_SECURITY_HEADERS "Allow: GET, HEAD\r\n");
    return 1;
  }
  if (!strncmp(path, "/static/", 8)) {
    sched__web_serve_asset(r, path + 8);
    return 1;
  }
  if (!strcmp(path, "/audit")) /* a shell: the script reads /api/audit with the token */
    return sched__audit_page(s, r);
  const char *rest;
  if (!strcmp(path, "/")) {
    w->kind = SCHED__PAGE_OVERVIEW;
  } else if (sched__route_id(path, "/sweeps/", &w->id, &rest) && !*rest) {
    w->kind = SCHED__PAGE_SWEEP;
    long long off = sched__web_query_count(r, "offset", 0, INT32_MAX);
    const char *st;
    int has_st = http_query_param(r, "status", &st);
    w->status = has_st > 0 ? sched__route_status(st) : NULL;
    if (off < 0 || has_st < 0 || (has_st > 0 && *st && !w->status)) {
      sched__respond_message(
          w, 400, "Bad request",
          "offset is a whole number; status is queued, running, succeeded, failed "
          "or cancelled.");
      return 1;
    }
    w->offset = off;
  } else if (sched__route_id(path, "/runs/", &w->id, &rest) &&
             (!*rest || !strcmp(rest, "/config.json"))) {
    w->kind = *rest ? SCHED__PAGE_CONFIG : SCHED__PAGE_RUN;
  } else {
    sched__respond_message(w, 404, "Not found", "There is no such page.");
    return 1;
  }
  page(w);
  return 1;
}

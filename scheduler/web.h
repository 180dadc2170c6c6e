/* Inside the scheduler: the status page (docs/design.md#the-status-page),
 * split by concern: web.c routes and renders from one store read,
 * web_overview.c, web_sweep.c and web_run.c render the three pages,
 * web_json.c answers the page's JSON, web_frame.c holds the frame and the
 * cell formats, web_buf.c the text buffer and HTML escaping, web_asset.c the
 * embedded files. */
#ifndef SS_SCHEDULER_WEB_H
#define SS_SCHEDULER_WEB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"
#include "scheduler/internal.h"
#include "store/pages.h"

/* sched__web answers what is the page's (every path outside /api/ but
 * /metrics and /healthz, and the page's own JSON under /api/: curves, fit
 * points) and returns 1; 0 leaves the request to the API. */
int sched__web(sched *s, http_request *r);
/* text with & < > " ' replaced by their HTML character references (malloc;
 * NULL when out of memory): safe inside elements and quoted attributes */
char *sched__html_escape(const char *text);

/* The page's files, embedded at build time (scheduler/embed_web.cmake). */
typedef struct sched__asset {
  const char *name; /* served as /static/NAME */
  const char *type; /* Content-Type */
  const unsigned char *data;
  size_t len;
  const char *etag; /* quoted */
} sched__asset;
extern const sched__asset sched__assets[];
extern const int sched__nassets;
/* The asset named exactly name (no path is ever resolved), or NULL. */
const sched__asset *sched__asset_find(const char *name);
/* Answers GET /static/NAME: 200, 304 on a matching If-None-Match, or 404. */
void sched__web_serve_asset(http_request *r, const char *name);

#define SCHED__WEB_RUNS_PER_PAGE 100
#define SCHED__PF_DAY 8.64e19 /* FLOPs (SCIENCE.md) */

/* Every answer the page gets: scripts only from /static/, no inline code,
 * no framing, no sniffing. */
#define SCHED__WEB_SECURITY_HEADERS                                                    \
  "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; " \
  "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "    \
  "frame-ancestors 'none'\r\n"                                                         \
  "X-Content-Type-Options: nosniff\r\n"                                                \
  "X-Frame-Options: DENY\r\n"                                                          \
  "Referrer-Policy: no-referrer\r\n"

/* ---- web_buf.c: a growing string; after an allocation failure it stays
 * empty and oom is set (the page then answers 500). */
typedef struct sched__buf {
  char *p;
  size_t len, cap;
  int oom;
} sched__buf;
void sched__b_add(sched__buf *b, const char *s, size_t n);
void sched__b_puts(sched__buf *b, const char *s);
void sched__b_printf(sched__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Opens a page section: <section id="ID" aria-labelledby="h-ID"><h2
 * id="h-ID">TITLE</h2> (title is HTML, written as it is). */
void sched__b_section(sched__buf *b, const char *id, const char *title);
/* A table's head: open (the table's tag and what comes before the row),
 * then a column header for each of cols (NULL-terminated; HTML, written as
 * it is), then the body opened. */
void sched__b_thead(sched__buf *b, const char *open, const char *const *cols);
/* Text as HTML: the one place where values from runs and specs enter a page. */
void sched__b_esc(sched__buf *b, const char *s);

/* ---- a page request */
typedef enum {
  SCHED__PAGE_OVERVIEW,
  SCHED__PAGE_SWEEP,
  SCHED__PAGE_RUN,
  SCHED__PAGE_CONFIG
} sched__page_kind;

typedef struct sched__web_req {
  sched *s;
  http_request *r;
  sched__page_kind kind;
  int64_t id;
  int64_t offset;
  const char *status; /* run status filter of the sweep page (a sched__route_statuses entry) */
} sched__web_req;

/* ---- web_frame.c */
/* A non-negative integer query parameter (absent: dflt; bad: -1). */
long long sched__web_query_count(http_request *r, const char *name, long long dflt, long long max);
/* The page's head, header and <main>; page names the page for the script. */
void sched__page_start(sched__buf *b, sched *s, const char *page, int64_t id, const char *title);
void sched__page_end(sched__buf *b);
/* Sends b as HTML (500 when it ran out of memory) and frees it. */
void sched__respond_page(sched__web_req *w, int status, sched__buf *b);
/* A page of one heading and one sentence. */
void sched__respond_message(sched__web_req *w, int status, const char *title, const char *msg);
/* A document of the store (store/pages.h) as Jansson's value, its numbers
 * reals (jsonb writes 1e19 FLOPs as a 20-digit integer); NULL when doc is
 * NULL or not JSON. The caller json_decrefs it. */
json_t *sched__web_doc(const char *doc);
/* A member of a JSON object: a string or NULL, a number or NAN, an integer or 0. */
const char *sched__jstr(json_t *o, const char *k);
double sched__jnum(json_t *o, const char *k);
json_int_t sched__jint(json_t *o, const char *k);
/* a cell: "%.3g" (or fmt) of a number, "" when unknown */
void sched__b_num(sched__buf *b, double v, const char *fmt);
/* like sched__b_num, but "n/a" when v is unknown (a sentence needs a word there) */
void sched__b_num_na(sched__buf *b, double v, const char *fmt);
/* seconds as "12 s", "3.5 min" or "2.0 h" */
void sched__b_duration(sched__buf *b, double s);
/* a run's or sweep's status as a badge */
void sched__b_status(sched__buf *b, const char *st);
/* a progress element with its numbers beside it */
void sched__b_progress(sched__buf *b, const char *label, double done, double total,
                       const char *unit, double scale);

/* ---- the pages' bodies, from the store's rows and documents (store/pages.h) */
void sched__web_overview(sched__buf *b, sched *s, const store_overview *o);
void sched__web_sweep(sched__buf *b, sched__web_req *w, const store_sweep_page *p);
/* config: the run's document (p->config) as the page reads it */
void sched__web_run(sched__buf *b, sched__web_req *w, const store_run_page *p, json_t *config);

/* ---- web_json.c: the page's JSON under /api/; 0: not the page's (the API
 * answers). */
int sched__web_api(sched *s, http_request *r, const char *path);

#endif

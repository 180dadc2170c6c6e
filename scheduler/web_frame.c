/* The page frame and the formatting of cells (scheduler/web.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"
#include "scheduler/route.h"

long long sched__web_query_count(http_request *r, const char *name, long long dflt, long long max) {
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

void sched__page_start(sched__buf *b, sched *s, const char *page, int64_t id, const char *title) {
  sched__b_puts(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                   "<title>");
  sched__b_esc(b, title);
  sched__b_puts(b, " \xc2\xb7 scalesweep</title><link rel=\"icon\" href=\"data:,\">"
                   "<link rel=\"stylesheet\" href=\"/static/uPlot.min.css\">"
                   "<link rel=\"stylesheet\" href=\"/static/status.css\">"
                   "<script src=\"/static/uPlot.iife.min.js\" defer></script>"
                   "<script type=\"module\" src=\"/static/status.js\"></script></head>\n");
  sched__b_printf(b, "<body data-page=\"%s\" data-id=\"%" PRId64 "\" data-open-reads=\"%d\">\n",
                  page, id, s->o.open_reads ? 1 : 0);
  sched__b_puts(b,
                "<header class=\"top\"><nav aria-label=\"site\"><a href=\"/\" class=\"brand\">"
                "scalesweep</a></nav><form id=\"token-form\" class=\"token\" hidden>"
                "<label for=\"token\">API token</label>"
                "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" "
                "placeholder=\"to make changes\" size=\"18\"><button type=\"submit\">Use</button>"
                "<button type=\"button\" id=\"token-forget\" hidden>Forget</button></form>"
                "<span id=\"live\" class=\"live\" role=\"status\" aria-live=\"polite\">"
                "static page: live updates need JavaScript</span></header>\n<main>\n");
}

void sched__page_end(sched__buf *b) {
  sched__b_puts(b, "</main>\n<p id=\"notice\" class=\"notice\" role=\"alert\" hidden></p>\n"
                   "</body></html>\n");
}

void sched__respond_page(sched__web_req *w, int status, sched__buf *b) {
  static const char oom[] = "out of memory\n";
  char headers[1024];
  snprintf(headers, sizeof headers, "%sCache-Control: no-store\r\n", SCHED__WEB_SECURITY_HEADERS);
  if (b->oom)
    http_respond(w->r, 500, "text/plain; charset=utf-8", oom, sizeof oom - 1, headers);
  else
    http_respond(w->r, status, "text/html; charset=utf-8", b->p, b->len, headers);
  free(b->p);
}

void sched__respond_message(sched__web_req *w, int status, const char *title, const char *msg) {
  sched__buf b = {0};
  sched__page_start(&b, w->s, "message", 0, title);
  sched__b_puts(&b, "<h1>");
  sched__b_esc(&b, title);
  sched__b_puts(&b, "</h1><p>");
  sched__b_esc(&b, msg);
  sched__b_puts(&b, "</p>\n");
  sched__page_end(&b);
  sched__respond_page(w, status, &b);
}

/* ---- formatting
 * ---------------------------------------------------------------------- */

const char *sched__jstr(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

double sched__jnum(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

json_int_t sched__jint(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? json_integer_value(v)
                            : (json_is_real(v) ? (json_int_t)json_real_value(v) : 0);
}

/* a cell: "%.3g" (or fmt) of a number, "" when unknown */
void sched__b_num(sched__buf *b, double v, const char *fmt) {
  if (isfinite(v))
    sched__b_printf(b, fmt ? fmt : "%.3g", v);
}

/* like sched__b_num, but "n/a" when v is unknown (a sentence needs a word there) */
void sched__b_num_na(sched__buf *b, double v, const char *fmt) {
  if (isfinite(v))
    sched__b_printf(b, fmt, v);
  else
    sched__b_puts(b, "n/a");
}

void sched__b_duration(sched__buf *b, double s) {
  if (!isfinite(s) || s < 0)
    return;
  if (s < 120)
    sched__b_printf(b, "%.0f s", s);
  else if (s < 7200)
    sched__b_printf(b, "%.1f min", s / 60);
  else
    sched__b_printf(b, "%.1f h", s / 3600);
}

void sched__b_status(sched__buf *b, const char *st) {
  const char *k = sched__route_status(st);
  sched__b_printf(b, "<span class=\"st st-%s\">", k ? k : "other");
  sched__b_esc(b, st ? st : "?");
  sched__b_puts(b, "</span>");
}

/* runs: a progress element with its numbers beside it */
void sched__b_progress(sched__buf *b, const char *label, double done, double total,
                       const char *unit, double scale) {
  double d = isfinite(done) ? done / scale : 0, t = isfinite(total) ? total / scale : 0;
  sched__b_printf(b, "<div class=\"prog\"><progress max=\"%.6g\" value=\"%.6g\" aria-label=\"",
                  t > 0 ? t : 1, d);
  sched__b_esc(b, label);
  sched__b_printf(b, "\"></progress> <span>%.3g / %.3g %s</span></div>", d, t, unit);
}

json_t *sched__web_doc(const char *doc) {
  return doc ? json_loads(doc, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
}

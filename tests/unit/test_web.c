/* scheduler/web.c: the HTML escaping every page value goes through, and the
 * embedded asset table (exact names only: no path is ever resolved). The
 * pages themselves are tested in a browser (tests/browser). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "scheduler/web.h"

static int escapes_to(const char *in, const char *want) {
  char *got = sched__html_escape(in);
  int ok = got && !strcmp(got, want);
  if (!ok)
    fprintf(stderr, "escape(\"%s\") = \"%s\", expected \"%s\"\n", in, got ? got : "(null)", want);
  free(got);
  return ok;
}

int main(void) {
  CHECK(escapes_to("", ""));
  CHECK(escapes_to("plain text 1.5e+3", "plain text 1.5e+3"));
  CHECK(escapes_to("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"));
  CHECK(escapes_to("a & b", "a &amp; b"));
  CHECK(escapes_to("&amp;", "&amp;amp;")); /* escaped once more: shown as typed */
  CHECK(escapes_to("\"x\" onmouseover='y'", "&quot;x&quot; onmouseover=&#39;y&#39;"));
  CHECK(escapes_to("<<>>", "&lt;&lt;&gt;&gt;"));
  CHECK(escapes_to("\xc3\xa9t\xc3\xa9 \xe2\x86\x92", "\xc3\xa9t\xc3\xa9 \xe2\x86\x92"));
  CHECK(escapes_to("line\nnext", "line\nnext"));
  char *n = sched__html_escape(NULL);
  CHECK(n && !*n);
  free(n);
  /* a long value grows the buffer */
  size_t len = 100000;
  char *big = malloc(len + 1);
  memset(big, '<', len);
  big[len] = 0;
  char *e = sched__html_escape(big);
  CHECK(e && strlen(e) == 4 * len && !strncmp(e, "&lt;&lt;", 8));
  free(e);
  free(big);

  /* the assets: the page's own and uPlot's, with types and quoted ETags */
  static const char *const want[] = {"status.js",  "util.js",           "charts.js",     "runs.js",
                                     "status.css", "uPlot.iife.min.js", "uPlot.min.css", NULL};
  for (int i = 0; want[i]; i++) {
    const sched__asset *a = sched__asset_find(want[i]);
    CHECK(a != NULL);
    if (!a)
      continue;
    CHECK(a->len > 0 && a->data[a->len] == 0);
    CHECK(a->etag[0] == '"' && a->etag[strlen(a->etag) - 1] == '"');
    CHECK(strstr(a->type, strstr(want[i], ".css") ? "text/css" : "text/javascript") == a->type);
  }
  CHECK(sched__asset_find("../status.js") == NULL);
  CHECK(sched__asset_find("/status.js") == NULL);
  CHECK(sched__asset_find("") == NULL);
  CHECK(sched__asset_find("STATUS.JS") == NULL);
  CHECK(sched__asset_find("status.js/") == NULL);
  /* no page source refers to another host: the page works without internet */
  for (int i = 0; i < sched__nassets; i++) {
    const sched__asset *a = &sched__assets[i];
    if (strncmp(a->name, "uPlot", 5))
      CHECK(!strstr((const char *)a->data, "http://") &&
            !strstr((const char *)a->data, "https://"));
  }
  CHECK_DONE();
}

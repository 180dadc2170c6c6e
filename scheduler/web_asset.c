/* The embedded assets under /static/ (scheduler/web.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"

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

void sched__web_serve_asset(http_request *r, const char *name) {
  const sched__asset *a = sched__asset_find(name);
  if (!a) {
    http_respond(r, 404, "text/plain; charset=utf-8", "not found\n", 10,
                 SCHED__WEB_SECURITY_HEADERS);
    return;
  }
  /* names are not fingerprinted: revalidate each time, cheaply (304) */
  char headers[1024];
  snprintf(headers, sizeof headers, "%sETag: %s\r\nCache-Control: no-cache\r\n",
           SCHED__WEB_SECURITY_HEADERS, a->etag);
  if (etag_matches(http_header(r, "if-none-match"), a->etag))
    http_respond(r, 304, NULL, NULL, 0, headers);
  else
    http_respond(r, 200, a->type, (const char *)a->data, a->len, headers);
}

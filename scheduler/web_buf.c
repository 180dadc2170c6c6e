/* The page's text buffer and the HTML escaping every value goes through
 * (scheduler/web.h). */
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"

/* ---- text buffers
 * -------------------------------------------------------------------- */

/* A growing string; after an allocation failure it stays empty and oom is set.
 */

void sched__b_add(sched__buf *b, const char *s, size_t n) {
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

void sched__b_puts(sched__buf *b, const char *s) { sched__b_add(b, s, strlen(s)); }

void sched__b_thead(sched__buf *b, const char *open, const char *const *cols) {
  sched__b_puts(b, open);
  sched__b_puts(b, "<thead><tr>");
  for (int i = 0; cols[i]; i++)
    sched__b_printf(b, "<th scope=\"col\">%s</th>", cols[i]);
  sched__b_puts(b, "</tr></thead><tbody>");
}

void sched__b_printf(sched__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sched__b_printf(sched__buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof small) {
    sched__b_add(b, small, (size_t)n);
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
  sched__b_add(b, big, (size_t)n);
  free(big);
}

/* Text as HTML: the one place where values from runs and specs enter a page. */
void sched__b_esc(sched__buf *b, const char *s) {
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
    sched__b_add(b, run, (size_t)(s - run));
    sched__b_puts(b, ref);
    run = s + 1;
  }
  sched__b_add(b, run, (size_t)(s - run));
}

char *sched__html_escape(const char *text) {
  sched__buf b = {0};
  sched__b_add(&b, "", 0);
  sched__b_esc(&b, text);
  return b.oom ? NULL : b.p;
}

void sched__b_section(sched__buf *b, const char *id, const char *title) {
  sched__b_printf(b, "<section id=\"%s\" aria-labelledby=\"h-%s\"><h2 id=\"h-%s\">%s</h2>", id, id,
                  id, title);
}

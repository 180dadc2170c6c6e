/* The worker's log line and the UTF-8 cleaning of text it did not write. */
#include "worker/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void wrk__log(const char *fmt, ...) {
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ worker: ", ts.tv_nsec / 1000000);
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (k < 0)
    k = 0;
  n += (size_t)k < sizeof line - n - 1 ? (size_t)k : sizeof line - n - 2;
  line[n++] = '\n';
  fwrite(line, 1, n, stderr);
}

char *wrk__utf8_clean(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out)
    return NULL;
  size_t i = 0, o = 0;
  while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
    i++;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    int ok = len > 0 && i + len <= n && c != 0;
    for (size_t k = 1; ok && k < len; k++)
      ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
    if (ok && len > 1) {
      /* reject overlong forms, surrogates and code points past U+10FFFF */
      unsigned cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
      for (size_t k = 1; k < len; k++)
        cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3Fu);
      static const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok) {
      out[o++] = '?';
      i++;
      continue;
    }
    memcpy(out + o, s + i, len);
    o += len;
    i += len;
  }
  out[o] = '\0';
  return out;
}

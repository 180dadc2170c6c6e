/* Requests: their allocation, the request target (percent-decoded path,
 * raw query), the header index, query parameters and the accessors of
 * http.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/internal.h"

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

enum { DECODE_BAD = -1, DECODE_NUL = -2 };

/* Percent-decodes in[0..n) into out (n + 1 bytes), NUL-terminated; with
 * plus, '+' is a space (query strings). Returns 0, DECODE_BAD for a
 * malformed %XX or DECODE_NUL for %00. */
static int percent_decode(char *out, const char *in, size_t n, int plus) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (plus && in[i] == '+') {
      out[o++] = ' ';
      continue;
    }
    if (in[i] != '%') {
      out[o++] = in[i];
      continue;
    }
    int hi = i + 2 < n ? hexval((unsigned char)in[i + 1]) : -1;
    int lo = hi >= 0 ? hexval((unsigned char)in[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      return DECODE_BAD;
    if (hi == 0 && lo == 0)
      return DECODE_NUL;
    out[o++] = (char)(hi * 16 + lo);
    i += 2;
  }
  out[o] = '\0';
  return 0;
}

http_request *http__req_new(http_conn *c) {
  http_request *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->conn = c;
  r->start_ns = uv_hrtime();
  size_t n = strlen(c->peer) + 1;
  r->peer = http_alloc(r, n);
  memcpy(r->peer, c->peer, n);
  r->path = "/";
  r->query = "";
  r->method = "";
  return r;
}

void http__req_free(http_request *r) {
  if (!r)
    return;
  for (http_block *b = r->blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(r->head);
  free(r->body);
  free(r);
}

/* Splits the request target into the decoded path and the raw query.
 * Returns NULL or a message for a 400. */
static const char *req_set_target(http_request *r, const char *url) {
  const char *p = url;
  if (strncasecmp(p, "http://", 7) == 0 || strncasecmp(p, "https://", 8) == 0) {
    p = strstr(p, "//") + 2; /* absolute form: drop scheme and authority */
    p += strcspn(p, "/?#");
  }
  size_t plen = strcspn(p, "?#");
  if (p[plen] == '?') {
    const char *q = p + plen + 1;
    if (!(r->query = http__strndup(r, q, strcspn(q, "#"))))
      return "out of memory";
  }
  if (plen == 0)
    return NULL; /* path "/" */
  if (p[0] != '/' && !(plen == 1 && p[0] == '*'))
    return "request target must start with '/'";
  char *out = http_alloc(r, plen + 1);
  if (!out)
    return "out of memory";
  int rc = percent_decode(out, p, plen, 0);
  if (rc == DECODE_BAD)
    return "invalid percent-encoding in path";
  if (rc == DECODE_NUL)
    return "%00 in path";
  r->path = out;
  return NULL;
}

/* Trailing whitespace of header values, which llhttp keeps, is dropped. */
const char *http__req_index_head(http_request *r) {
  char *p = r->head, *end = r->head + r->head_len;
  const char *url = p;
  p += strlen(p) + 1;
  r->headers = http_alloc(r, (size_t)(r->n_fields + 1) * sizeof *r->headers);
  if (!r->headers)
    return "out of memory";
  while (p < end && r->n_headers < r->n_fields) {
    char *name = p;
    p += strlen(p) + 1;
    if (p >= end)
      break;
    char *value = p;
    size_t vlen = strlen(value);
    p += vlen + 1;
    while (vlen > 0 && (value[vlen - 1] == ' ' || value[vlen - 1] == '\t'))
      value[--vlen] = '\0';
    r->headers[r->n_headers].name = name;
    r->headers[r->n_headers].value = value;
    r->n_headers++;
  }
  return req_set_target(r, url);
}

/* ---- accessors ---- */

const char *http_method(const http_request *r) { return r->method; }
const char *http_path(const http_request *r) { return r->path; }
const char *http_query(const http_request *r) { return r->query; }
const char *http_peer(const http_request *r) { return r->peer; }
uint64_t http_request_start_ns(const http_request *r) { return r->start_ns; }

void http_on_answer(http_request *r, http_answer_cb cb, void *ud) {
  r->on_answer = cb;
  r->on_answer_ud = ud;
}

int http_query_param(http_request *r, const char *name, const char **value) {
  size_t nlen = strlen(name);
  *value = NULL;
  for (const char *p = r->query; *p;) {
    size_t len = strcspn(p, "&;");
    size_t klen = strcspn(p, "=&;");
    if (klen == nlen && !memcmp(p, name, nlen)) {
      const char *v = p + klen + (klen < len);
      size_t vlen = len - (size_t)(v - p);
      char *out = http_alloc(r, vlen + 1);
      if (!out || percent_decode(out, v, vlen, 1) != 0)
        return -1;
      *value = out;
      return 1;
    }
    p += len;
    if (*p)
      p++;
  }
  return 0;
}

const char *http_header(const http_request *r, const char *name) {
  for (int i = 0; i < r->n_headers; i++)
    if (strcasecmp(r->headers[i].name, name) == 0)
      return r->headers[i].value;
  return NULL;
}

const char *http_body(const http_request *r, size_t *len) {
  if (len)
    *len = r->body_len;
  return r->body ? r->body : "";
}

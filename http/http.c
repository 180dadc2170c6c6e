/* HTTP/1.1 server on libuv with llhttp (see http.h for the contract).
 *
 * A connection is a small state machine:
 *   READ  — parsing a request (or idle between requests); the timer bounds
 *           the time to a complete request (idle and slow-loris alike).
 *   BUSY  — a complete request is with the handler; llhttp is paused and
 *           further bytes (a pipelined request) are buffered, bounded.
 *   SSE   — the connection is an event stream; input is discarded.
 *   DRAIN — a last answer is queued; once written the socket is shut down.
 *   LINGER— shut down; input is discarded until EOF or a short timer, so
 *           that unread input does not turn the close into a reset that
 *           would destroy the answer before the client reads it.
 * llhttp is paused twice per request: after the head (to check the head
 * size, the URL and Content-Length before any body is read) and after the
 * message (one request at a time).
 *
 * Memory: each connection is one allocation holding its libuv handles and
 * freed in the last close callback. Each request is one allocation whose
 * tail is the first block of its arena; a request whose client has gone is
 * detached from its connection and freed by the handler's answer. */
#include "http/http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <llhttp.h>
#include <signal.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

enum {
  HTTP_READ_BUF = 64 * 1024,     /* one read; shared by all connections */
  HTTP_IN_HIGH = 64 * 1024,      /* buffered pipelined input: stop reading */
  HTTP_WRITE_HIGH = 1024 * 1024, /* queued answers: stop parsing */
  HTTP_SSE_MAX_QUEUE = 4 << 20,  /* an SSE client this far behind is closed */
  HTTP_SSE_KEEPALIVE_MS = 15000, /* ": keepalive" comment period */
  HTTP_LINGER_MS = 2000,         /* input drained after a closing answer */
  HTTP_ARENA_FIRST = 2048,       /* arena bytes inside the request allocation */
  HTTP_ARENA_BLOCK = 16 * 1024,  /* further arena blocks */
};

enum { CONN_READ, CONN_BUSY, CONN_SSE, CONN_DRAIN, CONN_LINGER };
enum { PAUSE_NONE, PAUSE_HEAD, PAUSE_DONE };

typedef struct http_conn http_conn;

struct http_sse {
  http_conn *conn;
  uint64_t last_id;
  void (*on_close)(http_sse *s, void *ud);
  void *ud;
};

typedef struct http_kv {
  const char *name, *value;
} http_kv;

typedef struct http_block {
  struct http_block *next;
  size_t used, cap;
  max_align_t data[];
} http_block;

struct http_request {
  http_conn *conn;    /* NULL once the client has gone or the server stopped */
  const char *method; /* static (llhttp) */
  char *path, *query; /* arena */
  char *peer;         /* arena */
  char *head;         /* "url\0name\0value\0..." as parsed (malloc) */
  size_t head_len, head_cap;
  int n_fields;     /* header fields seen in head */
  http_kv *headers; /* arena, n_headers entries, built after the head */
  int n_headers;
  char *body; /* malloc, NUL-terminated */
  size_t body_len, body_cap;
  uint64_t start_ns;
  int is_head, keep_alive, http10, dispatched;
  http_block *blocks; /* arena blocks after the first */
  size_t arena_used;
  max_align_t arena[HTTP_ARENA_FIRST / sizeof(max_align_t)];
};

struct http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shutdown;
  http_server *srv;
  http_conn *prev, *next;
  llhttp_t parser;
  http_request *req; /* being read or with the handler */
  char *in;          /* input received while BUSY, not yet parsed */
  size_t in_len, in_cap;
  size_t head_bytes; /* raw bytes of the current request's head */
  int state, pause;
  int in_message;     /* a request has begun (a timeout answers 408) */
  int timer_extended; /* the request timer was extended once (on_conn_timer) */
  int head_done;
  int err_status; /* set by a parser callback that rejects the request */
  const char *err_msg;
  int processing;  /* conn_parse is on the stack */
  int read_paused; /* uv_read_stop'ed: too much buffered input */
  int closing, closed_handles;
  unsigned writes; /* uv_write requests in flight */
  int is_sse;
  http_sse sse;
  char peer[INET6_ADDRSTRLEN + 8];
};

struct http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t keepalive;
  http_limits lim;
  http_handler handler;
  void *ud;
  llhttp_settings_t settings;
  http_conn *conns;
  int n_conns, n_sse;
  int open_handles; /* listener, keepalive timer, connections */
  int stopping;
  void (*stop_cb)(void *ud);
  void *stop_ud;
  http_stats stats;
  char readbuf[HTTP_READ_BUF];
};

static void on_conn_timer(uv_timer_t *t);
static void conn_resume(http_conn *c);

typedef struct http_write {
  uv_write_t req; /* first: the callback casts back */
  http_conn *conn;
  size_t len;
  char data[];
} http_write;

void http_limits_default(http_limits *l) {
  l->max_header_bytes = 16 * 1024;
  l->max_body_bytes = 1024 * 1024;
  l->max_connections = 1024;
  l->idle_timeout_ms = 30000;
}

/* ---- small helpers ---- */

static const char *status_text(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 202:
    return "Accepted";
  case 204:
    return "No Content";
  case 301:
    return "Moved Permanently";
  case 302:
    return "Found";
  case 303:
    return "See Other";
  case 304:
    return "Not Modified";
  case 307:
    return "Temporary Redirect";
  case 308:
    return "Permanent Redirect";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 406:
    return "Not Acceptable";
  case 408:
    return "Request Timeout";
  case 409:
    return "Conflict";
  case 410:
    return "Gone";
  case 411:
    return "Length Required";
  case 412:
    return "Precondition Failed";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 415:
    return "Unsupported Media Type";
  case 416:
    return "Range Not Satisfiable";
  case 422:
    return "Unprocessable Content";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  case 505:
    return "HTTP Version Not Supported";
  default:
    break;
  }
  if (status < 200)
    return "Informational";
  if (status < 300)
    return "Success";
  if (status < 400)
    return "Redirection";
  if (status < 500)
    return "Client Error";
  return "Server Error";
}

/* {"error":{"message":msg,"path":path}}, malloc'd; NULL when out of memory. */
static char *error_json(int status, const char *msg, const char *path) {
  json_t *o = json_pack("{s:{s:s,s:s?}}", "error", "message", msg ? msg : status_text(status),
                        "path", path);
  if (!o) /* msg or path not valid UTF-8 */
    o = json_pack("{s:{s:s,s:n}}", "error", "message", status_text(status), "path");
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

/* ---- requests and their arenas ---- */

static http_request *req_new(http_conn *c) {
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

static void req_free(http_request *r) {
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

void *http_alloc(http_request *r, size_t n) {
  const size_t a = alignof(max_align_t);
  if (n > SIZE_MAX - a)
    return NULL;
  n = (n + a - 1) / a * a;
  if (n == 0)
    n = a;
  if (n <= sizeof r->arena - r->arena_used) {
    void *p = (char *)r->arena + r->arena_used;
    r->arena_used += n;
    return p;
  }
  http_block *b = r->blocks;
  if (b && n <= b->cap - b->used) {
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
  }
  size_t cap = n > HTTP_ARENA_BLOCK / 2 ? n : HTTP_ARENA_BLOCK;
  http_block *nb = malloc(sizeof *nb + cap);
  if (!nb)
    return NULL;
  nb->cap = cap;
  nb->used = n;
  if (cap == n && b) { /* a large one-off: keep filling the current block */
    nb->next = b->next;
    b->next = nb;
  } else {
    nb->next = b;
    r->blocks = nb;
  }
  return nb->data;
}

static char *arena_strndup(http_request *r, const char *s, size_t n) {
  char *p = http_alloc(r, n + 1);
  if (!p)
    return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
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
    if (!(r->query = arena_strndup(r, q, strcspn(q, "#"))))
      return "out of memory";
  }
  if (plen == 0)
    return NULL; /* path "/" */
  if (p[0] != '/' && !(plen == 1 && p[0] == '*'))
    return "request target must start with '/'";
  char *out = http_alloc(r, plen + 1);
  if (!out)
    return "out of memory";
  size_t o = 0;
  for (size_t i = 0; i < plen; i++) {
    if (p[i] != '%') {
      out[o++] = p[i];
      continue;
    }
    int hi = i + 2 < plen ? hexval((unsigned char)p[i + 1]) : -1;
    int lo = hi >= 0 ? hexval((unsigned char)p[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      return "invalid percent-encoding in path";
    if (hi == 0 && lo == 0)
      return "%00 in path";
    out[o++] = (char)(hi * 16 + lo);
    i += 2;
  }
  out[o] = '\0';
  r->path = out;
  return NULL;
}

/* Turns the raw head into the header index; trailing whitespace of values,
 * which llhttp keeps, is dropped. */
static const char *req_index_head(http_request *r) {
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

/* ---- request accessors ---- */

const char *http_method(const http_request *r) { return r->method; }
const char *http_path(const http_request *r) { return r->path; }
const char *http_query(const http_request *r) { return r->query; }
const char *http_peer(const http_request *r) { return r->peer; }

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
      if (!out)
        return -1;
      size_t o = 0;
      for (size_t i = 0; i < vlen; i++) {
        if (v[i] == '+') {
          out[o++] = ' ';
        } else if (v[i] != '%') {
          out[o++] = v[i];
        } else {
          int hi = i + 2 < vlen ? hexval((unsigned char)v[i + 1]) : -1;
          int lo = hi >= 0 ? hexval((unsigned char)v[i + 2]) : -1;
          if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -1;
          out[o++] = (char)(hi * 16 + lo);
          i += 2;
        }
      }
      out[o] = '\0';
      *value = out;
      return 1;
    }
    p += len;
    if (*p)
      p++;
  }
  return 0;
}
uint64_t http_request_start_ns(const http_request *r) { return r->start_ns; }

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

/* (Re)starts the connection's one timer. The loop's cached time may be old
 * by the time spent in earlier callbacks of this turn; refreshing it keeps
 * a timeout from firing early. */
static void conn_timer(http_conn *c, int ms) {
  uv_update_time(c->srv->loop);
  uv_timer_start(&c->timer, on_conn_timer, (uint64_t)ms, 0);
}

/* ---- connections: closing ---- */

static void server_maybe_finish(http_server *s) {
  if (!s->stopping || s->open_handles > 0)
    return;
  if (s->stop_cb)
    s->stop_cb(s->stop_ud);
  free(s);
}

static void on_handle_closed(uv_handle_t *h) {
  http_server *s = h->data;
  s->open_handles--;
  server_maybe_finish(s);
}

static void on_conn_closed(uv_handle_t *h) {
  http_conn *c = h->data;
  if (++c->closed_handles < 2)
    return;
  http_server *s = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->n_conns--;
  if (c->is_sse) {
    s->n_sse--;
    if (s->n_sse == 0 && !s->stopping)
      uv_timer_stop(&s->keepalive);
    if (c->sse.on_close)
      c->sse.on_close(&c->sse, c->sse.ud);
  }
  free(c->in);
  free(c);
  s->open_handles--;
  server_maybe_finish(s);
}

/* Closes at once; pending writes are cancelled (their callbacks free them).
 * A request with the handler is detached and freed by its answer. */
static void conn_close(http_conn *c) {
  if (c->closing)
    return;
  c->closing = 1;
  if (c->req) {
    if (c->req->dispatched)
      c->req->conn = NULL;
    else
      req_free(c->req);
    c->req = NULL;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  http_conn *c = req->data;
  if (status < 0)
    conn_close(c);
}

/* All answers are written: send FIN, then discard input until the client
 * closes or a short timer runs out. */
static void conn_linger(http_conn *c) {
  c->state = CONN_LINGER;
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    conn_close(c);
    return;
  }
  int ms =
      c->srv->lim.idle_timeout_ms < HTTP_LINGER_MS ? c->srv->lim.idle_timeout_ms : HTTP_LINGER_MS;
  conn_timer(c, ms);
}

/* The last answer is queued: close once it is written (bounded by the
 * idle timeout for a client that does not read). */
static void conn_drain(http_conn *c) {
  c->state = CONN_DRAIN;
  if (c->writes == 0) {
    conn_linger(c);
    return;
  }
  conn_timer(c, c->srv->lim.idle_timeout_ms);
}

/* ---- connections: writing ---- */

static void on_write(uv_write_t *req, int status) {
  http_write *w = (http_write *)req;
  http_conn *c = w->conn;
  free(w);
  c->writes--;
  if (c->closing)
    return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  if (c->state == CONN_DRAIN && c->writes == 0) {
    conn_linger(c);
  } else if (c->state == CONN_READ && c->writes == 0) {
    if (!c->in_message) /* idle time counts from the last byte sent */
      conn_timer(c, c->srv->lim.idle_timeout_ms);
    conn_resume(c);
  }
}

static http_write *write_new(size_t len) {
  http_write *w = malloc(sizeof *w + len);
  if (w)
    w->len = len;
  return w;
}

/* Queues w (ownership passes); on failure the connection is closed.
 * Returns 0 or a negative libuv error. */
static int conn_write(http_conn *c, http_write *w) {
  if (c->closing) {
    free(w);
    return UV_EPIPE;
  }
  if (w->len > UINT32_MAX) { /* uv_buf_t's limit: such an answer cannot go out */
    free(w);
    conn_close(c);
    return UV_E2BIG;
  }
  w->conn = c;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  if (rc != 0) {
    free(w);
    conn_close(c);
    return rc;
  }
  c->writes++;
  return 0;
}

static void count_status(http_server *s, int status) {
  if (status >= 500)
    s->stats.responses_5xx++;
  else if (status >= 400)
    s->stats.responses_4xx++;
}

/* Formats a complete answer; NULL when out of memory. */
static http_write *response_new(int status, const char *ctype, const char *body, size_t len,
                                const char *headers, int is_head, int http10, int close) {
  int no_body = status < 200 || status == 204 || status == 304;
  char cl[64] = "", ct[256] = "";
  if (!no_body)
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", len);
  if (ctype && *ctype && strlen(ctype) < sizeof ct - 20)
    snprintf(ct, sizeof ct, "Content-Type: %s\r\n", ctype);
  const char *conn = close ? "Connection: close\r\n" : http10 ? "Connection: keep-alive\r\n" : "";
  if (!headers)
    headers = "";
  const char *fmt = "HTTP/1.1 %d %s\r\n%s%s%s%s\r\n";
  int hlen = snprintf(NULL, 0, fmt, status, status_text(status), ct, cl, conn, headers);
  if (hlen < 0)
    return NULL;
  size_t blen = is_head || no_body ? 0 : len;
  http_write *w = write_new((size_t)hlen + 1 + blen);
  if (!w)
    return NULL;
  snprintf(w->data, (size_t)hlen + 1, fmt, status, status_text(status), ct, cl, conn, headers);
  if (blen)
    memcpy(w->data + hlen, body, blen);
  w->len = (size_t)hlen + blen;
  return w;
}

/* Formats and queues a complete answer. Returns 0 or a negative libuv
 * error (then the connection is closing). */
static int conn_send(http_conn *c, int status, const char *ctype, const char *body, size_t len,
                     const char *headers, int is_head, int http10, int close) {
  http_write *w = response_new(status, ctype, body, len, headers, is_head, http10, close);
  if (!w) {
    conn_close(c);
    return UV_ENOMEM;
  }
  count_status(c->srv, status);
  return conn_write(c, w);
}

/* Answers a request that never reached the handler, then closes. */
static void conn_fail(http_conn *c, int status, const char *msg) {
  if (c->closing)
    return;
  c->srv->stats.requests++;
  if (c->req) {
    req_free(c->req);
    c->req = NULL;
  }
  char *json = error_json(status, msg, NULL);
  const char *b = json ? json : "{\"error\":{\"message\":\"error\",\"path\":null}}";
  int rc = conn_send(c, status, "application/json", b, strlen(b), NULL, 0, 0, 1);
  free(json);
  if (rc == 0)
    conn_drain(c);
}

/* ---- parsing ---- */

static int head_append(http_conn *c, const char *at, size_t len) {
  http_request *r = c->req;
  if (!r)
    return -1;
  if (r->head_len + len + 1 > c->srv->lim.max_header_bytes) {
    c->err_status = 431;
    c->err_msg = "request header too large";
    return -1;
  }
  if (r->head_len + len + 1 > r->head_cap) {
    size_t cap = r->head_cap ? r->head_cap : 512;
    while (cap < r->head_len + len + 1)
      cap *= 2;
    char *p = realloc(r->head, cap);
    if (!p) {
      c->err_status = 503;
      c->err_msg = "out of memory";
      return -1;
    }
    r->head = p;
    r->head_cap = cap;
  }
  memcpy(r->head + r->head_len, at, len);
  r->head_len += len;
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  http_conn *c = p->data;
  c->in_message = 1;
  c->head_done = 0;
  if (!c->req && !(c->req = req_new(c))) {
    c->err_status = 503;
    c->err_msg = "out of memory";
    return -1;
  }
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) { return head_append(p->data, at, len); }

static int on_field(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  return c->head_done ? 0 : head_append(c, at, len); /* trailers are ignored */
}

static int on_part_complete(llhttp_t *p) {
  http_conn *c = p->data;
  return c->head_done ? 0 : head_append(c, "", 1);
}

static int on_field_complete(llhttp_t *p) {
  http_conn *c = p->data;
  if (c->head_done)
    return 0;
  c->req->n_fields++;
  return head_append(c, "", 1);
}

static int on_headers_complete(llhttp_t *p) {
  http_conn *c = p->data;
  c->head_done = 1;
  c->pause = PAUSE_HEAD;
  return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  http_request *r = c->req;
  size_t max = c->srv->lim.max_body_bytes;
  if (len > max - r->body_len) {
    c->err_status = 413;
    c->err_msg = "request body too large";
    return -1;
  }
  if (r->body_len + len + 1 > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap : 4096;
    while (cap < r->body_len + len + 1)
      cap *= 2;
    if (cap > max + 1)
      cap = max + 1;
    char *b = realloc(r->body, cap);
    if (!b) {
      c->err_status = 503;
      c->err_msg = "out of memory";
      return -1;
    }
    r->body = b;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, at, len);
  r->body_len += len;
  r->body[r->body_len] = '\0';
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  http_conn *c = p->data;
  c->req->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade;
  c->pause = PAUSE_DONE;
  return HPE_PAUSED;
}

/* The head is complete: checks that need no body. Returns 0 to go on. */
static int head_checks(http_conn *c) {
  http_server *s = c->srv;
  http_request *r = c->req;
  llhttp_t *p = &c->parser;
  if (c->head_bytes > s->lim.max_header_bytes) {
    conn_fail(c, 431, "request header too large");
    return -1;
  }
  r->method = llhttp_method_name((llhttp_method_t)p->method);
  r->is_head = p->method == HTTP_HEAD;
  r->http10 = p->http_major == 1 && p->http_minor == 0;
  const char *err = r->head ? req_index_head(r) : "empty request";
  if (err) {
    conn_fail(c, 400, err);
    return -1;
  }
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > s->lim.max_body_bytes) {
    conn_fail(c, 413, "request body too large");
    return -1;
  }
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0) {
    /* sized up front, but a client that only announces a body pins little */
    size_t cap = p->content_length < 65536 ? (size_t)p->content_length + 1 : 65536;
    if (!(r->body = malloc(cap))) {
      conn_fail(c, 503, "out of memory");
      return -1;
    }
    r->body_cap = cap;
  }
  const char *expect = http_header(r, "Expect");
  if (expect && strcasecmp(expect, "100-continue") == 0 && !r->http10) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    http_write *w = write_new(sizeof cont - 1);
    if (!w) {
      conn_fail(c, 503, "out of memory");
      return -1;
    }
    memcpy(w->data, cont, sizeof cont - 1);
    if (conn_write(c, w) != 0)
      return -1;
  }
  return 0;
}

static void dispatch(http_conn *c) {
  http_server *s = c->srv;
  http_request *r = c->req;
  c->state = CONN_BUSY;
  uv_timer_stop(&c->timer);
  r->dispatched = 1;
  s->stats.requests++;
  s->handler(r, s->ud);
}

/* Feeds data to llhttp until a request goes to the handler (and is not
 * answered at once), the connection fails, or data runs out. Returns the
 * bytes consumed. */
static size_t conn_parse(http_conn *c, const char *data, size_t len) {
  size_t off = 0;
  int again = 0; /* after the head pause, a bodiless request completes on an empty call */
  c->processing = 1;
  while (c->state == CONN_READ && !c->closing && (off < len || again)) {
    if (c->tcp.write_queue_size > HTTP_WRITE_HIGH)
      break; /* resumed by on_write */
    again = 0;
    c->pause = PAUSE_NONE;
    int counting = !c->head_done;
    llhttp_errno_t e = llhttp_execute(&c->parser, data + off, len - off);
    size_t used =
        e == HPE_OK ? len - off : (size_t)(llhttp_get_error_pos(&c->parser) - (data + off));
    off += used;
    if (counting && c->in_message) {
      c->head_bytes += used;
      if (c->head_bytes > c->srv->lim.max_header_bytes) {
        conn_fail(c, 431, "request header too large");
        break;
      }
    }
    if (e == HPE_OK)
      continue;
    if (e == HPE_PAUSED && c->pause == PAUSE_HEAD) {
      if (head_checks(c) != 0)
        break;
      llhttp_resume(&c->parser);
      again = 1;
    } else if (e == HPE_PAUSED && c->pause == PAUSE_DONE) {
      dispatch(c);
    } else {
      conn_fail(c, c->err_status ? c->err_status : 400,
                c->err_msg ? c->err_msg : llhttp_get_error_reason(&c->parser));
      break;
    }
  }
  c->processing = 0;
  return off;
}

static void conn_buffer(http_conn *c, const char *data, size_t len) {
  if (c->in_len + len > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : 4096;
    while (cap < c->in_len + len)
      cap *= 2;
    char *p = realloc(c->in, cap);
    if (!p) {
      conn_close(c);
      return;
    }
    c->in = p;
    c->in_cap = cap;
  }
  memcpy(c->in + c->in_len, data, len);
  c->in_len += len;
  if (c->in_len >= HTTP_IN_HIGH && !c->read_paused) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->read_paused = 1;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* Parses buffered input after an answer or when the write queue drained. */
static void conn_resume(http_conn *c) {
  if (c->processing || c->closing)
    return;
  if (c->state == CONN_READ && c->in_len > 0) {
    size_t used = conn_parse(c, c->in, c->in_len);
    if (c->closing)
      return;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
  }
  if (c->read_paused && c->in_len < HTTP_IN_HIGH &&
      (c->state == CONN_READ || c->state == CONN_BUSY)) {
    c->read_paused = 0;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
      conn_close(c);
  }
}

/* ---- connections: input and timers ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  /* One buffer for all: libuv hands each read to on_read before the next. */
  http_conn *c = h->data;
  *buf = uv_buf_init(c->srv->readbuf, sizeof c->srv->readbuf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  http_conn *c = st->data;
  if (nread < 0) { /* EOF or error: the client is gone (an answer being made is dropped) */
    conn_close(c);
    return;
  }
  if (c->state != CONN_READ && c->state != CONN_BUSY)
    return; /* SSE, DRAIN, LINGER: discarded */
  const char *data = buf->base;
  size_t len = (size_t)nread;
  if (c->state == CONN_READ && c->in_len == 0) {
    size_t used = conn_parse(c, data, len);
    data += used;
    len -= used;
  }
  if (len > 0 && !c->closing && (c->state == CONN_READ || c->state == CONN_BUSY)) {
    conn_buffer(c, data, len);
    conn_resume(c);
  }
}

/* 1 when input waits in the socket that the loop has not read yet. */
static int input_pending(http_conn *c) {
  uv_os_fd_t fd;
  char b;
  return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
         recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

static void on_conn_timer(uv_timer_t *t) {
  http_conn *c = t->data;
  if (c->state == CONN_READ && !c->timer_extended && input_pending(c)) {
    /* The loop was held up and timers run before reads: the bytes that
     * arrived in time get one more period, once per request. */
    c->timer_extended = 1;
    conn_timer(c, c->srv->lim.idle_timeout_ms);
    return;
  }
  if (c->state == CONN_READ && c->in_message)
    conn_fail(c, 408, "request not completed in time");
  else if (c->state == CONN_READ || c->state == CONN_DRAIN || c->state == CONN_LINGER)
    conn_close(c);
}

/* ---- answers ---- */

void http_respond(http_request *r, int status, const char *content_type, const char *body,
                  size_t len, const char *headers) {
  http_conn *c = r->conn;
  if (!c || c->closing || c->req != r || c->state != CONN_BUSY) { /* client gone: dropped */
    if (c && c->req == r)
      c->req = NULL;
    req_free(r);
    return;
  }
  if (status < 100 || status > 999)
    status = 500;
  int close = !r->keep_alive || c->srv->stopping;
  c->req = NULL;
  int rc = conn_send(c, status, content_type, body ? body : "", body ? len : 0, headers, r->is_head,
                     r->http10, close);
  req_free(r); /* after the copy: body and headers may live in the arena */
  if (rc != 0 || c->closing)
    return;
  if (close) {
    conn_drain(c);
    return;
  }
  c->state = CONN_READ;
  c->in_message = 0;
  c->timer_extended = 0;
  c->head_done = 0;
  c->head_bytes = 0;
  c->err_status = 0;
  c->err_msg = NULL;
  conn_timer(c, c->srv->lim.idle_timeout_ms);
  llhttp_resume(&c->parser);
  conn_resume(c);
}

void http_respond_json(http_request *r, int status, const char *json) {
  http_respond(r, status, "application/json", json, json ? strlen(json) : 0, NULL);
}

void http_respond_error(http_request *r, int status, const char *msg, const char *path) {
  char *json = error_json(status, msg, path);
  http_respond_json(r, status, json ? json : "{\"error\":{\"message\":\"error\",\"path\":null}}");
  free(json);
}

/* ---- Server-Sent Events ---- */

/* Queues w on a stream; a client too far behind is closed. */
static int sse_write(http_conn *c, http_write *w) {
  int rc = conn_write(c, w);
  if (rc != 0)
    return rc;
  if (c->tcp.write_queue_size > HTTP_SSE_MAX_QUEUE) {
    conn_close(c);
    return UV_ENOBUFS;
  }
  return 0;
}

static void on_keepalive(uv_timer_t *t) {
  http_server *s = t->data;
  static const char ka[] = ": keepalive\n\n";
  for (http_conn *c = s->conns; c; c = c->next) {
    if (c->closing || c->state != CONN_SSE)
      continue;
    http_write *w = write_new(sizeof ka - 1);
    if (!w)
      return;
    memcpy(w->data, ka, sizeof ka - 1);
    sse_write(c, w);
  }
}

static uint64_t parse_event_id(const char *v) {
  if (!v)
    return 0;
  uint64_t id = 0;
  for (; *v; v++) {
    if (*v < '0' || *v > '9' || id > (UINT64_MAX - 9) / 10)
      return 0;
    id = id * 10 + (uint64_t)(*v - '0');
  }
  return id;
}

http_sse *http_sse_start(http_request *r) {
  http_conn *c = r->conn;
  if (!c || c->closing || c->req != r || c->state != CONN_BUSY) {
    if (c && c->req == r)
      c->req = NULL;
    req_free(r);
    return NULL;
  }
  http_server *s = c->srv;
  int is_head = r->is_head;
  c->is_sse = 1;
  c->sse.conn = c;
  c->sse.last_id = parse_event_id(http_header(r, "Last-Event-ID"));
  c->req = NULL;
  req_free(r);
  c->state = CONN_SSE;
  uv_timer_stop(&c->timer);
  s->n_sse++;
  if (!uv_is_active((uv_handle_t *)&s->keepalive))
    uv_timer_start(&s->keepalive, on_keepalive, HTTP_SSE_KEEPALIVE_MS, HTTP_SSE_KEEPALIVE_MS);
  static const char head[] = "HTTP/1.1 200 OK\r\n"
                             "Content-Type: text/event-stream\r\n"
                             "Cache-Control: no-cache\r\n"
                             "X-Accel-Buffering: no\r\n\r\n";
  http_write *w = write_new(sizeof head - 1);
  if (!w) {
    conn_close(c);
    return &c->sse;
  }
  memcpy(w->data, head, sizeof head - 1);
  if (conn_write(c, w) == 0 && is_head)
    conn_drain(c);
  return &c->sse;
}

int http_sse_send(http_sse *s, uint64_t id, const char *event, const char *data) {
  http_conn *c = s->conn;
  if (c->closing || c->state != CONN_SSE)
    return UV_EPIPE;
  if (event && strpbrk(event, "\r\n"))
    return UV_EINVAL;
  if (!data)
    data = "";
  size_t dlen = strlen(data), lines = 1;
  for (const char *p = data; *p; p++)
    if (*p == '\n' || (*p == '\r' && p[1] != '\n'))
      lines++;
  size_t cap = 32 + (event ? strlen(event) + 8 : 0) + dlen + lines * 7 + 2;
  http_write *w = write_new(cap);
  if (!w)
    return UV_ENOMEM;
  char *o = w->data;
  if (id)
    o += sprintf(o, "id: %llu\n", (unsigned long long)id);
  if (event)
    o += sprintf(o, "event: %s\n", event);
  const char *p = data;
  for (;;) { /* one "data:" line per line; CRLF, CR and LF all end a line */
    size_t n = strcspn(p, "\r\n");
    memcpy(o, "data: ", 6);
    memcpy(o + 6, p, n);
    o += 6 + n;
    *o++ = '\n';
    p += n;
    if (!*p)
      break;
    p += p[0] == '\r' && p[1] == '\n' ? 2 : 1;
  }
  *o++ = '\n';
  w->len = (size_t)(o - w->data);
  return sse_write(c, w);
}

uint64_t http_sse_last_id(const http_sse *s) { return s->last_id; }

void http_sse_on_close(http_sse *s, void (*cb)(http_sse *s, void *ud), void *ud) {
  s->on_close = cb;
  s->ud = ud;
}

/* ---- the server ---- */

static void on_connection(uv_stream_t *l, int status) {
  http_server *s = l->data;
  if (status < 0 || s->stopping)
    return;
  http_conn *c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->srv = s;
  uv_tcp_init(s->loop, &c->tcp);
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  s->n_conns++;
  s->open_handles++;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 || s->n_conns > s->lim.max_connections) {
    conn_close(c); /* over the limit: closed at once */
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
  }
  snprintf(c->peer, sizeof c->peer, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, port);
  llhttp_init(&c->parser, HTTP_REQUEST, &s->settings);
  c->parser.data = c;
  c->state = CONN_READ;
  conn_timer(c, s->lim.idle_timeout_ms);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c);
}

static int parse_host(const char *host, int port, struct sockaddr_storage *ss) {
  char h[INET6_ADDRSTRLEN + 2];
  if (!host || !*host)
    host = "0.0.0.0";
  if (strcmp(host, "localhost") == 0)
    host = "127.0.0.1";
  size_t n = strlen(host);
  if (n >= sizeof h)
    return UV_EINVAL;
  if (host[0] == '[' && host[n - 1] == ']') { /* "[::1]" */
    memcpy(h, host + 1, n - 2);
    h[n - 2] = '\0';
  } else {
    memcpy(h, host, n + 1);
  }
  memset(ss, 0, sizeof *ss);
  if (uv_ip4_addr(h, port, (struct sockaddr_in *)ss) == 0)
    return 0;
  if (uv_ip6_addr(h, port, (struct sockaddr_in6 *)ss) == 0)
    return 0;
  return UV_EINVAL;
}

http_server *http_server_start(uv_loop_t *loop, const char *host, int port,
                               const http_limits *limits, http_handler handler, void *ud,
                               int *bound_port, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  if (port < 0 || port > 65535 || parse_host(host, port, &ss) != 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: expected an IPv4 or IPv6 address and a port",
             host ? host : "", port);
    return NULL;
  }
  /* libuv writes with write(2): a client gone mid-answer would raise
   * SIGPIPE and kill the process. Only the default action is replaced. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  http_server *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  s->loop = loop;
  s->handler = handler;
  s->ud = ud;
  http_limits_default(&s->lim);
  if (limits) { /* zero fields keep their defaults */
    if (limits->max_header_bytes)
      s->lim.max_header_bytes = limits->max_header_bytes;
    if (limits->max_body_bytes)
      s->lim.max_body_bytes = limits->max_body_bytes;
    if (limits->max_connections > 0)
      s->lim.max_connections = limits->max_connections;
    if (limits->idle_timeout_ms > 0)
      s->lim.idle_timeout_ms = limits->idle_timeout_ms;
  }
  llhttp_settings_init(&s->settings);
  s->settings.on_message_begin = on_message_begin;
  s->settings.on_url = on_url;
  s->settings.on_url_complete = on_part_complete;
  s->settings.on_header_field = on_field;
  s->settings.on_header_field_complete = on_field_complete;
  s->settings.on_header_value = on_field;
  s->settings.on_header_value_complete = on_part_complete;
  s->settings.on_headers_complete = on_headers_complete;
  s->settings.on_body = on_body;
  s->settings.on_message_complete = on_message_complete;
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->keepalive);
  s->listener.data = s;
  s->keepalive.data = s;
  s->open_handles = 2;
  int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
  struct sockaddr_storage bound;
  int bl = sizeof bound;
  if (rc == 0)
    rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &bl);
  if (rc != 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: %s", host ? host : "", port, uv_strerror(rc));
    s->stopping = 1; /* freed by the close callbacks, on the loop's next turn */
    uv_close((uv_handle_t *)&s->listener, on_handle_closed);
    uv_close((uv_handle_t *)&s->keepalive, on_handle_closed);
    return NULL;
  }
  if (bound_port)
    *bound_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
  return s;
}

void http_server_stop(http_server *s, void (*cb)(void *ud), void *ud) {
  if (s->stopping)
    return;
  s->stopping = 1;
  s->stop_cb = cb;
  s->stop_ud = ud;
  uv_close((uv_handle_t *)&s->listener, on_handle_closed);
  uv_close((uv_handle_t *)&s->keepalive, on_handle_closed);
  char *json = error_json(503, "server is stopping", NULL);
  for (http_conn *c = s->conns; c; c = c->next) {
    if (c->closing)
      continue;
    if (c->req && c->req->dispatched && c->state == CONN_BUSY && json) {
      /* Best effort: the 503 goes out only if it fits in the socket now. */
      http_write *w = response_new(503, "application/json", json, strlen(json), NULL,
                                   c->req->is_head, c->req->http10, 1);
      if (w && c->tcp.write_queue_size == 0) {
        uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
      }
      free(w);
      s->stats.responses_5xx++;
    }
    conn_close(c);
  }
  free(json);
}

void http_server_stats(const http_server *s, http_stats *out) {
  *out = s->stats;
  out->connections = s->n_conns;
  out->sse_streams = s->n_sse;
}

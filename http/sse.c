/* Server-Sent Event streams: a request turned into a stream, events
 * written as "id:/event:/data:" lines, the keepalive comment, and the cut
 * of a client that falls too far behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

/* Queues w on a stream; a client too far behind is closed. */
static int sse_write(http_conn *c, http_write *w) {
  int rc = http__conn_write(c, w);
  if (rc != 0)
    return rc;
  if (c->tcp.write_queue_size > HTTP_SSE_MAX_QUEUE) {
    http__conn_close(c);
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
    http_write *w = http__write_new(sizeof ka - 1);
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
    http__req_free(r);
    return NULL;
  }
  http_server *s = c->srv;
  int is_head = r->is_head;
  c->is_sse = 1;
  c->sse.conn = c;
  c->sse.last_id = parse_event_id(http_header(r, "Last-Event-ID"));
  c->req = NULL;
  http__req_free(r);
  c->state = CONN_SSE;
  uv_timer_stop(&c->timer);
  s->n_sse++;
  if (!uv_is_active((uv_handle_t *)&s->keepalive))
    uv_timer_start(&s->keepalive, on_keepalive, HTTP_SSE_KEEPALIVE_MS, HTTP_SSE_KEEPALIVE_MS);
  static const char head[] = "HTTP/1.1 200 OK\r\n"
                             "Content-Type: text/event-stream\r\n"
                             "Cache-Control: no-cache\r\n"
                             "X-Accel-Buffering: no\r\n\r\n";
  http_write *w = http__write_new(sizeof head - 1);
  if (!w) {
    http__conn_close(c);
    return &c->sse;
  }
  memcpy(w->data, head, sizeof head - 1);
  if (http__conn_write(c, w) == 0 && is_head)
    http__conn_drain(c);
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
  http_write *w = http__write_new(cap);
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

void http__sse_closed(http_conn *c) {
  http_server *s = c->srv;
  s->n_sse--;
  if (s->n_sse == 0 && !s->stopping)
    uv_timer_stop(&s->keepalive);
  if (c->sse.on_close)
    c->sse.on_close(&c->sse, c->sse.ud);
}

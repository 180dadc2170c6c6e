/* Server-Sent Event streams: the stream limits (per address, in total), a
 * request turned into a stream, events written as "id:/event:/data:" lines,
 * the keepalive comment, and the cut of a client that falls too far behind
 * (its own queue, or the streams' together). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

/* c's queue (bytes the kernel has not taken) counted again in the total. */
static void sse_count(http_conn *c) {
  http_server *s = c->srv;
  size_t q = c->closing ? 0 : c->tcp.write_queue_size;
  s->sse_queued = s->sse_queued - c->sse_queued + q;
  c->sse_queued = q;
}

/* Closes stream c, which fell behind, with a log line saying why. */
static void sse_cut(http_conn *c, const char *why) {
  http_server *s = c->srv;
  s->stats.stalled_streams++;
  http__log(s, "closing the event stream of %s: %s (%zu KiB queued)", c->peer, why,
            c->tcp.write_queue_size / 1024);
  http__conn_close(c);
}

/* The stream furthest behind (NULL: none has anything queued). */
static http_conn *sse_furthest_behind(http_server *s) {
  http_conn *worst = NULL;
  for (http_conn *c = s->conns; c; c = c->next)
    if (c->is_sse && !c->closing && c->sse_queued > 0 &&
        (!worst || c->sse_queued > worst->sse_queued))
      worst = c;
  return worst;
}

/* Queues w on a stream. A stream whose queue passes the bound gets its
 * timer (closed if still over when it fires); one 4 times over is closed
 * at once, and so is the stream furthest behind when all streams together
 * queue too much. */
static int sse_write(http_conn *c, http_write *w) {
  http_server *s = c->srv;
  int rc = http__conn_write(c, w);
  if (rc != 0)
    return rc;
  sse_count(c);
  size_t q = c->tcp.write_queue_size, max = s->lim.stream_max_queue;
  if (q > max * HTTP_SSE_HARD_FACTOR) {
    sse_cut(c, "its reader is too far behind");
    return UV_ENOBUFS;
  }
  if (q > max && !uv_is_active((uv_handle_t *)&c->timer))
    http__conn_timer(c, s->lim.stream_stall_ms);
  while (s->sse_queued > s->lim.streams_max_queue) {
    http_conn *worst = sse_furthest_behind(s);
    if (!worst)
      break;
    sse_cut(worst, "the streams together queue too much and its reader is the furthest behind");
    if (worst == c)
      return UV_ENOBUFS;
  }
  return 0;
}

/* Also called once c is closing: its queue then counts as 0. */
void http__sse_wrote(http_conn *c) { sse_count(c); }

void http__sse_timer(http_conn *c) {
  if (c->tcp.write_queue_size > c->srv->lim.stream_max_queue)
    sse_cut(c, "its reader is stalled");
}

/* The stream limits: 0 when r may become a stream, else the status of its
 * refusal (429: its address has too many; 503: the server has too many). */
static int sse_admit(http_conn *c) {
  http_server *s = c->srv;
  int all = 0, same = 0; /* streams not closing */
  for (http_conn *o = s->conns; o; o = o->next)
    if (o->is_sse && !o->closing) {
      all++;
      same += strcmp(o->ip, c->ip) == 0;
    }
  if (all >= s->lim.max_streams)
    return 503;
  return same >= s->lim.max_streams_per_addr ? 429 : 0;
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
  int refusal = sse_admit(c);
  if (refusal) {
    s->stats.refused_streams++;
    char what[160];
    snprintf(what, sizeof what, "an event stream of %s refused: %s", c->ip,
             refusal == 429 ? "its address has too many" : "the server has too many");
    http__log_refusal(s, what);
    char msg[200];
    if (refusal == 429)
      snprintf(msg, sizeof msg, "too many event streams from %s (at most %d); retry later", c->ip,
               s->lim.max_streams_per_addr);
    else
      snprintf(msg, sizeof msg, "too many event streams (at most %d); retry later",
               s->lim.max_streams);
    char *json = http__error_json(refusal, msg, NULL);
    r->keep_alive = 0; /* the slot is given back: the client retries later */
    http_respond(r, refusal, "application/json", json ? json : "{}", json ? strlen(json) : 2,
                 "Retry-After: 5\r\n");
    free(json);
    return NULL;
  }
  int is_head = r->is_head;
  c->is_sse = 1;
  c->sse.conn = c;
  c->sse.last_id = parse_event_id(http_header(r, "Last-Event-ID"));
  c->req = NULL;
  http__req_free(r);
  c->state = CONN_SSE;
  uv_timer_stop(&c->timer); /* from now on it runs only while the queue is over the bound */
  /* The kernel's share of a stalled reader is bounded too. */
  int sndbuf = HTTP_SSE_SNDBUF;
  uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
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

size_t http_sse_queued(const http_sse *s) { return s->conn->tcp.write_queue_size; }

void http_sse_close(http_sse *s) {
  if (!s->conn->closing)
    http__conn_close(s->conn);
}

void http_sse_on_close(http_sse *s, void (*cb)(http_sse *s, void *ud), void *ud) {
  s->on_close = cb;
  s->ud = ud;
}

void http__sse_closed(http_conn *c) {
  http_server *s = c->srv;
  s->n_sse--;
  s->sse_queued -= c->sse_queued;
  c->sse_queued = 0;
  if (s->n_sse == 0 && !s->stopping)
    uv_timer_stop(&s->keepalive);
  if (c->sse.on_close)
    c->sse.on_close(&c->sse, c->sse.ud);
}

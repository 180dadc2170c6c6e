/* A connection's lifecycle (the state machine of internal.h): accept,
 * read and buffer input, queue writes, drain, linger and close, and the
 * one timer that bounds every state but SSE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http/internal.h"

static void on_conn_timer(uv_timer_t *t);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* (Re)starts the connection's one timer. The loop's cached time may be old
 * by the time spent in earlier callbacks of this turn; refreshing it keeps
 * a timeout from firing early. */
void http__conn_timer(http_conn *c, int ms) {
  uv_update_time(c->srv->loop);
  uv_timer_start(&c->timer, on_conn_timer, (uint64_t)ms, 0);
}

/* ---- closing ---- */

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
  s->n_closing--;
  if (c->is_sse)
    http__sse_closed(c);
  free(c->in);
  free(c);
  http__server_handle_closed(s);
}

/* Closes at once; pending writes are cancelled (their callbacks free them).
 * A request with the handler is detached and freed by its answer. */
void http__conn_close(http_conn *c) {
  if (c->closing)
    return;
  c->closing = 1;
  c->srv->n_closing++;
  if (c->is_sse)
    http__sse_wrote(c); /* its queue no longer counts */
  if (c->req) {
    if (c->req->dispatched)
      c->req->conn = NULL;
    else
      http__req_free(c->req);
    c->req = NULL;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  http_conn *c = req->data;
  if (status < 0)
    http__conn_close(c);
}

/* All answers are written: send FIN, then discard input until the client
 * closes or a short timer runs out. */
static void conn_linger(http_conn *c) {
  c->state = CONN_LINGER;
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    http__conn_close(c);
    return;
  }
  int ms =
      c->srv->lim.idle_timeout_ms < HTTP_LINGER_MS ? c->srv->lim.idle_timeout_ms : HTTP_LINGER_MS;
  http__conn_timer(c, ms);
}

/* The last answer is queued: close once it is written (bounded by the
 * idle timeout for a client that does not read). */
void http__conn_drain(http_conn *c) {
  c->state = CONN_DRAIN;
  if (c->writes == 0) {
    conn_linger(c);
    return;
  }
  http__conn_timer(c, c->srv->lim.idle_timeout_ms);
}

/* ---- writing ---- */

static void on_write(uv_write_t *req, int status) {
  http_write *w = (http_write *)req;
  http_conn *c = w->conn;
  free(w);
  c->writes--;
  if (c->closing)
    return;
  if (status < 0) {
    http__conn_close(c);
    return;
  }
  if (c->is_sse)
    http__sse_wrote(c);
  if (c->state == CONN_DRAIN && c->writes == 0) {
    conn_linger(c);
  } else if (c->state == CONN_READ && c->writes == 0) {
    if (!c->in_message) /* idle time counts from the last byte sent */
      http__conn_timer(c, c->srv->lim.idle_timeout_ms);
    http__conn_resume(c);
  }
}

http_write *http__write_new(size_t len) {
  http_write *w = malloc(sizeof *w + len);
  if (w)
    w->len = len;
  return w;
}

/* Queues w (ownership passes); on failure the connection is closed.
 * Returns 0 or a negative libuv error. */
int http__conn_write(http_conn *c, http_write *w) {
  if (c->closing) {
    free(w);
    return UV_EPIPE;
  }
  if (w->len > UINT32_MAX) { /* uv_buf_t's limit: such an answer cannot go out */
    free(w);
    http__conn_close(c);
    return UV_E2BIG;
  }
  w->conn = c;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  if (rc != 0) {
    free(w);
    http__conn_close(c);
    return rc;
  }
  c->writes++;
  return 0;
}

/* Keeps input that cannot be parsed yet; reading stops when too much waits. */
static void conn_buffer(http_conn *c, const char *data, size_t len) {
  if (http__grow(&c->in, &c->in_cap, c->in_len + len, 4096, 0) != 0) {
    http__conn_close(c);
    return;
  }
  memcpy(c->in + c->in_len, data, len);
  c->in_len += len;
  if (c->in_len >= HTTP_IN_HIGH && !c->read_paused) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->read_paused = 1;
  }
}

/* Parses buffered input after an answer or when the write queue drained. */
void http__conn_resume(http_conn *c) {
  if (c->processing || c->closing)
    return;
  if (c->state == CONN_READ && c->in_len > 0) {
    size_t used = http__conn_parse(c, c->in, c->in_len);
    if (c->closing)
      return;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
  }
  if (c->read_paused && c->in_len < HTTP_IN_HIGH &&
      (c->state == CONN_READ || c->state == CONN_BUSY)) {
    c->read_paused = 0;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
      http__conn_close(c);
  }
}

/* ---- input and timers ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  /* One buffer for all: libuv hands each read to on_read before the next. */
  http_conn *c = h->data;
  *buf = uv_buf_init(c->srv->readbuf, sizeof c->srv->readbuf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  http_conn *c = st->data;
  if (nread < 0) { /* EOF or error: the client is gone (an answer being made is dropped) */
    http__conn_close(c);
    return;
  }
  if (c->state != CONN_READ && c->state != CONN_BUSY)
    return; /* SSE, DRAIN, LINGER: discarded */
  const char *data = buf->base;
  size_t len = (size_t)nread;
  if (c->state == CONN_READ && c->in_len == 0) {
    size_t used = http__conn_parse(c, data, len);
    data += used;
    len -= used;
  }
  if (len > 0 && !c->closing && (c->state == CONN_READ || c->state == CONN_BUSY)) {
    conn_buffer(c, data, len);
    http__conn_resume(c);
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
    http__conn_timer(c, c->in_message || !c->served ? c->srv->lim.header_timeout_ms
                                                    : c->srv->lim.idle_timeout_ms);
    return;
  }
  if (c->state == CONN_READ && c->in_message)
    http__conn_fail(c, 408, "request not completed in time");
  else if (c->state == CONN_READ || c->state == CONN_DRAIN || c->state == CONN_LINGER)
    http__conn_close(c);
  else if (c->state == CONN_SSE)
    http__sse_timer(c);
}

/* A connection that holds a slot for the least: one lingering after its
 * last answer, else the longest idle (new or keep-alive), else the oldest
 * unfinished request; NULL when every connection is busy (a request with
 * the handler, an answer being written, an event stream). */
static http_conn *eviction_victim(http_server *s, http_conn *except) {
  http_conn *best = NULL;
  int best_rank = 0;
  for (http_conn *c = s->conns; c; c = c->next) {
    if (c == except || c->closing)
      continue;
    int rank = c->state == CONN_LINGER                                 ? 3
               : c->state == CONN_READ && !c->in_message && !c->writes ? 2
               : c->state == CONN_READ                                 ? 1
                                                                       : 0;
    if (rank > best_rank || (rank == best_rank && rank > 0 && c->since < best->since)) {
      best = c;
      best_rank = rank;
    }
  }
  return best;
}

/* c's peer as "ip" and "ip:port" ("?" when unknown). */
static void conn_peer(http_conn *c) {
  struct sockaddr_storage ss = {0};
  int sl = sizeof ss;
  int port = 0;
  snprintf(c->ip, sizeof c->ip, "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, c->ip, sizeof c->ip);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&ss, c->ip, sizeof c->ip);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
  }
  snprintf(c->peer, sizeof c->peer, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", c->ip, port);
}

/* ---- accepting ---- */

void http__conn_accept(http_server *s) {
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
  if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) != 0) {
    http__conn_close(c);
    return;
  }
  if (http__live_conns(s) > s->lim.max_connections) {
    http_conn *victim = eviction_victim(s, c);
    if (!victim) {
      http__conn_close(c); /* every slot is busy: closed at once */
      s->stats.refused_reserve++;
      http__log_refusal(s, "a connection closed at once: every slot is busy");
      return;
    }
    s->stats.evicted++;
    http__conn_close(victim);
  }
  uv_tcp_nodelay(&c->tcp, 1);
  conn_peer(c);
  llhttp_init(&c->parser, HTTP_REQUEST, &s->settings);
  c->parser.data = c;
  c->state = CONN_READ;
  c->since = uv_now(s->loop);
  http__conn_timer(c, s->lim.header_timeout_ms); /* to a complete request */
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    http__conn_close(c);
}

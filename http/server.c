/* The server: listening socket, limits, stop and statistics. Connections
 * are conn.c's; the server is freed once its last handle has closed. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

void http_limits_default(http_limits *l) {
  l->max_header_bytes = 16 * 1024;
  l->max_body_bytes = 1024 * 1024;
  l->max_connections = 1024;
  l->idle_timeout_ms = 30000;
  l->header_timeout_ms = 10000;
  l->reserve_connections = 0; /* max_connections / 16 */
  l->max_streams = 0;         /* max_connections / 2 */
  l->max_streams_per_addr = 8;
  l->stream_max_queue = 256 * 1024;
  l->stream_stall_ms = 5000;
  l->streams_max_queue = 32u << 20;
}

/* The limits from l over the defaults: zero fields keep them; the shares
 * of the slots follow max_connections when not given. */
static void limits_apply(http_limits *o, const http_limits *l) {
  http_limits_default(o);
  if (!l)
    return;
  if (l->max_header_bytes)
    o->max_header_bytes = l->max_header_bytes;
  if (l->max_body_bytes)
    o->max_body_bytes = l->max_body_bytes;
  if (l->max_connections > 0)
    o->max_connections = l->max_connections;
  if (l->idle_timeout_ms > 0)
    o->idle_timeout_ms = l->idle_timeout_ms;
  if (l->header_timeout_ms > 0)
    o->header_timeout_ms = l->header_timeout_ms;
  if (o->header_timeout_ms > o->idle_timeout_ms)
    o->header_timeout_ms = o->idle_timeout_ms;
  o->reserve_connections =
      l->reserve_connections > 0 ? l->reserve_connections : o->max_connections / 16;
  if (o->reserve_connections >= o->max_connections)
    o->reserve_connections = o->max_connections - 1;
  o->max_streams = l->max_streams > 0 ? l->max_streams : o->max_connections / 2;
  if (o->max_streams < 1)
    o->max_streams = 1;
  if (l->max_streams_per_addr > 0)
    o->max_streams_per_addr = l->max_streams_per_addr;
  if (l->stream_max_queue)
    o->stream_max_queue = l->stream_max_queue;
  if (l->stream_stall_ms > 0)
    o->stream_stall_ms = l->stream_stall_ms;
  if (l->streams_max_queue)
    o->streams_max_queue = l->streams_max_queue;
}

void http_server_hooks(http_server *s, const http_hooks *h) { s->hooks = *h; }

void http__log(http_server *s, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (s->hooks.log)
    s->hooks.log(line, s->hooks.ud);
  else
    fprintf(stderr, "http: %s\n", line);
}

void http__log_refusal(http_server *s, const char *what) {
  s->refusals++;
  uint64_t now = uv_now(s->loop);
  if (s->refusal_log_ms && now - s->refusal_log_ms < HTTP_REFUSAL_LOG_MS)
    return;
  http__log(s,
            "refused %llu request(s) in the last %d s, the latest: %s (%d connections, %d "
            "streams)",
            (unsigned long long)s->refusals, HTTP_REFUSAL_LOG_MS / 1000, what, http__live_conns(s),
            s->n_sse);
  s->refusals = 0;
  s->refusal_log_ms = now;
}

int http__live_conns(const http_server *s) { return s->n_conns - s->n_closing; }

void http__server_handle_closed(http_server *s) {
  s->open_handles--;
  if (!s->stopping || s->open_handles > 0)
    return;
  if (s->stop_cb)
    s->stop_cb(s->stop_ud);
  free(s);
}

static void on_handle_closed(uv_handle_t *h) { http__server_handle_closed(h->data); }

/* Stops the server's own handles; it is freed once every handle closed. */
static void server_close_handles(http_server *s) {
  s->stopping = 1;
  uv_close((uv_handle_t *)&s->listener, on_handle_closed);
  uv_close((uv_handle_t *)&s->keepalive, on_handle_closed);
}

static void on_connection(uv_stream_t *l, int status) {
  http_server *s = l->data;
  if (status < 0 || s->stopping)
    return;
  http__conn_accept(s);
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
  limits_apply(&s->lim, limits);
  http__parser_settings(&s->settings);
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
    server_close_handles(s); /* freed by the close callbacks, on the loop's next turn */
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
  s->stop_cb = cb;
  s->stop_ud = ud;
  server_close_handles(s);
  char *json = http__error_json(503, "server is stopping", NULL);
  for (http_conn *c = s->conns; c; c = c->next) {
    if (c->closing)
      continue;
    if (c->req && c->req->dispatched && c->state == CONN_BUSY && json) {
      /* Best effort: the 503 goes out only if it fits in the socket now. */
      http_write *w = http__response_new(503, "application/json", json, strlen(json), NULL,
                                         c->req->is_head, c->req->http10, 1);
      if (w && c->tcp.write_queue_size == 0) {
        uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
      }
      free(w);
      s->stats.responses_5xx++;
    }
    http__conn_close(c);
  }
  free(json);
}

void http_server_stats(const http_server *s, http_stats *out) {
  *out = s->stats;
  out->connections = s->n_conns;
  out->sse_streams = s->n_sse;
}

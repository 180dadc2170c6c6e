/* The HTTP server (http/, the scheduler's) as a client sees it: the
 * input is written as raw bytes to a real server on 127.0.0.1 in this
 * process's libuv loop (one connection per input, reset once the server
 * has answered), and the loop runs until the server has closed that
 * connection. So llhttp, the limits, the target and header indexing,
 * pipelining, keep-alive, 100-
 * continue, error answers and SSE all run as they do in the scheduler. The
 * handler reads every accessor and answers at once: /events* opens an
 * event stream, /error* answers with the decoded path and raw query in a
 * JSON error, anything else echoes what it saw. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "fuzz.h"
#include "http/http.h"

enum { FUZZ_HTTP_MAX_INPUT = 256 * 1024 };

static void handler(http_request *r, void *ud) {
  (void)ud;
  const char *m = http_method(r), *p = http_path(r), *q = http_query(r);
  size_t n;
  const char *body = http_body(r, &n);
  const char *ct = http_header(r, "Content-Type");
  const char *auth = http_header(r, "authorization");
  const char *limit, *status;
  if (http_query_param(r, "limit", &limit) == 1 && !limit)
    abort();
  if (http_query_param(r, "status", &status) == 1 && !status)
    abort();
  (void)http_peer(r);
  (void)http_request_start_ns(r);
  if (strncmp(p, "/events", 7) == 0) {
    char ev[64], data[512]; /* the request is freed once the stream starts */
    snprintf(ev, sizeof ev, "%s", q);
    snprintf(data, sizeof data, "%s\n%s", p, body);
    http_sse *s = http_sse_start(r);
    if (s) {
      http_sse_send(s, http_sse_last_id(s) + 1, ev, data);
      http_sse_send(s, 0, NULL, data);
    }
    return;
  }
  if (strncmp(p, "/error", 6) == 0) {
    http_respond_error(r, 400 + (int)(n % 100), p, *q ? q : NULL);
    return;
  }
  size_t len = strlen(m) + strlen(p) + strlen(q) + (ct ? strlen(ct) : 0) +
               (auth ? strlen(auth) : 0) + n + 16;
  char *out = http_alloc(r, len);
  if (!out) {
    http_respond_error(r, 503, "out of memory", NULL);
    return;
  }
  int w = snprintf(out, len, "%s %s?%s\n%s\n%s\n", m, p, q, ct ? ct : "", auth ? auth : "");
  memcpy(out + w, body, n);
  http_respond(r, 200, ct ? ct : "text/plain", out, (size_t)w + n, "X-Fuzz: 1\r\n");
}

typedef struct client {
  uv_poll_t poll;
  int fd;
  const uint8_t *data;
  size_t len, off;
  int shut, done; /* shut: everything written (or the server stopped reading) */
  size_t got;     /* bytes the server answered */
} client;

static void client_closed(uv_handle_t *h) {
  client *c = h->data;
  close(c->fd);
  c->done = 1;
}

static void client_io(uv_poll_t *h, int status, int events) {
  client *c = h->data;
  if (status < 0) {
    uv_close((uv_handle_t *)h, client_closed);
    return;
  }
  if ((events & UV_WRITABLE) && !c->shut) {
    while (c->off < c->len) {
      ssize_t w = send(c->fd, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
      if (w <= 0)
        break;
      c->off += (size_t)w;
    }
    if (c->off == c->len || (errno != EAGAIN && errno != EINTR)) {
      c->shut = 1;
      uv_poll_start(h, UV_READABLE, client_io);
    }
  }
  if (events & UV_READABLE) {
    char buf[65536];
    ssize_t r;
    while ((r = recv(c->fd, buf, sizeof buf, 0)) > 0)
      c->got += (size_t)r;
    if (r == 0 || (errno != EAGAIN && errno != EINTR)) /* the server closed */
      uv_close((uv_handle_t *)h, client_closed);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uv_loop_t loop;
  static http_server *srv;
  static int port;
  if (!srv) {
    http_limits lim;
    http_limits_default(&lim);
    lim.max_header_bytes = 4096; /* small limits: the bounds are reachable */
    lim.max_body_bytes = 8192;
    lim.idle_timeout_ms = 2000;
    char err[256];
    if (uv_loop_init(&loop) != 0 || !(srv = http_server_start(&loop, "127.0.0.1", 0, &lim, handler,
                                                              NULL, &port, err, sizeof err))) {
      fprintf(stderr, "fuzz_http: cannot start the server: %s\n", srv ? "" : err);
      abort();
    }
  }
  if (size > FUZZ_HTTP_MAX_INPUT)
    size = FUZZ_HTTP_MAX_INPUT;
  client c = {.data = data, .len = size};
  c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (c.fd < 0 || (connect(c.fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
    perror("fuzz_http: connect");
    abort();
  }
  c.poll.data = &c;
  if (uv_poll_init(&loop, &c.poll, c.fd) != 0 ||
      uv_poll_start(&c.poll, UV_READABLE | UV_WRITABLE, client_io) != 0)
    abort();
  /* Closing with a reset (SO_LINGER 0) once the server has answered,
   * rather than half-closing after the input: a FIN from this end first
   * leaves the connection in TIME_WAIT, and at thousands of inputs a second
   * those use up the host's ephemeral ports (binds failing with EADDRINUSE
   * in every program on it). The server reads the reset as it reads an EOF. */
  struct linger l = {.l_onoff = 1, .l_linger = 0};
  setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  http_stats st;
  uint64_t last_requests = UINT64_MAX;
  size_t last_got = 0;
  for (int still = 0; still < 8 && !c.done;) {
    uv_run(&loop, UV_RUN_NOWAIT);
    http_server_stats(srv, &st);
    still = !c.shut || st.requests != last_requests || c.got != last_got ? 0 : still + 1;
    last_requests = st.requests;
    last_got = c.got;
  }
  if (!uv_is_closing((uv_handle_t *)&c.poll))
    uv_close((uv_handle_t *)&c.poll, client_closed);
  http_server_stats(srv, &st);
  while (!c.done || st.connections > 0) {
    uv_run(&loop, UV_RUN_ONCE);
    http_server_stats(srv, &st);
  }
  return 0;
}

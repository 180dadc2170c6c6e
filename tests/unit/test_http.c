/* The HTTP server (http/http.h): a server on 127.0.0.1:0 in a libuv
 * loop on the main thread, driven by blocking-socket clients on a second
 * thread. Only the client thread CHECKs while the loop runs; what the
 * handler saw is checked after the thread is joined. Small limits (2 KiB
 * head, 64 KiB body, 400 ms idle) keep the timeout tests fast. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "http/http.h"

/* Only the "quick" server has the short idle timeout: on a loaded machine a
 * client thread can be descheduled for longer than IDLE_MS, which would cut
 * off unrelated tests. The others wait SLOW_IDLE_MS. */
enum { IDLE_MS = 400, SLOW_IDLE_MS = 20000, MAX_HEAD = 2048, MAX_BODY = 64 * 1024 };
enum { LIMITED_CONNS = 3 };
enum { SRV_MAIN, SRV_LIMITED, SRV_QUICK, SRV_V6, N_SRV };

typedef struct state {
  uv_loop_t *loop;
  http_server *srv[N_SRV]; /* srv[SRV_V6] is NULL without IPv6 */
  int port[N_SRV];
  http_request *held; /* answered only after the server stopped */
  int stopped;
  int sse_opened, sse_closed;
  int flood_sends, flood_rc;
  int slow_started, slow_answered;
  int arena_ok;
  char last_peer[64];
} state;

static state st;

/* ---- the handler ---- */

typedef struct slow_answer {
  uv_timer_t timer;
  http_request *req;
} slow_answer;

static void slow_closed(uv_handle_t *h) { free(h->data); }

static void slow_fire(uv_timer_t *t) {
  slow_answer *a = t->data;
  http_respond(a->req, 200, "text/plain", "slow done", 9, "");
  st.slow_answered++;
  uv_close((uv_handle_t *)&a->timer, slow_closed);
}

static void sse_gone(http_sse *s, void *ud) {
  (void)s;
  (void)ud;
  st.sse_closed++;
}

static void on_stopped(void *ud) {
  (void)ud;
  if (++st.stopped == N_SRV && st.held) {
    /* The client got its 503 from the server; this answer is dropped and
     * the request freed. */
    http_respond_json(st.held, 200, "{\"late\":true}");
    st.held = NULL;
  }
}

static void stop_fire(uv_timer_t *t) {
  for (int i = 0; i < N_SRV; i++) {
    if (st.srv[i])
      http_server_stop(st.srv[i], on_stopped, NULL);
    else
      on_stopped(NULL);
  }
  uv_close((uv_handle_t *)t, slow_closed);
}

static void handler(http_request *r, void *ud) {
  http_server *srv = *(http_server **)ud; /* ud: the server's slot in st */
  const char *m = http_method(r), *p = http_path(r);
  int get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
  snprintf(st.last_peer, sizeof st.last_peer, "%s", http_peer(r));
  if (strcmp(p, "/hello") == 0) {
    if (!get) {
      http_respond(r, 405, "application/json",
                   "{\"error\":{\"message\":\"method not allowed\",\"path\":null}}", 52,
                   "Allow: GET, HEAD\r\n");
      return;
    }
    http_respond_json(r, 200, "{\"hello\":\"world\"}");
  } else if (strcmp(p, "/echo") == 0 && strcmp(m, "POST") == 0) {
    size_t n;
    const char *b = http_body(r, &n);
    http_respond(r, 200, "text/plain", b, n, "");
  } else if (strncmp(p, "/path/", 6) == 0) {
    size_t n = strlen(p) + strlen(http_query(r)) + 2;
    char *out = http_alloc(r, n); /* the answer may live in the arena */
    snprintf(out, n, "%s\n%s", p, http_query(r));
    http_respond(r, 200, "text/plain", out, strlen(out), "");
  } else if (strcmp(p, "/param") == 0) {
    /* "/param?name=N&...": the decoded value of N as "rc:value" */
    const char *name, *v;
    if (http_query_param(r, "name", &name) != 1)
      name = "";
    int rc = http_query_param(r, name, &v);
    size_t n = (v ? strlen(v) : 4) + 16;
    char *out = http_alloc(r, n);
    snprintf(out, n, "[%d:%s]", rc, v ? v : "null");
    http_respond(r, 200, "text/plain", out, strlen(out), "");
  } else if (strcmp(p, "/peer") == 0) {
    http_respond(r, 200, "text/plain", http_peer(r), strlen(http_peer(r)), "");
  } else if (strcmp(p, "/slow") == 0) {
    slow_answer *a = calloc(1, sizeof *a);
    a->req = r;
    a->timer.data = a;
    uv_timer_init(st.loop, &a->timer);
    uv_timer_start(&a->timer, slow_fire, 50, 0);
    st.slow_started++;
  } else if (strcmp(p, "/events") == 0) {
    http_sse *s = http_sse_start(r);
    if (!s)
      return;
    st.sse_opened++;
    http_sse_on_close(s, sse_gone, NULL);
    uint64_t id = http_sse_last_id(s);
    http_sse_send(s, id + 1, "tick", "one");
    http_sse_send(s, id + 2, NULL, "line1\nline2");
    http_sse_send(s, id + 3, "tick", "three");
  } else if (strcmp(p, "/flood") == 0) {
    http_sse *s = http_sse_start(r);
    if (!s)
      return;
    st.sse_opened++;
    http_sse_on_close(s, sse_gone, NULL);
    static char big[64 * 1024];
    memset(big, 'x', sizeof big - 1);
    int rc = 0, i;
    for (i = 0; i < 2000 && rc == 0; i++)
      rc = http_sse_send(s, (uint64_t)i + 1, NULL, big);
    st.flood_sends = i;
    st.flood_rc = rc;
  } else if (strcmp(p, "/arena") == 0) {
    int ok = 1;
    unsigned char *ptrs[64];
    size_t sizes[64];
    for (int i = 0; i < 64; i++) {
      sizes[i] = (size_t)(i % 7 == 0 ? 100000 : 1 + i * 37);
      ptrs[i] = http_alloc(r, sizes[i]);
      if (!ptrs[i] || ((uintptr_t)ptrs[i] % sizeof(void *)) != 0)
        ok = 0;
      else
        memset(ptrs[i], i, sizes[i]);
    }
    for (int i = 0; i < 64 && ok; i++)
      for (size_t j = 0; j < sizes[i]; j++)
        if (ptrs[i][j] != (unsigned char)i) {
          ok = 0;
          break;
        }
    st.arena_ok = ok;
    http_respond_json(r, 200, ok ? "{\"arena\":\"ok\"}" : "{\"arena\":\"bad\"}");
  } else if (strcmp(p, "/stats") == 0) {
    http_stats s;
    http_server_stats(srv, &s);
    char *out = http_alloc(r, 256);
    snprintf(out, 256,
             "{\"requests\":%llu,\"4xx\":%llu,\"5xx\":%llu,\"connections\":%d,\"sse\":%d,"
             "\"flood_sends\":%d}",
             (unsigned long long)s.requests, (unsigned long long)s.responses_4xx,
             (unsigned long long)s.responses_5xx, s.connections, s.sse_streams, st.flood_sends);
    http_respond_json(r, 200, out);
  } else if (strcmp(p, "/hold") == 0) {
    st.held = r; /* never answered: the stop answers 503 */
    uv_timer_t *t = malloc(sizeof *t);
    t->data = t;
    uv_timer_init(st.loop, t);
    uv_timer_start(t, stop_fire, 20, 0);
  } else {
    http_respond_error(r, 404, "no such route", NULL);
  }
}

/* ---- blocking clients ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_str(int fd, const char *s) {
  size_t n = strlen(s), off = 0;
  while (off < n) {
    ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
    if (k <= 0)
      return;
    off += (size_t)k;
  }
}

typedef struct response {
  int status;
  char head[4096];
  char *body;
  size_t body_len;
} response;

/* A per-connection input buffer so that pipelined answers are split right. */
typedef struct client {
  int fd;
  char buf[1 << 16];
  size_t len;
} client;

static int client_fill(client *c) {
  if (c->len == sizeof c->buf)
    return -1;
  ssize_t k = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
  if (k <= 0)
    return -1;
  c->len += (size_t)k;
  return 0;
}

static const char *header_in(const char *head, const char *name) {
  static char v[256];
  size_t n = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
    if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
      const char *s = p + 3 + n;
      while (*s == ' ')
        s++;
      size_t l = strcspn(s, "\r");
      if (l >= sizeof v)
        l = sizeof v - 1;
      memcpy(v, s, l);
      v[l] = '\0';
      return v;
    }
  }
  return NULL;
}

/* Reads one answer; no_body for HEAD. Returns 0, or -1 on EOF/timeout. */
static int read_response(client *c, response *r, int no_body) {
  memset(r, 0, sizeof *r);
  char *end;
  while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
    if (client_fill(c) != 0)
      return -1;
  size_t hl = (size_t)(end - c->buf) + 4;
  if (hl >= sizeof r->head)
    return -1;
  memcpy(r->head, c->buf, hl);
  r->head[hl] = '\0';
  if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
    return -1;
  const char *cl = header_in(r->head, "Content-Length");
  size_t blen = cl && !no_body ? strtoul(cl, NULL, 10) : 0;
  while (c->len < hl + blen)
    if (client_fill(c) != 0)
      return -1;
  r->body = malloc(blen + 1);
  memcpy(r->body, c->buf + hl, blen);
  r->body[blen] = '\0';
  r->body_len = blen;
  memmove(c->buf, c->buf + hl + blen, c->len - hl - blen);
  c->len -= hl + blen;
  return 0;
}

/* 1 when the server closed the connection (EOF or reset) within the receive timeout. */
static int closed_by_server(client *c) {
  char b[4096];
  for (;;) {
    ssize_t k = recv(c->fd, b, sizeof b, 0);
    if (k == 0)
      return 1;
    if (k < 0)
      return errno == ECONNRESET;
  }
}

static client *client_open(int port) {
  client *c = calloc(1, sizeof *c);
  c->fd = connect_to(port);
  return c;
}

static void client_close(client *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

/* One request on a fresh connection; the answer in *r (free r->body). */
static int roundtrip(int port, const char *req, response *r) {
  client *c = client_open(port);
  send_str(c->fd, req);
  int rc = read_response(c, r, strncmp(req, "HEAD ", 5) == 0);
  client_close(c);
  return rc;
}

static void check_status(int port, const char *req, int status, const char *body_has) {
  response r;
  int rc = roundtrip(port, req, &r);
  CHECK_INT_EQ(rc, 0);
  CHECK_INT_EQ(r.status, status);
  if (body_has && !(r.body && strstr(r.body, body_has))) {
    fprintf(stderr, "body of %d answer lacks %s: %s\n", r.status, body_has, r.body);
    CHECK(0);
  }
  free(r.body);
}

/* ---- scenarios ---- */

static void test_basic(int port) {
  response r;
  CHECK_INT_EQ(roundtrip(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "{\"hello\":\"world\"}") == 0);
  const char *ct = header_in(r.head, "Content-Type");
  CHECK(ct && strcmp(ct, "application/json") == 0);
  free(r.body);

  /* 404 and 405 come from the handler, with the JSON error shape. */
  check_status(port, "GET /nope HTTP/1.1\r\n\r\n", 404,
               "{\"error\":{\"message\":\"no such route\",\"path\":null}}");
  CHECK_INT_EQ(roundtrip(port, "DELETE /hello HTTP/1.1\r\n\r\n", &r), 0);
  CHECK_INT_EQ(r.status, 405);
  CHECK(header_in(r.head, "Allow") && strcmp(header_in(r.head, "Allow"), "GET, HEAD") == 0);
  free(r.body);

  /* the peer is "ip:port" */
  CHECK_INT_EQ(roundtrip(port, "GET /peer HTTP/1.1\r\n\r\n", &r), 0);
  CHECK(r.body && strncmp(r.body, "127.0.0.1:", 10) == 0);
  free(r.body);

  /* query parameters: first match, '+' and %XX decoded, bare names, bad encodings */
  check_status(port, "GET /param?name=a&a=x%20y+z&a=2 HTTP/1.1\r\n\r\n", 200, "[1:x y z]");
  check_status(port, "GET /param?name=b&a=1&b HTTP/1.1\r\n\r\n", 200, "[1:]");
  check_status(port, "GET /param?name=ab&a=1&b=2 HTTP/1.1\r\n\r\n", 200, "[0:null]");
  check_status(port, "GET /param?name=a&a=%zz HTTP/1.1\r\n\r\n", 200, "[-1:null]");
  check_status(port, "GET /param?name=a&a=%00 HTTP/1.1\r\n\r\n", 200, "[-1:null]");
  check_status(port, "GET /param?name=a&a=%4 HTTP/1.1\r\n\r\n", 200, "[-1:null]");

  /* the arena hands out aligned, independent blocks, large ones included */
  check_status(port, "GET /arena HTTP/1.1\r\n\r\n", 200, "\"ok\"");
}

static void test_keepalive_and_pipelining(int port) {
  client *c = client_open(port);
  response r;
  for (int i = 0; i < 2; i++) {
    send_str(c->fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_INT_EQ(read_response(c, &r, 0), 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(header_in(r.head, "Connection") == NULL);
    free(r.body);
  }
  send_str(c->fd, "POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "hello world") == 0);
  free(r.body);

  /* a body near the limit, over several reads */
  enum { BIG = 60000 };
  char *req = malloc(BIG + 128);
  int hl = sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n", BIG);
  for (int i = 0; i < BIG; i++)
    req[hl + i] = (char)('a' + i % 26);
  req[hl + BIG] = '\0';
  send_str(c->fd, req);
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body_len == BIG && memcmp(r.body, req + hl, BIG) == 0);
  free(r.body);
  free(req);

  /* three requests in one write, one of them async: answers in order */
  send_str(c->fd, "GET /slow HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                  "GET /path/p%41?q=1 HTTP/1.1\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK(r.body && strcmp(r.body, "slow done") == 0);
  free(r.body);
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK(r.body && strcmp(r.body, "abc") == 0);
  free(r.body);
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK(r.body && strcmp(r.body, "/path/pA\nq=1") == 0);
  free(r.body);

  /* chunked request body */
  send_str(c->fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK(r.body && strcmp(r.body, "abcdefg") == 0);
  free(r.body);

  /* Expect: 100-continue gets the interim answer before the body is sent */
  send_str(c->fd, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 100);
  free(r.body);
  send_str(c->fd, "body");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "body") == 0);
  free(r.body);
  client_close(c);
}

static void test_close_semantics(int port) {
  response r;
  /* Connection: close */
  client *c = client_open(port);
  send_str(c->fd, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(header_in(r.head, "Connection") && strcmp(header_in(r.head, "Connection"), "close") == 0);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  /* HTTP/1.0: closed after the answer unless keep-alive is asked for */
  c = client_open(port);
  send_str(c->fd, "GET /hello HTTP/1.0\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  c = client_open(port);
  for (int i = 0; i < 2; i++) {
    send_str(c->fd, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    CHECK_INT_EQ(read_response(c, &r, 0), 0);
    CHECK_INT_EQ(r.status, 200);
    const char *cn = header_in(r.head, "Connection");
    CHECK(cn && strcmp(cn, "keep-alive") == 0);
    free(r.body);
  }
  client_close(c);

  /* HEAD: the length of the GET body, no body; the next answer is intact */
  c = client_open(port);
  send_str(c->fd, "HEAD /hello HTTP/1.1\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 1), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(header_in(r.head, "Content-Length") &&
        strcmp(header_in(r.head, "Content-Length"), "17") == 0);
  free(r.body);
  send_str(c->fd, "GET /hello HTTP/1.1\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "{\"hello\":\"world\"}") == 0);
  free(r.body);
  client_close(c);
}

static void test_bad_requests(int port) {
  response r;
  /* garbage: 400 with a JSON error, then closed */
  client *c = client_open(port);
  send_str(c->fd, "GARBAGE\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 400);
  CHECK(r.body && strstr(r.body, "{\"error\":{\"message\":") == r.body &&
        strstr(r.body, "\"path\":null}}"));
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);
  check_status(port, "GET /hello HTTP/1.1\r\nBad Header\r\n\r\n", 400, "\"error\"");
  check_status(port, "GET /hello HTTP/9.9\r\n\r\n", 400, "\"error\"");
  check_status(port,
               "GET /hello HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
               400, "\"error\"");

  /* 413 as soon as Content-Length is over the limit: no body is sent */
  c = client_open(port);
  send_str(c->fd, "POST /echo HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 413);
  CHECK(r.body && strstr(r.body, "too large"));
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  /* 413 for a chunked body that grows over the limit */
  c = client_open(port);
  send_str(c->fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  char *chunk = malloc(16 * 1024 + 32);
  int n = sprintf(chunk, "%x\r\n", 16 * 1024);
  memset(chunk + n, 'y', 16 * 1024);
  strcpy(chunk + n + 16 * 1024, "\r\n");
  for (int i = 0; i < 5; i++)
    send_str(c->fd, chunk);
  free(chunk);
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 413);
  free(r.body);
  client_close(c);

  /* 431: a head over 2 KiB, in one header or in many */
  char big[4096];
  int k = snprintf(big, sizeof big, "GET /hello HTTP/1.1\r\nX-Big: ");
  memset(big + k, 'z', 3000);
  strcpy(big + k + 3000, "\r\n\r\n");
  check_status(port, big, 431, "too large");
  k = snprintf(big, sizeof big, "GET /hello HTTP/1.1\r\n");
  for (int i = 0; i < 300; i++)
    k += snprintf(big + k, sizeof big - (size_t)k, "A%d: b\r\n", i);
  strcat(big, "\r\n");
  check_status(port, big, 431, "too large");

  /* percent-decoding of the path; the query stays raw */
  CHECK_INT_EQ(roundtrip(port, "GET /path/a%20b%2Fc%e2%82%ac?x=%20y&z HTTP/1.1\r\n\r\n", &r), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "/path/a b/c\xe2\x82\xac\nx=%20y&z") == 0);
  free(r.body);
  CHECK_INT_EQ(roundtrip(port, "GET http://example.org/path/abs?q HTTP/1.1\r\n\r\n", &r), 0);
  CHECK(r.body && strcmp(r.body, "/path/abs\nq") == 0);
  free(r.body);
  check_status(port, "GET /path/a%00b HTTP/1.1\r\n\r\n", 400, "%00");
  check_status(port, "GET /path/a%zzb HTTP/1.1\r\n\r\n", 400, "percent");
  check_status(port, "GET /path/a%4 HTTP/1.1\r\n\r\n", 400, "percent");
  check_status(port, "GET /path/a% HTTP/1.1\r\n\r\n", 400, "percent");
}

static void test_async(int port) {
  response r;
  double t0 = now_ms();
  CHECK_INT_EQ(roundtrip(port, "GET /slow HTTP/1.1\r\n\r\n", &r), 0);
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strcmp(r.body, "slow done") == 0);
  CHECK(now_ms() - t0 >= 45); /* the handler's timer is 50 ms; 5 ms for timer rounding */
  free(r.body);

  /* the client leaves before the answer: it is dropped, nothing leaks */
  for (int i = 0; i < 3; i++) {
    client *c = client_open(port);
    send_str(c->fd, "GET /slow HTTP/1.1\r\n\r\n");
    usleep(i * 10000);
    client_close(c);
  }
  usleep(150 * 1000);
  check_status(port, "GET /hello HTTP/1.1\r\n\r\n", 200, "world");
}

/* Reads SSE events up to n; returns the text after the answer's head. */
static char *read_events(client *c, int n, response *head) {
  if (read_response(c, head, 1) != 0)
    return NULL;
  for (;;) {
    int count = 0;
    for (char *p = c->buf; (p = memmem(p, c->len - (size_t)(p - c->buf), "\n\n", 2)); p += 2)
      count++;
    if (count >= n)
      break;
    if (client_fill(c) != 0)
      return NULL;
  }
  char *out = malloc(c->len + 1);
  memcpy(out, c->buf, c->len);
  out[c->len] = '\0';
  return out;
}

static void test_sse(int port) {
  response h;
  client *c = client_open(port);
  send_str(c->fd, "GET /events HTTP/1.1\r\nLast-Event-ID: 5\r\n\r\n");
  char *ev = read_events(c, 3, &h);
  CHECK_INT_EQ(h.status, 200);
  const char *ct = header_in(h.head, "Content-Type");
  CHECK(ct && strcmp(ct, "text/event-stream") == 0);
  const char *cc = header_in(h.head, "Cache-Control");
  CHECK(cc && strcmp(cc, "no-cache") == 0);
  free(h.body);
  CHECK(ev && strcmp(ev, "id: 6\nevent: tick\ndata: one\n\n"
                         "id: 7\ndata: line1\ndata: line2\n\n"
                         "id: 8\nevent: tick\ndata: three\n\n") == 0);
  if (ev)
    free(ev);
  client_close(c);

  c = client_open(port);
  send_str(c->fd, "GET /events HTTP/1.1\r\n\r\n");
  ev = read_events(c, 3, &h);
  free(h.body);
  CHECK(ev && strncmp(ev, "id: 1\n", 6) == 0 && strstr(ev, "id: 3\n"));
  free(ev);
  client_close(c);

  /* a client that does not read is cut off once 4 MiB are queued */
  c = client_open(port);
  send_str(c->fd, "GET /flood HTTP/1.1\r\n\r\n");
  /* not a byte is read until the handler has finished sending (it reports
   * how many events went out in /stats) */
  int done = 0;
  for (double t0 = now_ms(); !done && now_ms() - t0 < 10000;) {
    response r;
    CHECK_INT_EQ(roundtrip(port, "GET /stats HTTP/1.1\r\n\r\n", &r), 0);
    done = r.body && !strstr(r.body, "\"flood_sends\":0}");
    free(r.body);
    if (!done)
      usleep(10 * 1000);
  }
  CHECK(done);
  size_t total = 0;
  char buf[65536];
  for (;;) {
    ssize_t k = recv(c->fd, buf, sizeof buf, 0);
    if (k <= 0)
      break;
    total += (size_t)k;
  }
  CHECK(total > 0);
  client_close(c);
}

static void test_timeouts(int port) {
  /* idle: a connection that sends nothing is closed after IDLE_MS */
  double t0 = now_ms(); /* before connect: the server's clock starts later */
  client *c = client_open(port);
  CHECK(closed_by_server(c));
  double dt = now_ms() - t0;
  CHECK(dt >= IDLE_MS - 50 && dt < 5000); /* the upper bound only says "closed" */
  client_close(c);

  /* slow loris: a head dribbled in forever gets 408 */
  c = client_open(port);
  send_str(c->fd, "GET /hello HTTP/1.1\r\n");
  t0 = now_ms();
  struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
  int i = 0;
  while (now_ms() - t0 < 3000 && poll(&pfd, 1, 50) == 0) {
    char line[32];
    snprintf(line, sizeof line, "X-%d: a\r\n", i++);
    send_str(c->fd, line);
  }
  response r;
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 408);
  CHECK(now_ms() - t0 < 5000);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  /* keep-alive idle time counts from the last answer */
  c = client_open(port);
  t0 = now_ms(); /* before the request: the server's clock starts at its answer */
  send_str(c->fd, "GET /hello HTTP/1.1\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  free(r.body);
  CHECK(closed_by_server(c));
  CHECK(now_ms() - t0 >= IDLE_MS - 50);
  client_close(c);
}

/* Mutated and random requests, all at once: each gets an answer or a close
 * (a truncated head waits for the quick server's 408), and the server lives. */
static void test_garbage(int port) {
  enum { N = 40 };
  static const char *seeds[] = {
      "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "GET /path/%41%42?x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
  };
  unsigned seed = 12345;
  client *cs[N];
  for (int i = 0; i < N; i++) {
    char buf[512];
    const char *src = seeds[i % 4];
    size_t n = strlen(src);
    memcpy(buf, src, n);
    if (i % 5 == 4) { /* random bytes */
      n = 1 + rand_r(&seed) % 300;
      for (size_t j = 0; j < n; j++)
        buf[j] = (char)(rand_r(&seed) & 0xff);
    } else { /* a few bytes flipped */
      for (int k = 0; k < 1 + i % 4; k++)
        buf[rand_r(&seed) % n] = (char)(rand_r(&seed) & 0xff);
    }
    cs[i] = client_open(port);
    size_t off = 0;
    while (off < n) {
      ssize_t k = send(cs[i]->fd, buf + off, n - off, MSG_NOSIGNAL);
      if (k <= 0)
        break;
      off += (size_t)k;
    }
  }
  for (int i = 0; i < N; i++) {
    response r;
    while (read_response(cs[i], &r, 0) == 0) {
      CHECK(r.status >= 200 && r.status < 600);
      free(r.body);
    }
    client_close(cs[i]);
  }
  check_status(port, "GET /hello HTTP/1.1\r\n\r\n", 200, "world");
}

static void test_connection_limit(int port) {
  client *cs[LIMITED_CONNS];
  response r;
  for (int i = 0; i < LIMITED_CONNS; i++) {
    cs[i] = client_open(port);
    send_str(cs[i]->fd, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK_INT_EQ(read_response(cs[i], &r, 0), 0);
    free(r.body);
  }
  client *extra = client_open(port); /* the kernel accepts; the server closes it */
  CHECK(extra->fd >= 0 && closed_by_server(extra));
  client_close(extra);
  client_close(cs[0]);
  /* a place is free once the server has seen cs[0] go: poll for it */
  cs[0] = NULL;
  double t0 = now_ms();
  while (!cs[0] && now_ms() - t0 < 3000) {
    client *c = client_open(port);
    send_str(c->fd, "GET /stats HTTP/1.1\r\n\r\n");
    if (read_response(c, &r, 0) == 0) {
      cs[0] = c;
    } else {
      client_close(c);
      usleep(20 * 1000);
    }
  }
  CHECK(cs[0] != NULL);
  if (!cs[0])
    return;
  CHECK_INT_EQ(r.status, 200);
  CHECK(r.body && strstr(r.body, "\"connections\":3"));
  free(r.body);
  for (int i = 0; i < LIMITED_CONNS; i++)
    client_close(cs[i]);
}

static void test_ipv6(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
  a.sin6_addr = in6addr_loopback;
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CHECK_INT_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  client *c = calloc(1, sizeof *c);
  c->fd = fd;
  send_str(fd, "GET /peer HTTP/1.1\r\n\r\n");
  response r;
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK(r.body && strncmp(r.body, "[::1]:", 6) == 0);
  free(r.body);
  client_close(c);
}

static void test_stop(int port) {
  response r;
  /* an open stream and a request the handler never answers */
  client *sse = client_open(port);
  send_str(sse->fd, "GET /events HTTP/1.1\r\n\r\n");
  char *ev = read_events(sse, 3, &r);
  free(r.body);
  free(ev);
  client *c = client_open(port);
  send_str(c->fd, "GET /hold HTTP/1.1\r\n\r\n");
  CHECK_INT_EQ(read_response(c, &r, 0), 0);
  CHECK_INT_EQ(r.status, 503);
  CHECK(r.body && strstr(r.body, "stopping"));
  free(r.body);
  CHECK(closed_by_server(c));
  CHECK(closed_by_server(sse));
  client_close(c);
  client_close(sse);
}

static void *client_main(void *arg) {
  (void)arg;
  int port = st.port[SRV_MAIN];
  test_basic(port);
  test_keepalive_and_pipelining(port);
  test_close_semantics(port);
  test_bad_requests(port);
  test_async(port);
  test_sse(port);
  test_timeouts(st.port[SRV_QUICK]);
  test_garbage(st.port[SRV_QUICK]);
  test_connection_limit(st.port[SRV_LIMITED]);
  if (st.srv[SRV_V6])
    test_ipv6(st.port[SRV_V6]);
  else
    printf("note: no IPv6 loopback here; the IPv6 part is skipped\n");

  /* every earlier client has gone once the server has seen them go */
  response r;
  int quiet = 0;
  for (double t0 = now_ms(); !quiet && now_ms() - t0 < 3000;) {
    CHECK_INT_EQ(roundtrip(port, "GET /stats HTTP/1.1\r\n\r\n", &r), 0);
    quiet = r.body && strstr(r.body, "\"sse\":0") && strstr(r.body, "\"connections\":1");
    if (quiet)
      printf("stats before stop: %s\n", r.body);
    free(r.body);
    if (!quiet)
      usleep(20 * 1000);
  }
  CHECK(quiet);

  test_stop(port);
  return NULL;
}

static void blocker_stopped(void *ud) { ++*(int *)ud; }

int main(void) {
  uv_loop_t loop;
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  st.loop = &loop;
  http_limits lim;
  http_limits_default(&lim);
  CHECK_INT_EQ(lim.max_header_bytes, 16 * 1024);
  CHECK_INT_EQ(lim.max_body_bytes, 1024 * 1024);
  CHECK_INT_EQ(lim.max_connections, 1024);
  CHECK_INT_EQ(lim.idle_timeout_ms, 30000);
  lim.max_header_bytes = MAX_HEAD;
  lim.max_body_bytes = MAX_BODY;
  lim.max_connections = 64;
  lim.idle_timeout_ms = IDLE_MS;
  char err[256];

  /* failures: a bad address, a port in use */
  CHECK(http_server_start(&loop, "no.such.host", 0, &lim, handler, NULL, NULL, err, sizeof err) ==
        NULL);
  CHECK(strstr(err, "no.such.host") != NULL);

  int used_port = 0;
  http_server *blocker =
      http_server_start(&loop, "127.0.0.1", 0, &lim, handler, NULL, &used_port, err, sizeof err);
  CHECK(blocker != NULL);
  CHECK(http_server_start(&loop, "127.0.0.1", used_port, &lim, handler, NULL, NULL, err,
                          sizeof err) == NULL);
  CHECK(strstr(err, "address already in use") != NULL);
  int blocker_done = 0;
  if (blocker)
    http_server_stop(blocker, blocker_stopped, &blocker_done);
  uv_run(&loop, UV_RUN_DEFAULT); /* frees both */
  CHECK_INT_EQ(blocker_done, 1);

  /* the servers under test; ud is the server's slot (for /stats) */
  for (int i = 0; i < N_SRV; i++) {
    http_limits l = lim;
    l.idle_timeout_ms = i == SRV_QUICK ? IDLE_MS : SLOW_IDLE_MS;
    if (i == SRV_LIMITED)
      l.max_connections = LIMITED_CONNS;
    st.srv[i] = http_server_start(&loop, i == SRV_V6 ? "::1" : "127.0.0.1", 0, &l, handler,
                                  &st.srv[i], &st.port[i], err, sizeof err);
    if (!st.srv[i] && i != SRV_V6) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
  }
  uv_run(&loop, UV_RUN_NOWAIT); /* frees a failed IPv6 start */
  /* a client gone mid-answer must not kill the process */
  struct sigaction sa;
  CHECK(sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN);

  pthread_t th;
  pthread_create(&th, NULL, client_main, NULL);
  uv_run(&loop, UV_RUN_DEFAULT); /* returns when the servers stopped and every handle closed */
  pthread_join(th, NULL);

  CHECK_INT_EQ(st.stopped, N_SRV);
  CHECK(st.held == NULL);
  CHECK_INT_EQ(st.sse_opened, 4);
  CHECK_INT_EQ(st.sse_closed, 4);
  CHECK_INT_EQ(st.flood_rc, UV_ENOBUFS);
  CHECK(st.flood_sends > 1 && st.flood_sends < 2000);
  CHECK_INT_EQ(st.slow_started, st.slow_answered);
  CHECK(st.arena_ok);
  printf("flood: cut off after %d events of 64 KiB\n", st.flood_sends);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  CHECK_DONE();
}

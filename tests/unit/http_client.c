/* The HTTP tests' servers, handler and blocking clients (http_client.h). */
#include "http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

http_test_state ht;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the handler ---- */

typedef struct slow_answer {
  uv_timer_t timer;
  http_request *req;
} slow_answer;

static void slow_closed(uv_handle_t *h) { free(h->data); }

static void slow_fire(uv_timer_t *t) {
  slow_answer *a = t->data;
  http_respond(a->req, 200, "text/plain", "slow done", 9, "");
  ht.slow_answered++;
  uv_close((uv_handle_t *)&a->timer, slow_closed);
}

static void sse_gone(http_sse *s, void *ud) {
  (void)s;
  (void)ud;
  ht.sse_closed++;
}

/* The request as a counted stream; NULL when its client has gone. */
static http_sse *sse_open(http_request *r) {
  http_sse *s = http_sse_start(r);
  if (s) {
    ht.sse_opened++;
    http_sse_on_close(s, sse_gone, NULL);
  }
  return s;
}

/* /stall: a stream fed 8 KiB events every 2 ms until it queues more than
 * ?kib= KiB (default GUARD_QUEUE), then left alone; its client reads
 * nothing. */
typedef struct stall {
  uv_timer_t timer;
  http_sse *s;
  size_t stop_at;
  int n;
} stall;

static void stall_gone(http_sse *s, void *ud) {
  (void)s;
  stall *st = ud;
  st->s = NULL;
  ht.stall_streams--;
  ht.sse_closed++;
  if (!uv_is_closing((uv_handle_t *)&st->timer))
    uv_close((uv_handle_t *)&st->timer, slow_closed);
}

static void stall_fire(uv_timer_t *t) {
  stall *st = t->data;
  static char ev[8 * 1024];
  memset(ev, 'y', sizeof ev - 1);
  if (st->s && http_sse_queued(st->s) <= st->stop_at && st->n < 10000) {
    st->n++;
    http_sse_send(st->s, (uint64_t)st->n, "fill", ev);
  } else {
    uv_timer_stop(t);
  }
}

static void stall_open(http_request *r) {
  const char *kib;
  size_t stop_at = GUARD_QUEUE;
  if (http_query_param(r, "kib", &kib) == 1)
    stop_at = strtoul(kib, NULL, 10) * 1024;
  http_sse *s = http_sse_start(r);
  if (!s)
    return;
  ht.sse_opened++;
  ht.stall_streams++;
  stall *st = calloc(1, sizeof *st);
  st->s = s;
  st->stop_at = stop_at;
  st->timer.data = st;
  uv_timer_init(ht.loop, &st->timer);
  uv_timer_start(&st->timer, stall_fire, 0, 2);
  http_sse_on_close(s, stall_gone, st);
}

static void on_stopped(void *ud) {
  (void)ud;
  if (++ht.stopped == N_SRV && ht.held) {
    /* The client got its 503 from the server; this answer is dropped and
     * the request freed. */
    http_respond_json(ht.held, 200, "{\"late\":true}");
    ht.held = NULL;
  }
}

static void stop_fire(uv_timer_t *t) {
  for (int i = 0; i < N_SRV; i++) {
    if (ht.srv[i])
      http_server_stop(ht.srv[i], on_stopped, NULL);
    else
      on_stopped(NULL);
  }
  uv_close((uv_handle_t *)t, slow_closed);
}

void http_test_handler(http_request *r, void *ud) {
  http_server *srv = *(http_server **)ud; /* ud: the server's slot in ht */
  const char *m = http_method(r), *p = http_path(r);
  int get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
  snprintf(ht.last_peer, sizeof ht.last_peer, "%s", http_peer(r));
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
    uv_timer_init(ht.loop, &a->timer);
    uv_timer_start(&a->timer, slow_fire, 50, 0);
    ht.slow_started++;
  } else if (strcmp(p, "/events") == 0) {
    http_sse *s = sse_open(r);
    if (!s)
      return;
    uint64_t id = http_sse_last_id(s);
    http_sse_send(s, id + 1, "tick", "one");
    http_sse_send(s, id + 2, NULL, "line1\nline2");
    http_sse_send(s, id + 3, "tick", "three");
  } else if (strcmp(p, "/flood") == 0) {
    http_sse *s = sse_open(r);
    if (!s)
      return;
    static char big[64 * 1024];
    memset(big, 'x', sizeof big - 1);
    int rc = 0, i;
    for (i = 0; i < 2000 && rc == 0; i++)
      rc = http_sse_send(s, (uint64_t)i + 1, NULL, big);
    ht.flood_sends = i;
    ht.flood_rc = rc;
  } else if (strcmp(p, "/healthz") == 0) {
    http_respond_json(r, 200, "{\"ok\":true}");
  } else if (strcmp(p, "/park") == 0 && ht.n_parked < 16) {
    ht.parked[ht.n_parked++] = r; /* a busy slot until /release */
  } else if (strcmp(p, "/release") == 0) {
    char *out = http_alloc(r, 32);
    snprintf(out, 32, "{\"released\":%d}", ht.n_parked);
    while (ht.n_parked > 0)
      http_respond_json(ht.parked[--ht.n_parked], 200, "{\"parked\":true}");
    http_respond_json(r, 200, out);
  } else if (strcmp(p, "/stall") == 0) {
    stall_open(r);
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
    ht.arena_ok = ok;
    http_respond_json(r, 200, ok ? "{\"arena\":\"ok\"}" : "{\"arena\":\"bad\"}");
  } else if (strcmp(p, "/stats") == 0) {
    http_stats s;
    http_server_stats(srv, &s);
    char *out = http_alloc(r, 512);
    snprintf(out, 512,
             "{\"requests\":%llu,\"4xx\":%llu,\"5xx\":%llu,\"connections\":%d,\"sse\":%d,"
             "\"refused_reserve\":%llu,\"refused_streams\":%llu,\"evicted\":%llu,"
             "\"stalled\":%llu,\"flood_sends\":%d}",
             (unsigned long long)s.requests, (unsigned long long)s.responses_4xx,
             (unsigned long long)s.responses_5xx, s.connections, s.sse_streams,
             (unsigned long long)s.refused_reserve, (unsigned long long)s.refused_streams,
             (unsigned long long)s.evicted, (unsigned long long)s.stalled_streams, ht.flood_sends);
    http_respond_json(r, 200, out);
  } else if (strcmp(p, "/hold") == 0) {
    ht.held = r; /* never answered: the stop answers 503 */
    uv_timer_t *t = malloc(sizeof *t);
    t->data = t;
    uv_timer_init(ht.loop, t);
    uv_timer_start(t, stop_fire, 20, 0);
  } else {
    http_respond_error(r, 404, "no such route", NULL);
  }
}

/* ---- blocking clients ---- */

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int connect_to(int port) {
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

int connect_from(const char *ip, int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct sockaddr_in from = {.sin_family = AF_INET};
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (rcvbuf > 0) /* before connect: the window is agreed then */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (inet_pton(AF_INET, ip, &from.sin_addr) != 1 ||
      bind(fd, (struct sockaddr *)&from, sizeof from) != 0 ||
      connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int guard_log(char *out, size_t n) {
  pthread_mutex_lock(&log_lock);
  int lines = ht.log_lines;
  snprintf(out, n, "%s", ht.last_log);
  pthread_mutex_unlock(&log_lock);
  return lines;
}

int guard_stat(client *probe, const char *name) {
  static const char req[] = "GET /stats HTTP/1.1\r\nAuthorization: Bearer " GUARD_TOKEN "\r\n\r\n";
  response r;
  int v = -1, rc;
  if (probe) {
    send_str(probe->fd, req);
    rc = read_response(probe, &r, 0);
  } else {
    rc = roundtrip(ht.port[SRV_GUARD], req, &r);
  }
  if (rc == 0) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = r.body ? strstr(r.body, key) : NULL;
    if (p)
      v = atoi(p + strlen(key));
    free(r.body);
  }
  return v;
}

static void guard_log_line(const char *line, void *ud) {
  (void)ud;
  printf("guard log: %s\n", line);
  pthread_mutex_lock(&log_lock);
  ht.log_lines++;
  snprintf(ht.last_log, sizeof ht.last_log, "%s", line);
  pthread_mutex_unlock(&log_lock);
}

/* The guard's reserved slots: /healthz and the right bearer token. */
static int guard_reserved(http_request *r, void *ud) {
  (void)ud;
  const char *a = http_header(r, "Authorization");
  return strcmp(http_path(r), "/healthz") == 0 || (a && strcmp(a, "Bearer " GUARD_TOKEN) == 0);
}

void send_str(int fd, const char *s) {
  size_t n = strlen(s), off = 0;
  while (off < n) {
    ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
    if (k <= 0)
      return;
    off += (size_t)k;
  }
}

int client_fill(client *c) {
  if (c->len == sizeof c->buf)
    return -1;
  ssize_t k = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
  if (k <= 0)
    return -1;
  c->len += (size_t)k;
  return 0;
}

const char *header_in(const char *head, const char *name) {
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

int read_response(client *c, response *r, int no_body) {
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

void exchange(client *c, const char *req, int status, response *r) {
  if (req)
    send_str(c->fd, req);
  CHECK_INT_EQ(read_response(c, r, req && strncmp(req, "HEAD ", 5) == 0), 0);
  if (status)
    CHECK_INT_EQ(r->status, status);
}

void expect_body(client *c, const char *req, int status, const char *body) {
  response r;
  exchange(c, req, status, &r);
  CHECK(r.body && strcmp(r.body, body) == 0);
  free(r.body);
}

int closed_by_server(client *c) {
  char b[4096];
  for (;;) {
    ssize_t k = recv(c->fd, b, sizeof b, 0);
    if (k == 0)
      return 1;
    if (k < 0)
      return errno == ECONNRESET;
  }
}

client *client_open(int port) {
  client *c = calloc(1, sizeof *c);
  c->fd = connect_to(port);
  return c;
}

void client_close(client *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

int roundtrip(int port, const char *req, response *r) {
  client *c = client_open(port);
  send_str(c->fd, req);
  int rc = read_response(c, r, strncmp(req, "HEAD ", 5) == 0);
  client_close(c);
  return rc;
}

void check_status(int port, const char *req, int status, const char *body_has) {
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

char *read_events(client *c, int n, response *head) {
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

client *events_open(int port, const char *headers, int n, response *head, char **ev) {
  client *c = client_open(port);
  char req[512];
  snprintf(req, sizeof req, "GET /events HTTP/1.1\r\n%s\r\n", headers);
  send_str(c->fd, req);
  *ev = read_events(c, n, head);
  return c;
}

static void test_stop(int port) {
  response r;
  char *ev;
  /* an open stream and a request the handler never answers */
  client *sse = events_open(port, "", 3, &r, &ev);
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

static void (*harness_scenarios)(void);

static void *client_main(void *arg) {
  (void)arg;
  harness_scenarios();

  /* every earlier client has gone once the server has seen them go */
  int port = ht.port[SRV_MAIN];
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

void http_harness_limits(http_limits *l) {
  l->max_header_bytes = MAX_HEAD;
  l->max_body_bytes = MAX_BODY;
  l->max_connections = 64;
  l->idle_timeout_ms = IDLE_MS;
}

int http_harness_main(void (*scenarios)(void)) {
  uv_loop_t loop_storage, *loop = &loop_storage;
  CHECK_INT_EQ(uv_loop_init(loop), 0);
  char err[256];
  http_limits lim;
  http_limits_default(&lim);
  http_harness_limits(&lim);
  ht.loop = loop;
  harness_scenarios = scenarios;
  /* the servers under test; ud is the server's slot (for /stats) */
  for (int i = 0; i < N_SRV; i++) {
    http_limits l = lim;
    l.idle_timeout_ms = i == SRV_QUICK ? IDLE_MS : SLOW_IDLE_MS;
    if (i == SRV_LIMITED) {
      l.max_connections = LIMITED_CONNS;
      l.max_streams = LIMITED_CONNS;
    }
    if (i == SRV_GUARD) {
      l.max_connections = GUARD_CONNS;
      l.reserve_connections = GUARD_RESERVE;
      l.max_streams = GUARD_STREAMS;
      l.max_streams_per_addr = GUARD_STREAMS_PER_ADDR;
      l.header_timeout_ms = GUARD_HEADER_MS;
      l.stream_max_queue = GUARD_QUEUE;
      l.stream_stall_ms = GUARD_STALL_MS;
      l.streams_max_queue = GUARD_TOTAL_QUEUE;
    }
    ht.srv[i] = http_server_start(loop, i == SRV_V6 ? "::1" : "127.0.0.1", 0, &l, http_test_handler,
                                  &ht.srv[i], &ht.port[i], err, sizeof err);
    if (!ht.srv[i] && i != SRV_V6) {
      fprintf(stderr, "%s\n", err);
      return -1;
    }
    if (i == SRV_GUARD)
      http_server_hooks(ht.srv[i],
                        &(http_hooks){.reserved = guard_reserved, .log = guard_log_line});
  }
  uv_run(loop, UV_RUN_NOWAIT); /* frees a failed IPv6 start */
  /* a client gone mid-answer must not kill the process */
  struct sigaction sa;
  CHECK(sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN);

  pthread_t th;
  pthread_create(&th, NULL, client_main, NULL);
  uv_run(loop, UV_RUN_DEFAULT); /* returns when the servers stopped and every handle closed */
  pthread_join(th, NULL);

  CHECK_INT_EQ(ht.stopped, N_SRV);
  CHECK(ht.held == NULL);
  CHECK_INT_EQ(ht.slow_started, ht.slow_answered);
  CHECK_INT_EQ(uv_loop_close(loop), 0);
  return check__failures;
}

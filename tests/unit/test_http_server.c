/* server.c and conn.c: the default limits, start failures (a bad address,
 * a port in use), idle, header and slow-client timeouts, the connection
 * ceiling (eviction of idle connections), the reserved slots and IPv6,
 * through the servers of http_client.h. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"

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
  exchange(c, NULL, 408, &r);
  CHECK(now_ms() - t0 < 5000);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  /* keep-alive idle time counts from the last answer */
  c = client_open(port);
  t0 = now_ms(); /* before the request: the server's clock starts at its answer */
  exchange(c, "GET /hello HTTP/1.1\r\n\r\n", 0, &r);
  free(r.body);
  CHECK(closed_by_server(c));
  CHECK(now_ms() - t0 >= IDLE_MS - 50);
  client_close(c);
}

/* At the ceiling a new connection evicts the longest idle one; with every
 * slot busy (event streams here) it is closed at once. */
static void test_connection_limit(int port) {
  client *cs[LIMITED_CONNS];
  response r;
  for (int i = 0; i < LIMITED_CONNS; i++) {
    cs[i] = client_open(port);
    send_str(cs[i]->fd, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK_INT_EQ(read_response(cs[i], &r, 0), 0);
    free(r.body);
    usleep(5 * 1000); /* cs[0] is the longest idle */
  }
  client *extra = client_open(port);
  send_str(extra->fd, "GET /stats HTTP/1.1\r\n\r\n");
  exchange(extra, NULL, 200, &r);
  CHECK(r.body && strstr(r.body, "\"connections\":3") && strstr(r.body, "\"evicted\":1"));
  free(r.body);
  CHECK(closed_by_server(cs[0]));
  for (int i = 1; i < LIMITED_CONNS; i++) /* the others were not touched */
    expect_body(cs[i], "GET /hello HTTP/1.1\r\n\r\n", 200, "{\"hello\":\"world\"}");
  client_close(extra);
  for (int i = 0; i < LIMITED_CONNS; i++)
    client_close(cs[i]);

  /* every slot an event stream: nothing to evict */
  for (int i = 0; i < LIMITED_CONNS; i++) {
    cs[i] = NULL;
    for (double t0 = now_ms(); !cs[i] && now_ms() - t0 < 3000;) {
      char *ev;
      client *c = events_open(port, "", 3, &r, &ev);
      if (ev && r.status == 200) {
        cs[i] = c;
      } else {
        client_close(c); /* a slot of the earlier clients not yet given back */
        usleep(20 * 1000);
      }
      free(r.body);
      free(ev);
    }
    CHECK(cs[i] != NULL);
  }
  extra = client_open(port);
  send_str(extra->fd, "GET /hello HTTP/1.1\r\n\r\n");
  CHECK(read_response(extra, &r, 0) != 0); /* closed without an answer */
  client_close(extra);
  for (int i = 0; i < LIMITED_CONNS; i++)
    if (cs[i])
      client_close(cs[i]);
}

/* A guard client: a connection from 127.0.0.1 that sent req. */
static client *guard_send(const char *req) {
  client *c = calloc(1, sizeof *c);
  c->fd = connect_to(ht.port[SRV_GUARD]);
  send_str(c->fd, req);
  return c;
}

/* Waits until the guard server counts n connections (probe included); 1
 * when it did within 3 s. */
static int guard_wait_conns(client *probe, int n) {
  for (double t0 = now_ms(); now_ms() - t0 < 3000; usleep(10 * 1000))
    if (guard_stat(probe, "connections") == n)
      return 1;
  return 0;
}

/* The reserve: once only GUARD_RESERVE slots are left, a request without
 * the token is refused 503 with Retry-After, while /healthz and the token
 * are served up to the ceiling; there an idle keep-alive connection is
 * evicted for a new one. */
static void test_reserve(void) {
  int open = GUARD_CONNS - GUARD_RESERVE; /* slots anyone may take */
  client *probe = guard_send("");
  CHECK(guard_stat(probe, "connections") >= 1); /* before the header timeout */
  client *held[GUARD_CONNS];
  int n = 0;
  for (; n < open - 2; n++)
    held[n] = guard_send("GET /park HTTP/1.1\r\n\r\n");
  CHECK(guard_wait_conns(probe, open - 1)); /* the parked and the probe */
  /* the last open slot: an anonymous request is served */
  held[n++] = guard_send("GET /park HTTP/1.1\r\n\r\n");
  CHECK(guard_wait_conns(probe, open));
  response r;
  /* only the reserve is left now */
  double t0 = now_ms();
  check_status(ht.port[SRV_GUARD], "GET /hello HTTP/1.1\r\n\r\n", 503, "retry later");
  client *c = guard_send("GET /hello HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n");
  exchange(c, NULL, 503, &r);
  const char *ra = header_in(r.head, "Retry-After");
  CHECK(ra && atoi(ra) > 0);
  CHECK(r.body && strstr(r.body, "\"error\""));
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);
  check_status(ht.port[SRV_GUARD], "GET /healthz HTTP/1.1\r\n\r\n", 200, "\"ok\"");
  check_status(ht.port[SRV_GUARD],
               "GET /hello HTTP/1.1\r\nAuthorization: Bearer " GUARD_TOKEN "\r\n\r\n", 200,
               "world");
  printf("reserve: refused and served in %.1f ms with %d of %d slots held\n", now_ms() - t0, n + 1,
         GUARD_CONNS);
  CHECK(guard_stat(probe, "refused_reserve") >= 2);
  /* privileged requests fill the reserve up to the ceiling */
  while (n < GUARD_CONNS - 1)
    held[n++] = guard_send("GET /park HTTP/1.1\r\nAuthorization: Bearer " GUARD_TOKEN "\r\n\r\n");
  CHECK(guard_wait_conns(probe, GUARD_CONNS));
  /* past the ceiling: the one idle keep-alive connection, the probe, makes
   * room; then the new one, idle in turn, for the next */
  client *ka = guard_send("GET /healthz HTTP/1.1\r\n\r\n");
  exchange(ka, NULL, 200, &r);
  free(r.body);
  CHECK(closed_by_server(probe));
  client_close(probe);
  check_status(ht.port[SRV_GUARD], "GET /healthz HTTP/1.1\r\n\r\n", 200, "\"ok\"");
  CHECK(closed_by_server(ka));
  client_close(ka);
  CHECK(guard_stat(NULL, "evicted") >= 2);
  char line[512];
  CHECK(guard_log(line, sizeof line) >= 1 && strstr(line, "refused"));
  check_status(ht.port[SRV_GUARD],
               "GET /release HTTP/1.1\r\nAuthorization: Bearer " GUARD_TOKEN "\r\n\r\n", 200,
               "\"released\"");
  for (int i = 0; i < n; i++) {
    exchange(held[i], NULL, 200, &r);
    free(r.body);
    client_close(held[i]);
  }
}

/* The header timeout: a new connection that sends nothing, and a
 * keep-alive one whose next request stops halfway, are cut after
 * GUARD_HEADER_MS, not after the 20 s idle timeout; an idle keep-alive
 * connection lives longer. */
static void test_header_timeout(void) {
  double t0 = now_ms();
  client *c = guard_send("");
  CHECK(closed_by_server(c)); /* within the 5 s receive timeout */
  double dt = now_ms() - t0;
  CHECK(dt >= GUARD_HEADER_MS - 50);
  printf("header timeout: a silent connection closed after %.0f ms (limit %d ms, idle %d ms)\n", dt,
         GUARD_HEADER_MS, SLOW_IDLE_MS);
  client_close(c);

  c = guard_send("GET /hello HTTP/1.1\r\n\r\n");
  response r;
  exchange(c, NULL, 200, &r);
  free(r.body);
  usleep(3 * GUARD_HEADER_MS * 1000); /* idle: the idle timeout applies */
  send_str(c->fd, "GET /hello HTTP/1.1\r\nHost: x\r\n");
  t0 = now_ms();
  exchange(c, NULL, 408, &r);
  free(r.body);
  printf("header timeout: a keep-alive request left halfway got 408 after %.0f ms\n",
         now_ms() - t0);
  CHECK(closed_by_server(c));
  client_close(c);
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
  exchange(c, NULL, 0, &r);
  CHECK(r.body && strncmp(r.body, "[::1]:", 6) == 0);
  free(r.body);
  client_close(c);
}

static void scenarios(void) {
  test_timeouts(ht.port[SRV_QUICK]);
  test_connection_limit(ht.port[SRV_LIMITED]);
  test_reserve();
  test_header_timeout();
  if (ht.srv[SRV_V6])
    test_ipv6(ht.port[SRV_V6]);
  else
    printf("note: no IPv6 loopback here; the IPv6 part is skipped\n");
}

static void blocker_stopped(void *ud) { ++*(int *)ud; }

int main(void) {
  uv_loop_t loop;
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  http_limits lim;
  http_limits_default(&lim);
  CHECK_INT_EQ(lim.max_header_bytes, 16 * 1024);
  CHECK_INT_EQ(lim.max_body_bytes, 1024 * 1024);
  CHECK_INT_EQ(lim.max_connections, 1024);
  CHECK_INT_EQ(lim.idle_timeout_ms, 30000);
  CHECK_INT_EQ(lim.header_timeout_ms, 10000);
  CHECK_INT_EQ(lim.max_streams_per_addr, 8);
  CHECK_INT_EQ(lim.stream_max_queue, 256 * 1024);
  http_harness_limits(&lim);
  char err[256];

  /* failures: a bad address, a port in use */
  CHECK(http_server_start(&loop, "no.such.host", 0, &lim, http_test_handler, NULL, NULL, err,
                          sizeof err) == NULL);
  CHECK(strstr(err, "no.such.host") != NULL);

  int used_port = 0;
  http_server *blocker = http_server_start(&loop, "127.0.0.1", 0, &lim, http_test_handler, NULL,
                                           &used_port, err, sizeof err);
  CHECK(blocker != NULL);
  CHECK(http_server_start(&loop, "127.0.0.1", used_port, &lim, http_test_handler, NULL, NULL, err,
                          sizeof err) == NULL);
  CHECK(strstr(err, "address already in use") != NULL);
  int blocker_done = 0;
  if (blocker)
    http_server_stop(blocker, blocker_stopped, &blocker_done);
  uv_run(&loop, UV_RUN_DEFAULT); /* frees both */
  CHECK_INT_EQ(blocker_done, 1);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);

  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK_DONE();
}

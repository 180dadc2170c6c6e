/* server.c and conn.c: the default limits, start failures (a bad address,
 * a port in use), idle and slow-client timeouts, the connection limit and
 * IPv6, through the servers of http_client.h. */
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
  exchange(c, NULL, 0, &r);
  CHECK(r.body && strncmp(r.body, "[::1]:", 6) == 0);
  free(r.body);
  client_close(c);
}

static void scenarios(void) {
  test_timeouts(ht.port[SRV_QUICK]);
  test_connection_limit(ht.port[SRV_LIMITED]);
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

/* respond.c: Connection: close, HTTP/1.0, HEAD, answers made later and
 * answers dropped when the client has gone. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"

static void test_close_semantics(int port) {
  response r;
  /* Connection: close */
  client *c = client_open(port);
  exchange(c, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n", 200, &r);
  CHECK(header_in(r.head, "Connection") && strcmp(header_in(r.head, "Connection"), "close") == 0);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  /* HTTP/1.0: closed after the answer unless keep-alive is asked for */
  c = client_open(port);
  exchange(c, "GET /hello HTTP/1.0\r\n\r\n", 200, &r);
  free(r.body);
  CHECK(closed_by_server(c));
  client_close(c);

  c = client_open(port);
  for (int i = 0; i < 2; i++) {
    exchange(c, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 200, &r);
    const char *cn = header_in(r.head, "Connection");
    CHECK(cn && strcmp(cn, "keep-alive") == 0);
    free(r.body);
  }
  client_close(c);

  /* HEAD: the length of the GET body, no body; the next answer is intact */
  c = client_open(port);
  exchange(c, "HEAD /hello HTTP/1.1\r\n\r\n", 200, &r);
  CHECK(header_in(r.head, "Content-Length") &&
        strcmp(header_in(r.head, "Content-Length"), "17") == 0);
  free(r.body);
  expect_body(c, "GET /hello HTTP/1.1\r\n\r\n", 200, "{\"hello\":\"world\"}");
  client_close(c);
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

static void scenarios(void) {
  test_close_semantics(ht.port[SRV_MAIN]);
  test_async(ht.port[SRV_MAIN]);
}

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK_DONE();
}

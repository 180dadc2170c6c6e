/* request.c and parse.c's head: routes, the peer, query parameters
 * (http_query_param), through the servers of http_client.h. */
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
}

static void scenarios(void) { test_basic(ht.port[SRV_MAIN]); }

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK_DONE();
}

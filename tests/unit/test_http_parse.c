/* parse.c: keep-alive, pipelining, chunked and 100-continue bodies, bad
 * requests and their 4xx answers, percent-decoding of the target, and
 * mutated input, through the servers of http_client.h. */
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

static void test_keepalive_and_pipelining(int port) {
  client *c = client_open(port);
  response r;
  for (int i = 0; i < 2; i++) {
    exchange(c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", 200, &r);
    CHECK(header_in(r.head, "Connection") == NULL);
    free(r.body);
  }
  expect_body(c, "POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world", 200,
              "hello world");

  /* a body near the limit, over several reads */
  enum { BIG = 60000 };
  char *req = malloc(BIG + 128);
  int hl = sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n", BIG);
  for (int i = 0; i < BIG; i++)
    req[hl + i] = (char)('a' + i % 26);
  req[hl + BIG] = '\0';
  exchange(c, req, 200, &r);
  CHECK(r.body_len == BIG && memcmp(r.body, req + hl, BIG) == 0);
  free(r.body);
  free(req);

  /* three requests in one write, one of them async: answers in order */
  exchange(c,
           "GET /slow HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
           "GET /path/p%41?q=1 HTTP/1.1\r\n\r\n",
           0, &r);
  CHECK(r.body && strcmp(r.body, "slow done") == 0);
  free(r.body);
  expect_body(c, NULL, 0, "abc");
  expect_body(c, NULL, 0, "/path/pA\nq=1");

  /* chunked request body */
  exchange(c,
           "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
           0, &r);
  CHECK(r.body && strcmp(r.body, "abcdefg") == 0);
  free(r.body);

  /* Expect: 100-continue gets the interim answer before the body is sent */
  exchange(c, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n", 100, &r);
  free(r.body);
  expect_body(c, "body", 200, "body");
  client_close(c);
}

static void test_bad_requests(int port) {
  response r;
  /* garbage: 400 with a JSON error, then closed */
  client *c = client_open(port);
  exchange(c, "GARBAGE\r\n\r\n", 400, &r);
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
  exchange(c, "POST /echo HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n", 413, &r);
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
  exchange(c, NULL, 413, &r);
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

static void scenarios(void) {
  test_keepalive_and_pipelining(ht.port[SRV_MAIN]);
  test_bad_requests(ht.port[SRV_MAIN]);
  test_garbage(ht.port[SRV_QUICK]);
}

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK_DONE();
}

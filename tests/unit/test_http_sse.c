/* sse.c: event streams, Last-Event-ID, multi-line data, and the cut of a
 * client that does not read (the harness's stop closes one more stream). */
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

static void scenarios(void) { test_sse(ht.port[SRV_MAIN]); }

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK_INT_EQ(ht.sse_opened, 4);
  CHECK_INT_EQ(ht.sse_closed, 4);
  CHECK_INT_EQ(ht.flood_rc, UV_ENOBUFS);
  CHECK(ht.flood_sends > 1 && ht.flood_sends < 2000);
  printf("flood: cut off after %d events of 64 KiB\n", ht.flood_sends);
  CHECK_DONE();
}

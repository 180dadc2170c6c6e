/* sse.c: event streams, Last-Event-ID, multi-line data, the stream limits
 * per address and in total, and the cut of a client that does not read (at
 * once far over the bound, after the stall time just over it, and when the
 * streams together queue too much; the harness's stop closes one more
 * stream). */
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

/* Reads what c was sent until the server closes it; the byte count. */
static size_t drain(client *c) {
  size_t total = 0;
  char buf[65536];
  for (;;) {
    ssize_t k = recv(c->fd, buf, sizeof buf, 0);
    if (k <= 0)
      break;
    total += (size_t)k;
  }
  return total;
}

static void test_sse(int port) {
  response h;
  char *ev;
  client *c = events_open(port, "Last-Event-ID: 5\r\n", 3, &h, &ev);
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

  c = events_open(port, "", 3, &h, &ev);
  free(h.body);
  CHECK(ev && strncmp(ev, "id: 1\n", 6) == 0 && strstr(ev, "id: 3\n"));
  free(ev);
  client_close(c);

  /* a client that does not read is cut off at once when 4 times the
   * stream bound (256 KiB) is queued */
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
  CHECK(drain(c) > 0);
  client_close(c);
}

/* A stream on the guard server from the loopback address ip: its client,
 * with the answer's status in *status (0: none came). */
static client *guard_stream(const char *ip, const char *path, int rcvbuf, int *status) {
  client *c = calloc(1, sizeof *c);
  c->fd = connect_from(ip, ht.port[SRV_GUARD], rcvbuf);
  char req[128];
  snprintf(req, sizeof req, "GET %s HTTP/1.1\r\n\r\n", path);
  send_str(c->fd, req);
  *status = 0;
  if (strcmp(path, "/events") == 0) {
    response h;
    char *ev = read_events(c, 3, &h);
    if (ev || h.status)
      *status = h.status;
    free(ev);
    free(h.body);
  }
  return c;
}

/* The stream limits: GUARD_STREAMS_PER_ADDR per address (429), then
 * GUARD_STREAMS in all (503), both with Retry-After and a JSON error. */
static void test_stream_limits(void) {
  client *open[GUARD_STREAMS];
  int n = 0, st;
  for (int i = 0; i < GUARD_STREAMS_PER_ADDR; i++) {
    open[n++] = guard_stream("127.0.0.1", "/events", 0, &st);
    CHECK_INT_EQ(st, 200);
  }
  client *c = calloc(1, sizeof *c);
  c->fd = connect_from("127.0.0.1", ht.port[SRV_GUARD], 0);
  response r;
  exchange(c, "GET /events HTTP/1.1\r\n\r\n", 429, &r);
  const char *ra = header_in(r.head, "Retry-After");
  CHECK(ra && atoi(ra) > 0);
  CHECK(r.body && strstr(r.body, "too many event streams from 127.0.0.1"));
  free(r.body);
  CHECK(closed_by_server(c)); /* the slot is given back */
  client_close(c);
  /* other addresses still get streams, up to the total */
  static const char *const ips[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};
  for (int i = 0; n < GUARD_STREAMS; i++) {
    open[n++] = guard_stream(ips[i], "/events", 0, &st);
    CHECK_INT_EQ(st, 200);
  }
  c = calloc(1, sizeof *c);
  c->fd = connect_from("127.0.0.5", ht.port[SRV_GUARD], 0);
  exchange(c, "GET /events HTTP/1.1\r\n\r\n", 503, &r);
  ra = header_in(r.head, "Retry-After");
  CHECK(ra && atoi(ra) > 0);
  CHECK(r.body && strstr(r.body, "too many event streams (at most 4)"));
  free(r.body);
  client_close(c);
  /* ordinary requests are still served */
  check_status(ht.port[SRV_GUARD], "GET /hello HTTP/1.1\r\n\r\n", 200, "world");
  for (int i = 0; i < n; i++)
    client_close(open[i]);
}

/* Waits (10 s at most) until the guard server counts n stalled streams. */
static int wait_stalled(int n) {
  for (double t0 = now_ms(); now_ms() - t0 < 10000; usleep(10 * 1000))
    if (guard_stat(NULL, "stalled") >= n)
      return 1;
  return 0;
}

/* A reader that stops reading: its stream queues a little over the bound
 * and then nothing more is sent; it is closed once it stayed over for
 * GUARD_STALL_MS, with a log line. Then two such streams that each stay
 * under the bound but together pass GUARD_TOTAL_QUEUE: the one furthest
 * behind is closed. */
static void test_stalled(void) {
  for (double t0 = now_ms(); guard_stat(NULL, "sse") != 0 && now_ms() - t0 < 3000;)
    usleep(10 * 1000); /* the server has seen the earlier streams go */
  int st, before = guard_stat(NULL, "stalled");
  char line[512];
  double t0 = now_ms();
  client *c = guard_stream("127.0.0.6", "/stall", 4096, &st);
  CHECK(wait_stalled(before + 1));
  printf("stalled reader: closed %.0f ms after it stopped reading (bound %d KiB, %d ms)\n",
         now_ms() - t0, GUARD_QUEUE / 1024, GUARD_STALL_MS);
  CHECK(guard_log(line, sizeof line) >= 1 && strstr(line, "stalled") && strstr(line, "127.0.0.6"));
  CHECK(drain(c) > 0);
  client_close(c);

  /* each stops at 56 KiB: under the 64 KiB bound, over 96 KiB together */
  client *a = guard_stream("127.0.0.7", "/stall?kib=56", 4096, &st);
  client *b = guard_stream("127.0.0.8", "/stall?kib=56", 4096, &st);
  CHECK(wait_stalled(before + 2));
  CHECK(guard_log(line, sizeof line) >= 2 && strstr(line, "together"));
  printf("streams together over %d KiB: %s\n", GUARD_TOTAL_QUEUE / 1024, line);
  client_close(a); /* unread: the survivor is closed by the client */

  client_close(b);
}

static void scenarios(void) {
  test_sse(ht.port[SRV_MAIN]);
  test_stream_limits();
  test_stalled();
}

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  /* 4 on the main server (one closed by the stop), 4 within the limits and
   * 3 stalled ones on the guard server */
  CHECK_INT_EQ(ht.sse_opened, 11);
  CHECK_INT_EQ(ht.sse_closed, 11);
  CHECK_INT_EQ(ht.flood_rc, UV_ENOBUFS);
  CHECK(ht.flood_sends > 1 && ht.flood_sends < 2000);
  printf("flood: cut off after %d events of 64 KiB\n", ht.flood_sends);
  CHECK_DONE();
}

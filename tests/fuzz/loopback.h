/* The far end of a loopback TCP connection, for the harnesses that drive a
 * service over its real socket (fuzz_wmsg, fuzz_route, fuzz_wconn): a
 * non-blocking socket polled on the service's own libuv loop, which writes
 * the fuzz input and hands what the service answers to a callback. Static
 * inline, like fuzz.h.
 *
 * No connection may end in TIME_WAIT: at hundreds of inputs a second the
 * host's ephemeral ports would run out within a minute (binds and connects
 * failing with EADDRINUSE, here and in every other program on the host).
 * So the harness's end closes with a reset (SO_LINGER 0) rather than a FIN,
 * and the service's end of the connection gets the same option
 * (fuzz_no_time_wait) where the service, not the harness, closes first. */
#ifndef SS_TESTS_FUZZ_LOOPBACK_H
#define SS_TESTS_FUZZ_LOOPBACK_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/proto.h"

/* Closing fd sends a reset and leaves nothing in TIME_WAIT. */
static inline void fuzz_no_time_wait(int fd) {
  struct linger l = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

typedef struct fuzz_peer {
  uv_poll_t poll;
  int fd;
  const uint8_t *data; /* to write (not copied) */
  size_t len, off;
  int written; /* everything went, or the service stopped reading */
  int eof;     /* the service closed its side */
  int closed;  /* the poll handle and the socket are closed */
  void (*on_data)(void *ud, const char *buf, size_t n);
  void *ud;
} fuzz_peer;

/* Bytes waiting to be read on fd. */
static inline int fuzz_unread(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

static inline void fuzz__peer_closed(uv_handle_t *h) {
  fuzz_peer *p = h->data;
  close(p->fd);
  p->closed = 1;
}

/* Closes the harness's end (a reset: the service reads ECONNRESET, which it
 * takes as the end of its peer, as it takes an EOF). */
static inline void fuzz_peer_close(fuzz_peer *p) {
  if (!uv_is_closing((uv_handle_t *)&p->poll))
    uv_close((uv_handle_t *)&p->poll, fuzz__peer_closed);
}

static inline void fuzz__peer_io(uv_poll_t *h, int status, int events);

static inline void fuzz__peer_arm(fuzz_peer *p) {
  if (p->eof) {
    fuzz_peer_close(p);
    return;
  }
  uv_poll_start(&p->poll, UV_READABLE | (p->written ? 0 : UV_WRITABLE), fuzz__peer_io);
}

static inline void fuzz__peer_io(uv_poll_t *h, int status, int events) {
  fuzz_peer *p = h->data;
  if (status < 0) {
    p->written = p->eof = 1;
    fuzz_peer_close(p);
    return;
  }
  if ((events & UV_WRITABLE) && !p->written) {
    ssize_t w = 1;
    while (p->off < p->len &&
           (w = send(p->fd, p->data + p->off, p->len - p->off, MSG_NOSIGNAL)) > 0)
      p->off += (size_t)w;
    if (p->off == p->len || (w < 0 && errno != EAGAIN && errno != EINTR))
      p->written = 1;
  }
  if (events & (UV_READABLE | UV_DISCONNECT)) {
    char buf[65536];
    ssize_t r;
    while ((r = recv(p->fd, buf, sizeof buf, 0)) > 0)
      if (p->on_data)
        p->on_data(p->ud, buf, (size_t)r);
    if (r == 0 || (errno != EAGAIN && errno != EINTR))
      p->written = p->eof = 1;
  }
  fuzz__peer_arm(p);
}

/* Starts polling fd (connected or connecting, non-blocking) on loop. */
static inline void fuzz_peer_start(uv_loop_t *loop, fuzz_peer *p, int fd) {
  p->fd = fd;
  fuzz_no_time_wait(fd);
  p->poll.data = p;
  if (uv_poll_init(loop, &p->poll, fd) != 0)
    abort();
  fuzz__peer_arm(p);
}

/* Connects to 127.0.0.1:port and starts polling. */
static inline void fuzz_peer_connect(uv_loop_t *loop, fuzz_peer *p, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS))
    abort();
  fuzz_peer_start(loop, p, fd);
}

/* Writes data next (not copied), once what was given before has gone. */
static inline void fuzz_peer_write(fuzz_peer *p, const uint8_t *data, size_t len) {
  if (p->eof || p->closed)
    return;
  p->data = data;
  p->len = len;
  p->off = 0;
  p->written = 0;
  fuzz__peer_arm(p);
}

/* A line the service under test sent to the harness's peer (who: "the
 * scheduler sent"), checked: the harness aborts, printing the line, when it
 * is not a valid protocol message or wrong(type, ud) gives a reason (a
 * message the service must not send then). Printed under FUZZ_VERBOSE, to
 * look at one input. */
static inline void fuzz_check_sent(const char *harness, const char *who, const char *line,
                                   size_t len, const char *(*wrong)(proto_type, const void *),
                                   const void *ud) {
  char err[512];
  json_t *m = NULL;
  proto_type t = proto_parse(line, len, &m, err, sizeof err);
  json_decref(m);
  const char *why = t == PROTO_INVALID ? err : wrong(t, ud);
  if (why) {
    fprintf(stderr, "%s: %s %.*s: %s\n", harness, who, (int)(len > 200 ? 200 : len), line, why);
    abort();
  }
  if (getenv("FUZZ_VERBOSE"))
    fprintf(stderr, "%s: %s %.*s\n", harness, who, (int)(len > 300 ? 300 : len), line);
}

/* The lines a service sends, framed, each checked by fuzz_check_sent with
 * wrong(type, this) and counted. fuzz_sent_feed is a fuzz_peer's on_data
 * (its ud the fuzz_sent). */
typedef struct fuzz_sent {
  proto_reader rd;
  int lines; /* read so far */
  const char *harness, *who;
  const char *(*wrong)(proto_type t, const void *sent);
} fuzz_sent;

/* Starts s (again: what it had read is dropped) for harness's checks of
 * who ("the worker sent") by wrong. */
static inline void fuzz_sent_start(fuzz_sent *s, const char *harness, const char *who,
                                   const char *(*wrong)(proto_type, const void *)) {
  if (s->harness)
    proto_reader_free(&s->rd);
  *s = (fuzz_sent){.lines = 0, .harness = harness, .who = who, .wrong = wrong};
  proto_reader_init(&s->rd);
}

static inline int fuzz__sent_line(void *ud, const char *line, size_t len) {
  fuzz_sent *s = ud;
  fuzz_check_sent(s->harness, s->who, line, len, s->wrong, s);
  s->lines++;
  return 0;
}

static inline void fuzz_sent_feed(void *ud, const char *buf, size_t n) {
  fuzz_sent *s = ud;
  if (proto_reader_feed(&s->rd, buf, n, fuzz__sent_line, s) != 0)
    abort(); /* a line over the protocol's limit */
}

static inline void fuzz_sent_free(fuzz_sent *s) {
  if (s->harness)
    proto_reader_free(&s->rd);
  s->harness = NULL;
}

#endif

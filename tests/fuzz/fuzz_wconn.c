/* The worker as its scheduler sees it: the input is the byte stream of the
 * scheduler's side of the connection. The harness listens on 127.0.0.1,
 * the real worker connection code (worker/conn.c: resolve, connect, hello,
 * framing, dispatch) connects to it, and once its hello has arrived the
 * input is written; the real handlers take it (welcome, assign and cancel in
 * run.c, ack in outbox.c, heartbeat answers in lease.c, error), with the
 * trainers stubbed (worker_stub.c: no process is ever spawned, and a run
 * whose directory would lie outside the work directory aborts). Then the
 * worker is stopped as by SIGTERM and must close every handle.
 *
 * Input: the stream, in which an empty line is not sent but waited at: what
 * follows it is written once the worker has gone quiet (its trainers'
 * output sent, its messages read); a line "#reconnect" between empty ones
 * closes the harness's end and takes the worker's next connection (its
 * hello lists its runs; after a welcome it resends what was not acked). Invariant: every line the
 * worker sends is a valid protocol message of a worker's type (proto_parse), its first one a hello.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"
#include "fuzz.h"
#include "loopback.h"
#include "tests/fuzz/worker_stub.h"

enum { FUZZ_WCONN_MAX_INPUT = 1 << 20 };

/* The scheduler's side: what the worker sends, framed and checked. */
typedef struct sched_side {
  fuzz_sent sent;
  fuzz_peer peer;
  int reconnects;
} sched_side;

/* A worker sends only its own message types, and hello first. */
static const char *not_a_workers(proto_type t, const void *ud) {
  const fuzz_sent *s = ud;
  return t >= PROTO_WELCOME || (s->lines == 0 && t != PROTO_HELLO) ? "not what a worker sends then"
                                                                   : NULL;
}

/* Nothing left to do but wait: the input is written and read, the
 * worker's messages are read, no trainer has output or an exit to come. */
static int quiet(wrk__worker *w, sched_side *s) {
  fuzz_peer *p = &s->peer;
  if (!p->written || worker_stub_busy(w) || (!p->closed && fuzz_unread(p->fd)))
    return 0;
  if (w->c && !w->c->closing) {
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&w->c->tcp, &fd) == 0 && fuzz_unread(fd))
      return 0;
    if (w->c->tcp.write_queue_size)
      return 0;
  }
  return 1;
}

/* fd is the worker's connection: its peer is the worker's socket (not some
 * other program on this host that found the harness's port). */
static int from_worker(wrk__worker *w, int fd) {
  struct sockaddr_storage peer, mine;
  socklen_t plen = sizeof peer;
  int mlen = sizeof mine;
  return w->c && getpeername(fd, (struct sockaddr *)&peer, &plen) == 0 &&
         uv_tcp_getsockname(&w->c->tcp, (struct sockaddr *)&mine, &mlen) == 0 &&
         peer.ss_family == AF_INET && mine.ss_family == AF_INET &&
         ((struct sockaddr_in *)&peer)->sin_port == ((struct sockaddr_in *)&mine)->sin_port;
}

/* Takes the worker's (next) connection and waits for its hello. */
static void attach(wrk__worker *w, sched_side *s, int lfd) {
  fuzz_sent_start(&s->sent, "fuzz_wconn", "the worker sent", not_a_workers);
  s->peer = (fuzz_peer){.written = 1, .on_data = fuzz_sent_feed, .ud = &s->sent};
  for (int fd;;) {
    uv_run(&w->loop, UV_RUN_NOWAIT);
    if ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) < 0)
      continue;
    if (from_worker(w, fd)) {
      fuzz_peer_start(&w->loop, &s->peer, fd);
      uv_os_fd_t wfd; /* the worker closes first at its end: no TIME_WAIT */
      if (uv_fileno((uv_handle_t *)&w->c->tcp, &wfd) == 0)
        fuzz_no_time_wait(wfd);
      break;
    }
    close(fd);
  }
  while (s->sent.lines == 0 && !s->peer.eof)
    uv_run(&w->loop, UV_RUN_NOWAIT);
}

/* The scheduler goes away and the worker comes back at once (as its
 * reconnect timer would have it, later): a new hello with its runs. */
static void reconnect(wrk__worker *w, sched_side *s, int lfd) {
  int was_open = !s->peer.eof; /* else the worker closed it and is reconnecting */
  fuzz_peer_close(&s->peer);
  while (!s->peer.closed || (was_open && w->c))
    uv_run(&w->loop, UV_RUN_NOWAIT);
  if (!w->c) {
    uv_timer_stop(&w->reconnect_timer);
    wrk__connect_start(w);
  }
  attach(w, s, lfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_WCONN_MAX_INPUT)
    size = FUZZ_WCONN_MAX_INPUT;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 8) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
    abort();
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/worker", fuzz_dir());
  wrk__worker *w = worker_stub_new(dir, ntohs(a.sin_port));

  sched_side s = {.reconnects = 0};
  wrk__connect_start(w);
  attach(w, &s, lfd);
  for (size_t pos = 0; pos < size;) {
    const uint8_t *end = memmem(data + pos, size - pos, "\n\n", 2);
    size_t n = end ? (size_t)(end - (data + pos)) + 1 : size - pos;
    if (n == 11 && !memcmp(data + pos, "#reconnect\n", 11)) {
      if (s.reconnects++ < 4)
        reconnect(w, &s, lfd);
    } else {
      fuzz_peer_write(&s.peer, data + pos, n);
    }
    pos += n + (end ? 1 : 0);
    while (!quiet(w, &s))
      uv_run(&w->loop, UV_RUN_NOWAIT);
  }

  worker_stub_stop(w);
  while (!w->closed_all)
    uv_run(&w->loop, UV_RUN_NOWAIT);
  fuzz_peer_close(&s.peer);
  close(lfd); /* a reconnection waiting in its backlog is refused */
  worker_stub_free(w);
  fuzz_sent_free(&s.sent);
  return 0;
}

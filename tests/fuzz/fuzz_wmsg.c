/* The scheduler's worker port as a worker sees it: the input is the byte
 * stream of one worker connection, written to the real port
 * (scheduler/wport.c: accept, framing, the hello's authentication, the
 * database check) on 127.0.0.1, whose messages go to the real handlers
 * (scheduler/wmsg.c) and, through the port's hooks, to placement (place.c:
 * the queue, claims, assign messages) and the sweeps' status updates and
 * refits (refit.c). The store is store_stub.c. Each input gets a scheduler
 * of its own on a private loop; the loop runs until nothing is left to
 * read, write or answer, then the connection is reset (loopback.h: no
 * TIME_WAIT), the port and the connections closed, and uv_loop_close must
 * succeed (no handle left).
 *
 * Input: an optional first line "#SCRIPT" (the store's answers, one byte
 * each: store_stub.h), then the stream (cluster token: FUZZ_WMSG_TOKEN),
 * in which an empty line is not sent but waited at: what comes after it is
 * written once the scheduler has gone quiet (as a worker waits for its
 * welcome before it sends anything else; lines between empty ones go in
 * one burst, as a worker's metrics and finished do), and a line "#connect"
 * between empty ones opens another connection, which takes the rest (the
 * one before stays open: a worker restarted, or a second one of that name;
 * at most MAX_CONNS).
 * Invariant: every line the scheduler sends is a valid protocol message of
 * a scheduler's type (common/proto.c's proto_parse). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"
#include "fuzz.h"
#include "loopback.h"
#include "scheduler/internal.h"
#include "tests/fuzz/store_stub.h"

#define FUZZ_WMSG_TOKEN "fuzz-cluster-token-0123456789"
enum { FUZZ_WMSG_MAX_INPUT = 1 << 20 };

/* The scheduler sends a worker only its own message types. */
static const char *not_a_schedulers(proto_type t, const void *sent) {
  (void)sent;
  return t < PROTO_WELCOME && t != PROTO_HEARTBEAT ? "a worker's message type" : NULL;
}


enum { MAX_CONNS = 4 };

/* The harness's connections: the worker's, then those "#connect" opened. */
typedef struct conns {
  fuzz_peer p[MAX_CONNS];
  fuzz_sent rep[MAX_CONNS]; /* what the scheduler sent on each */
  int port[MAX_CONNS]; /* the harness's end's, network order */
  int n;
} conns;

/* Nothing left to do but wait: the input is written and read, the
 * scheduler's answers are read, the store has answered everything. */
static int quiet(sched *s, conns *cs) {
  if (store_stub_pending())
    return 0;
  for (int i = 0; i < cs->n; i++)
    if (!cs->p[i].written || (!cs->p[i].closed && fuzz_unread(cs->p[i].fd)))
      return 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && fuzz_unread(fd))
      return 0;
    if (c->tcp.write_queue_size)
      return 0;
  }
  return 1;
}

/* The scheduler's connection whose peer is the harness's port (not some
 * other program's on this host that found the port), or NULL. */
static sched__wconn *conn_of(sched *s, int port) {
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    struct sockaddr_in peer;
    int plen = sizeof peer;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &plen) == 0 && peer.sin_port == port)
      return c;
  }
  return NULL;
}

/* Opens the next connection (the last one stays open: a worker that
 * restarted, or a second one under the same name). */
static void open_conn(sched *s, conns *cs) {
  fuzz_sent *r = &cs->rep[cs->n];
  fuzz_peer *p = &cs->p[cs->n];
  fuzz_sent_start(r, "fuzz_wmsg", "the scheduler sent", not_a_schedulers);
  *p = (fuzz_peer){.written = 1, .on_data = fuzz_sent_feed, .ud = r};
  fuzz_peer_connect(s->loop, p, s->wp.port);
  struct sockaddr_in mine;
  socklen_t mlen = sizeof mine;
  if (getsockname(p->fd, (struct sockaddr *)&mine, &mlen) != 0)
    abort();
  cs->port[cs->n++] = mine.sin_port;
  sched__wconn *c;
  while (!(c = conn_of(s, mine.sin_port)) && !p->eof)
    uv_run(s->loop, UV_RUN_ONCE);
  uv_os_fd_t fd;
  if (c && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
    fuzz_no_time_wait(fd); /* the scheduler may drop it first */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_WMSG_MAX_INPUT)
    size = FUZZ_WMSG_MAX_INPUT;
  const uint8_t *script = NULL;
  size_t nscript = 0;
  if (size && data[0] == '#') {
    const uint8_t *nl = memchr(data, '\n', size);
    script = data + 1;
    nscript = (nl ? (size_t)(nl - data) : size) - 1;
    size_t skip = nl ? (size_t)(nl - data) + 1 : size;
    data += skip;
    size -= skip;
  }
  uv_loop_t loop;
  sched *s = store_stub_sched_new(&loop, script, nscript, FUZZ_WMSG_TOKEN, 1);
  s->o.reserve_after_s = 300; /* sched_options_default's, as the lease and heartbeat */
  sched__wport *wp = &s->wp;
  wp->lease_s = s->o.lease_s;
  wp->heartbeat_s = s->o.heartbeat_s;
  wp->hooks = sched__port_hooks(s); /* the scheduler's own (port_hooks.c) */
  char err[256];
  if (sched__wport_listen(wp, "127.0.0.1:0", err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_wmsg: %s\n", err);
    abort();
  }

  conns cs = {.n = 0};
  open_conn(s, &cs);
  for (size_t pos = 0; pos < size;) {
    const uint8_t *end = memmem(data + pos, size - pos, "\n\n", 2);
    size_t n = end ? (size_t)(end - (data + pos)) + 1 : size - pos;
    if (n == 9 && !memcmp(data + pos, "#connect\n", 9)) {
      if (cs.n < MAX_CONNS)
        open_conn(s, &cs);
    } else {
      fuzz_peer_write(&cs.p[cs.n - 1], data + pos, n);
    }
    pos += n + (end ? 1 : 0);
    while (!quiet(s, &cs))
      uv_run(&loop, UV_RUN_NOWAIT);
  }
  /* the sweeps touched get their status and refits, as at a lease tick */
  sched__sweep_flush(s);
  while (!quiet(s, &cs))
    uv_run(&loop, UV_RUN_NOWAIT);
  for (int i = 0; i < cs.n; i++) /* the workers go: their connections are dropped */
    fuzz_peer_close(&cs.p[i]);
  for (int i = 0; i < cs.n; i++)
    while (!cs.p[i].closed || conn_of(s, cs.port[i]) || store_stub_pending())
      uv_run(&loop, UV_RUN_NOWAIT);

  s->stopping = 1;
  sched__wport_close(wp);
  store_stub_sched_close(s);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) {
    fprintf(stderr, "fuzz_wmsg: a handle was left open\n");
    abort();
  }
  for (int i = 0; i < cs.n; i++)
    fuzz_sent_free(&cs.rep[i]);
  sched__events_free(&s->ev);
  sched__wport_free(wp);
  sched__refits_free(&s->refits);
  sched__sweepq_free(&s->tunes); /* the sweeps a flush marked for an lr tune check */
  sched__sweepq_free(&s->adapt); /* and for an adaptive round check */
  sched__place_free(s);
  free(s);
  return 0;
}

/* The worker port's connections (wport.h): accept, read, write, close,
 * reap, and the limit on failed authentications (a wrong token only is
 * throttled, per address; the records expire and are bounded in number). */
#include "scheduler/wport.h"

#include <stdarg.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/err.h"

void sched__wlog(const sched__wconn *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "scheduler: worker %s (%s): ", c->name[0] ? c->name : "?", c->peer);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

sched__wconn *sched__conn_by_worker(sched__wport *wp, int64_t worker_id) {
  for (sched__wconn *c = wp->conns; c; c = c->next)
    if (c->authed && !c->closing && c->worker_id == worker_id)
      return c;
  return NULL;
}

int sched__conn_offers(const sched__wconn *c, const char *trainer) {
  for (int i = 0; i < c->ntrainers; i++)
    if (!strcmp(c->trainers[i], trainer))
      return 1;
  return 0;
}

sched__wrun *sched__conn_find_run(sched__wconn *c, int64_t run_id) {
  for (sched__wrun *w = c->runs; w; w = w->next)
    if (w->run_id == run_id)
      return w;
  return NULL;
}

sched__wrun *sched__conn_add_run(sched__wconn *c, int64_t run_id, int attempt, int ngpus,
                                 const int *gpus, int slots) {
  sched__wrun *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->run_id = run_id;
  w->attempt = attempt;
  w->ngpus = ngpus;
  for (int g = 0; g < ngpus; g++) {
    w->gpus[g] = gpus[g];
    c->gpu_busy[gpus[g]] = 1;
  }
  w->slots = ngpus == 0 ? (slots > 0 ? slots : 1) : 0;
  c->cpu_busy += w->slots;
  w->next = c->runs;
  c->runs = w;
  return w;
}

void sched__conn_release_run(sched__wconn *c, int64_t run_id) {
  for (sched__wrun **pp = &c->runs; *pp; pp = &(*pp)->next) {
    sched__wrun *w = *pp;
    if (w->run_id != run_id)
      continue;
    c->cpu_busy -= w->slots;
    for (int g = 0; g < w->ngpus; g++)
      c->gpu_busy[w->gpus[g]] = 0;
    *pp = w->next;
    json_decref(w->finished);
    free(w);
    return;
  }
}

/* ---- failed authentications -------------------------------------------------- */

static uint64_t auth_window_ns(const sched__wport *wp) {
  return (uint64_t)(wp->auth_block_s > 0 ? wp->auth_block_s : 0) * 1000000000ull;
}

/* Forgets the records whose window is over; how many. */
static int auth_prune(sched__wport *wp, uint64_t now) {
  int n = 0;
  for (sched__authfail **pp = &wp->authfails; *pp;) {
    sched__authfail *a = *pp;
    if (now - a->window_start_ns >= auth_window_ns(wp)) {
      *pp = a->next;
      free(a);
      wp->nauthfails--;
      n++;
    } else {
      pp = &a->next;
    }
  }
  return n;
}

/* New records go to the head and a record's window never moves, so the
 * list is ordered newest first: the oldest is the last. */
static void auth_evict_oldest(sched__wport *wp) {
  sched__authfail **pp = &wp->authfails;
  if (!*pp)
    return;
  while ((*pp)->next)
    pp = &(*pp)->next;
  free(*pp);
  *pp = NULL;
  wp->nauthfails--;
  wp->auth_evicted++;
}

int sched__wport_auth_failed(sched__wport *wp, const char *addr) {
  uint64_t now = uv_hrtime();
  wp->auth_pruned += auth_prune(wp, now);
  sched__authfail *a;
  for (a = wp->authfails; a; a = a->next)
    if (!strcmp(a->addr, addr))
      break;
  if (a && a->count >= SCHED__MAX_AUTH_FAILURES) {
    uint64_t left = a->window_start_ns + auth_window_ns(wp) - now;
    return (int)((left + 999999999ull) / 1000000000ull);
  }
  if (!a) {
    if (wp->nauthfails >= SCHED__AUTH_TRACKED)
      auth_evict_oldest(wp);
    a = calloc(1, sizeof *a);
    if (!a)
      return 0; /* not counted: refusing the token is what matters */
    snprintf(a->addr, sizeof a->addr, "%s", addr);
    a->window_start_ns = now;
    a->next = wp->authfails;
    wp->authfails = a;
    wp->nauthfails++;
  }
  if (++a->count == SCHED__MAX_AUTH_FAILURES)
    fprintf(stderr,
            "scheduler: worker port: %d failed authentications from %s; its wrong tokens are "
            "refused unread for %d s (a right one is still welcome)\n",
            a->count, addr, wp->auth_block_s);
  return 0;
}

void sched__wport_auth_prune(sched__wport *wp) {
  int n = auth_prune(wp, uv_hrtime()) + wp->auth_pruned;
  wp->auth_pruned = 0;
  if (n > 0)
    fprintf(stderr,
            "scheduler: worker port: forgot the failed authentications of %d address%s (their "
            "window of %d s is over); %d tracked\n",
            n, n == 1 ? "" : "es", wp->auth_block_s, wp->nauthfails);
  if (wp->auth_evicted > 0)
    fprintf(stderr,
            "scheduler: worker port: failed authentications from over %d addresses: forgot the "
            "oldest %d\n",
            SCHED__AUTH_TRACKED, wp->auth_evicted);
  wp->auth_evicted = 0;
}

int sched__wport_db_up(const sched__wport *wp) {
  int up = db_ready(wp->db);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    up = up && db_ready(wp->db_metrics[i]);
  return up;
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct wreq {
  uv_write_t req;
  char *buf;
} wreq;

static void on_written(uv_write_t *req, int status) {
  (void)status;
  wreq *w = (wreq *)req;
  free(w->buf);
  free(w);
}

void sched__send(sched__wconn *c, json_t *msg) {
  size_t len;
  char *line = proto_encode(msg, &len);
  json_decref(msg);
  if (!line || c->closing) {
    free(line);
    return;
  }
  wreq *w = malloc(sizeof *w);
  if (!w) {
    free(line);
    return;
  }
  w->buf = line;
  uv_buf_t b = uv_buf_init(line, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
    free(line);
    free(w);
  }
}

/* ---- closing ------------------------------------------------------------------ */

static void on_conn_closed(uv_handle_t *h) {
  sched__wconn *c = h->data;
  proto_reader_free(&c->rd);
  while (c->runs) {
    sched__wrun *n = c->runs->next;
    json_decref(c->runs->finished);
    free(c->runs);
    c->runs = n;
  }
  json_decref(c->gpus_json);
  free(c);
}

void sched__conn_drop(sched__wconn *c, const char *why) {
  if (c->closing)
    return;
  if (why) {
    sched__send(c, json_pack("{s:s,s:s}", "type", "error", "message", why));
    sched__wlog(c, "disconnected: %s", why);
  }
  c->closing = 1;
  sched__wport *wp = c->wp;
  for (sched__wconn **pp = &wp->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  if (c->authed)
    sched__events_emit(wp->ev, "worker",
                       json_pack("{s:I,s:s,s:b}", "id", (json_int_t)c->worker_id, "name", c->name,
                                 "connected", 0));
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_listener_closed(uv_handle_t *h) { (void)h; }

void sched__wport_close(sched__wport *wp) {
  wp->stopping = 1;
  if (wp->listening) {
    uv_close((uv_handle_t *)&wp->listener, on_listener_closed);
    uv_close((uv_handle_t *)&wp->trim_timer, on_listener_closed);
  }
  wp->listening = 0;
  while (wp->conns)
    sched__conn_drop(wp->conns, NULL);
}

void sched__wport_free(sched__wport *wp) {
  while (wp->authfails) {
    sched__authfail *n = wp->authfails->next;
    free(wp->authfails);
    wp->authfails = n;
  }
  wp->nauthfails = 0;
}

/* ---- reading --------------------------------------------------------------------------------- */

static int on_line(void *ud, const char *line, size_t len) {
  sched__wconn *c = ud;
  if (c->closing)
    return -1;
  c->last_msg_ns = uv_hrtime();
  char err[512];
  json_t *m = NULL;
  proto_type t = proto_parse(line, len, &m, err, sizeof err);
  if (t == PROTO_INVALID) {
    sched__conn_drop(c, err);
    return -1;
  }
  if (!c->authed && t != PROTO_HELLO)
    sched__conn_drop(c, "the first message must be hello");
  else if ((c->authed || c->registering) && t == PROTO_HELLO)
    sched__conn_drop(c, "hello sent twice");
  else if (!sched__wport_db_up(c->wp) && t != PROTO_HEARTBEAT && t != PROTO_STOPPING)
    /* nothing can be stored: the worker keeps its messages and resends */
    sched__conn_drop(c, "database unavailable; reconnect later");
  else
    sched__wmsg_handle(c, t, m);
  json_decref(m);
  return c->closing ? -1 : 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  buf->base = malloc(suggested);
  buf->len = buf->base ? suggested : 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  sched__wconn *c = st->data;
  if (n > 0 && !c->closing) {
    c->rx_bytes += (uint64_t)n;
    int rc = proto_reader_feed(&c->rd, buf->base, (size_t)n, on_line, c);
    if (rc == SS_ERANGE)
      sched__conn_drop(c, "protocol line over the size limit");
  } else if (n < 0 && !c->closing) {
    if (c->authed)
      sched__wlog(c, "connection lost (%s)", uv_strerror((int)n));
    sched__conn_drop(c, NULL);
  }
  free(buf->base);
}

static void peer_name(sched__wconn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char ip[64] = "?";
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
    else
      uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
  }
  snprintf(c->peer, sizeof c->peer, "%s", ip);
}

/* a connection waiting for its hello (not yet being registered) */
static int pre_hello(const sched__wconn *c) { return !c->authed && !c->registering && !c->closing; }

/* bytes the peer sent that this side has not read yet */
static int pending_bytes(sched__wconn *c) {
  uv_os_fd_t fd;
  int n = 0;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &n) != 0)
    return 0;
  return n;
}

/* The pre-hello connections from addr (NULL: from anywhere). */
static int pre_hello_count(const sched__wport *wp, const char *addr) {
  int n = 0;
  for (const sched__wconn *x = wp->conns; x; x = x->next)
    n += pre_hello(x) && (!addr || !strcmp(x->peer, addr));
  return n;
}

/* The pre-hello connection from addr (NULL: from anywhere) to close to
 * make room: the oldest that has sent nothing, else (unless idle_only) the
 * oldest (the list is newest first, so the last match is the oldest); NULL
 * when there is none. Only over a limit: it asks the kernel about every
 * candidate's socket. */
static sched__wconn *room_from(sched__wport *wp, const char *addr, int idle_only) {
  sched__wconn *idle = NULL, *any = NULL;
  for (sched__wconn *x = wp->conns; x; x = x->next) {
    if (!pre_hello(x) || (addr && strcmp(x->peer, addr) != 0))
      continue;
    any = x;
    if (x->rx_bytes == 0 && pending_bytes(x) == 0)
      idle = x;
  }
  return idle ? idle : idle_only ? NULL : any;
}

/* Closes pre-hello connections from addr (NULL: from anywhere) until at
 * most max are left, sparing keep (which may be one of them); with
 * idle_only, only those that have sent nothing (the others keep to the
 * hello deadline). */
static void make_room(sched__wport *wp, const char *addr, int max, const sched__wconn *keep,
                      int idle_only) {
  sched__wconn *v;
  while (pre_hello_count(wp, addr) > max && (v = room_from(wp, addr, idle_only)) != NULL &&
         v != keep) {
    wp->unauthed_replaced++;
    sched__conn_drop(v, NULL);
  }
}

/* Brings every address's, then all, pre-hello connections back within
 * their limits by closing idle ones, the oldest first. */
static void on_trim(uv_timer_t *t) {
  sched__wport *wp = t->data;
  for (sched__wconn *x = wp->conns; x; x = x->next) {
    if (!pre_hello(x))
      continue;
    int first = 1; /* each address once: at its newest connection, which stays */
    for (sched__wconn *y = wp->conns; y != x && first; y = y->next)
      first = !(pre_hello(y) && !strcmp(y->peer, x->peer));
    if (first)
      make_room(wp, x->peer, SCHED__UNAUTHED_PER_ADDR, x, 1);
  }
  make_room(wp, NULL, SCHED__MAX_UNAUTHED, NULL, 1);
}

static void on_connection(uv_stream_t *server, int status) {
  sched__wport *wp = server->data;
  sched__wconn *c = status < 0 || wp->stopping ? NULL : calloc(1, sizeof *c);
  if (!c)
    return;
  c->wp = wp;
  uv_tcp_init(wp->loop, &c->tcp);
  c->tcp.data = c;
  proto_reader_init(&c->rd);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  peer_name(c);
  c->connected_ns = c->last_msg_ns = uv_hrtime();
  /* the limits make room rather than refuse (wport.h): past twice a limit
   * at once; past it, after SCHED__TRIM_MS, time for a worker's hello that
   * was on its way to arrive and be read (it then waits for its
   * registration, not its hello). c is not in the list yet. */
  make_room(wp, c->peer, 2 * SCHED__UNAUTHED_PER_ADDR - 1, NULL, 0);
  make_room(wp, NULL, 2 * SCHED__MAX_UNAUTHED - 1, NULL, 0);
  if (!uv_is_active((uv_handle_t *)&wp->trim_timer) &&
      (pre_hello_count(wp, c->peer) >= SCHED__UNAUTHED_PER_ADDR ||
       pre_hello_count(wp, NULL) >= SCHED__MAX_UNAUTHED))
    uv_timer_start(&wp->trim_timer, on_trim, SCHED__TRIM_MS, 0);
  c->next = wp->conns;
  wp->conns = c;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

#define SCHED__STR2(x) #x
#define SCHED__STR(x) SCHED__STR2(x)

void sched__wport_reap(sched__wport *wp) {
  sched__wport_auth_prune(wp);
  uint64_t now = uv_hrtime(), lease = (uint64_t)wp->lease_s * 1000000000ull;
  uint64_t hello = (uint64_t)SCHED__HELLO_S * 1000000000ull;
  int late = 0;
  for (sched__wconn *c = wp->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing)
      continue;
    if (pre_hello(c) && now - c->connected_ns > hello) {
      late++; /* not logged one by one: a flood would fill the log */
      sched__send(c, json_pack("{s:s,s:s}", "type", "error", "message",
                               "no hello within " SCHED__STR(SCHED__HELLO_S) " s; closing"));
      sched__conn_drop(c, NULL);
    } else if (c->registering && now - c->connected_ns > lease)
      sched__conn_drop(c, "its hello was not registered within a lease; closing");
    else if (c->authed && now - c->last_msg_ns > 2 * lease)
      sched__conn_drop(c, "nothing heard for two leases (no heartbeat); closing");
  }
  if (late || wp->unauthed_replaced)
    fprintf(stderr,
            "scheduler: worker port: in the last second, %d connection%s sent no hello within "
            "%d s and %d waiting for theirs made room for newer ones (at most %d from one "
            "address, %d in all)\n",
            late, late == 1 ? "" : "s", SCHED__HELLO_S, wp->unauthed_replaced,
            SCHED__UNAUTHED_PER_ADDR, SCHED__MAX_UNAUTHED);
  wp->unauthed_replaced = 0;
}

int sched__wport_listen(sched__wport *wp, const char *hostport, char *err, size_t errlen) {
  char host[256];
  int port;
  if (addr_split(hostport, "0.0.0.0", 0, host, sizeof host, &port, NULL, 0) != 0) {
    snprintf(err, errlen, "--workers %s: expected HOST:PORT", hostport);
    return SS_EINVAL;
  }
  struct sockaddr_storage addr;
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0) {
    snprintf(err, errlen, "--workers %s: not an IP address", hostport);
    return SS_EINVAL;
  }
  uv_tcp_init(wp->loop, &wp->listener);
  uv_timer_init(wp->loop, &wp->trim_timer);
  wp->trim_timer.data = wp;
  wp->listening = 1;
  wp->listener.data = wp;
  int rc = uv_tcp_bind(&wp->listener, (struct sockaddr *)&addr, 0);
  if (!rc)
    rc = uv_listen((uv_stream_t *)&wp->listener, 128, on_connection);
  if (rc) {
    snprintf(err, errlen, "--workers %s: %s", hostport, uv_strerror(rc));
    return SS_EIO;
  }
  struct sockaddr_storage b;
  int blen = sizeof b;
  uv_tcp_getsockname(&wp->listener, (struct sockaddr *)&b, &blen);
  wp->port = ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                           : ((struct sockaddr_in *)&b)->sin_port);
  return 0;
}

void sched__wport_cancel(sched__wport *wp, int64_t run_id) {
  /* every worker that runs ranks of it (several for a run spread over them) */
  for (sched__wconn *c = wp->conns; c; c = c->next) {
    sched__wrun *w = c->authed ? sched__conn_find_run(c, run_id) : NULL;
    if (w) {
      w->cancelling = 1;
      sched__send(c, json_pack("{s:s,s:I}", "type", "cancel", "run_id", (json_int_t)run_id));
    }
  }
}

/* The connection to the scheduler: resolve, connect (each address in turn),
 * hello and welcome, reading and dispatching its messages, writing, and
 * reconnecting forever with exponential backoff. */
#include "worker/conn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "worker/backends.h"
#include "worker/datadirs.h"
#include "worker/identity.h"
#include "worker/internal.h"
#include "worker/lease.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/outbox.h"
#include "worker/run.h"
#include "worker/trainers.h"
#include "worker/wbuf.h"

#define BACKOFF_MAX_MS 5000
#define WELCOME_TIMEOUT_MS 10000

/* ---- sending ------------------------------------------------------------ */

typedef struct wreq {
  uv_write_t req;
  wrk__wbuf *b;
  wrk__conn *c;
} wreq;

static void on_write(uv_write_t *req, int status) {
  wreq *wr = (wreq *)req;
  if (status < 0 && status != UV_ECANCELED && !wr->c->closing) {
    wrk__log("write to the scheduler failed: %s", uv_strerror(status));
    wrk__conn_close(wr->c, NULL);
  }
  wrk__wbuf_unref(wr->b);
  free(wr);
}

/* Writes b on c now (before a welcome too: the hello). */
void wrk__conn_write(wrk__conn *c, wrk__wbuf *b) {
  if (!c || c->closing || !c->connected)
    return;
  wreq *wr = malloc(sizeof *wr);
  if (!wr) {
    wrk__conn_close(c, "out of memory");
    return;
  }
  wr->b = wrk__wbuf_ref(b);
  wr->c = c;
  uv_buf_t buf = uv_buf_init(b->data, (unsigned)b->len);
  int rc = uv_write(&wr->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (rc) {
    wrk__wbuf_unref(wr->b);
    free(wr);
    wrk__log("write to the scheduler failed: %s", uv_strerror(rc));
    wrk__conn_close(c, NULL);
  }
}

/* Sends when there is a welcomed connection; otherwise the message waits
 * in its run (for the kinds that are kept) or is dropped (heartbeats). */
void wrk__send(wrk__worker *w, wrk__wbuf *b) {
  if (w->c && w->c->welcomed)
    wrk__conn_write(w->c, b);
}

void wrk__send_json(wrk__worker *w, json_t *msg) {
  char err[512];
  wrk__wbuf *b = wrk__wbuf_encode(msg, err, sizeof err);
  if (!b) {
    wrk__log("BUG: refusing to send an invalid %s message: %s",
             json_string_value(json_object_get(msg, "type")), err);
    return;
  }
  wrk__send(w, b);
  wrk__wbuf_unref(b);
}

/* ---- scheduler messages ------------------------------------------------- */

static void on_welcome(wrk__conn *c, json_t *m) {
  wrk__worker *w = c->w;
  if (c->welcomed) {
    wrk__log("a second welcome from the scheduler; ignored");
    return;
  }
  c->welcomed = 1;
  w->backoff_ms = WRK__BACKOFF_MIN_MS;
  w->worker_id = json_integer_value(json_object_get(m, "worker_id"));
  uv_timer_stop(&w->welcome_timer);
  double hb = wrk__lease_welcome(w, m);
  wrk__data_dirs_welcome(w, m);
  wrk__identity_welcome(w, m);
  int nruns = 0;
  for (wrk__run *r = w->runs; r; r = r->next)
    nruns++;
  int nmsg = wrk__outbox_resend(w, c);
  wrk__log("connected to the scheduler at %s:%s as worker %" PRId64 " (heartbeat %.3g s); "
           "%d run%s here, %d unacknowledged message%s resent",
           w->sched_host, w->sched_port, w->worker_id, hb, nruns, nruns == 1 ? "" : "s", nmsg,
           nmsg == 1 ? "" : "s");
}

static void on_error(wrk__conn *c, json_t *m) {
  wrk__log("the scheduler reported an error: %s", json_string_value(json_object_get(m, "message")));
  wrk__conn_close(c, NULL);
}

/* The scheduler's message types; the others are a worker's. */
static wrk__handler *const handlers[] = {
    [PROTO_WELCOME] = on_welcome,
    [PROTO_ASSIGN] = wrk__on_assign,
    [PROTO_CANCEL] = wrk__on_cancel,
    [PROTO_ACK] = wrk__on_ack,
    [PROTO_HEARTBEAT] = wrk__on_lease_renewed,
    [PROTO_ERROR] = on_error,
};

static int on_sched_line(void *ud, const char *line, size_t len) {
  wrk__conn *c = ud;
  if (c->closing)
    return 1;
  char err[512];
  json_t *m = NULL;
  proto_type t = proto_parse(line, len, &m, err, sizeof err);
  wrk__handler *h = (size_t)t < sizeof handlers / sizeof *handlers ? handlers[t] : NULL;
  if (t == PROTO_INVALID)
    wrk__log("ignored a bad message from the scheduler: %s", err);
  else if (h)
    h(c, m);
  else
    wrk__log("ignored a %s message from the scheduler (a worker's message type)",
             proto_type_name(t));
  json_decref(m);
  return c->closing ? 1 : 0;
}

/* ---- the connection ----------------------------------------------------- */

static void on_reconnect_timer(uv_timer_t *t) { wrk__connect_start(t->data); }

/* Exponential backoff from 100 ms to 5 s; once a welcome has told the lease,
 * to at most a quarter of it, so that a worker kept out for a while (a
 * scheduler restarting, its database away) is back before its runs' leases
 * lapse. */
static void schedule_reconnect(wrk__worker *w) {
  if (w->stopping)
    return;
  int cap = BACKOFF_MAX_MS;
  if (w->lease_ms > 0 && w->lease_ms / 4 < cap)
    cap = w->lease_ms / 4 > WRK__BACKOFF_MIN_MS ? (int)(w->lease_ms / 4) : WRK__BACKOFF_MIN_MS;
  if (w->backoff_ms > cap)
    w->backoff_ms = cap;
  wrk__log("reconnecting in %d ms", w->backoff_ms);
  uv_timer_start(&w->reconnect_timer, on_reconnect_timer, (uint64_t)w->backoff_ms, 0);
  w->backoff_ms = w->backoff_ms * 2 > cap ? cap : w->backoff_ms * 2;
}

static void connect_next(wrk__worker *w);

static void on_conn_closed(uv_handle_t *h) {
  wrk__conn *c = h->data;
  wrk__worker *w = c->w;
  int try_next = !c->connected && w->addr_i + 1 < w->naddrs;
  if (w->c == c)
    w->c = NULL;
  proto_reader_free(&c->rd);
  free(c);
  if (w->stopping) {
    wrk__maybe_finish_shutdown(w);
    return;
  }
  if (try_next) {
    w->addr_i++;
    connect_next(w);
  } else {
    schedule_reconnect(w);
  }
}

/* Closes c (a reason is logged when given); the close callback decides
 * whether to reconnect. */
void wrk__conn_close(wrk__conn *c, const char *why) {
  if (!c || c->closing)
    return;
  wrk__worker *w = c->w;
  c->closing = 1;
  if (why)
    wrk__log("%s", why);
  if (w->c == c) {
    uv_timer_stop(&w->hb_timer);
    uv_timer_stop(&w->welcome_timer);
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  wrk__conn *c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  wrk__conn *c = s->data;
  if (nread > 0) {
    int rc = proto_reader_feed(&c->rd, buf->base, (size_t)nread, on_sched_line, c);
    if (rc == SS_ERANGE)
      wrk__conn_close(c, "the scheduler sent a line over the protocol's limit; reconnecting");
    else if (rc == SS_ENOMEM)
      wrk__conn_close(c, "out of memory reading from the scheduler; reconnecting");
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_EOF)
    wrk__conn_close(c, "the scheduler closed the connection");
  else {
    char m[256];
    snprintf(m, sizeof m, "connection to the scheduler lost: %s", uv_strerror((int)nread));
    wrk__conn_close(c, m);
  }
}

static void send_hello(wrk__conn *c) {
  wrk__worker *w = c->w;
  json_t *gpus = json_array();
  for (int i = 0; i < w->ngpus; i++)
    json_array_append_new(gpus, json_pack("{s:i, s:s, s:I}", "index", w->gpus[i].index, "name",
                                          w->gpus[i].name, "memory_bytes",
                                          (json_int_t)w->gpus[i].memory_bytes));
  json_t *runs = json_array();
  for (wrk__run *r = w->runs; r; r = r->next) {
    /* what the run holds here, so that a restarted scheduler counts it:
     * its GPUs, or a CPU slot per data-parallel rank */
    json_t *gl = json_array();
    for (int i = 0; i < r->ngpus; i++)
      json_array_append_new(gl, json_integer(r->gpus[i]));
    json_t *ws = json_object_get(json_object_get(r->assign, "config"), "world_size");
    char part[4096];
    int here = wrk__run_dist_ranks(r, part, sizeof part); /* a run spread over workers */
    json_int_t slots = r->ngpus              ? 0
                       : here                ? here
                       : json_is_integer(ws) ? json_integer_value(ws)
                                             : 1;
    json_t *e = json_pack("{s:I, s:I, s:o, s:I}", "run_id", (json_int_t)r->id, "attempt",
                          (json_int_t)r->attempt, "gpus", gl, "slots", slots);
    /* a part without rank 0 of a run spread over workers: rank 0's worker
     * holds the run (its lease); a restarted scheduler keeps this part */
    if (here && !(part[0] == '0' && (part[1] == ',' || part[1] == '\0')) && !strstr(part, ",0,") &&
        strcmp(part + (strlen(part) > 2 ? strlen(part) - 2 : 0), ",0"))
      json_object_set_new(e, "part", json_true());
    json_array_append_new(runs, e);
  }
  json_t *msg =
      json_pack("{s:s, s:i, s:s, s:s, s:s, s:o, s:i, s:o, s:o}", "type", "hello", "version",
                PROTO_VERSION, "token", w->token, "name", w->name, "host", w->host, "gpus", gpus,
                "cpu_slots", w->cpu_slots, "runs", runs, "backends", wrk__backends_json(w));
  if (msg) /* placement sends a run only to a worker that offers its trainer */
    json_object_set_new(msg, "trainers", wrk__trainers_json(w));
  if (msg && w->slurm_job[0]) /* the scheduler's --slurm counts its jobs' workers by it */
    json_object_set_new(msg, "slurm_job", json_string(w->slurm_job));
  if (msg && w->secret[0]) /* this worker holds its name (identity.c) */
    json_object_set_new(msg, "secret", json_string(w->secret));
  if (msg && w->instance[0])
    json_object_set_new(msg, "instance", json_string(w->instance));
  char err[512];
  wrk__wbuf *b = msg ? wrk__wbuf_encode(msg, err, sizeof err) : NULL;
  json_decref(msg);
  if (!b) {
    wrk__conn_close(c, "BUG: cannot encode the hello message");
    return;
  }
  wrk__conn_write(c, b);
  wrk__wbuf_unref(b);
}

static void on_welcome_timeout(uv_timer_t *t) {
  wrk__worker *w = t->data;
  if (w->c && !w->c->welcomed)
    wrk__conn_close(w->c, "no welcome from the scheduler within 10 s");
}

static void on_connect(uv_connect_t *req, int status) {
  wrk__conn *c = req->data;
  wrk__worker *w = c->w;
  if (status < 0) {
    if (status != UV_ECANCELED && !c->closing) {
      char m[512];
      snprintf(m, sizeof m, "cannot connect to the scheduler at %s:%s: %s", w->sched_host,
               w->sched_port, uv_strerror(status));
      wrk__conn_close(c, m);
    }
    return;
  }
  if (c->closing)
    return;
  c->connected = 1;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_tcp_keepalive(&c->tcp, 1, 10);
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
  if (rc) {
    wrk__conn_close(c, "cannot read from the scheduler's connection");
    return;
  }
  send_hello(c);
}

static void connect_next(wrk__worker *w) {
  if (w->stopping)
    return;
  wrk__conn *c = calloc(1, sizeof *c);
  if (!c) {
    wrk__log("out of memory");
    schedule_reconnect(w);
    return;
  }
  c->w = w;
  proto_reader_init(&c->rd);
  uv_tcp_init(&w->loop, &c->tcp);
  c->tcp.data = c;
  c->creq.data = c;
  w->c = c;
  uv_timer_start(&w->welcome_timer, on_welcome_timeout, WELCOME_TIMEOUT_MS, 0);
  int rc =
      uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&w->addrs[w->addr_i], on_connect);
  if (rc) {
    char m[512];
    snprintf(m, sizeof m, "cannot connect to the scheduler at %s:%s: %s", w->sched_host,
             w->sched_port, uv_strerror(rc));
    wrk__conn_close(c, m);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  wrk__worker *w = req->data;
  w->gai_active = 0;
  if (status < 0 || w->stopping) {
    if (status < 0 && status != UV_ECANCELED)
      wrk__log("cannot resolve %s: %s", w->sched_host, uv_strerror(status));
    uv_freeaddrinfo(res);
    if (w->stopping)
      wrk__maybe_finish_shutdown(w);
    else
      schedule_reconnect(w);
    return;
  }
  w->naddrs = 0;
  for (struct addrinfo *a = res; a && w->naddrs < WRK__MAX_ADDRS; a = a->ai_next)
    if (a->ai_addrlen <= sizeof w->addrs[0])
      memcpy(&w->addrs[w->naddrs++], a->ai_addr, a->ai_addrlen);
  uv_freeaddrinfo(res);
  if (!w->naddrs) {
    wrk__log("%s has no address", w->sched_host);
    schedule_reconnect(w);
    return;
  }
  w->addr_i = 0;
  connect_next(w);
}

void wrk__connect_start(wrk__worker *w) {
  if (w->stopping || w->c || w->gai_active)
    return;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  w->gai.data = w;
  int rc = uv_getaddrinfo(&w->loop, &w->gai, on_resolved, w->sched_host, w->sched_port, &hints);
  if (rc) {
    wrk__log("cannot resolve %s: %s", w->sched_host, uv_strerror(rc));
    schedule_reconnect(w);
    return;
  }
  w->gai_active = 1;
}

/* The worker port: authentication, heartbeats, metrics, results. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/token.h"
#include "scheduler/internal.h"

static uint64_t now_ns(void) { return uv_hrtime(); }

static void wlog(const sched__wconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(const sched__wconn *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "scheduler: worker %s (%s): ", c->name[0] ? c->name : "?", c->peer);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

sched__wconn *sched__conn_by_worker(sched *s, int64_t worker_id) {
  for (sched__wconn *c = s->conns; c; c = c->next)
    if (c->authed && !c->closing && c->worker_id == worker_id)
      return c;
  return NULL;
}

sched__wrun *sched__conn_find_run(sched__wconn *c, int64_t run_id) {
  for (sched__wrun *w = c->runs; w; w = w->next)
    if (w->run_id == run_id)
      return w;
  return NULL;
}

void sched__conn_release_run(sched__wconn *c, int64_t run_id) {
  for (sched__wrun **pp = &c->runs; *pp; pp = &(*pp)->next) {
    sched__wrun *w = *pp;
    if (w->run_id != run_id)
      continue;
    if (w->ngpus == 0)
      c->cpu_busy--;
    for (int g = 0; g < w->ngpus; g++)
      c->gpu_busy[w->gpus[g]] = 0;
    *pp = w->next;
    json_decref(w->finished);
    free(w);
    return;
  }
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

/* Disconnects (why: an error message sent to the peer first, or NULL).
 * The worker's runs keep their leases: a worker that reconnects in time
 * reports them and carries on; otherwise they expire and are re-queued. */
void sched__conn_drop(sched__wconn *c, const char *why) {
  if (c->closing)
    return;
  if (why) {
    sched__send(c, json_pack("{s:s,s:s}", "type", "error", "message", why));
    wlog(c, "disconnected: %s", why);
  }
  c->closing = 1;
  sched *s = c->s;
  for (sched__wconn **pp = &s->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  if (c->authed)
    sched__emit(s, "worker",
                json_pack("{s:I,s:s,s:b}", "id", (json_int_t)c->worker_id, "name", c->name,
                          "connected", 0));
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* ---- database callbacks carry the connection by worker id, since the
 * connection may be gone when the answer comes ----------------------------------- */

typedef struct wctx {
  sched *s;
  int64_t worker_id, run_id;
  int attempt;
  int64_t seq;
  int cancelled; /* finished: the run was being cancelled */
  json_t *msg;   /* finished: the message */
} wctx;

static wctx *ctx(sched__wconn *c, int64_t run_id, int attempt, int64_t seq) {
  wctx *x = calloc(1, sizeof *x);
  x->s = c->s;
  x->worker_id = c->worker_id;
  x->run_id = run_id;
  x->attempt = attempt;
  x->seq = seq;
  return x;
}

static void ack(wctx *x) {
  sched__wconn *c = sched__conn_by_worker(x->s, x->worker_id);
  if (c)
    sched__send(c, json_pack("{s:s,s:I,s:i,s:I}", "type", "ack", "run_id", (json_int_t)x->run_id,
                             "attempt", x->attempt, "seq", (json_int_t)x->seq));
}

static void log_db_error(const char *what, int status, const char *errmsg) {
  if (status != 0)
    fprintf(stderr, "scheduler: %s failed: %s\n", what, errmsg);
}

/* ---- hello ------------------------------------------------------------------------ */

static int auth_blocked(sched *s, const char *addr, int failed) {
  uint64_t t = now_ns();
  sched__authfail *a;
  for (a = s->authfails; a; a = a->next)
    if (!strcmp(a->addr, addr))
      break;
  if (!a && !failed)
    return 0;
  if (!a) {
    a = calloc(1, sizeof *a);
    snprintf(a->addr, sizeof a->addr, "%s", addr);
    a->next = s->authfails;
    s->authfails = a;
  }
  if (t - a->window_start_ns > 60ull * 1000000000ull) {
    a->window_start_ns = t;
    a->count = 0;
  }
  if (failed)
    a->count++;
  return a->count > SCHED__MAX_AUTH_FAILURES;
}

typedef struct hello_ctx {
  sched *s;
  sched__wconn *c; /* valid while c->closing is 0: checked through the list */
  json_t *runs;    /* the runs the worker says it is executing */
} hello_ctx;

static int conn_alive(sched *s, sched__wconn *c) {
  for (sched__wconn *x = s->conns; x; x = x->next)
    if (x == c)
      return 1;
  return 0;
}

static void on_reconciled(void *ud, int status, PGresult *res, const char *errmsg) {
  wctx *x = ud;
  sched__wconn *c = sched__conn_by_worker(x->s, x->worker_id);
  if (status != 0 || !c) {
    log_db_error("reconciling a worker's run", status, errmsg);
  } else if (PQntuples(res) == 0) {
    /* not ours any more (re-queued or finished meanwhile): stop it */
    sched__conn_release_run(c, x->run_id);
    sched__send(c, json_pack("{s:s,s:I}", "type", "cancel", "run_id", (json_int_t)x->run_id));
  }
  free(x);
}

static void on_orphans(void *ud, int status, PGresult *res, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    log_db_error("re-queueing a restarted worker's runs", status, errmsg);
    return;
  }
  for (int i = 0; i < PQntuples(res); i++) {
    fprintf(stderr, "scheduler: run %s: its worker restarted without it; now %s\n",
            PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
    s->runs_requeued++;
    sched__emit(s, "run",
                json_pack("{s:I,s:s}", "id", (json_int_t)strtoll(PQgetvalue(res, i, 0), NULL, 10),
                          "status", PQgetvalue(res, i, 1)));
    sched__sweep_status(s, strtoll(PQgetvalue(res, i, 3), NULL, 10));
  }
  if (PQntuples(res))
    sched__place(s);
}

static void on_worker_row(void *ud, int status, PGresult *res, const char *errmsg) {
  hello_ctx *h = ud;
  sched *s = h->s;
  sched__wconn *c = conn_alive(s, h->c) ? h->c : NULL;
  if (status != 0 || !c) {
    log_db_error("registering a worker", status, errmsg);
    if (c)
      sched__conn_drop(c, "the scheduler cannot reach its database; try again");
    json_decref(h->runs);
    free(h);
    return;
  }
  c->worker_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
  /* another live connection with the same name is a stale one: drop it */
  for (sched__wconn *o = s->conns; o; o = o->next)
    if (o != c && o->authed && o->worker_id == c->worker_id) {
      sched__conn_drop(o, "replaced by a new connection of the same worker");
      break;
    }
  c->authed = 1;
  sched__send(c, json_pack("{s:s,s:I,s:i,s:i}", "type", "welcome", "worker_id",
                           (json_int_t)c->worker_id, "heartbeat_s", s->o.heartbeat_s, "lease_s",
                           s->o.lease_s));
  wlog(c, "connected: %d GPU(s), %d CPU slot(s)", c->ngpus, c->cpu_slots);
  /* runs it is still executing: keep those that are still its, by attempt */
  size_t i;
  json_t *r;
  json_array_foreach(h->runs, i, r) {
    int64_t run_id = json_integer_value(json_object_get(r, "run_id"));
    int attempt = (int)json_integer_value(json_object_get(r, "attempt"));
    sched__wrun *w = calloc(1, sizeof *w);
    w->run_id = run_id;
    w->attempt = attempt;
    json_t *g = json_object_get(r, "gpus");
    size_t j;
    json_t *gi;
    json_array_foreach(g, j, gi) {
      int idx = (int)json_integer_value(gi);
      if (w->ngpus < 8 && idx >= 0 && idx < c->ngpus) {
        w->gpus[w->ngpus++] = idx;
        c->gpu_busy[idx] = 1;
      }
    }
    if (w->ngpus == 0)
      c->cpu_busy++;
    w->next = c->runs;
    c->runs = w;
    char rid[32], att[16], wid[32], lease[16];
    snprintf(rid, sizeof rid, "%" PRId64, run_id);
    snprintf(att, sizeof att, "%d", attempt);
    snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
    snprintf(lease, sizeof lease, "%d", s->o.lease_s);
    const char *p[4] = {rid, att, wid, lease};
    db_query(s->db,
             "UPDATE runs SET lease_until = now() + $4 * interval '1 second' "
             "WHERE id = $1 AND attempt = $2 AND worker = $3 AND status = 'running' "
             "RETURNING id",
             4, p, on_reconciled, ctx(c, run_id, attempt, 0));
  }
  /* runs the database gives this worker that it no longer has (its previous
   * process died): back to the queue now rather than at lease expiry */
  {
    char wid[32];
    snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
    json_t *ids = json_array();
    json_array_foreach(h->runs, i, r) json_array_append(ids, json_object_get(r, "run_id"));
    char *idtext = json_dumps(ids, JSON_COMPACT);
    json_decref(ids);
    const char *p[2] = {wid, idtext ? idtext : "[]"};
    db_query(s->db,
             "UPDATE runs SET status = CASE WHEN attempt >= max_attempts "
             "THEN 'failed'::run_status ELSE 'queued'::run_status END, "
             "worker = NULL, lease_until = NULL, error = 'worker restarted: run lost', "
             "finished_at = CASE WHEN attempt >= max_attempts THEN now() END "
             "WHERE worker = $1 AND status = 'running' "
             "AND id NOT IN (SELECT jsonb_array_elements_text($2::jsonb)::bigint) "
             "RETURNING id, status, worker, sweep_id",
             2, p, on_orphans, s);
    free(idtext);
  }
  sched__emit(
      s, "worker",
      json_pack("{s:I,s:s,s:b}", "id", (json_int_t)c->worker_id, "name", c->name, "connected", 1));
  json_decref(h->runs);
  free(h);
  sched__place(s);
}

static void on_hello(sched__wconn *c, json_t *m) {
  sched *s = c->s;
  const char *token = json_string_value(json_object_get(m, "token"));
  if (auth_blocked(s, c->peer, 0)) {
    sched__conn_drop(c, "too many failed authentications; wait a minute");
    return;
  }
  if (!token_equal(s->token, token)) {
    auth_blocked(s, c->peer, 1);
    sched__conn_drop(c, "authentication failed: wrong cluster token");
    return;
  }
  if (json_integer_value(json_object_get(m, "version")) != PROTO_VERSION) {
    sched__conn_drop(c, "protocol version mismatch: upgrade the worker");
    return;
  }
  snprintf(c->name, sizeof c->name, "%s", json_string_value(json_object_get(m, "name")));
  snprintf(c->host, sizeof c->host, "%s", json_string_value(json_object_get(m, "host")));
  json_t *gpus = json_object_get(m, "gpus");
  c->ngpus = (int)json_array_size(gpus);
  if (c->ngpus > SCHED__MAX_GPUS)
    c->ngpus = SCHED__MAX_GPUS;
  c->gpus_json = json_incref(gpus);
  c->cpu_slots = (int)json_integer_value(json_object_get(m, "cpu_slots"));
  if (c->cpu_slots < 0)
    c->cpu_slots = 0;
  char *gj = json_dumps(gpus, JSON_COMPACT), slots[16];
  snprintf(slots, sizeof slots, "%d", c->cpu_slots);
  const char *p[4] = {c->name, c->host, gj ? gj : "[]", slots};
  hello_ctx *h = calloc(1, sizeof *h);
  h->s = s;
  h->c = c;
  h->runs = json_incref(json_object_get(m, "runs"));
  db_query(s->db,
           "INSERT INTO workers (name, host, gpus, cpu_slots, last_seen) "
           "VALUES ($1, $2, $3::jsonb, $4::int, now()) ON CONFLICT (name) DO UPDATE "
           "SET host = EXCLUDED.host, gpus = EXCLUDED.gpus, cpu_slots = EXCLUDED.cpu_slots, "
           "last_seen = now() RETURNING id",
           4, p, on_worker_row, h);
  free(gj);
}

/* ---- heartbeat ---------------------------------------------------------------------- */

/* The leases are renewed: a heartbeat that carried "hb" is answered with
 * {"type":"heartbeat","hb":N,"runs":[the runs renewed]}, so that the worker
 * knows until when its runs are its own (it stops a trainer whose lease it
 * could not renew, before the run is given to another worker). */
static void on_heartbeat_done(void *ud, int status, PGresult *res, const char *errmsg) {
  wctx *x = ud;
  log_db_error("renewing leases", status, errmsg);
  sched__wconn *c = status == 0 && x->attempt ? sched__conn_by_worker(x->s, x->worker_id) : NULL;
  if (c) {
    json_t *runs = json_array();
    for (int i = 0; i < PQntuples(res); i++)
      json_array_append_new(runs, json_integer(strtoll(PQgetvalue(res, i, 0), NULL, 10)));
    sched__send(
        c, json_pack("{s:s,s:I,s:o}", "type", "heartbeat", "hb", (json_int_t)x->seq, "runs", runs));
  }
  free(x);
}

/* Renews the leases of the runs the worker says it is executing, and only
 * those: a run of a worker that died and came back under the same name is
 * not kept alive by the new process's heartbeats. */
static void on_heartbeat(sched__wconn *c, json_t *m) {
  char wid[32], lease[16];
  snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
  snprintf(lease, sizeof lease, "%d", c->s->o.lease_s);
  char *ids = json_dumps(json_object_get(m, "runs"), JSON_COMPACT);
  const char *sqls[2] = {
      "UPDATE workers SET last_seen = now() WHERE id = $1",
      "UPDATE runs SET lease_until = now() + $2 * interval '1 second' "
      "WHERE worker = $1 AND status = 'running' "
      "AND id IN (SELECT jsonb_array_elements_text($3::jsonb)::bigint) RETURNING id"};
  const char *p1[1] = {wid}, *p2[3] = {wid, lease, ids ? ids : "[]"};
  const char *const *ps[2] = {p1, p2};
  const int np[2] = {1, 3};
  /* attempt: whether to answer (a worker that sends no "hb" expects none) */
  json_t *hb = json_object_get(m, "hb");
  wctx *x = ctx(c, 0, json_is_integer(hb), json_integer_value(hb));
  db_tx(c->s->db, 2, sqls, np, ps, on_heartbeat_done, x);
  free(ids);
}

/* ---- started / checkpoint ---------------------------------------------------------------- */

static void on_update_done(void *ud, int status, PGresult *res, const char *errmsg) {
  (void)res;
  log_db_error("updating a run", status, errmsg);
  free(ud);
}

static void on_started(sched__wconn *c, json_t *m) {
  json_t *cfg = json_object_get(m, "config");
  char rid[32], att[16], wid[32], params[32], nep[32], flops_pt[64];
  snprintf(rid, sizeof rid, "%" JSON_INTEGER_FORMAT,
           json_integer_value(json_object_get(m, "run_id")));
  snprintf(att, sizeof att, "%" JSON_INTEGER_FORMAT,
           json_integer_value(json_object_get(m, "attempt")));
  snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
  snprintf(params, sizeof params, "%.0f", json_number_value(json_object_get(cfg, "params")));
  snprintf(nep, sizeof nep, "%.0f", json_number_value(json_object_get(cfg, "nonembedding_params")));
  snprintf(flops_pt, sizeof flops_pt, "%.17g",
           json_number_value(json_object_get(cfg, "flops_per_token")));
  const char *p[6] = {rid, att, wid, params, nep, flops_pt};
  db_query(c->s->db,
           "UPDATE runs SET params = $4::bigint, nonembedding_params = $5::bigint, "
           "flops = coalesce(flops, $6::float8 * tokens) "
           "WHERE id = $1 AND attempt = $2 AND worker = $3",
           6, p, on_update_done, NULL);
}

static void on_checkpoint(sched__wconn *c, json_t *m) {
  char rid[32], att[16], step[32];
  snprintf(rid, sizeof rid, "%" JSON_INTEGER_FORMAT,
           json_integer_value(json_object_get(m, "run_id")));
  snprintf(att, sizeof att, "%" JSON_INTEGER_FORMAT,
           json_integer_value(json_object_get(m, "attempt")));
  snprintf(step, sizeof step, "%" JSON_INTEGER_FORMAT,
           json_integer_value(json_object_get(m, "step")));
  const char *p[4] = {rid, att, step, json_string_value(json_object_get(m, "path"))};
  db_query(c->s->db,
           "UPDATE runs SET checkpoint_step = $3::bigint, checkpoint_path = $4 "
           "WHERE id = $1 AND attempt = $2",
           4, p, on_update_done, NULL);
}

/* ---- metrics ------------------------------------------------------------------------------ */

/* Column arrays of a batch in PostgreSQL's binary array format (array_recv:
 * ndim, has-nulls flag, element type, then per dimension its length and
 * lower bound, then per element its byte length, -1 for NULL, and its
 * big-endian value), one element per step: a step line and an eval line of
 * the same step are merged, so one INSERT never touches a row twice. Binary
 * arrays spare the server parsing decimal text, most of its work per row. */
enum { OID_INT4 = 23, OID_INT8 = 20, OID_FLOAT8 = 701 };

typedef struct colbuf {
  unsigned char *p;
  size_t len;
  int oid;
} colbuf;

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* room for n elements of at most 8 bytes each */
static int cb_init(colbuf *b, int oid, size_t n) {
  b->p = malloc(20 + n * 12);
  b->oid = oid;
  if (!b->p)
    return -1;
  put32(b->p, 1);                 /* dimensions */
  put32(b->p + 4, 1);             /* may hold NULLs */
  put32(b->p + 8, (uint32_t)oid); /* element type */
  put32(b->p + 12, 0);            /* length, set by cb_finish */
  put32(b->p + 16, 1);            /* lower bound */
  b->len = 20;
  return 0;
}

static void cb_num(colbuf *b, json_t *v) {
  unsigned char *p = b->p + b->len;
  if (!json_is_number(v)) {
    put32(p, UINT32_MAX); /* NULL */
    b->len += 4;
    return;
  }
  uint64_t u;
  if (b->oid == OID_INT4) {
    put32(p, 4);
    put32(p + 4, (uint32_t)(int32_t)json_integer_value(v));
    b->len += 8;
    return;
  }
  if (b->oid == OID_INT8) {
    u = (uint64_t)(int64_t)json_number_value(v);
  } else {
    double d = json_number_value(v);
    memcpy(&u, &d, sizeof u);
  }
  put32(p, 8);
  put32(p + 4, (uint32_t)(u >> 32));
  put32(p + 8, (uint32_t)u);
  b->len += 12;
}

static void cb_finish(colbuf *b, size_t n) { put32(b->p + 12, (uint32_t)n); }

static int cmp_step(const void *a, const void *b) {
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "step"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "step"));
  return x < y ? -1 : x > y;
}

/* A store failed: drop the worker so that it reconnects and resends what
 * was not acknowledged (it keeps every unacknowledged message). */
static void resend_later(wctx *x) {
  sched__wconn *c = sched__conn_by_worker(x->s, x->worker_id);
  if (c)
    sched__conn_drop(c, "the scheduler could not store a message; reconnect and resend");
}

static void on_finished(sched__wconn *c, json_t *m);

static void on_metrics_stored(void *ud, int status, PGresult *res, const char *errmsg) {
  wctx *x = ud;
  sched__wconn *c = sched__conn_by_worker(x->s, x->worker_id);
  sched__wrun *w = c ? sched__conn_find_run(c, x->run_id) : NULL;
  if (w && --w->metrics_inflight == 0 && w->finished && status == 0) {
    /* the result waited for the run's last rows: record it now */
    json_t *fin = w->finished;
    w->finished = NULL;
    on_finished(c, fin);
    json_decref(fin);
  }
  if (status != 0) {
    log_db_error("storing metrics", status, errmsg);
    resend_later(x);
  } else {
    x->s->metric_rows += (uint64_t)atoll(PQcmdTuples(res));
    ack(x);
  }
  free(x);
}

#define NCOLS 9
static const char *const metric_cols[NCOLS] = {"step",     "tokens",     "train_loss",
                                               "val_loss", "lr",         "grad_norm",
                                               "b_noise",  "loss_scale", "tok_per_s"};

static void on_metrics(sched__wconn *c, json_t *m) {
  sched *s = c->s;
  int64_t run_id = json_integer_value(json_object_get(m, "run_id"));
  int attempt = (int)json_integer_value(json_object_get(m, "attempt"));
  int64_t seq = json_integer_value(json_object_get(m, "seq"));
  json_t *rows = json_object_get(m, "rows");
  size_t n = json_array_size(rows);
  json_t **sorted = calloc(n ? n : 1, sizeof *sorted);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(rows, i);
    if (json_is_integer(json_object_get(r, "step")) && json_is_number(json_object_get(r, "tokens")))
      sorted[k++] = r;
  }
  qsort(sorted, k, sizeof *sorted, cmp_step);
  colbuf cols[NCOLS] = {{0}};
  int oom = 0;
  for (int j = 0; j < NCOLS; j++)
    oom |= cb_init(&cols[j], j == 0 ? OID_INT4 : j == 1 ? OID_INT8 : OID_FLOAT8, k);
  size_t out = 0;
  for (size_t i = 0; i < k && !oom;) {
    /* one row per step: each column takes the first number among the
     * step's lines (a step line and an eval line of the same step) */
    json_int_t step = json_integer_value(json_object_get(sorted[i], "step"));
    size_t end = i + 1;
    while (end < k && json_integer_value(json_object_get(sorted[end], "step")) == step)
      end++;
    for (int j = 0; j < NCOLS; j++) {
      json_t *v = NULL;
      for (size_t g = i; g < end && !json_is_number(v); g++)
        v = json_object_get(sorted[g], metric_cols[j]);
      cb_num(&cols[j], v);
    }
    i = end;
    out++;
  }
  if (oom) {
    free(sorted);
    for (int j = 0; j < NCOLS; j++)
      free(cols[j].p);
    sched__conn_drop(c, "the scheduler is out of memory; reconnect and resend");
    return;
  }
  char rid[32], att[16], wid[32];
  snprintf(rid, sizeof rid, "%" PRId64, run_id);
  snprintf(att, sizeof att, "%d", attempt);
  snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
  const char *p[5 + NCOLS] = {rid, att, wid};
  int lens[5 + NCOLS] = {0}, fmts[5 + NCOLS] = {0};
  for (int j = 0; j < NCOLS; j++) {
    cb_finish(&cols[j], out);
    p[3 + j] = (const char *)cols[j].p;
    lens[3 + j] = (int)cols[j].len;
    fmts[3 + j] = 1;
  }
  /* stored for the run's current attempt (also when that attempt has just
   * finished: a batch resent after a reconnect may arrive after the
   * result); a stale attempt's batch is acknowledged and ignored (0 rows).
   * A step already stored (resent, or an eval line after its step line)
   * keeps its values and gains the ones it lacked; the other steps are
   * plain inserts, cheaper than ON CONFLICT's speculative ones. One run's
   * batches go through one connection in order, so no other statement
   * inserts its steps meanwhile; were one to, the primary key refuses the
   * batch and the worker resends it. */
  char lo[24], hi[24];
  snprintf(lo, sizeof lo, "%" PRId64,
           out ? (int64_t)json_integer_value(json_object_get(sorted[0], "step")) : 0);
  snprintf(hi, sizeof hi, "%" PRId64,
           out ? (int64_t)json_integer_value(json_object_get(sorted[k - 1], "step")) : -1);
  free(sorted);
  p[3 + NCOLS] = lo;
  p[4 + NCOLS] = hi;
  db_query_bin(s->db_metrics[(uint64_t)run_id % SCHED__METRIC_DBS],
               "WITH u AS (SELECT * FROM unnest($4::int[], $5::bigint[], $6::float8[], "
               "$7::float8[], $8::float8[], $9::float8[], $10::float8[], $11::float8[], "
               "$12::float8[]) AS u (step, tokens, train_loss, val_loss, lr, grad_norm, "
               "b_noise, loss_scale, tok_per_s) "
               "WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1::bigint AND attempt = $2::int "
               "AND $3::bigint IS NOT NULL)), "
               "merged AS (UPDATE metrics m SET "
               "train_loss = coalesce(m.train_loss, u.train_loss), "
               "val_loss = coalesce(m.val_loss, u.val_loss), lr = coalesce(m.lr, u.lr), "
               "grad_norm = coalesce(m.grad_norm, u.grad_norm), "
               "b_noise = coalesce(m.b_noise, u.b_noise), "
               "loss_scale = coalesce(m.loss_scale, u.loss_scale), "
               "tok_per_s = coalesce(m.tok_per_s, u.tok_per_s) FROM u "
               "WHERE m.run_id = $1::bigint AND m.step BETWEEN $13::int AND $14::int "
               "AND m.step = u.step RETURNING 1) "
               "INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr, grad_norm, "
               "b_noise, loss_scale, tok_per_s) SELECT $1::bigint, u.* FROM u "
               "WHERE NOT EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = $1::bigint "
               "AND m.step BETWEEN $13::int AND $14::int AND m.step = u.step)",
               5 + NCOLS, p, lens, fmts, on_metrics_stored, ctx(c, run_id, attempt, seq));
  sched__wrun *w = sched__conn_find_run(c, run_id);
  if (w)
    w->metrics_inflight++;
  for (int j = 0; j < NCOLS; j++)
    free(cols[j].p);
  if (out)
    sched__emit(s, "metrics",
                json_pack("{s:I,s:I,s:O}", "run_id", (json_int_t)run_id, "rows", (json_int_t)out,
                          "last", json_array_get(rows, json_array_size(rows) - 1)));
}

/* ---- finished ------------------------------------------------------------------------------ */

static void on_finished_stored(void *ud, int status, PGresult *res, const char *errmsg) {
  wctx *x = ud;
  sched *s = x->s;
  if (status != 0) {
    log_db_error("recording a finished run", status, errmsg);
    resend_later(x);
    json_decref(x->msg);
    free(x);
    return;
  }
  sched__wconn *c = sched__conn_by_worker(s, x->worker_id);
  sched__wrun *held = c ? sched__conn_find_run(c, x->run_id) : NULL;
  /* a stale attempt's result (resent after a newer attempt of the run was
   * assigned to this worker) must not free the newer attempt's slot */
  if (held && (held->attempt == 0 || held->attempt == x->attempt))
    sched__conn_release_run(c, x->run_id);
  if (PQntuples(res) == 1) {
    const char *st = PQgetvalue(res, 0, 0);
    if (!strcmp(st, "succeeded") || !strcmp(st, "failed"))
      s->runs_finished++;
    if (!strcmp(st, "failed"))
      s->runs_failed++;
    if (!strcmp(st, "queued"))
      s->runs_requeued++;
    sched__emit(s, "run",
                json_pack("{s:I,s:s,s:i}", "id", (json_int_t)x->run_id, "status", st, "attempt",
                          x->attempt));
    sched__sweep_touch(s, strtoll(PQgetvalue(res, 0, 1), NULL, 10), !strcmp(st, "succeeded"));
  }
  ack(x);
  json_decref(x->msg);
  free(x);
  sched__place(s);
}

static void on_finished(sched__wconn *c, json_t *m) {
  int64_t run_id = json_integer_value(json_object_get(m, "run_id"));
  sched__wrun *held = sched__conn_find_run(c, run_id);
  if (held && held->metrics_inflight > 0) {
    /* its metric batches are still being stored (on their own connection):
     * the result is recorded after them, so a finished run's curve is whole */
    json_decref(held->finished);
    held->finished = json_incref(m);
    return;
  }
  int attempt = (int)json_integer_value(json_object_get(m, "attempt"));
  int64_t seq = json_integer_value(json_object_get(m, "seq"));
  json_t *done = json_object_get(m, "done");
  int code = (int)json_integer_value(json_object_get(m, "exit_code"));
  const char *error = json_string_value(json_object_get(m, "error"));
  sched__wrun *w = sched__conn_find_run(c, run_id);
  wctx *x = ctx(c, run_id, attempt, seq);
  x->cancelled = w && w->cancelling;
  x->msg = json_incref(m);
  char rid[32], att[16], wid[32], loss[40] = "", tokens[32] = "", outcome[16];
  snprintf(rid, sizeof rid, "%" PRId64, run_id);
  snprintf(att, sizeof att, "%d", attempt);
  snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
  int ok = code == 0 && json_is_object(done);
  if (ok) {
    snprintf(loss, sizeof loss, "%.17g",
             json_number_value(json_object_get(done, "final_val_loss")));
    snprintf(tokens, sizeof tokens, "%.0f", json_number_value(json_object_get(done, "tokens")));
  }
  snprintf(outcome, sizeof outcome, "%s", ok ? "succeeded" : x->cancelled ? "cancelled" : "failed");
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", error ? error : ok ? "" : "trainer exited");
  if (!ok && !error)
    snprintf(msg, sizeof msg, "trainer exited with code %d", code);
  /* a failed run's log tail is kept for the status page */
  const char *tail = json_string_value(json_object_get(m, "log_tail"));
  const char *p[8] = {rid,
                      att,
                      wid,
                      outcome,
                      ok ? loss : NULL,
                      ok ? tokens : NULL,
                      ok ? NULL : msg,
                      ok ? NULL : tail};
  /* failed with attempts left: back to the queue (it resumes from its
   * checkpoint); otherwise final */
  db_query(c->s->db,
           "UPDATE runs SET status = CASE WHEN $4 = 'failed' AND attempt < max_attempts "
           "THEN 'queued'::run_status ELSE $4::run_status END, "
           "worker = NULL, lease_until = NULL, "
           "final_val_loss = coalesce($5::float8, final_val_loss), "
           "tokens = coalesce($6::bigint, tokens), error = $7, log_tail = $8, "
           "finished_at = CASE WHEN $4 = 'failed' AND attempt < max_attempts THEN NULL "
           "ELSE now() END "
           "WHERE id = $1 AND attempt = $2 AND worker = $3 AND status = 'running' "
           "RETURNING status, sweep_id",
           8, p, on_finished_stored, x);
}

/* ---- reading --------------------------------------------------------------------------------- */

static int on_line(void *ud, const char *line, size_t len) {
  sched__wconn *c = ud;
  if (c->closing)
    return -1;
  c->last_msg_ns = now_ns();
  char err[512];
  json_t *m = NULL;
  proto_type t = proto_parse(line, len, &m, err, sizeof err);
  if (t == PROTO_INVALID) {
    sched__conn_drop(c, err);
    return -1;
  }
  if (!c->authed && t != PROTO_HELLO) {
    sched__conn_drop(c, "the first message must be hello");
  } else if (c->authed && t == PROTO_HELLO) {
    sched__conn_drop(c, "hello sent twice");
  } else if (!sched__db_up(c->s) && t != PROTO_HEARTBEAT) {
    /* nothing can be stored: the worker keeps its messages and resends */
    sched__conn_drop(c, "database unavailable; reconnect later");
  } else {
    switch (t) {
    case PROTO_HELLO:
      on_hello(c, m);
      break;
    case PROTO_HEARTBEAT:
      if (db_ready(c->s->db))
        on_heartbeat(c, m);
      break;
    case PROTO_STARTED:
      on_started(c, m);
      break;
    case PROTO_METRICS:
      on_metrics(c, m);
      break;
    case PROTO_CHECKPOINT:
      on_checkpoint(c, m);
      break;
    case PROTO_FINISHED:
      on_finished(c, m);
      break;
    default:
      sched__conn_drop(c, "unexpected message type from a worker");
    }
  }
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
    int rc = proto_reader_feed(&c->rd, buf->base, (size_t)n, on_line, c);
    if (rc == SS_ERANGE)
      sched__conn_drop(c, "protocol line over the size limit");
  } else if (n < 0 && !c->closing) {
    if (c->authed)
      wlog(c, "connection lost (%s)", uv_strerror((int)n));
    sched__conn_drop(c, NULL);
  }
  free(buf->base);
}

static void on_connection(uv_stream_t *server, int status) {
  sched *s = server->data;
  if (status < 0 || s->stopping)
    return;
  sched__wconn *c = calloc(1, sizeof *c);
  c->s = s;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  proto_reader_init(&c->rd);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
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
  c->connected_ns = c->last_msg_ns = now_ns();
  int unauthed = 0;
  for (sched__wconn *x = s->conns; x; x = x->next)
    unauthed += !x->authed && !x->closing;
  if (unauthed >= SCHED__MAX_UNAUTHED) {
    fprintf(stderr, "scheduler: worker port: %d connections wait for their hello; %s refused\n",
            unauthed, c->peer);
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  c->next = s->conns;
  s->conns = c;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

void sched__workers_reap(sched *s) {
  uint64_t now = now_ns(), lease = (uint64_t)s->o.lease_s * 1000000000ull;
  for (sched__wconn *c = s->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing)
      continue;
    if (!c->authed && now - c->connected_ns > lease)
      sched__conn_drop(c, "no hello within a lease; closing");
    else if (c->authed && now - c->last_msg_ns > 2 * lease)
      sched__conn_drop(c, "nothing heard for two leases (no heartbeat); closing");
  }
}

int sched__workers_listen(sched *s, const char *hostport, char *err, size_t errlen) {
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
  uv_tcp_init(s->loop, &s->listener);
  s->listener.data = s;
  int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
  if (!rc)
    rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
  if (rc) {
    snprintf(err, errlen, "--workers %s: %s", hostport, uv_strerror(rc));
    return SS_EIO;
  }
  struct sockaddr_storage b;
  int blen = sizeof b;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&b, &blen);
  s->workers_port = ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                                  : ((struct sockaddr_in *)&b)->sin_port);
  return 0;
}

/* Cancels a running run: SIGTERM on its worker (it checkpoints); the
 * finished message then records it as cancelled. */
void sched__cancel_running(sched *s, int64_t run_id) {
  for (sched__wconn *c = s->conns; c; c = c->next) {
    sched__wrun *w = c->authed ? sched__conn_find_run(c, run_id) : NULL;
    if (w) {
      w->cancelling = 1;
      sched__send(c, json_pack("{s:s,s:I}", "type", "cancel", "run_id", (json_int_t)run_id));
      return;
    }
  }
}

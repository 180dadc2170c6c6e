/* The scheduler's PostgreSQL access: libpq's asynchronous API on the libuv
 * loop (db.h).
 *
 * One connection. Requests (a statement, or a transaction of statements)
 * wait in a FIFO; the head is sent with PQsendQueryParams, and its results
 * are read with PQconsumeInput / PQisBusy / PQgetResult when the socket is
 * readable. Only after the last result of one statement has arrived is the
 * next one sent, so a transaction's BEGIN, statements and COMMIT run
 * back to back on the connection with nothing interleaved.
 *
 * The socket is watched by a uv_poll_t. libpq may replace its socket while
 * connecting (another address, an SSL/GSS retry), and drops it when the
 * connection breaks, so the poll handle lives in a small struct of its own,
 * allocated per socket and freed in its close callback; the poll is stopped
 * before every PQconnectPoll so that a socket closed and reopened under the
 * same number is registered afresh.
 *
 * Beyond db.h:
 * - db_tx: nparams may be NULL (no statement has parameters), params may be
 *   NULL, and so may params[i] (statement i has no parameters, or all of
 *   them are SQL NULL).
 * - SS_EQUERY's message is the server's primary message
 *   ("duplicate key value violates unique constraint ...").
 * - A session-ending error (severity FATAL or PANIC, such as "terminating
 *   connection due to administrator command" when the server shuts down)
 *   is reported as SS_ECONN, and the layer reconnects.
 * - A request that fails with SS_ECONN may or may not have been applied
 *   (the connection can break after the server ran COMMIT but before the
 *   answer arrived): statements sent after a SS_ECONN must be idempotent,
 *   as the metric inserts (ON CONFLICT DO NOTHING) are.
 * - COPY is not supported: a statement that starts one fails with
 *   SS_EQUERY and the connection is re-established.
 * - db_queue_length counts the request in flight and those waiting.
 * - Callbacks never run inside db_query or db_tx (queued requests are sent
 *   from a uv_prepare_t, just before the loop polls), except after db_close
 *   (they then fail at once with SS_ECONN) or when out of memory.
 * - Connection failures and recoveries are reported on stderr, once per
 *   outage. */
#include "store/db.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DB_BACKOFF_MIN_MS 100
#define DB_BACKOFF_MAX_MS 5000
/* libpq enforces connect_timeout only in its blocking calls. */
#define DB_CONNECT_TIMEOUT_MS 10000
#define DB_MSG_MAX 512

enum { DB_DOWN, DB_CONNECTING, DB_UP };

/* Transaction steps besides the statements 0..nstmts-1. */
enum { STEP_BEGIN = -1 };
#define STEP_COMMIT(q) ((q)->nstmts)
#define STEP_ROLLBACK(q) ((q)->nstmts + 1)

typedef struct db_stmt {
  const char *sql;
  int nparams;
  const char *const *params;
  const int *lengths; /* NULL: every parameter is text */
  const int *formats;
} db_stmt;

/* One allocation: the struct, then the statements, their parameter arrays
 * and all the strings (copied, so callers may free theirs at once). */
typedef struct db_req {
  struct db_req *next;
  db_cb cb;
  void *ud;
  int tx;           /* BEGIN ... COMMIT around the statements */
  int nstmts;       /* 1 when !tx */
  int step;         /* the statement in flight (tx: STEP_BEGIN .. STEP_ROLLBACK) */
  PGresult *cur;    /* the result of the statement in flight, so far */
  PGresult *last;   /* tx: the last statement's result, kept for the callback */
  PGresult *failed; /* tx: the error being rolled back */
  db_stmt *stmts;
} db_req;

/* A poll handle on one libpq socket; freed in its close callback. */
typedef struct db_watch {
  uv_poll_t poll;
  db *d;
  int fd;
} db_watch;

struct db {
  uv_loop_t *loop;
  char *url;
  PGconn *conn; /* NULL while DB_DOWN */
  int state;
  int closing;
  int flushing;      /* PQflush left data to send: watch for writable too */
  int outage_logged; /* a failure was reported and no recovery since */
  PostgresPollingStatusType connect_poll;
  db_watch *watch;      /* on PQsocket(conn), or NULL */
  uv_timer_t timer;     /* reconnect backoff, or the connect timeout */
  uv_prepare_t prepare; /* sends what db_query queued, before the loop polls */
  int nhandles;         /* handles open or closing; d is freed at 0 */
  unsigned backoff_ms;
  db_req *inflight;    /* the request being executed, or NULL */
  db_req *head, *tail; /* waiting requests */
  size_t nwaiting;
  void (*close_cb)(void *ud);
  void *close_ud;
};

static void pump(db *d);
static void send_step(db *d);
static void connect_start(db *d);
static void on_poll(uv_poll_t *h, int status, int events);
static void on_prepare(uv_prepare_t *h);

/* Copies the first line of a libpq message into dst, runs of blanks made
 * single spaces (libpq's second lines are hints such as "Is the server
 * running locally ...?"). */
static void msg_copy(char *dst, size_t n, const char *src) {
  size_t j = 0;
  int space = 0;
  if (!src)
    src = "unknown error";
  while (*src == '\n' || *src == ' ')
    src++;
  for (; *src && *src != '\n' && j + 1 < n; src++) {
    if (*src == '\t' || *src == ' ') {
      space = 1;
      continue;
    }
    if (space && j > 0 && j + 2 < n)
      dst[j++] = ' ';
    space = 0;
    dst[j++] = *src;
  }
  dst[j] = '\0';
}

static void notice_ignore(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* ---- the poll handle ---------------------------------------------------- */

static void maybe_finish(db *d) {
  if (!d->closing || d->nhandles > 0)
    return;
  void (*cb)(void *) = d->close_cb;
  void *ud = d->close_ud;
  free(d->url);
  free(d);
  if (cb)
    cb(ud);
}

static void on_watch_closed(uv_handle_t *h) {
  db_watch *w = h->data;
  db *d = w->d;
  free(w);
  d->nhandles--;
  maybe_finish(d);
}

static void on_handle_closed(uv_handle_t *h) {
  db *d = h->data;
  d->nhandles--;
  maybe_finish(d);
}

/* Must run before libpq closes the socket (PQfinish), so that libuv never
 * polls a closed descriptor. */
static void watch_close(db *d) {
  if (!d->watch)
    return;
  uv_close((uv_handle_t *)&d->watch->poll, on_watch_closed);
  d->watch = NULL;
}

/* Watches the connection's current socket for events; 0 or a libuv error. */
static int watch(db *d, int events) {
  int fd = PQsocket(d->conn);
  if (d->watch && d->watch->fd != fd)
    watch_close(d);
  if (fd < 0)
    return UV_EBADF;
  if (!d->watch) {
    db_watch *w = malloc(sizeof *w);
    if (!w)
      return UV_ENOMEM;
    int rc = uv_poll_init(d->loop, &w->poll, fd);
    if (rc) {
      free(w);
      return rc;
    }
    w->poll.data = w;
    w->d = d;
    w->fd = fd;
    d->watch = w;
    d->nhandles++;
  }
  return uv_poll_start(&d->watch->poll, events, on_poll);
}

/* ---- connection state --------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void backoff_start(db *d) {
  uv_timer_start(&d->timer, on_timer, d->backoff_ms, 0);
  d->backoff_ms *= 2;
  if (d->backoff_ms > DB_BACKOFF_MAX_MS)
    d->backoff_ms = DB_BACKOFF_MAX_MS;
}

static void drop_conn(db *d) {
  watch_close(d);
  if (d->conn)
    PQfinish(d->conn);
  d->conn = NULL;
  d->state = DB_DOWN;
  d->flushing = 0;
}

static void log_outage(db *d, const char *what, const char *msg) {
  if (d->outage_logged || d->closing)
    return;
  fprintf(stderr, "scalesweep: database %s: %s (retrying with backoff)\n", what, msg);
  d->outage_logged = 1;
}

static void req_free(db_req *q) {
  PQclear(q->cur);
  PQclear(q->last);
  PQclear(q->failed);
  free(q);
}

/* The connection is unusable: the request in flight fails with status and
 * msg; waiting ones stay queued for the next connection. */
static void conn_reset(db *d, int status, const char *msg) {
  char buf[DB_MSG_MAX];
  msg_copy(buf, sizeof buf, msg);
  drop_conn(d);
  log_outage(d, "connection lost", buf);
  if (!d->closing)
    backoff_start(d);
  db_req *q = d->inflight;
  d->inflight = NULL;
  if (q) {
    q->cb(q->ud, status, NULL, buf);
    req_free(q);
  }
}

static void connect_failed(db *d, const char *msg) {
  char buf[DB_MSG_MAX];
  msg_copy(buf, sizeof buf, msg);
  drop_conn(d);
  log_outage(d, "unreachable", buf);
  backoff_start(d);
}

static void connected(db *d) {
  uv_timer_stop(&d->timer);
  if (PQsetnonblocking(d->conn, 1) != 0) {
    connect_failed(d, PQerrorMessage(d->conn));
    return;
  }
  d->state = DB_UP;
  d->backoff_ms = DB_BACKOFF_MIN_MS;
  if (d->outage_logged)
    fprintf(stderr, "scalesweep: database: connected again\n");
  d->outage_logged = 0;
  int rc = watch(d, UV_READABLE);
  if (rc) {
    conn_reset(d, SS_ECONN, uv_strerror(rc));
    return;
  }
  pump(d);
}

/* Waits for the socket as PQconnectPoll last asked. */
static void connect_wait(db *d) {
  int rc = watch(d, d->connect_poll == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
  if (rc)
    connect_failed(d, rc == UV_EBADF ? PQerrorMessage(d->conn) : uv_strerror(rc));
}

static void connect_step(db *d) {
  if (d->watch)
    uv_poll_stop(&d->watch->poll);
  d->connect_poll = PQconnectPoll(d->conn);
  switch (d->connect_poll) {
  case PGRES_POLLING_OK:
    connected(d);
    break;
  case PGRES_POLLING_FAILED:
    connect_failed(d, PQerrorMessage(d->conn));
    break;
  default:
    connect_wait(d);
    break;
  }
}

/* The URL comes last so that whatever it sets overrides these defaults
 * (TCP only: a dead peer is noticed within about a minute, idle or not). */
static void connect_start(db *d) {
  static const char *const keys[] = {"fallback_application_name",
                                     "keepalives_idle",
                                     "keepalives_interval",
                                     "keepalives_count",
                                     "tcp_user_timeout",
                                     "dbname",
                                     NULL};
  const char *const vals[] = {"scalesweep", "30", "10", "3", "60000", d->url, NULL};
  d->conn = PQconnectStartParams(keys, vals, 1);
  if (!d->conn) {
    connect_failed(d, "out of memory");
    return;
  }
  if (PQstatus(d->conn) == CONNECTION_BAD) {
    connect_failed(d, PQerrorMessage(d->conn));
    return;
  }
  PQsetNoticeProcessor(d->conn, notice_ignore, NULL);
  d->state = DB_CONNECTING;
  d->connect_poll = PGRES_POLLING_WRITING;
  uv_timer_start(&d->timer, on_timer, DB_CONNECT_TIMEOUT_MS, 0);
  connect_wait(d);
}

static void on_timer(uv_timer_t *t) {
  db *d = t->data;
  if (d->closing)
    return;
  if (d->state == DB_DOWN)
    connect_start(d);
  else if (d->state == DB_CONNECTING)
    connect_failed(d, "timed out while connecting");
}

/* ---- requests ----------------------------------------------------------- */

/* lengths and formats (PQsendQueryParams's) may be NULL: text parameters.
 * Only a single statement (!tx) takes them. */
static db_req *req_new(int tx, int n, const char *const *sqls, const int *nparams,
                       const char *const *const *params, const int *lengths, const int *formats,
                       db_cb cb, void *ud) {
  size_t nptr = 0, nchar = 0;
  for (int i = 0; i < n; i++) {
    int np = nparams && nparams[i] > 0 ? nparams[i] : 0;
    nptr += (size_t)np;
    nchar += strlen(sqls[i]) + 1;
    for (int j = 0; j < np; j++)
      if (params && params[i] && params[i][j])
        nchar += (formats && formats[j] ? (size_t)lengths[j] : strlen(params[i][j])) + 1;
  }
  size_t nlen = formats ? nptr : 0; /* lengths and formats, copied */
  db_req *q = calloc(1, sizeof *q + (size_t)n * sizeof(db_stmt) + nptr * sizeof(char *) +
                            2 * nlen * sizeof(int) + nchar);
  if (!q)
    return NULL;
  q->cb = cb;
  q->ud = ud;
  q->tx = tx;
  q->nstmts = n;
  q->stmts = (db_stmt *)(q + 1);
  const char **ptrs = (const char **)(q->stmts + n);
  int *lens = (int *)(ptrs + nptr), *fmts = lens + nlen;
  char *chars = (char *)(fmts + nlen);
  if (nlen) {
    memcpy(lens, lengths, nlen * sizeof(int));
    memcpy(fmts, formats, nlen * sizeof(int));
  }
  for (int i = 0; i < n; i++) {
    int np = nparams && nparams[i] > 0 ? nparams[i] : 0;
    size_t len = strlen(sqls[i]) + 1;
    memcpy(chars, sqls[i], len);
    q->stmts[i].sql = chars;
    chars += len;
    q->stmts[i].nparams = np;
    q->stmts[i].params = ptrs;
    q->stmts[i].lengths = nlen ? lens : NULL;
    q->stmts[i].formats = nlen ? fmts : NULL;
    for (int j = 0; j < np; j++) {
      const char *p = params && params[i] ? params[i][j] : NULL;
      if (p) {
        len = formats && formats[j] ? (size_t)lengths[j] : strlen(p) + 1;
        memcpy(chars, p, len);
        *ptrs++ = chars;
        chars += len;
      } else {
        *ptrs++ = NULL;
      }
    }
  }
  return q;
}

/* Sending from db_query itself could run a callback inside it (a send that
 * fails at once); sending just before the loop next polls cannot, and
 * costs no latency. */
static void on_prepare(uv_prepare_t *h) {
  db *d = h->data;
  uv_prepare_stop(h);
  pump(d);
}

static void enqueue(db *d, db_req *q, db_cb cb, void *ud) {
  if (!q) {
    cb(ud, SS_EQUERY, NULL, "out of memory");
    return;
  }
  if (d->closing) {
    q->cb(q->ud, SS_ECONN, NULL, "database connection closed");
    req_free(q);
    return;
  }
  if (d->tail)
    d->tail->next = q;
  else
    d->head = q;
  d->tail = q;
  d->nwaiting++;
  uv_prepare_start(&d->prepare, on_prepare);
}

/* Sends the next waiting request if the connection is up and idle. */
static void pump(db *d) {
  if (d->state != DB_UP || d->inflight || !d->head || d->closing)
    return;
  db_req *q = d->head;
  d->head = q->next;
  if (!d->head)
    d->tail = NULL;
  q->next = NULL;
  d->nwaiting--;
  q->step = q->tx ? STEP_BEGIN : 0;
  d->inflight = q;
  send_step(d);
}

static const char *result_message(const PGresult *r) {
  if (!r)
    return "no result from the server";
  const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
  if (m && *m)
    return m;
  m = PQresultErrorMessage(r);
  return m && *m ? m : "query failed";
}

static int result_ok(const PGresult *r) {
  if (!r)
    return 0;
  ExecStatusType st = PQresultStatus(r);
  return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY;
}

/* FATAL and PANIC end the session: the server closes the connection. */
static int result_ends_session(const PGresult *r) {
  const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
  return sev && (!strcmp(sev, "FATAL") || !strcmp(sev, "PANIC"));
}

/* The request in flight is finished: its callback gets r (owned here). */
static void complete(db *d, int status, PGresult *r) {
  db_req *q = d->inflight;
  d->inflight = NULL;
  char buf[DB_MSG_MAX];
  const char *msg = NULL;
  if (status != 0) {
    msg_copy(buf, sizeof buf, result_message(r));
    msg = buf;
  }
  q->cb(q->ud, status, status == 0 ? r : NULL, msg);
  PQclear(r);
  req_free(q);
  pump(d);
}

/* The statement in flight has returned all its results (r: the first error,
 * or the last result; owned here). */
static void step_done(db *d, PGresult *r) {
  db_req *q = d->inflight;
  if (PQstatus(d->conn) == CONNECTION_BAD || (r && result_ends_session(r))) {
    char buf[DB_MSG_MAX];
    msg_copy(buf, sizeof buf, r ? result_message(r) : PQerrorMessage(d->conn));
    PQclear(r);
    conn_reset(d, SS_ECONN, buf);
    return;
  }
  int ok = result_ok(r);
  if (!q->tx) {
    complete(d, ok ? 0 : SS_EQUERY, r);
    return;
  }
  if (q->step == STEP_BEGIN) {
    if (!ok) {
      complete(d, SS_EQUERY, r);
      return;
    }
    PQclear(r);
    q->step = q->nstmts > 0 ? 0 : STEP_COMMIT(q);
  } else if (q->step < q->nstmts) {
    if (!ok) {
      q->failed = r;
      q->step = STEP_ROLLBACK(q);
    } else if (q->step == q->nstmts - 1) {
      q->last = r;
      q->step = STEP_COMMIT(q);
    } else {
      PQclear(r);
      q->step++;
    }
  } else if (q->step == STEP_COMMIT(q)) {
    if (!ok) {
      complete(d, SS_EQUERY, r);
      return;
    }
    PGresult *last = q->last ? q->last : r;
    if (last != r)
      PQclear(r);
    q->last = NULL;
    complete(d, 0, last);
    return;
  } else {
    /* ROLLBACK answered: report the error that caused it. A failed
     * ROLLBACK leaves the session in an unknown state: start afresh. */
    PGresult *failed = q->failed;
    q->failed = NULL;
    if (!ok) {
      char buf[DB_MSG_MAX];
      msg_copy(buf, sizeof buf, result_message(r));
      PQclear(r);
      d->inflight = NULL;
      q->cb(q->ud, SS_EQUERY, NULL, result_message(failed));
      PQclear(failed);
      req_free(q);
      conn_reset(d, SS_ECONN, buf);
      return;
    }
    PQclear(r);
    complete(d, SS_EQUERY, failed);
    return;
  }
  send_step(d);
}

static void flush(db *d) {
  int f = PQflush(d->conn);
  if (f < 0) {
    conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
    return;
  }
  d->flushing = f == 1;
  int rc = watch(d, d->flushing ? UV_READABLE | UV_WRITABLE : UV_READABLE);
  if (rc)
    conn_reset(d, SS_ECONN, uv_strerror(rc));
}

static void send_step(db *d) {
  db_req *q = d->inflight;
  const char *sql;
  int n = 0;
  const char *const *params = NULL;
  const int *lengths = NULL, *formats = NULL;
  if (q->tx && q->step == STEP_BEGIN) {
    sql = "BEGIN";
  } else if (q->tx && q->step == STEP_COMMIT(q)) {
    sql = "COMMIT";
  } else if (q->tx && q->step == STEP_ROLLBACK(q)) {
    sql = "ROLLBACK";
  } else {
    sql = q->stmts[q->step].sql;
    n = q->stmts[q->step].nparams;
    params = q->stmts[q->step].params;
    lengths = q->stmts[q->step].lengths;
    formats = q->stmts[q->step].formats;
  }
  if (!PQsendQueryParams(d->conn, sql, n, NULL, params, lengths, formats, 0)) {
    if (PQstatus(d->conn) == CONNECTION_BAD) {
      conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
      return;
    }
    /* Refused before sending (too many parameters, say): this statement's
     * error, with the connection still usable. */
    step_done(d, PQmakeEmptyPGresult(d->conn, PGRES_FATAL_ERROR));
    return;
  }
  flush(d);
}

/* Keeps the first error of the statement in flight, else its last result. */
static void collect(db_req *q, PGresult *r) {
  if (!q->cur) {
    q->cur = r;
  } else if (!result_ok(q->cur)) {
    PQclear(r);
  } else {
    PQclear(q->cur);
    q->cur = r;
  }
}

static void process_input(db *d) {
  if (!PQconsumeInput(d->conn)) {
    conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
    return;
  }
  PGnotify *n;
  while ((n = PQnotifies(d->conn)))
    PQfreemem(n);
  if (d->flushing) {
    flush(d);
    if (d->state != DB_UP)
      return;
  }
  while (d->state == DB_UP && d->inflight && !PQisBusy(d->conn)) {
    db_req *q = d->inflight;
    PGresult *r = PQgetResult(d->conn);
    if (r) {
      ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
        PQclear(r);
        drop_conn(d);
        backoff_start(d);
        d->inflight = NULL;
        q->cb(q->ud, SS_EQUERY, NULL, "COPY is not supported by the database layer");
        req_free(q);
        return;
      }
      collect(q, r);
      continue;
    }
    r = q->cur;
    q->cur = NULL;
    step_done(d, r);
  }
  if (d->state == DB_UP && !d->inflight && PQstatus(d->conn) == CONNECTION_BAD)
    conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
}

static void on_poll(uv_poll_t *h, int status, int events) {
  db_watch *w = h->data;
  db *d = w->d;
  if (w != d->watch || d->closing)
    return;
  if (d->state == DB_CONNECTING) {
    connect_step(d);
    return;
  }
  if (status < 0) {
    conn_reset(d, SS_ECONN, uv_strerror(status));
    return;
  }
  if ((events & UV_WRITABLE) && d->flushing) {
    flush(d);
    if (d->state != DB_UP)
      return;
  }
  if (events & UV_READABLE)
    process_input(d);
}

/* ---- the interface ------------------------------------------------------ */

db *db_open(uv_loop_t *loop, const char *url) {
  db *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->url = strdup(url ? url : "");
  if (!d->url) {
    free(d);
    return NULL;
  }
  d->loop = loop;
  d->state = DB_DOWN;
  d->backoff_ms = DB_BACKOFF_MIN_MS;
  uv_timer_init(loop, &d->timer);
  d->timer.data = d;
  uv_prepare_init(loop, &d->prepare);
  d->prepare.data = d;
  d->nhandles = 2;
  connect_start(d);
  return d;
}

void db_query(db *d, const char *sql, int nparams, const char *const *params, db_cb cb, void *ud) {
  const char *const *pp[1] = {params};
  enqueue(d, req_new(0, 1, &sql, &nparams, pp, NULL, NULL, cb, ud), cb, ud);
}

void db_query_bin(db *d, const char *sql, int nparams, const char *const *params,
                  const int *lengths, const int *formats, db_cb cb, void *ud) {
  const char *const *pp[1] = {params};
  enqueue(d, req_new(0, 1, &sql, &nparams, pp, lengths, formats, cb, ud), cb, ud);
}

void db_tx(db *d, int nstmts, const char *const *sqls, const int *nparams,
           const char *const *const *params, db_cb cb, void *ud) {
  if (nstmts < 0)
    nstmts = 0;
  enqueue(d, req_new(1, nstmts, sqls, nparams, params, NULL, NULL, cb, ud), cb, ud);
}

int db_ready(const db *d) { return d->state == DB_UP; }

size_t db_queue_length(const db *d) { return d->nwaiting + (d->inflight ? 1 : 0); }

void db_close(db *d, void (*cb)(void *ud), void *ud) {
  if (d->closing)
    return;
  d->closing = 1;
  d->close_cb = cb;
  d->close_ud = ud;
  drop_conn(d);
  uv_close((uv_handle_t *)&d->timer, on_handle_closed);
  uv_close((uv_handle_t *)&d->prepare, on_handle_closed);
  db_req *q = d->inflight;
  d->inflight = NULL;
  if (q) {
    q->next = d->head;
  } else {
    q = d->head;
  }
  d->head = d->tail = NULL;
  d->nwaiting = 0;
  while (q) {
    db_req *next = q->next;
    q->cb(q->ud, SS_ECONN, NULL, "database connection closed");
    req_free(q);
    q = next;
  }
}

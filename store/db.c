/* The scheduler's PostgreSQL access: libpq's asynchronous API on the libuv
 * loop (db.h): the statement queue and its results here, the connection
 * in db_conn.c.
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
 * - db_options (db_open_opts): on every new connection a first statement
 *   sets the session's statement_timeout and read-only default; a
 *   statement the server cancels for its timeout (SQLSTATE 57014), and one
 *   that waited in the queue over the same limit, fail with SS_ETIMEOUT.
 * - Callbacks never run inside db_query or db_tx (queued requests are sent
 *   from a uv_prepare_t, just before the loop polls), except after db_close
 *   (they then fail at once with SS_ECONN) or when out of memory.
 * - Connection failures and recoveries are reported on stderr, once per
 *   outage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

static void send_step(db *d);

/* ---- requests ----------------------------------------------------------- */

/* lengths and formats (PQsendQueryParams's) may be NULL: text parameters.
 * Only a single statement (!tx) takes them. */
static store__db_req *req_new(int tx, int n, const char *const *sqls, const int *nparams,
                              const char *const *const *params, const int *lengths,
                              const int *formats, db_cb cb, void *ud) {
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
  store__db_req *q = calloc(1, sizeof *q + (size_t)n * sizeof(store__db_stmt) +
                                   nptr * sizeof(char *) + 2 * nlen * sizeof(int) + nchar);
  if (!q)
    return NULL;
  q->cb = cb;
  q->ud = ud;
  q->tx = tx;
  q->nstmts = n;
  q->stmts = (store__db_stmt *)(q + 1);
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
  store__db_pump(d);
}

static void enqueue(db *d, store__db_req *q, db_cb cb, void *ud) {
  if (!q) {
    cb(ud, SS_EQUERY, NULL, "out of memory");
    return;
  }
  if (d->closing) {
    q->cb(q->ud, SS_ECONN, NULL, "database connection closed");
    store__db_req_free(q);
    return;
  }
  q->queued_ms = uv_now(d->loop);
  if (d->tail)
    d->tail->next = q;
  else
    d->head = q;
  d->tail = q;
  d->nwaiting++;
  uv_prepare_start(&d->prepare, on_prepare);
}

static store__db_req *dequeue(db *d) {
  store__db_req *q = d->head;
  d->head = q->next;
  if (!d->head)
    d->tail = NULL;
  q->next = NULL;
  d->nwaiting--;
  return q;
}

/* Sends the next waiting request if the connection is up and idle. A
 * request that has waited longer than the connection's limit fails
 * instead: its answer would come too late (the reader has given up or is
 * about to), and running it would only delay the ones behind it. */
void store__db_pump(db *d) {
  while (d->state == STORE__DB_UP && !d->inflight && d->head && !d->closing) {
    store__db_req *q = dequeue(d);
    uint64_t waited = uv_now(d->loop) - q->queued_ms;
    if (d->opts.timeout_ms > 0 && !q->setup && waited > (uint64_t)d->opts.timeout_ms) {
      char msg[STORE__DB_MSG_MAX];
      snprintf(msg, sizeof msg,
               "the query waited %llu ms for a database connection, over the %d ms read "
               "limit; try again shortly",
               (unsigned long long)waited, d->opts.timeout_ms);
      q->cb(q->ud, SS_ETIMEOUT, NULL, msg);
      store__db_req_free(q);
      continue;
    }
    q->step = q->tx ? STORE__STEP_BEGIN : 0;
    d->inflight = q;
    send_step(d);
  }
}

static void on_setup(void *ud, int status, PGresult *res, const char *errmsg) {
  (void)ud;
  (void)res;
  if (status != 0 && status != SS_ECONN)
    fprintf(stderr, "scalesweep: database: could not set the session's limits: %s\n", errmsg);
}

/* set_config rather than SET: one statement, with the values as parameters. */
void store__db_setup(db *d) {
  if (d->opts.timeout_ms <= 0 && !d->opts.read_only)
    return;
  char ms[24];
  snprintf(ms, sizeof ms, "%d", d->opts.timeout_ms > 0 ? d->opts.timeout_ms : 0);
  /* jit off: reads are many short statements, and compiling one took
   * longer than running it (a second for a curves query of half that) */
  const char *sql = "SELECT set_config('statement_timeout', $1, false), "
                    "set_config('default_transaction_read_only', $2, false), "
                    "set_config('jit', 'off', false)";
  const char *params[2] = {ms, d->opts.read_only ? "on" : "off"};
  const char *const *pp[1] = {params};
  int np = 2;
  store__db_req *q = req_new(0, 1, &sql, &np, pp, NULL, NULL, on_setup, NULL);
  if (!q) {
    fprintf(stderr, "scalesweep: database: out of memory setting the session's limits\n");
    return;
  }
  q->setup = 1;
  q->queued_ms = uv_now(d->loop);
  q->next = d->head;
  d->head = q;
  if (!d->tail)
    d->tail = q;
  d->nwaiting++;
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

/* query_canceled: with no cancel requests of ours, the statement_timeout */
static int result_timed_out(const PGresult *r) {
  const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  return st && !strcmp(st, "57014");
}

/* The request in flight is finished: its callback gets r (owned here). */
/* store__db_keep_result: the result a callback took over (the loop's
 * thread only: every db runs its callbacks on it) */
static const PGresult *kept_result;

void store__db_keep_result(const PGresult *r) { kept_result = r; }

static void complete(db *d, int status, PGresult *r) {
  store__db_req *q = d->inflight;
  d->inflight = NULL;
  char buf[STORE__DB_MSG_MAX];
  const char *msg = NULL;
  if (status == SS_EQUERY && d->opts.timeout_ms > 0 && result_timed_out(r)) {
    status = SS_ETIMEOUT;
    snprintf(buf, sizeof buf,
             "the query ran over the %d ms read limit; ask for less (fewer runs, points or "
             "rows)",
             d->opts.timeout_ms);
    msg = buf;
  } else if (status != 0) {
    store__db_msg_copy(buf, sizeof buf, result_message(r));
    msg = buf;
  }
  kept_result = NULL;
  q->cb(q->ud, status, status == 0 ? r : NULL, msg);
  if (r != kept_result || status != 0)
    PQclear(r);
  kept_result = NULL;
  store__db_req_free(q);
  store__db_pump(d);
}

/* The statement in flight has returned all its results (r: the first error,
 * or the last result; owned here). */
static void step_done(db *d, PGresult *r) {
  store__db_req *q = d->inflight;
  if (PQstatus(d->conn) == CONNECTION_BAD || (r && result_ends_session(r))) {
    char buf[STORE__DB_MSG_MAX];
    store__db_msg_copy(buf, sizeof buf, r ? result_message(r) : PQerrorMessage(d->conn));
    PQclear(r);
    store__db_conn_reset(d, SS_ECONN, buf);
    return;
  }
  int ok = result_ok(r);
  if (!q->tx) {
    complete(d, ok ? 0 : SS_EQUERY, r);
    return;
  }
  if (q->step == STORE__STEP_BEGIN) {
    if (!ok) {
      complete(d, SS_EQUERY, r);
      return;
    }
    PQclear(r);
    q->step = q->nstmts > 0 ? 0 : STORE__STEP_COMMIT(q);
  } else if (q->step < q->nstmts) {
    if (!ok) {
      q->failed = r;
      q->step = STORE__STEP_ROLLBACK(q);
    } else if (q->step == q->nstmts - 1) {
      q->last = r;
      q->step = STORE__STEP_COMMIT(q);
    } else {
      PQclear(r);
      q->step++;
    }
  } else if (q->step == STORE__STEP_COMMIT(q)) {
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
      char buf[STORE__DB_MSG_MAX];
      store__db_msg_copy(buf, sizeof buf, result_message(r));
      PQclear(r);
      d->inflight = NULL;
      q->cb(q->ud, SS_EQUERY, NULL, result_message(failed));
      PQclear(failed);
      store__db_req_free(q);
      store__db_conn_reset(d, SS_ECONN, buf);
      return;
    }
    PQclear(r);
    complete(d, SS_EQUERY, failed);
    return;
  }
  send_step(d);
}

void store__db_flush(db *d) {
  int f = PQflush(d->conn);
  if (f < 0) {
    store__db_conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
    return;
  }
  d->flushing = f == 1;
  int rc = store__db_watch(d, d->flushing ? UV_READABLE | UV_WRITABLE : UV_READABLE);
  if (rc)
    store__db_conn_reset(d, SS_ECONN, uv_strerror(rc));
}

static void send_step(db *d) {
  store__db_req *q = d->inflight;
  const char *sql;
  int n = 0;
  const char *const *params = NULL;
  const int *lengths = NULL, *formats = NULL;
  if (q->tx && q->step == STORE__STEP_BEGIN) {
    sql = "BEGIN";
  } else if (q->tx && q->step == STORE__STEP_COMMIT(q)) {
    sql = "COMMIT";
  } else if (q->tx && q->step == STORE__STEP_ROLLBACK(q)) {
    sql = "ROLLBACK";
  } else {
    sql = q->stmts[q->step].sql;
    n = q->stmts[q->step].nparams;
    params = q->stmts[q->step].params;
    lengths = q->stmts[q->step].lengths;
    formats = q->stmts[q->step].formats;
  }
  if (!PQsendQueryParams(d->conn, sql, n, NULL, params, lengths, formats, q->binary ? 1 : 0)) {
    if (PQstatus(d->conn) == CONNECTION_BAD) {
      store__db_conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
      return;
    }
    /* Refused before sending (too many parameters, say): this statement's
     * error, with the connection still usable. */
    step_done(d, PQmakeEmptyPGresult(d->conn, PGRES_FATAL_ERROR));
    return;
  }
  store__db_flush(d);
}

/* Keeps the first error of the statement in flight, else its last result. */
static void collect(store__db_req *q, PGresult *r) {
  if (!q->cur) {
    q->cur = r;
  } else if (!result_ok(q->cur)) {
    PQclear(r);
  } else {
    PQclear(q->cur);
    q->cur = r;
  }
}

void store__db_process_input(db *d) {
  if (!PQconsumeInput(d->conn)) {
    store__db_conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
    return;
  }
  PGnotify *n;
  while ((n = PQnotifies(d->conn)))
    PQfreemem(n);
  if (d->flushing) {
    store__db_flush(d);
    if (d->state != STORE__DB_UP)
      return;
  }
  while (d->state == STORE__DB_UP && d->inflight && !PQisBusy(d->conn)) {
    store__db_req *q = d->inflight;
    PGresult *r = PQgetResult(d->conn);
    if (r) {
      ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
        PQclear(r);
        store__db_drop_conn(d);
        store__db_backoff_start(d);
        d->inflight = NULL;
        q->cb(q->ud, SS_EQUERY, NULL, "COPY is not supported by the database layer");
        store__db_req_free(q);
        return;
      }
      collect(q, r);
      continue;
    }
    r = q->cur;
    q->cur = NULL;
    step_done(d, r);
  }
  if (d->state == STORE__DB_UP && !d->inflight && PQstatus(d->conn) == CONNECTION_BAD)
    store__db_conn_reset(d, SS_ECONN, PQerrorMessage(d->conn));
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

void db_query_binary(db *d, const char *sql, int nparams, const char *const *params, db_cb cb,
                     void *ud) {
  const char *const *pp[1] = {params};
  store__db_req *q = req_new(0, 1, &sql, &nparams, pp, NULL, NULL, cb, ud);
  if (q)
    q->binary = 1;
  enqueue(d, q, cb, ud);
}

void db_tx(db *d, int nstmts, const char *const *sqls, const int *nparams,
           const char *const *const *params, db_cb cb, void *ud) {
  if (nstmts < 0)
    nstmts = 0;
  enqueue(d, req_new(1, nstmts, sqls, nparams, params, NULL, NULL, cb, ud), cb, ud);
}

size_t db_queue_length(const db *d) { return d->nwaiting + (d->inflight ? 1 : 0); }

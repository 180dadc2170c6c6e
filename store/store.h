/* The store: the only code that speaks SQL (docs/design.md#tables).
 *
 * Callers outside store/ include this header (and the concern headers it
 * lists) and never see SQL, libpq or a PGresult. Every query is a typed
 * function of one concern: its arguments are C values, its answer comes to
 * a callback on the loop thread. The connection (a `db`, store/db.h inside
 * this folder) is libpq's asynchronous API on the caller's libuv loop: the
 * loop never blocks on the database, statements on one connection run in
 * the order they were queued, and after a lost connection the layer
 * reconnects by itself (100 ms doubling to 5 s).
 *
 * Status codes are those of common/err.h: 0, SS_EQUERY (the statement
 * failed: errmsg is the server's primary message), SS_ETIMEOUT (it ran
 * over, or waited over, the connection's time limit: db_options), SS_ECONN (the
 * connection was lost or is down: the statement may or may not have been
 * applied, so every write here is idempotent), SS_ENOMEM.
 *
 * Blocking calls (migrations, the private server of `up`) are for start-up
 * and shutdown, before and after the loop: store/migrate.h, store/pgserver.h. */
#ifndef SS_STORE_STORE_H
#define SS_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/err.h"

typedef struct db db; /* one connection and its queue */

/* Starts connecting (asynchronously) to a libpq conninfo or URL. */
db *db_open(uv_loop_t *loop, const char *url);

/* What a connection's session is set to each time it (re)connects (a
 * session with either set also has PostgreSQL's jit off: its reads are
 * short statements that compiling only slows down). */
typedef struct db_options {
  /* > 0: PostgreSQL's statement_timeout for the session, and the longest a
   * statement may wait in the queue before it is sent: over either it
   * fails with SS_ETIMEOUT and a message naming the limit ("the query ran
   * over the 5000 ms read limit; ..."); 0: no limit */
  int timeout_ms;
  /* default_transaction_read_only: a write fails (SS_EQUERY) */
  int read_only;
} db_options;

/* db_open with a session set up by o (NULL: as db_open). The settings are
 * sent before any queued statement on every new connection. */
db *db_open_opts(uv_loop_t *loop, const char *url, const db_options *o);
/* Connected now (HTTP handlers answer 503 when not). */
int db_ready(const db *d);
/* Statements queued and not yet answered (for /metrics). */
size_t db_queue_length(const db *d);
/* Fails every queued statement with SS_ECONN, closes the connection and its
 * libuv handles; cb runs once they are all closed. */
void db_close(db *d, void (*cb)(void *ud), void *ud);

/* A pool of connections for reads (the API's and the page's documents,
 * the refits' and the predictor's reads), apart from the connection that
 * carries what workers wait for, so that a slow read never delays a lease
 * renewal. Each connection is a db of its own (queue, reconnects); reads are
 * heavy (their cost grows with the data asked for: curves, a run's metrics)
 * or light (a page of runs, counts). With n > 1 heavy reads use only the
 * first n - 1 connections, so light ones always find one that no flood of
 * heavy reads has queued up. */
typedef struct db_pool db_pool;

/* n (>= 1) connections opened with o. */
db_pool *db_pool_open(uv_loop_t *loop, const char *url, int n, const db_options *o);
/* The connection for the next read: among those up (of the heavy ones for
 * a heavy read, unless none of them is up), the one with the fewest
 * statements queued; when none is up, the first (its statements wait). */
db *db_pool_get(db_pool *p, int heavy);
/* At least one connection is up. */
int db_pool_ready(const db_pool *p);
/* Statements queued on all the connections. */
size_t db_pool_queue_length(const db_pool *p);
/* db_close of every connection; cb once they are all closed (p is freed). */
void db_pool_close(db_pool *p, void (*cb)(void *ud), void *ud);

/* A read whose answer is one JSON document built by PostgreSQL (the API's
 * and the page's reads): json is NULL when there is no such object; valid
 * during the callback only. */
typedef void (*store_json_cb)(void *ud, int status, const char *json, const char *errmsg);

/* A statement whose answer is how many rows it changed or returned. */
typedef void (*store_done_cb)(void *ud, int status, int64_t rows, const char *errmsg);

/* rows of a worker's write refused because the run's attempt is no longer
 * that worker's running one (store/metrics.h) */
#define STORE_FENCED (-1)

#endif

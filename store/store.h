/* The store: the only code that speaks SQL (DESIGN.md "Storage").
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
 * failed: errmsg is the server's primary message), SS_ECONN (the
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
/* Connected now (HTTP handlers answer 503 when not). */
int db_ready(const db *d);
/* Statements queued and not yet answered (for /metrics). */
size_t db_queue_length(const db *d);
/* Fails every queued statement with SS_ECONN, closes the connection and its
 * libuv handles; cb runs once they are all closed. */
void db_close(db *d, void (*cb)(void *ud), void *ud);

/* A read whose answer is one JSON document built by PostgreSQL (the API's
 * and the page's reads): json is NULL when there is no such object; valid
 * during the callback only. */
typedef void (*store_json_cb)(void *ud, int status, const char *json, const char *errmsg);

/* A statement whose answer is how many rows it changed or returned. */
typedef void (*store_done_cb)(void *ud, int status, int64_t rows, const char *errmsg);

#endif

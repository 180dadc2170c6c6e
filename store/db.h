/* Inside store/ only (and its tests): the connection's statement API, with
 * libpq's results. Everything outside store/ uses store/store.h.
 *
 * PostgreSQL access for the scheduler (the only database client): libpq's
 * asynchronous API driven by the scheduler's libuv loop, so the loop never
 * blocks on the database.
 *
 * Queries are queued and sent one at a time on one connection; each gets a
 * callback with its result (or an error) on the loop thread. Every query is
 * parameterised (text parameters, $1..$n). When the connection drops, the
 * query in flight fails with status SS_ECONN, queued queries wait, and
 * the layer reconnects with exponential backoff (100 ms doubling to 5 s);
 * db_ready() says whether it is connected, so HTTP handlers can answer 503.
 *
 * A "transaction" is a list of statements sent as one unit (BEGIN ... COMMIT
 * around them); its callback sees the result of the last statement. */
#ifndef SS_STORE_DB_H
#define SS_STORE_DB_H

#include <libpq-fe.h>
#include <stddef.h>
#include <uv.h>

#include "common/err.h"
#include "store/store.h"

/* status: 0 with res (owned by the layer: valid during the callback
 * only), or an error with res NULL and a message. */
typedef void (*db_cb)(void *ud, int status, PGresult *res, const char *errmsg);

/* Queues one statement. params are NUL-terminated text or NULL for SQL NULL. */
void db_query(db *d, const char *sql, int nparams, const char *const *params, db_cb cb, void *ud);

/* db_query with binary parameters: formats[i] 1 for binary (lengths[i]
 * bytes, PostgreSQL's send format), 0 for text (lengths[i] ignored). */
void db_query_bin(db *d, const char *sql, int nparams, const char *const *params,
                  const int *lengths, const int *formats, db_cb cb, void *ud);
/* db_query with every result column in PostgreSQL's binary format
 * (network byte order; arrays as array_send writes them). */
void db_query_binary(db *d, const char *sql, int nparams, const char *const *params, db_cb cb,
                     void *ud);

/* Queues statements to run in one transaction (BEGIN; each; COMMIT); on any
 * error the transaction is rolled back and cb gets that error. */
void db_tx(db *d, int nstmts, const char *const *sqls, const int *nparams,
           const char *const *const *params, db_cb cb, void *ud);

#endif

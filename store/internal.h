/* Shared between the store's files (not exported). */
#ifndef SS_STORE_INTERNAL_H
#define SS_STORE_INTERNAL_H

#include "store/actions.h"
#include "store/db.h"
#include "store/pages.h"

/* Queues a statement whose first cell is one JSON document and answers cb
 * with it: json NULL (status 0) when there is no row or the cell is NULL.
 * The adapter between db_query's PGresult and the typed store_json_cb. */
void store__query_json(db *d, const char *sql, int nparams, const char *const *params,
                       store_json_cb cb, void *ud);

/* A typed callback and its ud, carried through db_query (malloc'd by
 * store__req_new, freed by the result's handler). */
typedef struct store__req {
  union {
    store_json_cb json;
    store_run_counts_cb counts;
    store_cancel_cb cancel;
    store_reproduce_cb reproduce;
  } cb;
  void *ud;
} store__req;
store__req *store__req_new(void *ud); /* NULL when out of memory */

/* "%" PRId64 of id into buf (at least 24 bytes); returns buf. */
const char *store__id(char *buf, int64_t id);

#endif

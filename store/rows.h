/* Inside store/ only: what the concern files share to turn a statement's
 * result into C values and hand it to a typed callback. */
#ifndef SS_STORE_ROWS_H
#define SS_STORE_ROWS_H

#include <libpq-fe.h>
#include <stdint.h>

#include "store/db.h"

/* The caller's callback and its user data, carried through db_query (one
 * malloc; the db_cb frees it). */
typedef struct store__call {
  void (*cb)(void);
  void *ud;
} store__call;

/* A call record for (cb, ud), or NULL when out of memory. */
store__call *store__call_new(void (*cb)(void), void *ud);

/* Field (row, col) as an integer or a double ("" and NULL read as 0). */
int64_t store__int(const PGresult *res, int row, int col);
double store__num(const PGresult *res, int row, int col);

/* A decimal integer or a %.17g number as text into buf (NAN: NULL is
 * returned, for an SQL NULL parameter). */
const char *store__itoa(char *buf, size_t len, int64_t v);
const char *store__dtoa(char *buf, size_t len, double v);

/* [ids...] as JSON text (malloc; NULL when out of memory). */
char *store__ids_json(const int64_t *ids, int n);

/* The db_cb of a store__call whose cb is a store_done_cb (rows: those
 * the statement changed or returned). */
void store__on_exec(void *ud, int status, PGresult *res, const char *errmsg);

/* Runs a statement whose callback is a store_done_cb: rows are those it
 * changed (or returned). */
void store__exec(db *d, const char *sql, int nparams, const char *const *params, store_done_cb cb,
                 void *ud);

#endif

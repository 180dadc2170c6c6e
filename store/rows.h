/* Inside store/ only: what the concern files share to turn a statement's
 * result into C values and hand it to a typed callback. */
#ifndef SS_STORE_ROWS_H
#define SS_STORE_ROWS_H

#include <libpq-fe.h>
#include <stdint.h>

#include "store/db.h"

/* How a statement's rows become an array of C structs for a typed
 * callback: the size of one, how row i fills one (strings point into the
 * result: valid during the callback only), and how the array reaches the
 * caller's callback (cb, cast back to its type). */
typedef struct store__rows_spec {
  size_t size;
  void (*decode)(const PGresult *res, int row, void *elem);
  void (*deliver)(void (*cb)(void), void *ud, int status, const void *rows, int n,
                  const char *errmsg);
} store__rows_spec;

/* The user data for store__on_rows (one malloc, freed there), or NULL when
 * out of memory (then deliver has had SS_ENOMEM). */
void *store__rows_call(const store__rows_spec *spec, void (*cb)(void), void *ud);
/* The db_cb that decodes every row and delivers them. */
void store__on_rows(void *ud, int status, PGresult *res, const char *errmsg);
/* db_query with store__on_rows. */
void store__query_rows(db *d, const char *sql, int nparams, const char *const *params,
                       const store__rows_spec *spec, void (*cb)(void), void *ud);

/* Field (row, col) as an integer or a double ("" and NULL read as 0). */
int64_t store__int(const PGresult *res, int row, int col);
double store__num(const PGresult *res, int row, int col);

/* A decimal integer or a %.17g number as text into buf (NAN: NULL is
 * returned, for an SQL NULL parameter). */
const char *store__itoa(char *buf, size_t len, int64_t v);
const char *store__dtoa(char *buf, size_t len, double v);

/* [ids...] as JSON text (malloc; NULL when out of memory). */
char *store__ids_json(const int64_t *ids, int n);

/* The user data for store__on_exec (one malloc, freed there), or NULL
 * when out of memory (then cb has had SS_ENOMEM). */
void *store__exec_call(store_done_cb cb, void *ud);
/* The db_cb that gives cb the rows the statement changed or returned. */
void store__on_exec(void *ud, int status, PGresult *res, const char *errmsg);

/* Runs a statement whose callback is a store_done_cb: rows are those it
 * changed (or returned). */
void store__exec(db *d, const char *sql, int nparams, const char *const *params, store_done_cb cb,
                 void *ud);

#endif

/* The store's one query layer (internal.h): a statement's result turned
 * into C values and handed to a typed callback. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

store__call *store__rows_call(const store__rows_spec *spec, void (*cb)(void), void *ud,
                              int64_t key) {
  store__call *c = malloc(sizeof *c);
  if (!c) {
    store__call tmp = {spec, cb, ud, key};
    spec->deliver(&tmp, SS_ENOMEM, NULL, 0, "out of memory");
    return NULL;
  }
  *c = (store__call){spec, cb, ud, key};
  return c;
}

void store__on_rows(void *ud, int status, PGresult *res, const char *errmsg) {
  store__call c = *(store__call *)ud;
  free(ud);
  int n = status == 0 ? PQntuples(res) : 0;
  unsigned char *rows = calloc(n ? (size_t)n : 1, c.spec->size);
  if (!rows) {
    c.spec->deliver(&c, SS_ENOMEM, NULL, 0, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++)
    c.spec->decode(res, i, rows + (size_t)i * c.spec->size);
  c.spec->deliver(&c, status, rows, n, errmsg);
  free(rows);
}

void store__query_rows(db *d, const char *sql, int nparams, const char *const *params,
                       const store__rows_spec *spec, void (*cb)(void), void *ud) {
  store__call *c = store__rows_call(spec, cb, ud, 0);
  if (c)
    db_query(d, sql, nparams, params, store__on_rows, c);
}

void store__query_rows_id(db *d, const char *sql, int64_t id, const store__rows_spec *spec,
                          void (*cb)(void), void *ud) {
  char ids[24];
  const char *p[1] = {store__itoa(ids, sizeof ids, id)};
  store__query_rows(d, sql, 1, p, spec, cb, ud);
}

void store__decode_id(const PGresult *res, int row, void *elem) {
  *(int64_t *)elem = store__int(res, row, 0);
}

static void decode_json(const PGresult *res, int row, void *elem) {
  *(const char **)elem = store__str_or_null(res, row, 0);
}

static void deliver_json(const store__call *c, int status, const void *rows, int n,
                         const char *errmsg) {
  ((store_json_cb)c->cb)(c->ud, status, n > 0 ? *(const char *const *)rows : NULL, errmsg);
}

static const store__rows_spec json_spec = {sizeof(const char *), decode_json, deliver_json};

void store__query_json(db *d, const char *sql, int nparams, const char *const *params,
                       store_json_cb cb, void *ud) {
  store__query_rows(d, sql, nparams, params, &json_spec, (void (*)(void))cb, ud);
}

void store__query_json_id(db *d, const char *sql, int64_t id, store_json_cb cb, void *ud) {
  store__query_rows_id(d, sql, id, &json_spec, (void (*)(void))cb, ud);
}

static void decode_none(const PGresult *res, int row, void *elem) {
  (void)res;
  (void)row;
  (void)elem;
}

static void deliver_none(const store__call *c, int status, const void *rows, int n,
                         const char *errmsg) {
  (void)rows;
  if (c->cb)
    ((store_done_cb)c->cb)(c->ud, status, n, errmsg);
}

/* only its deliver is used: on_exec answers with the rows changed */
static const store__rows_spec exec_spec = {1, decode_none, deliver_none};

store__call *store__exec_call(store_done_cb cb, void *ud) {
  return store__rows_call(&exec_spec, (void (*)(void))cb, ud, 0);
}

void store__on_exec(void *ud, int status, PGresult *res, const char *errmsg) {
  store__call c = *(store__call *)ud;
  free(ud);
  if (c.cb)
    ((store_done_cb)c.cb)(c.ud, status, status == 0 ? atoll(PQcmdTuples(res)) : 0, errmsg);
}

void store__exec(db *d, const char *sql, int nparams, const char *const *params, store_done_cb cb,
                 void *ud) {
  store__call *c = store__exec_call(cb, ud);
  if (c)
    db_query(d, sql, nparams, params, store__on_exec, c);
}

int64_t store__int(const PGresult *res, int row, int col) {
  return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

double store__num(const PGresult *res, int row, int col) { return atof(PQgetvalue(res, row, col)); }

double store__num_or_nan(const PGresult *res, int row, int col) {
  return PQgetisnull(res, row, col) ? NAN : strtod(PQgetvalue(res, row, col), NULL);
}

int store__one_row(int status, int n, const char **errmsg, const char *what) {
  if (status != 0 || n == 1)
    return status;
  *errmsg = what;
  return SS_EQUERY;
}

const char *store__str_or_null(const PGresult *res, int row, int col) {
  return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

const char *store__itoa(char *buf, size_t len, int64_t v) {
  snprintf(buf, len, "%" PRId64, v);
  return buf;
}

const char *store__dtoa(char *buf, size_t len, double v) {
  if (isnan(v))
    return NULL;
  snprintf(buf, len, "%.17g", v);
  return buf;
}

char *store__ids_json(const int64_t *ids, int n) {
  size_t cap = 3 + (size_t)(n > 0 ? n : 0) * 22, len = 0;
  char *t = malloc(cap);
  if (!t)
    return NULL;
  t[len++] = '[';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(t + len, cap - len, "%s%" PRId64, i ? "," : "", ids[i]);
  t[len++] = ']';
  t[len] = 0;
  return t;
}

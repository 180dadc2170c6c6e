/* Result helpers shared by the store's concern files (rows.h). */
#include "store/rows.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

store__call *store__call_new(void (*cb)(void), void *ud) {
  store__call *c = malloc(sizeof *c);
  if (c) {
    c->cb = cb;
    c->ud = ud;
  }
  return c;
}

int64_t store__int(const PGresult *res, int row, int col) {
  return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

double store__num(const PGresult *res, int row, int col) { return atof(PQgetvalue(res, row, col)); }

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

void store__on_exec(void *ud, int status, PGresult *res, const char *errmsg) {
  store__call *c = ud;
  store_done_cb cb = (store_done_cb)c->cb;
  void *cud = c->ud;
  free(c);
  if (cb)
    cb(cud, status, status == 0 ? atoll(PQcmdTuples(res)) : 0, errmsg);
}

void store__exec(db *d, const char *sql, int nparams, const char *const *params, store_done_cb cb,
                 void *ud) {
  store__call *c = store__call_new((void (*)(void))cb, ud);
  if (!c) {
    if (cb)
      cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  db_query(d, sql, nparams, params, store__on_exec, c);
}

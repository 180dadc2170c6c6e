/* Helpers shared by the store's concern files. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/internal.h"

store__req *store__req_new(void *ud) {
  store__req *q = malloc(sizeof *q);
  if (q)
    q->ud = ud;
  return q;
}

static void on_json(void *ud, int status, PGresult *res, const char *errmsg) {
  store__req q = *(store__req *)ud;
  free(ud);
  if (status != 0)
    q.cb.json(q.ud, status, NULL, errmsg);
  else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0))
    q.cb.json(q.ud, 0, NULL, NULL);
  else
    q.cb.json(q.ud, 0, PQgetvalue(res, 0, 0), NULL);
}

void store__query_json(db *d, const char *sql, int nparams, const char *const *params,
                       store_json_cb cb, void *ud) {
  store__req *q = store__req_new(ud);
  if (!q) {
    cb(ud, SS_ENOMEM, NULL, "out of memory");
    return;
  }
  q->cb.json = cb;
  db_query(d, sql, nparams, params, on_json, q);
}

const char *store__id(char *buf, int64_t id) {
  snprintf(buf, 24, "%" PRId64, id);
  return buf;
}

/* The workers table (workers.h). */
#include "store/workers.h"

#include <stdlib.h>

#include "store/rows.h"

static void on_registered(void *ud, int status, PGresult *res, const char *errmsg) {
  store__call *c = ud;
  store_worker_cb cb = (store_worker_cb)c->cb;
  void *cud = c->ud;
  free(c);
  if (status == 0 && PQntuples(res) != 1) {
    cb(cud, SS_EQUERY, 0, "no worker row returned");
    return;
  }
  cb(cud, status, status == 0 ? store__int(res, 0, 0) : 0, errmsg);
}

void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, store_worker_cb cb, void *ud) {
  char slots[24];
  const char *p[4] = {name, host, gpus_json ? gpus_json : "[]",
                      store__itoa(slots, sizeof slots, cpu_slots)};
  store__call *c = store__call_new((void (*)(void))cb, ud);
  if (!c) {
    cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  db_query(d,
           "INSERT INTO workers (name, host, gpus, cpu_slots, last_seen) "
           "VALUES ($1, $2, $3::jsonb, $4::int, now()) ON CONFLICT (name) DO UPDATE "
           "SET host = EXCLUDED.host, gpus = EXCLUDED.gpus, cpu_slots = EXCLUDED.cpu_slots, "
           "last_seen = now() RETURNING id",
           4, p, on_registered, c);
}

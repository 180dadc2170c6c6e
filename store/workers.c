/* The workers table (workers.h). */
#include "store/workers.h"

#include <stdlib.h>

#include "store/internal.h"

static void deliver_worker(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  if (status == 0 && n != 1)
    ((store_worker_cb)c->cb)(c->ud, SS_EQUERY, 0, "no worker row returned");
  else
    ((store_worker_cb)c->cb)(c->ud, status, status == 0 ? *(const int64_t *)rows : 0, errmsg);
}

static const store__rows_spec worker_id = {sizeof(int64_t), store__decode_id, deliver_worker};

void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, store_worker_cb cb, void *ud) {
  char slots[24];
  const char *p[4] = {name, host, gpus_json ? gpus_json : "[]",
                      store__itoa(slots, sizeof slots, cpu_slots)};
  store__query_rows(
      d,
      "INSERT INTO workers (name, host, gpus, cpu_slots, last_seen) "
      "VALUES ($1, $2, $3::jsonb, $4::int, now()) ON CONFLICT (name) DO UPDATE "
      "SET host = EXCLUDED.host, gpus = EXCLUDED.gpus, cpu_slots = EXCLUDED.cpu_slots, "
      "last_seen = now() RETURNING id",
      4, p, &worker_id, (void (*)(void))cb, ud);
}

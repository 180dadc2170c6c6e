/* The workers table (workers.h). */
#include "store/workers.h"

#include <stdlib.h>

#include "store/internal.h"

static void decode_reg(const PGresult *res, int row, void *elem) {
  *(store_worker_reg *)elem =
      (store_worker_reg){.worker_id = PQgetisnull(res, row, 0) ? 0 : store__int(res, row, 0),
                         .how = PQgetvalue(res, row, 1),
                         .leased = (int)store__int(res, row, 2),
                         .until = store__str_or_null(res, row, 3)};
}

static void deliver_reg(const store__call *c, int status, const void *rows, int n,
                        const char *errmsg) {
  if (status == 0 && n != 1)
    ((store_worker_cb)c->cb)(c->ud, SS_EQUERY, NULL, "no worker row returned");
  else
    ((store_worker_cb)c->cb)(c->ud, status, status == 0 ? rows : NULL, errmsg);
}

static const store__rows_spec registered = {sizeof(store_worker_reg), decode_reg, deliver_reg};

void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, const char *given_hash, const char *new_hash, int live,
                            store_worker_cb cb, void *ud) {
  char slots[24];
  const char *p[7] = {name,
                      host,
                      gpus_json ? gpus_json : "[]",
                      store__itoa(slots, sizeof slots, cpu_slots),
                      given_hash,
                      new_hash,
                      live ? "true" : "false"};
  store__query_rows(
      d,
      "WITH o AS (SELECT id, secret_hash FROM workers WHERE name = $1 FOR UPDATE), "
      "l AS (SELECT count(*) AS leased, max(r.lease_until) AS until FROM runs r JOIN o "
      "ON r.worker = o.id WHERE r.status = 'running' AND r.lease_until > now()), "
      "d AS (SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM o) THEN 'new' "
      "WHEN (SELECT secret_hash FROM o) = $5::text THEN 'proven' "
      "WHEN $7::bool THEN 'live' "
      "WHEN (SELECT secret_hash FROM o) IS NOT NULL AND (SELECT leased FROM l) > 0 THEN 'leased' "
      "ELSE 'taken' END AS how), "
      "u AS (INSERT INTO workers (name, host, gpus, cpu_slots, last_seen, secret_hash) "
      "SELECT $1, $2, $3::jsonb, $4::int, now(), CASE WHEN d.how = 'proven' THEN $5::text "
      "ELSE $6::text END FROM d WHERE d.how IN ('new', 'proven', 'taken') "
      "ON CONFLICT (name) DO UPDATE SET host = EXCLUDED.host, gpus = EXCLUDED.gpus, "
      "cpu_slots = EXCLUDED.cpu_slots, last_seen = now(), secret_hash = EXCLUDED.secret_hash "
      "RETURNING id) "
      "SELECT (SELECT id FROM u), d.how, (SELECT leased FROM l), "
      "to_char((SELECT until FROM l) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC' "
      "FROM d",
      7, p, &registered, (void (*)(void))cb, ud);
}

/* The workers table: one row per worker name, kept across reconnects. */
#ifndef SS_STORE_WORKERS_H
#define SS_STORE_WORKERS_H

#include <stdint.h>

#include "store/store.h"

/* worker_id: the row's id (valid when status is 0). */
typedef void (*store_worker_cb)(void *ud, int status, int64_t worker_id, const char *errmsg);

/* Inserts or updates the row of the worker called name (host, its GPUs as
 * JSON text, its CPU slots; last_seen now) and answers its id. */
void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, store_worker_cb cb, void *ud);

#endif

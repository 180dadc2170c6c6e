/* The workers table: one row per worker name, kept across reconnects. */
#ifndef SS_STORE_WORKERS_H
#define SS_STORE_WORKERS_H

#include <stdint.h>

#include "store/store.h"

/* What a registration decided (migration 016): the name was free ("new"),
 * the hello presented the name's secret ("proven"), the name was taken over
 * from a worker that no connection holds and no running run is leased to
 * ("taken"; also a row from before the secrets), or it was refused: another
 * connection holds the name ("live") or runs are leased to it ("leased").
 * worker_id is the row's (0 when refused); leased and until (text, NULL
 * when none) count its runs whose lease has not expired. */
typedef struct store_worker_reg {
  int64_t worker_id;
  const char *how;
  int leased;
  const char *until;
} store_worker_reg;

typedef void (*store_worker_cb)(void *ud, int status, const store_worker_reg *r,
                                const char *errmsg);

/* Registers the worker called name (host, its GPUs as JSON text, its CPU
 * slots; last_seen now) as one statement: proven when given_hash (the
 * SHA-256 hex of the secret its hello presented, or NULL) is the row's;
 * else refused when live (another connection holds the name: the caller
 * knows) or when runs are leased to it (a row without a hash yet is taken
 * while not live, as before the secrets); else the row takes new_hash (the
 * hash of the secret the welcome gives). */
void store_workers_register(db *d, const char *name, const char *host, const char *gpus_json,
                            int cpu_slots, const char *given_hash, const char *new_hash, int live,
                            store_worker_cb cb, void *ud);

#endif

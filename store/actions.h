/* The API's changes to sweeps and runs: cancel and reproduce. */
#ifndef SS_STORE_ACTIONS_H
#define SS_STORE_ACTIONS_H

#include <stdint.h>

#include "store/store.h"

/* A run a cancel touched: queued ones are cancelled in the database; a
 * running one is left for its worker to stop (it checkpoints) and is
 * recorded when the worker reports. */
typedef struct store_cancelled {
  int64_t run_id;
  int running;
} store_cancelled;

/* found: the sweep or run exists (else nothing changed); runs: n of them,
 * valid during the callback only. */
typedef void (*store_cancel_cb)(void *ud, int status, int found, const store_cancelled *runs, int n,
                                const char *errmsg);

/* Cancels sweep_id and its queued runs; runs lists those cancelled and
 * those still running. */
void store_actions_cancel_sweep(db *d, int64_t sweep_id, store_cancel_cb cb, void *ud);
/* Cancels run_id when it is queued; runs lists it (running: it is). */
void store_actions_cancel_run(db *d, int64_t run_id, store_cancel_cb cb, void *ud);

/* original_status: the original run's status, NULL when there is no such
 * run; json: {"id", "reproduces", "on_worker"} of the new run, NULL when
 * the original has not finished (its curve is not there to compare with
 * yet) or when on names no worker that ever connected (worker_known 0). */
typedef void (*store_reproduce_cb)(void *ud, int status, const char *original_status,
                                   const char *json, int worker_known, const char *errmsg);

/* Queues a new run of the same config as run_id, once run_id has finished;
 * with on (not NULL), one that only a worker of that name or on that host
 * takes (runs.on_worker), when such a worker has ever connected. */
void store_actions_reproduce(db *d, int64_t run_id, const char *on, store_reproduce_cb cb,
                             void *ud);

/* Sets sweep_id's priority and its queued runs' (placement orders the
 * queue by runs.priority); rows: 0 when there is no such sweep. */
void store_actions_set_priority(db *d, int64_t sweep_id, int priority, store_done_cb cb, void *ud);

#endif

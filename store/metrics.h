/* Metric rows: one per (run, step), stored idempotently. */
#ifndef SS_STORE_METRICS_H
#define SS_STORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/metric_row.h"
#include "store/store.h"

/* One step's row (common/metric_row.h): its stored columns go in, a
 * value that is NAN as NULL; the line-only ones are left out. */
typedef ss_metric_row store_metric_row;

/* Stores a batch of rows[0..n-1] (sorted by step, one row per step) for
 * the run's attempt `attempt`, which must be running on worker_id (the
 * fence of a result, store_runs_finish): any other batch (a fenced
 * trainer's, after its lease expired; another worker's; one resent after
 * the result, whose rows were stored before it) stores nothing and cb gets
 * rows STORE_FENCED. A step already stored (resent, or an eval line after
 * its step line) keeps its values and gains the ones it lacked. Batches of
 * one run must go through one connection, in order: an acknowledgement
 * then covers every earlier batch. cb gets the rows inserted; SS_ENOMEM
 * comes at once, before this returns. */
void store_metrics_insert(db *d, int64_t run_id, int attempt, int64_t worker_id,
                          const store_metric_row *rows, size_t n, store_done_cb cb, void *ud);

#endif

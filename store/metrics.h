/* Metric rows: one per (run, step), stored idempotently. */
#ifndef SS_STORE_METRICS_H
#define SS_STORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* The columns of a metric row after step and tokens, in this order. */
enum {
  STORE_METRIC_TRAIN_LOSS,
  STORE_METRIC_VAL_LOSS,
  STORE_METRIC_LR,
  STORE_METRIC_GRAD_NORM,
  STORE_METRIC_B_NOISE,
  STORE_METRIC_LOSS_SCALE,
  STORE_METRIC_TOK_PER_S,
  STORE_METRIC_NVALUES
};

/* One step's row; a value that is NAN is stored as NULL. */
typedef struct store_metric_row {
  int32_t step;
  int64_t tokens;
  double v[STORE_METRIC_NVALUES];
} store_metric_row;

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

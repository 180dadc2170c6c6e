/* What predicting running runs' final losses reads and writes
 * (scheduler/predict.c): their curves so far and runs.prediction. */
#ifndef SS_STORE_PREDICTIONS_H
#define SS_STORE_PREDICTIONS_H

#include <stdint.h>

#include "store/store.h"

/* A running run's curve: N (non-embedding parameters), D (tokens), its
 * planned and warmup steps (0 when unknown), its evaluations as JSON text
 * [[step, val_loss], ...] in step order, and the params of its sweep's
 * newest Chinchilla fit as JSON text (NULL: none). */
typedef struct store_curve {
  int64_t id;
  double n, d, steps, warmup_steps;
  const char *evals;
  const char *fit;
} store_curve;

typedef void (*store_curves_cb)(void *ud, int status, const store_curve *runs, int n,
                                const char *errmsg);

/* The curves of up to 1000 running runs, by id; batch-ladder runs aside
 * (they are measured by the steps they take, not by their loss). */
void store_predictions_curves(db *d, store_curves_cb cb, void *ud);

/* Stores a running run's prediction (JSON text) in runs.prediction; a run
 * no longer running keeps what it had. */
void store_predictions_set(db *d, int64_t run_id, const char *json, store_done_cb cb, void *ud);

#endif

/* Predicting running runs' final losses (internal; predict.c). */
#ifndef SS_SCHEDULER_PREDICT_H
#define SS_SCHEDULER_PREDICT_H

#include <uv.h>

#include "scheduler/events.h"
#include "store/store.h"

/* The caller sets loop, db, reads and ev; busy is the predictor's own;
 * stopping is set by the caller at shutdown (no pass starts, none stores). */
typedef struct sched__predictor {
  uv_loop_t *loop;
  db *db;         /* the predictions' writes */
  db_pool *reads; /* the curves they are made from */
  sched__events *ev;
  int busy; /* a pass is running */
  int stopping;
} sched__predictor;

/* Predicts every running run's final loss from its curve so far and flags
 * those far off their sweep's fitted surface (one pass at a time: a call
 * during a pass does nothing). */
void sched__predict(sched__predictor *p);

#endif

/* SCALESWEEP_PROFILE_OPS=1: where a training step's time goes, op by op.
 *
 * trn_opprof_install wraps the compute ops of the backend's table: the
 * backend is synchronised before and after each call and the host time
 * between is added to the op's row (matrix products and attention by
 * shape). Evaluation is left out (trn_opprof_pause). trn_opprof_report
 * prints the rows to a stream, largest first: calls, milliseconds in all
 * and per step, share of the ops' time and of the steps' wall time.
 *
 * Timing each op alone removes the overlap of a device's launches with its
 * work: each op carries a launch's latency (microseconds) and the steps run
 * slower than without the variable. It says where the time goes, not how
 * fast a run is. Not with SCALESWEEP_COUNT_SYNCS (its own synchronisations
 * would be counted). */
#ifndef SS_TRAINER_OPPROF_H
#define SS_TRAINER_OPPROF_H

#include <stdio.h>

#include "kernels/kern.h"

/* Wraps k->ops when $SCALESWEEP_PROFILE_OPS is "1"; returns whether it did. */
int trn_opprof_install(kern_ctx *k);

/* While paused, calls are not timed: from install until the training loop
 * starts, and during evaluation. */
void trn_opprof_pause(int paused);

/* The table, for steps training steps that took step_s seconds of wall
 * time; nothing when not installed. */
void trn_opprof_report(FILE *f, long long steps, double step_s);

#endif

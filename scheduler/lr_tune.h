/* The lr tune's state inside struct sched (scheduler/lr_tune.c; not
 * exported): the sweeps whose tune may have ended, checked one at a time. */
#ifndef SS_SCHEDULER_LR_TUNE_H
#define SS_SCHEDULER_LR_TUNE_H

#include "scheduler/sweepq.h"

typedef sched__sweepq sched__tunes;

/* Frees the list (at shutdown, once no check is in flight). */
void sched__tunes_free(sched__tunes *t);

#endif

/* The adaptive designs' state inside struct sched (scheduler/adaptive.c;
 * not exported): the sweeps whose round may have ended, checked one at a
 * time. */
#ifndef SS_SCHEDULER_ADAPTIVE_H
#define SS_SCHEDULER_ADAPTIVE_H

#include "scheduler/sweepq.h"

typedef sched__sweepq sched__adaptive;

/* Frees the list (at shutdown, once no check is in flight). */
void sched__adaptive_free(sched__adaptive *a);

#endif

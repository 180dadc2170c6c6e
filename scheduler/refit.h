/* The refits' state inside struct sched (scheduler/refit.c; not exported):
 * the sweeps being refitted, asked for again or cooling down, and the sweeps
 * touched since the last tick. Both lists grow as needed: no sweep's refit
 * or status update is ever dropped for want of room. */
#ifndef SS_SCHEDULER_REFIT_H
#define SS_SCHEDULER_REFIT_H

#include <stdint.h>

/* A sweep with a refit under way, asked for, or cooling down after one. */
typedef struct sched__refit_sweep {
  int64_t sweep_id;
  int busy;               /* being refitted */
  int again;              /* refit once it is neither busy nor cooling */
  uint64_t cool_until_ms; /* on the loop's clock; 0: not cooling */
} sched__refit_sweep;

/* A sweep waiting for sched__sweep_flush. */
typedef struct sched__touched {
  int64_t sweep_id;
  int refit; /* and a refit */
} sched__touched;

typedef struct sched__refits {
  sched__refit_sweep *sweeps; /* (nsweeps), malloc'd, capacity cap */
  int nsweeps, cap;
  sched__touched *touched; /* (ntouched), malloc'd, capacity touched_cap */
  int ntouched, touched_cap;
} sched__refits;

/* Frees both lists (at shutdown, once no refit is in flight). */
void sched__refits_free(sched__refits *st);

#endif

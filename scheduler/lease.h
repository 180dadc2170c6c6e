/* The lease timer (internal): once a second it reaps silent worker
 * connections, flushes the sweeps' status updates and refits, runs the
 * predictions every predict_s seconds, and re-queues the runs whose lease
 * expired. */
#ifndef SS_SCHEDULER_LEASE_H
#define SS_SCHEDULER_LEASE_H

#include <uv.h>

typedef struct sched__leases {
  uv_timer_t timer;
  int db_was_down;   /* the timer saw the database unavailable (or never looked) */
  int predict_ticks; /* seconds since the last prediction pass */
} sched__leases;

#endif

/* The scheduler's counters for /metrics (internal), bumped by placement,
 * leases and the worker port. */
#ifndef SS_SCHEDULER_COUNTERS_H
#define SS_SCHEDULER_COUNTERS_H

#include <stdint.h>

typedef struct sched__counters {
  uint64_t runs_finished; /* succeeded or failed for good */
  uint64_t runs_failed;
  uint64_t runs_requeued;
  uint64_t metric_rows; /* stored */
  uint64_t assigns;
} sched__counters;

#endif

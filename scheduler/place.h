/* Placement (internal): queued runs onto the connected workers' free GPUs
 * and CPU slots, one pass at a time, with a reservation for multi-GPU runs
 * that have waited long. */
#ifndef SS_SCHEDULER_PLACE_H
#define SS_SCHEDULER_PLACE_H

#include <stdint.h>

struct store_queued;

#define SCHED__BLOCKED 64
/* a placement pass reads at least this many queued runs */
#define SCHED__QUEUE_READ 256
/* a CPU run's ranks over at most this many workers (gang placement) */
#define SCHED__GANG_MAX 64
/* rank 0 of a run spread over workers listens on a port from here (the
 * run and attempt choose one of SCHED__GANG_PORTS) */
#define SCHED__GANG_PORT_BASE 29500
#define SCHED__GANG_PORTS 500

typedef struct sched__placement {
  int placing; /* a pass is reading the queue or claiming runs */
  int again;   /* asked for during a pass: run another after it (2: read
                * the queue afresh; 1: capacity freed, the queue unchanged) */
  /* the queue as the last read returned it (a prefix of it, in placement
   * order), less the runs claimed since: a pass for capacity freed by a
   * finished run claims from it without reading the queue again, one
   * database round trip and the queue's sort fewer between a run and the
   * next on its slot. Dropped whenever the queue may have changed (runs
   * submitted, re-queued, reproduced, cancelled; every lease tick), so it
   * is at most a second old; a claim the database refuses drops it too */
  struct store_queued *cache; /* owned; freed by sched__place_free */
  int ncache;
  /* multi-GPU runs found waiting, and since when (uv_now ms), for the
   * reservation; oldest dropped when full */
  struct {
    int64_t run_id;
    uint64_t since_ms;
  } blocked[SCHED__BLOCKED];
  int nblocked;
  /* sweeps whose runs the last pass read from the queue left waiting
   * because their owner was at their GPU limit, and that limit (their
   * sweep's "waiting" says so) */
  struct {
    int64_t sweep_id;
    int max_gpus;
  } limited[SCHED__BLOCKED];
  int nlimited;
} sched__placement;

#endif

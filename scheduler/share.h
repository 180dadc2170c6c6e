/* Fair share between people (README, "A shared cluster"): the order in
 * which placement takes the queued runs of several people, and the limits
 * per person a placement pass keeps. */
#ifndef SS_SCHEDULER_SHARE_H
#define SS_SCHEDULER_SHARE_H

#include <stdint.h>

#include "store/runs.h"

/* a run's expected seconds when its FLOPs or its sweep's throughput is
 * unknown: what placement charges its owner for it */
#define SCHED__SHARE_EST_S 600.0
/* the people with a GPU limit one placement pass keeps count of */
#define SCHED__SHARE_LIMITED 256

/* The device-seconds placement expects run q to take: its devices (GPUs,
 * or CPU slots) x its FLOPs / its sweep's throughput_flops, or x
 * SCHED__SHARE_EST_S when either is unknown. */
double sched__share_expected_s(const store_queued *q);

/* Reorders runs[0..n) (each person's in their own order, people in any
 * order) into placement order: again and again the next run of the person
 * with the least effective usage (their owner_usage, as the queue read
 * found it, plus what this ordering has charged them), ties to the higher
 * priority, then the earlier sweep, the larger run, the lower id (today's
 * order); each run taken charges its owner its expected device-seconds,
 * so that people of equal usage alternate within a pass (the next pass
 * reads the attempts' own usage afresh: place.c keeps no cache of a queue
 * of several people). 0, or SS_ENOMEM (runs then stay as they are). */
int sched__share_order(store_queued *runs, int n);

/* What one placement pass has given the people with a GPU limit. */
typedef struct sched__share_pass {
  int n;
  struct {
    int64_t owner_id;
    int gpus; /* in use when the queue was read, plus those given this pass */
    int max;
  } o[SCHED__SHARE_LIMITED];
} sched__share_pass;

/* 1 when run q may start as far as its owner's limits go: the GPUs they
 * hold (their running attempts' and those this pass gave them) plus q's
 * stay within their max_gpus. */
int sched__share_allows(sched__share_pass *p, const store_queued *q);

/* Counts q's GPUs as its owner's (q was placed). */
void sched__share_took(sched__share_pass *p, const store_queued *q);

#endif

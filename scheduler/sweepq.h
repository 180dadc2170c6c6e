/* The sweeps waiting for a check that runs one at a time (not exported):
 * the lr tunes' (lr_tune.c) and the adaptive designs' (adaptive.c). A run's
 * start or end touches its sweep, which is queued once however often it is
 * touched; a check reads the sweep, decides on libuv's thread pool and
 * stores what it decided, then the next one starts. */
#ifndef SS_SCHEDULER_SWEEPQ_H
#define SS_SCHEDULER_SWEEPQ_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "store/sweeps.h"

struct sched;

typedef struct sched__sweepq {
  int64_t *pending; /* sweeps to check (n), malloc'd, capacity cap; each once */
  int n, cap;
  int64_t *later; /* sweeps whose check failed: queued again at the next flush */
  int nlater, caplater;
  int busy;         /* a check, or what it decided, under way */
  const char *what; /* what is checked, for the log: "lr tune check" */
} sched__sweepq;

/* Queues sweep_id unless it is queued already. Out of memory: logged, the
 * sweep left out (it is touched again by its next run's start or end). */
void sched__sweepq_add(sched__sweepq *q, int64_t sweep_id);

/* The next sweep to check, taken off the queue, the queue then busy; 0
 * while a check is under way or none is queued. */
int64_t sched__sweepq_take(sched__sweepq *q);

/* A check's read or statement failed with status: logged ("scheduler:
 * sweep N: DOING failed: ERRMSG"), and the sweep queued again at the next
 * flush (sched__sweepq_retry, a lease tick away) when the connection was
 * lost or the statement ran too long (a check stores nothing twice, so it
 * may run again). Not at once: with the database down every check fails
 * at once, and an immediate retry would spin the loop and the log. */
void sched__sweepq_failed(sched__sweepq *q, int64_t sweep_id, int status, const char *doing,
                          const char *errmsg);

/* The sweeps whose check failed, queued again (at a flush). */
void sched__sweepq_retry(sched__sweepq *q);

/* A check that could not start (out of memory): logged, its sweep queued
 * again for the next flush, the queue no longer busy. */
void sched__sweepq_put_back(sched__sweepq *q, int64_t sweep_id);

/* Puts a check's job w (w->data its job) on libuv's thread pool; 0, or
 * libuv's error logged ("scheduler: sweep N: its WHAT: ERROR") and
 * returned, the check then to be ended by the caller. */
int sched__sweepq_queue(struct sched *s, uv_work_t *w, uv_work_cb work, uv_after_work_cb after,
                        int64_t sweep_id, const char *what);

/* The runs a check decided to add, as store_sweeps takes them: a spec
 * that names no max_attempts gives each run 3. */
store_sweep_new sched__sweepq_new_runs(int priority, int gpus, int max_attempts,
                                       const char *runs_json);

/* A check stored what it decided: its event ev (taken) sent, the sweep's
 * status refreshed, and the runs it added, if any, placed. */
void sched__sweepq_stored(struct sched *s, int64_t sweep_id, json_t *ev, int64_t added);

/* Frees the list (at shutdown, once no check is in flight). */
void sched__sweepq_free(sched__sweepq *q);

#endif

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

/* The head of a check's job, its first member. The job lives from
 * sched__sweepq_job_new until sched__sweepq_done frees it; each step in
 * between ends the check through sched__sweepq_done or passes the job on. */
typedef struct sched__sweepq_job {
  uv_work_t work; /* work.data is the job */
  struct sched *s;
  sched__sweepq *q;
  int64_t sweep_id;
  char *spec;                                   /* the sweep's spec, once read (owned) */
  int rc;                                       /* what the decision on the pool returned */
  void (*release)(struct sched__sweepq_job *j); /* frees what the job owns beyond its head */
  void (*due)(struct sched *s);                 /* starts the queue's next check */
} sched__sweepq_job;

/* The next check's job, size bytes zeroed but for its head, the queue then
 * busy; NULL while the scheduler stops, a check is under way or none is
 * queued, and out of memory (then the sweep is put back). */
void *sched__sweepq_job_new(struct sched *s, sched__sweepq *q, size_t size,
                            void (*release)(sched__sweepq_job *), void (*due)(struct sched *));

/* The check is over, whatever came of it: its job freed, the next started. */
void sched__sweepq_done(sched__sweepq_job *j);

/* A read's or statement's answer: 1 when status is a failure of DOING,
 * the check then over: logged ("scheduler: sweep N: DOING failed:
 * ERRMSG"), and the sweep checked again at the next flush when the
 * connection was lost or the statement ran too long; 0 when it succeeded. */
int sched__sweepq_job_failed(sched__sweepq_job *j, int status, const char *doing,
                             const char *errmsg);

/* Puts the job on libuv's thread pool; the check is over when it cannot go
 * (logged: "scheduler: sweep N: its WHAT: ERROR"). */
void sched__sweepq_job_queue(sched__sweepq_job *j, uv_work_cb work, uv_after_work_cb after,
                             const char *what);

/* The pool's answer (status) to a job whose decision returned j->rc: 1
 * when the check is over, the job cancelled or the scheduler stopping, or
 * rc an error (logged: "scheduler: sweep N: its UNDONE: REASON", REASON "out of
 * memory" for SS_ENOMEM); 0 to store what it decided. */
int sched__sweepq_job_ended(sched__sweepq_job *j, int status, const char *undone,
                            const char *reason);

/* The runs a check decided to add, as store_sweeps takes them: a spec
 * that names no max_attempts gives each run 3. */
store_sweep_new sched__sweepq_new_runs(int priority, int gpus, int max_attempts,
                                       const char *runs_json);

/* A check stored what it decided: its event ev (taken) sent, the sweep's
 * status refreshed, the runs it added, if any, placed, and the check over. */
void sched__sweepq_stored(sched__sweepq_job *j, int64_t sweep_id, json_t *ev, int64_t added);

/* Frees the list (at shutdown, once no check is in flight). */
void sched__sweepq_free(sched__sweepq *q);

#endif

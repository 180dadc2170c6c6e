/* Submitting sweeps and serving their fits (scheduler/submit.c). */
#ifndef SS_SCHEDULER_SUBMIT_H
#define SS_SCHEDULER_SUBMIT_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/internal.h"
#include "store/sweeps.h"

/* Spec jobs (checking and planning a submitted spec, designing a sweep's
 * next budget) on libuv's thread pool at once: the pool has 4 threads by
 * default, and two stay free for refits and predictions. */
#define SCHED_SPEC_JOBS 2
/* Designs of a sweep's next budget (next.c) under way at once, apart from
 * the spec jobs: one Chinchilla fit with its bootstrap at a time. */
#define SCHED_DESIGN_JOBS 1

/* What a spec job (a submission, a next budget's design) decided on the
 * pool, all owned: the answer, or the runs to store. */
typedef struct sched__spec_out {
  int status;   /* 0: the runs are there to store; 400; 500 (out of memory) */
  char *answer; /* the 400 body (a design: the design's JSON) */
  char *runs;   /* the runs to store, as store_sweeps takes them */
  int priority, gpus, max_attempts;
} sched__spec_out;

void sched__spec_out_free(sched__spec_out *out);

/* The runs out holds, as store_sweeps takes them (name, spec and hash
 * left to the caller). */
store_sweep_new sched__spec_out_runs(const sched__spec_out *out);

/* Answers a spec job that has nothing to store: 503 when the pool
 * cancelled it (status) or the scheduler is stopping ("AGAIN again once it
 * is back"), out's 400, or 500 ("out of memory DOING"); 1 when answered,
 * 0 when out's runs are there. */
int sched__spec_out_answered(const sched *s, http_request *r, int status,
                             const sched__spec_out *out, const char *again, const char *doing);

/* Answers 503 with Retry-After: 1, message saying which jobs are under way
 * already: a client retries rather than queueing more work on the pool. */
void sched__spec_busy(http_request *r, const char *message);

/* POST /api/sweeps: validates and plans the spec (sweeps/spec.h, plan.h),
 * stores the sweep and its runs at once (store/sweeps.h), owned by who,
 * and answers 201 with {"id", "runs", "spec_hash"}; 400 with every problem
 * and its JSON path; 403 when the spec's priority is outside who's range
 * (users.priority_min..priority_max; an admin's is any); 409 when an
 * identical spec was submitted before (naming that sweep). */
void sched__submit(sched *s, http_request *r, const sched__who *who, const char *body,
                   size_t len);

/* GET /api/sweeps/{id}/fit: the latest fit of each law, by law. */
void sched__get_fit(sched *s, http_request *r, int64_t sweep_id);

#endif

/* Submitting sweeps and serving their fits (scheduler/submit.c). */
#ifndef SS_SCHEDULER_SUBMIT_H
#define SS_SCHEDULER_SUBMIT_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/internal.h"

/* Spec jobs (checking and planning a submitted spec, designing a sweep's
 * next budget) on libuv's thread pool at once: the pool has 4 threads by
 * default, and two stay free for refits and predictions. */
#define SCHED_SPEC_JOBS 2
/* Designs of a sweep's next budget (next.c) under way at once, apart from
 * the spec jobs: one Chinchilla fit with its bootstrap at a time. */
#define SCHED_DESIGN_JOBS 1

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

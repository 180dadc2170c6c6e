/* The next compute budget of a sweep (scheduler/next.c). */
#ifndef SS_SCHEDULER_NEXT_H
#define SS_SCHEDULER_NEXT_H

#include <stdint.h>

#include "scheduler/internal.h"

/* GET /api/sweeps/{id}/next?flops=C[&points=M] (add 0): the budget's design
 * from the sweep's fits (sweeps/next.h, next_design_json), 200.
 * POST /api/sweeps/{id}/next with {"flops": C, "points": M} (add 1): the
 * same, and its runs added to the sweep: 201 {"sweep", "added", "design"}
 * ("added" 0 when the sweep has every one of them already). 400 with the
 * problems and their paths (a bad budget, a law that cannot be fitted yet,
 * a budget the spec's limits refuse), 404 for no such sweep, 409 when the
 * sweep is cancelled or its lr tune has not decided (a decided tune's sweep
 * is designed from its study's spec: store_sweeps_spec), 503 while
 * SCHED_DESIGN_JOBS designs are under way. */
void sched__next(sched *s, http_request *r, int64_t sweep_id, int add);

#endif

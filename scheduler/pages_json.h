/* The API's JSON of the store's rows (store/pages.h): the one place where
 * their keys are written. Keys are the table columns
 * (docs/design.md#the-http-api); web/runs.js and the CLI read the same documents. */
#ifndef SS_SCHEDULER_PAGES_JSON_H
#define SS_SCHEDULER_PAGES_JSON_H

#include "scheduler/internal.h"
#include "scheduler/web.h"
#include "store/pages.h"

/* GET /api/sweeps: [sweep, ...], each with "waiting" (place.c) when its
 * queued runs can start on no connected worker. */
void sched__json_sweeps(sched__buf *b, sched *s, const store_sweep *sweeps, int n);

/* GET /api/sweeps/{id}: the sweep, its counts and one page of its runs,
 * "waiting" first when its queued runs can start on no connected worker. */
void sched__json_sweep(sched__buf *b, sched *s, const store_sweep *sw, const store_runs *runs);

/* GET /api/sweeps/{id}/runs: {"runs_total", "runs_offset", "runs_limit",
 * "runs"}. */
void sched__json_runs(sched__buf *b, const store_runs *runs);

/* GET /api/runs/{id}: {"run" (with its "config"), "metrics",
 * "metrics_total", "metrics_offset", "metrics_limit", "attempts",
 * "reproduction"}, and "waiting" when not NULL (why a queued run that must
 * run on one worker cannot start). */
void sched__json_run_doc(sched__buf *b, const store_run_doc *doc, const char *waiting);

#endif

/* Compute accounting over HTTP (README, "A shared cluster"): GET
 * /api/usage[?since=DATE&by=person|sweep] (everyone's for those whose role
 * may read it, else one's own), GET /api/sweeps/{id}/usage (what a sweep
 * cost and wasted), the usage page /usage, and POST /api/limits/{name}
 * (an admin sets a person's limits). */
#ifndef SS_SCHEDULER_USAGE_H
#define SS_SCHEDULER_USAGE_H

#include "http/http.h"

struct sched;

struct sched__buf;

/* The sweep page's section of what the sweep cost and wasted, from its
 * usage document (store_sweep_page.usage; nothing when NULL). */
void sched__usage_sweep_line(struct sched__buf *b, const char *usage);

#include <stdint.h>

#include "store/sweeps.h"

/* Stores the sweep sw (store_sweeps_insert, cb and ud its), unless its
 * runs would take its owner over their queued-runs or queued-FLOPs limit:
 * then r is answered 403 with the figures and cb is not called. sw is
 * copied: the caller's may go at once. */
void sched__usage_insert(struct sched *s, http_request *r, const store_sweep_new *sw,
                         store_sweeps_inserted_cb cb, void *ud);

/* 1 when path is one of the routes above (answered), else 0. */
int sched__usage_route(struct sched *s, http_request *r, const char *path);

#endif

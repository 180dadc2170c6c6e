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

/* cb's status when r has been answered already (a refusal, or the check
 * failed): the caller only lets go of what it holds. */
enum { SCHED__ANSWERED = 1 };

/* Stores the new sweep sw (extend 0: store_sweeps_insert, on db_submit)
 * or adds sw's runs to sweep extend (store_sweeps_extend, on the control
 * connection), cb and ud its, unless the runs would take their owner (sw's
 * owner_id, or the sweep's) over their queued-runs or queued-FLOPs limit:
 * then r is answered 403 with the figures, and cb gets SCHED__ANSWERED.
 * One such change at a time, in the order asked, from its check to its
 * store's answer, so two cannot both pass the check. sw is copied: the
 * caller's may go at once. */
void sched__usage_add(struct sched *s, http_request *r, int64_t extend, const store_sweep_new *sw,
                      store_sweeps_inserted_cb cb, void *ud);

/* 1 when path is one of the routes above (answered), else 0. */
int sched__usage_route(struct sched *s, http_request *r, const char *path);

#endif

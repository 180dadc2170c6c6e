/* The audit trail (scheduler/audit.c): every change made or refused
 * through the API is a row of migration 021's table, written when the
 * change is answered; GET /api/audit (admins) reads it. */
#ifndef SS_SCHEDULER_AUDIT_H
#define SS_SCHEDULER_AUDIT_H

#include "http/http.h"
#include "scheduler/auth.h"

struct sched;

/* Writes a row: who (user_id 0: no known token), r's peer, action, target
 * ("sweep 3", "user ann", "-"), status (the HTTP status answered: 2xx is
 * ok, 401 and 403 refused, the rest failed) and detail (never a token).
 * The write is not waited for; a failed one is logged. */
void sched__audit(struct sched *s, http_request *r, const sched__who *who, const char *action,
                  const char *target, int status, const char *detail);

/* Writes r's row when r (a change to a sweep or a run) is answered: the
 * action and target from its method and path (a submission's target from
 * its answer's id), the detail its answer's error message (or, for a
 * change made, the answer). */
void sched__audit_watch(struct sched *s, http_request *r, const sched__who *who);

/* GET /api/audit[?since=DATE&user=NAME&limit=N] for admins: 1 when path
 * is the route (r answered), else 0. */
int sched__audit_route(struct sched *s, http_request *r, const sched__who *who, const char *path);

/* GET /audit: the audit trail's page, a shell whose script reads GET
 * /api/audit with the admin's token entered in the page (a page's own
 * request carries no token). Returns 1 (r answered). */
int sched__audit_page(struct sched *s, http_request *r);

#endif

/* The user routes (scheduler/users.c): GET /api/me (anyone with a token),
 * and for admins GET /api/users, POST /api/users {"name", "role"} (answers
 * the new token, once), POST /api/users/NAME/revoke, POST
 * /api/users/NAME/token (a new token, the old ones revoked) and POST
 * /api/users/NAME/priority {"min", "max"}. Each change is audited and
 * changes the scheduler's token table at once; a revoke also closes the
 * user's open event streams. */
#ifndef SS_SCHEDULER_USERS_H
#define SS_SCHEDULER_USERS_H

#include "http/http.h"
#include "scheduler/auth.h"

struct sched;

/* 1 when path is a user route (r answered), else 0. */
int sched__users_route(struct sched *s, http_request *r, const sched__who *who, const char *path);

#endif

/* Inside the scheduler: what the API (api.c) and the status page (web_*.c)
 * both need to route a request: ids in paths, the Bearer token, the run
 * statuses. */
#ifndef SS_SCHEDULER_ROUTE_H
#define SS_SCHEDULER_ROUTE_H

#include <stdint.h>

#include "http/http.h"

/* "/api/runs/12/cancel" with prefix "/api/runs/" -> 1 with id 12 and rest
 * "/cancel"; 0 when path does not start with prefix and a positive id. */
int sched__route_id(const char *path, const char *prefix, int64_t *id, const char **rest);

/* The request carries "Authorization: Bearer TOKEN" with TOKEN equal to
 * api_token (compared in constant time). */
int sched__route_authorized(http_request *r, const char *api_token);

/* The run statuses in their order of display, NULL-terminated. */
extern const char *const sched__route_statuses[];

/* The entry of sched__route_statuses equal to v (so it may be compared by
 * pointer and put in a page unescaped), or NULL. */
const char *sched__route_status(const char *v);

/* The HTTP status of a store read's answer (store_json_cb's arguments):
 * 0 when json is there to send, else 503 (database down, or the read ran
 * over its time limit: the store's message says which limit), 500 (the
 * query failed) or 404 (no such object), with *msg the API's message. */
int sched__route_read_status(int status, const char *json, const char *errmsg, const char **msg);

/* Answers r with a store read: json with ok_status, or the error of
 * sched__route_read_status as the API's JSON error. */
void sched__route_answer_read(http_request *r, int ok_status, int status, const char *json,
                              const char *errmsg);

#endif

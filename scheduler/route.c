/* Request routing shared by the API and the status page (scheduler/route.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"
#include "common/token.h"
#include "scheduler/route.h"

int sched__route_id(const char *path, const char *prefix, int64_t *id, const char **rest) {
  size_t pl = strlen(prefix);
  if (strncmp(path, prefix, pl) != 0 || path[pl] < '0' || path[pl] > '9')
    return 0;
  char *end;
  long long v = strtoll(path + pl, &end, 10);
  if (v <= 0 || v == LLONG_MAX) /* LLONG_MAX: it overflowed */
    return 0;
  *id = v;
  *rest = end;
  return 1;
}

int sched__route_authorized(http_request *r, const char *api_token) {
  const char *h = http_header(r, "authorization");
  return h && !strncasecmp(h, "Bearer ", 7) && token_equal(api_token, h + 7);
}

const char *const sched__route_statuses[] = {"queued", "running",   "succeeded",
                                             "failed", "cancelled", NULL};

const char *sched__route_status(const char *v) {
  for (int i = 0; v && sched__route_statuses[i]; i++)
    if (!strcmp(v, sched__route_statuses[i]))
      return sched__route_statuses[i];
  return NULL;
}

int sched__route_read_status(int status, const char *json, const char *errmsg, const char **msg) {
  if (status == SS_ECONN) {
    *msg = "database unavailable; try again";
    return 503;
  }
  if (status == SS_ETIMEOUT) {
    *msg = errmsg ? errmsg : "the query ran over the read time limit";
    return 503;
  }
  if (status != 0) {
    *msg = errmsg ? errmsg : "query failed";
    return 500;
  }
  if (!json) {
    *msg = "no such object";
    return 404;
  }
  *msg = NULL;
  return 0;
}

void sched__route_answer_read(http_request *r, int ok_status, int status, const char *json,
                              const char *errmsg) {
  const char *msg;
  int code = sched__route_read_status(status, json, errmsg, &msg);
  if (code)
    http_respond_error(r, code, msg, NULL);
  else
    http_respond_json(r, ok_status, json);
}

/* The page's own JSON under /api/: curves sampled on the server and a
 * sweep's fit points (store/pages.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"
#include "scheduler/route.h"
#include "store/pages.h"

#define CURVE_POINTS 100 /* default samples per curve */
#define CURVE_POINTS_MAX 2000
#define CURVE_RUNS 200 /* default runs per curves request */
#define CURVE_RUNS_MAX 1000

static void on_json(void *ud, int status, const char *json, const char *errmsg) {
  sched__route_answer_read(ud, 200, status, json, errmsg);
}

/* "1,2,3" -> "{1,2,3}" (request memory), or NULL with why in msg. Each id
 * must be a run id, 1 to INT64_MAX: a larger one would reach PostgreSQL,
 * whose bigint cast fails the whole query (a 500 with its error text). */
static const char *id_array(http_request *r, const char *list, int max, char *msg, size_t len) {
  size_t n = strlen(list);
  if (!n || n > (size_t)max * 21) {
    snprintf(msg, len, "query parameter runs: expected up to %d run ids, comma-separated", max);
    return NULL;
  }
  char *out = http_alloc(r, n + 3);
  if (!out) {
    snprintf(msg, len, "out of memory");
    return NULL;
  }
  size_t at = 0;
  out[at++] = '{';
  int count = 0;
  for (const char *p = list;; p++) {
    size_t digits = strspn(p, "0123456789"), item = strcspn(p, ",");
    errno = 0;
    long long id = digits == item && item ? strtoll(p, NULL, 10) : 0;
    if (++count > max) {
      snprintf(msg, len, "query parameter runs: expected up to %d run ids, comma-separated", max);
      return NULL;
    }
    if (id <= 0 || errno) {
      snprintf(msg, len,
               "query parameter runs: item %d = '%.*s%s': expected a run id, an integer in "
               "[1, %lld]",
               count, (int)(item > 40 ? 40 : item), p, item > 40 ? "..." : "",
               (long long)INT64_MAX);
      return NULL;
    }
    at += (size_t)snprintf(out + at, n + 3 - at, "%s%lld", count > 1 ? "," : "", id);
    p += item;
    if (!*p)
      break;
  }
  out[at++] = '}';
  out[at] = '\0';
  return out;
}

/* A whole-number query parameter in [min, max] into *out (dflt when
 * absent); else a 400 naming it, the value found and the range, and -1. */
static int count_param(http_request *r, const char *name, long long dflt, long long min,
                       long long max, long long *out) {
  const char *v;
  int found = http_query_param(r, name, &v);
  char msg[200];
  if (found == 0) {
    *out = dflt;
    return 0;
  }
  if (found > 0) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (*v && !*end && !errno && n >= min && n <= max) {
      *out = n;
      return 0;
    }
    if (*v && !*end && !errno && n > max)
      snprintf(msg, sizeof msg, "query parameter %s = %lld: over the maximum of %lld", name, n,
               max);
    else
      snprintf(msg, sizeof msg, "query parameter %s = '%.40s': expected an integer in [%lld, %lld]",
               name, v, min, max);
  } else {
    snprintf(msg, sizeof msg, "query parameter %s: invalid percent-encoding", name);
  }
  http_respond_error(r, 400, msg, name);
  return -1;
}

static void get_curves(sched *s, http_request *r, int64_t sweep_id, int64_t run_id) {
  long long points, limit, offset;
  if (count_param(r, "points", CURVE_POINTS, 1, CURVE_POINTS_MAX, &points) ||
      count_param(r, "limit", CURVE_RUNS, 0, CURVE_RUNS_MAX, &limit) ||
      count_param(r, "offset", 0, 0, INT32_MAX, &offset))
    return;
  const char *ids = NULL, *list;
  char one[32];
  int has_list = http_query_param(r, "runs", &list);
  if (run_id) {
    snprintf(one, sizeof one, "{%" PRId64 "}", run_id);
    ids = one;
  } else if (has_list) {
    char msg[200] = "query parameter runs: invalid percent-encoding";
    ids = has_list > 0 ? id_array(r, list, CURVE_RUNS_MAX, msg, sizeof msg) : NULL;
    if (!ids) {
      http_respond_error(r, 400, msg, "runs");
      return;
    }
  }
  store_pages_curves(db_pool_get(s->reads, 1), sweep_id, ids, points, limit, offset, on_json, r);
}

/* A sweep's succeeded runs as columns: what the fit plots draw. */
static void get_points(sched *s, http_request *r, int64_t sweep_id) {
  store_pages_points(db_pool_get(s->reads, 0), sweep_id, on_json, r);
}

/* The page's JSON under /api/; 0: not the page's (the API answers). */
int sched__web_api(sched *s, http_request *r, const char *path) {
  int64_t id;
  const char *rest;
  int sweep = 0, run = 0, points = 0;
  if (sched__route_id(path, "/api/sweeps/", &id, &rest)) {
    sweep = !strcmp(rest, "/curves");
    points = !strcmp(rest, "/points");
  } else if (sched__route_id(path, "/api/runs/", &id, &rest)) {
    run = !strcmp(rest, "/curves");
  }
  if (!sweep && !run && !points)
    return 0;
  const char *m = http_method(r);
  if (strcmp(m, "GET") && strcmp(m, "HEAD"))
    http_respond_error(r, 405, "method not allowed: use GET", NULL);
  else if (!sched__auth_may_read(s, r))
    http_respond_error(r, 401, "reads need the API token (Authorization: Bearer ...)", NULL);
  else if (!db_pool_ready(s->reads))
    http_respond_error(r, 503, "database unavailable; try again", NULL);
  else if (points)
    get_points(s, r, id);
  else
    get_curves(s, r, sweep ? id : 0, run ? id : 0);
  return 1;
}

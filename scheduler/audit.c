/* The audit trail (scheduler/audit.h). */
#include "scheduler/audit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/internal.h"
#include "scheduler/route.h"
#include "scheduler/web.h"
#include "store/audit.h"

static void on_written(void *ud, int status, int64_t rows, const char *errmsg) {
  (void)ud;
  (void)rows;
  if (status != 0)
    sched__logf("audit: a row was not written: %s", errmsg ? errmsg : "unknown error");
}

static const char *outcome_of(int status) {
  if (status >= 200 && status < 300)
    return "ok";
  return status == 401 || status == 403 ? "refused" : "failed";
}

void sched__audit(sched *s, http_request *r, const sched__who *who, const char *action,
                  const char *target, int status, const char *detail) {
  if (s->stopping)
    return;
  store_audit_row row = {.user_id = who->user_id,
                         .user_name = who->user_id ? who->name : "-",
                         .peer = http_peer(r),
                         .action = action,
                         .target = target,
                         .outcome = outcome_of(status),
                         .status = status,
                         .detail = detail ? detail : ""};
  store_audit_add(s->db, &row, on_written, NULL);
}

typedef struct watch {
  sched *s;
  sched__who who;
} watch;

/* The action and target of a change's path: "cancel" and "sweep 3"... */
static void path_action(const char *method, const char *path, char *action, size_t alen,
                        char *target, size_t tlen) {
  static const char *const acts[] = {"/cancel", "/priority", "/next", "/reproduce"};
  int64_t id;
  const char *rest;
  int run = sched__route_id(path, "/api/runs/", &id, &rest);
  snprintf(action, alen, "%s %.100s", method, path);
  snprintf(target, tlen, "-");
  if (!strcmp(path, "/api/sweeps")) {
    snprintf(action, alen, "submit");
    return;
  }
  if (!run && !sched__route_id(path, "/api/sweeps/", &id, &rest))
    return;
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
    if (!strcmp(rest, acts[i])) {
      snprintf(action, alen, "%s", acts[i] + 1);
      snprintf(target, tlen, "%s %" PRId64, run ? "run" : "sweep", id);
    }
}

static void on_answer(http_request *r, int status, const char *body, size_t len, void *ud) {
  watch *w = ud;
  char action[128], target[64], detail[512];
  path_action(http_method(r), http_path(r), action, sizeof action, target, sizeof target);
  json_t *doc = json_loadb(body, len, 0, NULL);
  json_t *msg = json_object_get(json_object_get(doc, "error"), "message");
  json_t *id = json_object_get(doc, "id");
  if (!strcmp(action, "submit") && status == 201 && json_is_integer(id))
    snprintf(target, sizeof target, "sweep %" JSON_INTEGER_FORMAT, json_integer_value(id));
  if (json_is_string(msg))
    snprintf(detail, sizeof detail, "%s", json_string_value(msg));
  else
    snprintf(detail, sizeof detail, "%.*s", (int)(len < 500 ? len : 500), body);
  json_decref(doc);
  sched__audit(w->s, r, &w->who, action, target, status, detail);
}

void sched__audit_watch(sched *s, http_request *r, const sched__who *who) {
  watch *w = http_alloc(r, sizeof *w);
  if (!w)
    return;
  *w = (watch){s, *who};
  http_on_answer(r, on_answer, w);
}

static void on_list(void *ud, int status, const char *json, const char *errmsg) {
  http_request *r = ud;
  if (status == SS_EQUERY) /* PostgreSQL could not read since */
    http_respond_error(r, 400, errmsg, "since");
  else
    sched__route_answer_read(r, 200, status, json, errmsg);
}

int sched__audit_route(sched *s, http_request *r, const sched__who *who, const char *path) {
  if (strcmp(path, "/api/audit") != 0)
    return 0;
  const char *since = NULL, *user = NULL, *limit = NULL;
  if (strcmp(http_method(r), "GET") && strcmp(http_method(r), "HEAD"))
    http_respond_error(r, 405, "method not allowed: use GET", NULL);
  else if (sched__auth_refuse(s, r, who, SS_ACT_AUDIT, 0, "the audit trail"))
    return 1;
  else if (http_query_param(r, "since", &since) < 0 || http_query_param(r, "user", &user) < 0 ||
           http_query_param(r, "limit", &limit) < 0)
    http_respond_error(r, 400, "query parameters: invalid percent-encoding", NULL);
  else if (limit &&
           (atoi(limit) < 1 || atoi(limit) > 10000 || strspn(limit, "0123456789") != strlen(limit)))
    http_respond_error(r, 400, "query parameter limit: expected an integer in [1, 10000]", "limit");
  else if (!db_pool_ready(s->reads))
    http_respond_error(r, 503, "database unavailable; try again", NULL);
  else
    store_audit_list(db_pool_get(s->reads, 0), since, user, limit ? atoi(limit) : 1000, on_list, r);
  return 1;
}

int sched__audit_page(sched *s, http_request *r) {
  sched__web_req w = {.s = s, .r = r};
  sched__buf b = {0};
  sched__page_start(&b, s, "audit", 0, "Audit trail");
  sched__b_puts(&b, "<section id=\"audit\" aria-labelledby=\"h-audit\"><h1 id=\"h-audit\">Audit "
                    "trail</h1><p id=\"audit-note\">An admin's token reads it (JavaScript "
                    "needed); <code>scalesweep audit</code> prints it too.</p><div "
                    "class=\"scroll\"><table><thead><tr><th scope=\"col\">At</th><th "
                    "scope=\"col\">User</th><th scope=\"col\">From</th><th "
                    "scope=\"col\">Action</th><th scope=\"col\">Target</th><th "
                    "scope=\"col\">Outcome</th><th scope=\"col\">Detail</th></tr></thead>"
                    "<tbody id=\"audit-rows\"></tbody></table></div></section>\n");
  sched__page_end(&b);
  sched__respond_page(&w, 200, &b);
  return 1;
}

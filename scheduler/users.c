/* The user routes (scheduler/users.h). A new token is 32 random bytes as
 * 64 hex digits; only its SHA-256 leaves this file (to the database and
 * the token table), and the token itself only in the answer. */
#include "scheduler/users.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/digest.h"
#include "common/token.h"
#include "scheduler/audit.h"
#include "scheduler/internal.h"
#include "scheduler/route.h"
#include "store/users.h"

typedef struct user_req {
  sched *s;
  http_request *r;
  sched__who who;
  const char *action; /* "user add", "user revoke", ... */
  char name[40], role[16], target[64];
  char token[65], hash[65]; /* a new token and its SHA-256 ("" : none) */
  int min, max;
} user_req;

/* Answers and audits: json (2xx) or an error message. */
static void finish(user_req *u, int status, const char *text, const char *detail) {
  sched__audit(u->s, u->r, &u->who, u->action, u->target, status, status < 300 ? detail : text);
  if (status < 300)
    http_respond_json(u->r, status, text);
  else
    http_respond_error(u->r, status, text, NULL);
}

static int name_ok(const char *name) {
  size_t n = strlen(name);
  if (n < 1 || n > 32 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_.-") != n)
    return 0;
  return name[0] != '_' && name[0] != '.' && name[0] != '-';
}

static void close_streams(sched *s, int64_t user_id) {
  sched__sse *next;
  for (sched__sse *c = s->ev.sse; c; c = next) {
    next = c->next;
    if (c->user_id == user_id)
      http_sse_close(c->stream);
  }
}

static void on_user(void *ud, int status, const store_user *su, const char *errmsg) {
  user_req *u = ud;
  char body[256], detail[128];
  if (status != 0)
    return finish(u, status == SS_ECONN ? 503 : 500, errmsg, NULL);
  if (!su) {
    snprintf(body, sizeof body,
             !strcmp(u->action, "user add") ? "a user named %s exists already"
                                            : "no user named %s (or the user is revoked)",
             u->name);
    return finish(u, !strcmp(u->action, "user add") ? 409 : 404, body, NULL);
  }
  if (sched__auth_put(&u->s->auth, su, u->hash[0] ? u->hash : NULL))
    return finish(u, 500, "out of memory", NULL);
  if (su->revoked || !strcmp(u->action, "user token")) /* their old tokens are refused */
    close_streams(u->s, su->id);
  snprintf(detail, sizeof detail, "role %s, priority %d..%d%s", su->role, su->priority_min,
           su->priority_max, su->revoked ? ", revoked" : "");
  snprintf(body, sizeof body,
           "{\"id\":%" PRId64 ",\"name\":\"%s\",\"role\":\"%s\",\"priority_min\":%d,"
           "\"priority_max\":%d,\"revoked\":%s%s%s%s}",
           su->id, su->name, su->role, su->priority_min, su->priority_max,
           su->revoked ? "true" : "false", u->token[0] ? ",\"token\":\"" : "", u->token,
           u->token[0] ? "\"" : "");
  finish(u, u->token[0] ? 201 : 200, body, detail);
}

/* A fresh token and its hash into u; 0, or -1 (answered). */
static int new_token(user_req *u) {
  if (token_random_hex(u->token, 32) != 0) {
    finish(u, 500, "no random bytes for a token", NULL);
    return -1;
  }
  digest_sha256_hex(u->token, strlen(u->token), u->hash);
  return 0;
}

/* The body's object, or NULL (answered 400). */
static json_t *body_object(user_req *u, const char *expected) {
  size_t len;
  const char *text = http_body(u->r, &len);
  json_t *b = json_loadb(text, len, 0, NULL);
  if (json_is_object(b))
    return b;
  json_decref(b);
  char msg[160];
  snprintf(msg, sizeof msg, "request body: expected %s", expected);
  finish(u, 400, msg, NULL);
  return NULL;
}

static void add(user_req *u) {
  json_t *b = body_object(u, "{\"name\": NAME, \"role\": \"admin\"|\"member\"|\"viewer\"}");
  if (!b)
    return;
  const char *name = json_string_value(json_object_get(b, "name"));
  const char *role = json_string_value(json_object_get(b, "role"));
  snprintf(u->name, sizeof u->name, "%s", name ? name : "");
  snprintf(u->role, sizeof u->role, "%s", role ? role : "member");
  json_decref(b);
  snprintf(u->target, sizeof u->target, "user %s", u->name);
  if (!name_ok(u->name))
    return finish(u, 400,
                  "$.name: expected 1 to 32 of a-z, 0-9, '_', '.', '-', the first a letter or "
                  "digit",
                  NULL);
  if (ss_role_parse(u->role) == SS_ROLE_NONE)
    return finish(u, 400, "$.role: expected admin, member or viewer", NULL);
  if (!new_token(u))
    store_users_add(u->s->db, u->name, u->role, u->hash, on_user, u);
}

static void set_priority(user_req *u) {
  json_t *b = body_object(u, "{\"min\": N, \"max\": N}");
  if (!b)
    return;
  json_t *lo = json_object_get(b, "min"), *hi = json_object_get(b, "max");
  int ok = json_is_integer(lo) && json_is_integer(hi) && json_integer_value(lo) >= -1000000 &&
           json_integer_value(hi) <= 1000000 && json_integer_value(lo) <= json_integer_value(hi);
  u->min = ok ? (int)json_integer_value(lo) : 0;
  u->max = ok ? (int)json_integer_value(hi) : 0;
  json_decref(b);
  if (!ok)
    return finish(u, 400,
                  "request body: expected {\"min\": N, \"max\": N}, integers with "
                  "-1000000 <= min <= max <= 1000000",
                  NULL);
  store_users_set_priority(u->s->db, u->name, u->min, u->max, on_user, u);
}

/* POST /api/users/NAME/ACTION */
static void change(user_req *u, const char *rest) {
  const char *slash = strchr(rest, '/');
  size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
  snprintf(u->name, sizeof u->name, "%.*s", (int)(n < 39 ? n : 39), rest);
  snprintf(u->target, sizeof u->target, "user %s", u->name);
  const char *what = slash ? slash + 1 : "";
  if (!name_ok(u->name) || n > 32 ||
      (strcmp(what, "revoke") && strcmp(what, "token") && strcmp(what, "priority")))
    return finish(u, 404, "not found (POST /api/users/NAME/revoke, /token or /priority)", NULL);
  if (!strcmp(what, "revoke")) {
    u->action = "user revoke";
    if (!strcmp(u->name, "admin"))
      return finish(u, 403,
                    "user revoke of user admin refused: admin is the --api-token-file's token "
                    "(change that file to retire it)",
                    NULL);
    return store_users_revoke(u->s->db, u->name, on_user, u);
  }
  if (!strcmp(what, "token")) {
    u->action = "user token";
    if (!new_token(u))
      store_users_new_token(u->s->db, u->name, u->hash, on_user, u);
    return;
  }
  u->action = "user priority";
  set_priority(u);
}

static void me(sched *s, http_request *r, const sched__who *who) {
  const sched__user *u = sched__auth_user(&s->auth, who->user_id);
  if (!u)
    return http_respond_error(r, 401, "no token, or one not known or revoked", NULL);
  char body[256];
  snprintf(body, sizeof body,
           "{\"id\":%" PRId64 ",\"name\":\"%s\",\"role\":\"%s\",\"priority_min\":%d,"
           "\"priority_max\":%d}",
           u->id, u->name, ss_role_name(u->role), u->priority_min, u->priority_max);
  http_respond_json(r, 200, body);
}

static void on_list(void *ud, int status, const char *json, const char *errmsg) {
  sched__route_answer_read(ud, 200, status, json, errmsg);
}

int sched__users_route(sched *s, http_request *r, const sched__who *who, const char *path) {
  int get = !strcmp(http_method(r), "GET") || !strcmp(http_method(r), "HEAD");
  if (!strcmp(path, "/api/me")) {
    if (!get)
      http_respond_error(r, 405, "method not allowed: use GET", NULL);
    else
      me(s, r, who);
    return 1;
  }
  if (strcmp(path, "/api/users") && strncmp(path, "/api/users/", 11))
    return 0;
  user_req *u = http_alloc(r, sizeof *u);
  if (!u) {
    http_respond_error(r, 500, "out of memory", NULL);
    return 1;
  }
  *u = (user_req){.s = s, .r = r, .who = *who, .action = get ? "user list" : "user add"};
  snprintf(u->target, sizeof u->target, "-");
  if (get && !strcmp(path, "/api/users")) {
    if (!sched__auth_refuse(s, r, who, SS_ACT_USERS, 0, "the users"))
      store_users_list(db_pool_get(s->reads, 0), on_list, r);
    return 1;
  }
  char msg[320];
  const char *why = ss_perm_refusal(who->role, 0, SS_ACT_USERS, !s->o.open_reads);
  if (get) {
    http_respond_error(r, 405, "method not allowed: use POST", NULL);
  } else if (why) {
    snprintf(msg, sizeof msg, "changes to users refused for %s (%s): %s",
             who->user_id ? who->name : "anyone", ss_role_name(who->role), why);
    finish(u, who->user_id ? 403 : 401, msg, NULL);
  } else if (!db_ready(s->db)) {
    finish(u, 503, "database unavailable; try again", NULL);
  } else if (!strcmp(path, "/api/users")) {
    add(u);
  } else {
    change(u, path + 11);
  }
  return 1;
}

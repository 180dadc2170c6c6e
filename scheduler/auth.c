/* Who is asking (scheduler/auth.h). Tokens are 256 random bits, so their
 * unsalted SHA-256 is as good as a salted one and lets a token be found by
 * its hash; every stored hash is compared, each in constant time, so that
 * the time taken says nothing of how near a guess came. */
#include "scheduler/auth.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/digest.h"
#include "common/token.h"
#include "scheduler/internal.h"

sched__user *sched__auth_user(sched__auth *a, int64_t id) {
  for (int i = 0; i < a->nusers; i++)
    if (a->users[i].id == id)
      return &a->users[i];
  return NULL;
}

sched__user *sched__auth_user_named(sched__auth *a, const char *name) {
  for (int i = 0; i < a->nusers; i++)
    if (!strcmp(a->users[i].name, name))
      return &a->users[i];
  return NULL;
}

static int grow(void **p, int *cap, int n, size_t size) {
  if (n < *cap)
    return 0;
  int nc = *cap ? *cap * 2 : 16;
  void *q = realloc(*p, (size_t)nc * size);
  if (!q)
    return -1;
  *p = q;
  *cap = nc;
  return 0;
}

static void drop_tokens(sched__auth *a, int64_t user_id) {
  int k = 0;
  for (int i = 0; i < a->ntokens; i++)
    if (a->tokens[i].user_id != user_id)
      a->tokens[k++] = a->tokens[i];
  a->ntokens = k;
}

static int add_token(sched__auth *a, const char *hash_hex, int64_t user_id) {
  if (grow((void **)&a->tokens, &a->captokens, a->ntokens, sizeof *a->tokens))
    return -1;
  sched__token *t = &a->tokens[a->ntokens++];
  snprintf(t->hash, sizeof t->hash, "%s", hash_hex);
  t->user_id = user_id;
  return 0;
}

int sched__auth_put(sched__auth *a, const store_user *u, const char *hash_hex) {
  sched__user *x = sched__auth_user(a, u->id);
  if (!x) {
    if (grow((void **)&a->users, &a->capusers, a->nusers, sizeof *a->users))
      return -1;
    x = &a->users[a->nusers++];
  }
  *x = (sched__user){.id = u->id,
                     .role = ss_role_parse(u->role),
                     .priority_min = u->priority_min,
                     .priority_max = u->priority_max,
                     .revoked = u->revoked};
  snprintf(x->name, sizeof x->name, "%s", u->name);
  if (!strcmp(x->name, "admin"))
    a->admin_id = x->id;
  if (hash_hex || u->revoked)
    drop_tokens(a, u->id);
  return hash_hex && !u->revoked ? add_token(a, hash_hex, u->id) : 0;
}

typedef struct load_ctx {
  sched__auth *a;
  int oom;
} load_ctx;

static void on_user(void *ud, const store_user *u) {
  load_ctx *c = ud;
  c->oom |= sched__auth_put(c->a, u, NULL) != 0;
}

static void on_token(void *ud, const store_user_token *t) {
  load_ctx *c = ud;
  c->oom |= add_token(c->a, t->hash_hex, t->user_id) != 0;
}

int sched__auth_load(sched *s, char *err, size_t errlen) {
  load_ctx c = {&s->auth, 0};
  int rc = store_users_load(s->o.database, on_user, on_token, &c, err, errlen);
  if (!rc && c.oom) {
    snprintf(err, errlen, "out of memory loading the users");
    rc = SS_ENOMEM;
  }
  if (!rc && !s->auth.admin_id) {
    snprintf(err, errlen, "the database has no user \"admin\" (migration 020 makes it)");
    rc = SS_EINVAL;
  }
  return rc;
}

void sched__auth_free(sched__auth *a) {
  free(a->users);
  free(a->tokens);
  memset(a, 0, sizeof *a);
}

/* The user id of a token: the API token is the admin; else the one whose
 * hash matches (every hash compared, each in constant time); 0: none. */
static int64_t token_user(sched *s, const char *token) {
  if (token_equal(s->api_token, token))
    return s->auth.admin_id;
  char hash[65];
  digest_sha256_hex(token, strlen(token), hash);
  int64_t found = 0;
  for (int i = 0; i < s->auth.ntokens; i++)
    if (token_equal(s->auth.tokens[i].hash, hash))
      found = s->auth.tokens[i].user_id;
  return found;
}

void sched__who_of(sched *s, http_request *r, sched__who *who) {
  memset(who, 0, sizeof *who);
  const char *h = http_header(r, "authorization");
  if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !h[7])
    return;
  sched__user *u = sched__auth_user(&s->auth, token_user(s, h + 7));
  if (!u || u->revoked || u->role == SS_ROLE_NONE)
    return;
  who->user_id = u->id;
  snprintf(who->name, sizeof who->name, "%s", u->name);
  who->role = u->role;
}

int sched__auth_bad_token(http_request *r, const sched__who *who) {
  return !who->user_id && http_header(r, "authorization") != NULL;
}

int sched__auth_may_read(sched *s, http_request *r) {
  sched__who who;
  sched__who_of(s, r, &who);
  return who.role != SS_ROLE_NONE || (s->o.open_reads && !sched__auth_bad_token(r, &who));
}

int sched__auth_refuse(sched *s, http_request *r, const sched__who *who, ss_action a, int owns,
                       const char *target) {
  const char *why = ss_perm_refusal(who->role, owns, a, !s->o.open_reads);
  if (!why)
    return 0;
  char msg[320];
  snprintf(msg, sizeof msg, "%s%s%s refused for %s (%s): %s", ss_action_name(a),
           target ? " of " : "", target ? target : "", who->user_id ? who->name : "anyone",
           ss_role_name(who->role), why);
  http_respond_error(r, who->user_id ? 403 : 401, msg, NULL);
  return 1;
}

typedef struct gate {
  sched *s;
  http_request *r;
  sched__who who;
  ss_action a;
  int run;
  int64_t id;
  sched__gated go;
  void *arg;
} gate;

static void on_owner(void *ud, int status, int64_t owner_id, const char *errmsg) {
  gate *g = ud;
  char target[48];
  snprintf(target, sizeof target, "%s %" PRId64, g->run ? "run" : "sweep", g->id);
  if (status != 0) {
    http_respond_error(g->r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
    return;
  }
  if (!owner_id) {
    http_respond_error(g->r, 404, g->run ? "no such run" : "no such sweep", NULL);
    return;
  }
  if (owner_id != g->who.user_id) {
    const sched__user *o = sched__auth_user(&g->s->auth, owner_id);
    char whose[96];
    snprintf(whose, sizeof whose, "%s (%s's)", target, o ? o->name : "another's");
    sched__auth_refuse(g->s, g->r, &g->who, g->a, 0, whose);
    return;
  }
  g->go(g->s, g->r, g->arg);
}

void sched__auth_gate(sched *s, http_request *r, const sched__who *who, ss_action a, int run,
                      int64_t id, sched__gated go, void *arg) {
  char target[48];
  snprintf(target, sizeof target, "%s %" PRId64, run ? "run" : "sweep", id);
  if (sched__auth_refuse(s, r, who, a, 1, target))
    return;
  if (!ss_perm_refusal(who->role, 0, a, !s->o.open_reads)) {
    go(s, r, arg);
    return;
  }
  gate *g = http_alloc(r, sizeof *g);
  if (!g) {
    http_respond_error(r, 500, "out of memory", NULL);
    return;
  }
  *g = (gate){s, r, *who, a, run, id, go, arg};
  store_users_owner_of(s->db, run, id, on_owner, g);
}

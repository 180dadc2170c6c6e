/* Who is asking (README, "A shared cluster"): the scheduler's table of
 * users and live tokens, loaded from the database at start and changed by
 * the user routes (users.c), so that a revoked token is refused by the
 * next request. The token of --api-token-file (or the cluster token when
 * there is none) is the user "admin". */
#ifndef SS_SCHEDULER_AUTH_H
#define SS_SCHEDULER_AUTH_H

#include <stdint.h>

#include "common/perm.h"
#include "http/http.h"
#include "store/users.h"

struct sched;

typedef struct sched__user {
  int64_t id;
  char name[40];
  ss_role role;
  int priority_min, priority_max;
  int revoked;
} sched__user;

typedef struct sched__token {
  char hash[65]; /* SHA-256 of the token, hex */
  int64_t user_id;
} sched__token;

/* Zeroed is empty; owned by the sched. */
typedef struct sched__auth {
  sched__user *users;
  int nusers, capusers;
  sched__token *tokens;
  int ntokens, captokens;
  int64_t admin_id; /* the user "admin" (the API token's) */
} sched__auth;

typedef struct sched__who {
  int64_t user_id; /* users.id; 0: no token, or one not known or revoked */
  char name[40];
  ss_role role; /* SS_ROLE_NONE when user_id is 0 */
} sched__who;

/* Loads the users and live tokens (blocking; at start, after the
 * migrations). 0, or an error code with a message in err. */
int sched__auth_load(struct sched *s, char *err, size_t errlen);
void sched__auth_free(sched__auth *a);

/* Who r's "Authorization: Bearer TOKEN" is: the API token is the admin;
 * another token is looked up by its SHA-256 (compared in constant time). */
void sched__who_of(struct sched *s, http_request *r, sched__who *who);

/* r carries a token that is no user's (not known, or revoked): refused
 * by every route, reads under open reads included. */
int sched__auth_bad_token(http_request *r, const sched__who *who);

/* r may read: a token of a user not revoked, or open reads and no token
 * that sched__auth_bad_token refuses. */
int sched__auth_may_read(struct sched *s, http_request *r);

/* The user of that id or name in the table (revoked ones too), or NULL. */
sched__user *sched__auth_user(sched__auth *a, int64_t id);
sched__user *sched__auth_user_named(sched__auth *a, const char *name);

/* Puts a user's row (new or changed) in the table; with hash_hex (may be
 * NULL), the user's live tokens become that one alone; a revoked user
 * loses every token. -1 when out of memory. */
int sched__auth_put(sched__auth *a, const store_user *u, const char *hash_hex);

#endif

/* Answers r 401 (no known token) or 403 ("ACTION of TARGET refused: WHY")
 * and returns 1 when who may not do a (owns: on a thing of theirs; target
 * may be NULL); else 0, r not answered. */
int sched__auth_refuse(struct sched *s, http_request *r, const sched__who *who, ss_action a,
                       int owns, const char *target);

/* Continues a change once it is allowed (go is called with arg), else
 * answers r: 403 when who may not do a on sweep id (run 0) or on run id's
 * sweep (run 1) because another owns it (a member, say), 404 when there is
 * no such sweep or run, 503 when the database cannot say. An admin, and
 * anyone the rules allow whatever the owner, goes on at once. */
typedef void (*sched__gated)(struct sched *s, http_request *r, void *arg);
void sched__auth_gate(struct sched *s, http_request *r, const sched__who *who, ss_action a, int run,
                      int64_t id, sched__gated go, void *arg);

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

/* r may read (open reads, or a token of a user not revoked). */
int sched__auth_may_read(struct sched *s, http_request *r);

/* The user of that id or name in the table (revoked ones too), or NULL. */
sched__user *sched__auth_user(sched__auth *a, int64_t id);
sched__user *sched__auth_user_named(sched__auth *a, const char *name);

/* Puts a user's row (new or changed) in the table; with hash_hex (may be
 * NULL), the user's live tokens become that one alone; a revoked user
 * loses every token. -1 when out of memory. */
int sched__auth_put(sched__auth *a, const store_user *u, const char *hash_hex);

#endif

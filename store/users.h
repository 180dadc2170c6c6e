/* A shared cluster's people and their tokens (store/users.c, migration
 * 020): only a token's SHA-256 is stored, as 64 hex digits here and 32
 * bytes in user_tokens.hash. A user is never deleted; a revoked one has
 * revoked_at set, as have all their tokens. */
#ifndef SS_STORE_USERS_H
#define SS_STORE_USERS_H

#include <stdint.h>

#include "store/store.h"

/* A user row; name and role valid during the callback only. */
typedef struct store_user {
  int64_t id;
  const char *name;
  const char *role; /* "admin", "member" or "viewer" */
  int priority_min, priority_max;
  int revoked;
} store_user;

/* One live token: its SHA-256 (hex) and its user. */
typedef struct store_user_token {
  const char *hash_hex;
  int64_t user_id;
} store_user_token;

/* Blocking, at start-up (after db_migrate, before the loop): every user
 * (on_user) and every token not revoked (on_token), each called once per
 * row. 0, or SS_EIO (cannot connect) / SS_EQUERY with a message in err. */
int store_users_load(const char *url, void (*on_user)(void *ud, const store_user *u),
                     void (*on_token)(void *ud, const store_user_token *t), void *ud, char *err,
                     size_t errlen);

/* u: the user the change made or changed; NULL when there is none of that
 * name (or, for add, one of that name exists already; for a new token or
 * a priority range, the user is revoked). */
typedef void (*store_users_cb)(void *ud, int status, const store_user *u, const char *errmsg);

/* A new user with one token (hash_hex: its SHA-256 as 64 hex digits);
 * the priority range is the table's default (admins: any). */
void store_users_add(db *d, const char *name, const char *role, const char *hash_hex,
                     store_users_cb cb, void *ud);
/* Revokes the user and every token of theirs (again: no change). */
void store_users_revoke(db *d, const char *name, store_users_cb cb, void *ud);
/* Revokes the user's tokens and adds hash_hex's; not for a revoked user. */
void store_users_new_token(db *d, const char *name, const char *hash_hex, store_users_cb cb,
                           void *ud);
/* Sets the sweep priorities the user may submit or set; not for a revoked
 * user. */
void store_users_set_priority(db *d, const char *name, int min, int max, store_users_cb cb,
                              void *ud);

/* [{"id", "name", "role", "created_at", "revoked_at", "priority_min",
 * "priority_max", "sweeps"}] by id. */
void store_users_list(db *d, store_json_cb cb, void *ud);

/* owner_id: the owner of sweep id (run 0) or of run id's sweep (run 1);
 * 0 when there is no such sweep or run. */
typedef void (*store_users_owner_cb)(void *ud, int status, int64_t owner_id, const char *errmsg);
void store_users_owner_of(db *d, int run, int64_t id, store_users_owner_cb cb, void *ud);

#endif

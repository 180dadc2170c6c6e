/* People and tokens: their SQL (store/users.h). */
#include "store/users.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "store/internal.h"

#define USER_COLS "id, name, role, priority_min, priority_max, revoked_at IS NOT NULL"

static void decode_user(const PGresult *res, int row, void *elem) {
  *(store_user *)elem =
      (store_user){store__int(res, row, 0),      PQgetvalue(res, row, 1),
                   PQgetvalue(res, row, 2),      (int)store__int(res, row, 3),
                   (int)store__int(res, row, 4), PQgetvalue(res, row, 5)[0] == 't'};
}

static void deliver_user(const store__call *c, int status, const void *rows, int n,
                         const char *errmsg) {
  ((store_users_cb)c->cb)(c->ud, status, status == 0 && n > 0 ? rows : NULL,
                          status == 0 ? NULL : errmsg);
}

static const store__rows_spec user_spec = {sizeof(store_user), decode_user, deliver_user};

static void user_query(db *d, const char *sql, int nparams, const char *const *p, store_users_cb cb,
                       void *ud) {
  store__query_rows(d, sql, nparams, p, &user_spec, (void (*)(void))cb, ud);
}

void store_users_add(db *d, const char *name, const char *role, const char *hash_hex,
                     store_users_cb cb, void *ud) {
  const char *p[3] = {name, role, hash_hex};
  user_query(d,
             "WITH u AS (INSERT INTO users (name, role, priority_max) "
             "VALUES ($1, $2, CASE WHEN $2 = 'admin' THEN 1000000 ELSE 0 END) "
             "ON CONFLICT (name) DO NOTHING RETURNING *), "
             "t AS (INSERT INTO user_tokens (hash, user_id) "
             "SELECT decode($3, 'hex'), id FROM u) "
             "SELECT " USER_COLS " FROM u",
             3, p, cb, ud);
}

void store_users_revoke(db *d, const char *name, store_users_cb cb, void *ud) {
  const char *p[1] = {name};
  user_query(d,
             "WITH u AS (UPDATE users SET revoked_at = coalesce(revoked_at, now()) "
             "WHERE name = $1 RETURNING *), "
             "t AS (UPDATE user_tokens SET revoked_at = now() "
             "WHERE user_id IN (SELECT id FROM u) AND revoked_at IS NULL) "
             "SELECT " USER_COLS " FROM u",
             1, p, cb, ud);
}

void store_users_new_token(db *d, const char *name, const char *hash_hex, store_users_cb cb,
                           void *ud) {
  const char *p[2] = {name, hash_hex};
  user_query(d,
             "WITH u AS (SELECT * FROM users WHERE name = $1 AND revoked_at IS NULL), "
             "o AS (UPDATE user_tokens SET revoked_at = now() "
             "WHERE user_id IN (SELECT id FROM u) AND revoked_at IS NULL), "
             "n AS (INSERT INTO user_tokens (hash, user_id) SELECT decode($2, 'hex'), id FROM u) "
             "SELECT " USER_COLS " FROM u",
             2, p, cb, ud);
}

void store_users_set_priority(db *d, const char *name, int min, int max, store_users_cb cb,
                              void *ud) {
  char lo[24], hi[24];
  const char *p[3] = {name, store__itoa(lo, sizeof lo, min), store__itoa(hi, sizeof hi, max)};
  user_query(d,
             "UPDATE users SET priority_min = $2::int, priority_max = $3::int "
             "WHERE name = $1 AND revoked_at IS NULL RETURNING " USER_COLS,
             3, p, cb, ud);
}

void store_users_list(db *d, store_json_cb cb, void *ud) {
  store__query_json(
      d,
      "SELECT coalesce(json_agg(json_build_object('id', u.id, 'name', u.name, 'role', u.role, "
      "'created_at', u.created_at, 'revoked_at', u.revoked_at, 'priority_min', u.priority_min, "
      "'priority_max', u.priority_max, 'sweeps', (SELECT count(*) FROM sweeps s "
      "WHERE s.owner_id = u.id)) ORDER BY u.id), '[]') FROM users u",
      0, NULL, cb, ud);
}

static void deliver_owner(const store__call *c, int status, const void *rows, int n,
                          const char *errmsg) {
  ((store_users_owner_cb)c->cb)(c->ud, status, status == 0 && n > 0 ? *(const int64_t *)rows : 0,
                                status == 0 ? NULL : errmsg);
}

static const store__rows_spec owner_spec = {sizeof(int64_t), store__decode_id, deliver_owner};

void store_users_owner_of(db *d, int run, int64_t id, store_users_owner_cb cb, void *ud) {
  store__query_rows_id(d,
                       run ? "SELECT s.owner_id FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                             "WHERE r.id = $1"
                           : "SELECT owner_id FROM sweeps WHERE id = $1",
                       id, &owner_spec, (void (*)(void))cb, ud);
}

/* ---- the blocking load at start ---------------------------------------- */

static PGresult *load_exec(PGconn *c, const char *sql, char *err, size_t errlen) {
  PGresult *r = PQexec(c, sql);
  if (PQresultStatus(r) == PGRES_TUPLES_OK)
    return r;
  err_setf(err, errlen, "loading the users: %s", PQerrorMessage(c));
  PQclear(r);
  return NULL;
}

static int load_rows(PGconn *c, void (*on_user)(void *ud, const store_user *u),
                     void (*on_token)(void *ud, const store_user_token *t), void *ud, char *err,
                     size_t errlen) {
  PGresult *r = load_exec(c, "SELECT " USER_COLS " FROM users ORDER BY id", err, errlen);
  if (!r)
    return SS_EQUERY;
  for (int i = 0; i < PQntuples(r); i++) {
    store_user u;
    decode_user(r, i, &u);
    on_user(ud, &u);
  }
  PQclear(r);
  r = load_exec(c, "SELECT encode(hash, 'hex'), user_id FROM user_tokens WHERE revoked_at IS NULL",
                err, errlen);
  if (!r)
    return SS_EQUERY;
  for (int i = 0; i < PQntuples(r); i++)
    on_token(ud, &(store_user_token){PQgetvalue(r, i, 0), store__int(r, i, 1)});
  PQclear(r);
  return 0;
}

int store_users_load(const char *url, void (*on_user)(void *ud, const store_user *u),
                     void (*on_token)(void *ud, const store_user_token *t), void *ud, char *err,
                     size_t errlen) {
  int rc;
  PGconn *c = store__connect_blocking(url, "scalesweep-users", &rc, err, errlen);
  if (!c)
    return rc;
  rc = load_rows(c, on_user, on_token, ud, err, errlen);
  PQfinish(c);
  return rc;
}

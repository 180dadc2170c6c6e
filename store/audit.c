/* The audit trail's SQL (store/audit.h). */
#include "store/audit.h"

#include "store/internal.h"

void store_audit_add(db *d, const store_audit_row *row, store_done_cb cb, void *ud) {
  char uid[24], st[24];
  const char *p[8] = {row->user_id ? store__itoa(uid, sizeof uid, row->user_id) : NULL,
                      row->user_name,
                      row->peer,
                      row->action,
                      row->target,
                      row->outcome,
                      store__itoa(st, sizeof st, row->status),
                      row->detail};
  store__exec(d,
              "INSERT INTO audit (user_id, user_name, peer, action, target, outcome, status, "
              "detail) VALUES ($1::bigint, $2, $3, $4, $5, $6, $7::int, $8)",
              8, p, cb, ud);
}

void store_audit_list(db *d, const char *since, const char *user, int limit, store_json_cb cb,
                      void *ud) {
  char lim[24];
  const char *p[3] = {since, user, store__itoa(lim, sizeof lim, limit)};
  store__query_json(d,
                    "SELECT coalesce(json_agg(json_build_object('id', id, 'at', at, 'user_id', "
                    "user_id, 'user', user_name, 'peer', peer, 'action', action, 'target', "
                    "target, 'outcome', outcome, 'status', status, 'detail', detail) "
                    "ORDER BY id DESC), '[]') FROM (SELECT * FROM audit "
                    "WHERE ($1::timestamptz IS NULL OR at >= $1::timestamptz) "
                    "AND ($2::text IS NULL OR user_name = $2) ORDER BY id DESC LIMIT $3::int) a",
                    3, p, cb, ud);
}

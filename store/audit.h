/* The audit trail (store/audit.c, migration 021). */
#ifndef SS_STORE_AUDIT_H
#define SS_STORE_AUDIT_H

#include <stdint.h>

#include "store/store.h"

/* One row; the strings are copied before store_audit_add returns. */
typedef struct store_audit_row {
  int64_t user_id; /* 0: no known token (NULL in the table) */
  const char *user_name, *peer, *action, *target;
  const char *outcome; /* "ok", "refused" or "failed" */
  int status;          /* the HTTP status answered */
  const char *detail;
} store_audit_row;

void store_audit_add(db *d, const store_audit_row *row, store_done_cb cb, void *ud);

/* [{"id", "at", "user_id", "user", "peer", "action", "target", "outcome",
 * "status", "detail"}], newest first: at most limit rows, since (an ISO
 * date or time; NULL: any) and of user (a name; NULL: anyone's). A since
 * PostgreSQL cannot read fails with its message. */
void store_audit_list(db *d, const char *since, const char *user, int limit, store_json_cb cb,
                      void *ud);

#endif

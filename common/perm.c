/* The permission rules (common/perm.h). */
#include "common/perm.h"

#include <string.h>

static const char *const action_names[SS_ACT_N] = {"read",  "submit",    "cancel", "priority",
                                                   "next",  "reproduce", "users",  "limits",
                                                   "audit", "usage_all"};

const char *ss_perm_refusal(ss_role role, int owns, ss_action a, int closed_reads) {
  if ((int)a < 0 || a >= SS_ACT_N || (int)role < SS_ROLE_NONE || role > SS_ROLE_ADMIN)
    return "unknown role or action";
  if (role == SS_ROLE_ADMIN)
    return NULL;
  if (a == SS_ACT_READ)
    return role == SS_ROLE_NONE && closed_reads
               ? "reads need a token under --closed-reads (Authorization: Bearer ...)"
               : NULL;
  if (role == SS_ROLE_NONE)
    return "changes need a token (Authorization: Bearer ...)";
  if (role == SS_ROLE_VIEWER)
    return "a viewer may only read";
  switch (a) {
  case SS_ACT_SUBMIT:
  case SS_ACT_REPRODUCE:
    return NULL;
  case SS_ACT_CANCEL:
  case SS_ACT_PRIORITY:
  case SS_ACT_NEXT:
    return owns ? NULL : "a member may change only the sweeps they submitted";
  default:
    return "only an admin may do this";
  }
}

ss_role ss_role_parse(const char *s) {
  if (!s)
    return SS_ROLE_NONE;
  for (ss_role r = SS_ROLE_VIEWER; r <= SS_ROLE_ADMIN; r++)
    if (!strcmp(s, ss_role_name(r)))
      return r;
  return SS_ROLE_NONE;
}

const char *ss_role_name(ss_role r) {
  switch (r) {
  case SS_ROLE_VIEWER:
    return "viewer";
  case SS_ROLE_MEMBER:
    return "member";
  case SS_ROLE_ADMIN:
    return "admin";
  default:
    return "none";
  }
}

const char *ss_action_name(ss_action a) {
  return (int)a >= 0 && a < SS_ACT_N ? action_names[a] : "unknown";
}

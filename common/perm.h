/* Who may do what on a shared cluster (README, "A shared cluster"): the
 * roles, the actions the API's routes take, and the one table of rules
 * that every route asks. A rule depends on the role, on whether the thing
 * acted on belongs to the one asking, and, for reads, on --closed-reads. */
#ifndef SS_COMMON_PERM_H
#define SS_COMMON_PERM_H

typedef enum ss_role { SS_ROLE_NONE, SS_ROLE_VIEWER, SS_ROLE_MEMBER, SS_ROLE_ADMIN } ss_role;

typedef enum ss_action {
  SS_ACT_READ,      /* any GET of the API or the page */
  SS_ACT_SUBMIT,    /* POST /api/sweeps */
  SS_ACT_CANCEL,    /* a sweep or a run */
  SS_ACT_PRIORITY,  /* a sweep's priority */
  SS_ACT_NEXT,      /* POST /api/sweeps/{id}/next */
  SS_ACT_REPRODUCE, /* any run, by anyone who may submit */
  SS_ACT_USERS,     /* add, revoke, new token, priority range */
  SS_ACT_LIMITS,    /* per-person limits */
  SS_ACT_AUDIT,     /* read the audit trail */
  SS_ACT_USAGE_ALL, /* everyone's usage, not only one's own */
  SS_ACT_N
} ss_action;

/* NULL when role may do a on a thing it owns (owns: 1) or not (0; 0 for
 * actions on no one's thing), else why not, as a user reads it (a static
 * string). closed_reads: the scheduler runs with --closed-reads (reads
 * need a token). Values out of range are refused. */
const char *ss_perm_refusal(ss_role role, int owns, ss_action a, int closed_reads);

/* "admin", "member" or "viewer" as a role; SS_ROLE_NONE for anything else
 * (NULL included). */
ss_role ss_role_parse(const char *s);
/* The role's name ("none" for SS_ROLE_NONE and values out of range). */
const char *ss_role_name(ss_role r);
/* The action's name as the audit trail writes it ("submit", "cancel", ...). */
const char *ss_action_name(ss_action a);

#endif

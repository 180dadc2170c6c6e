/* The commands of a shared cluster's people (README, "A shared cluster"):
 * `user add|list|revoke|token|set`, `audit` and `priority`. They talk to
 * the scheduler's API (scheduler/users.c, audit.c) with the caller's
 * token; user changes and the audit need an admin's. A refusal (401, 403)
 * exits 1, a bad argument 2. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/err.h"

typedef struct uopts {
  const char *url, *state, *token_file;
  const char *role, *range, *since, *user, *limit;
  int json;
  const char *args[3];
  int nargs;
} uopts;

/* Reads the options into *o; returns only when they are good: after
 * printing usage (-h, --help: exit 0) or what is wrong (exit 2), exits, as
 * cmd_client.c's commands do. */
static void parse(int argc, char **argv, uopts *o, const char *usage) {
  memset(o, 0, sizeof *o);
  const cli_opt opts[] = {CLI_API_OPTS(o),
                          {"--role", &o->role, NULL},
                          {"--priority-range", &o->range, NULL},
                          {"--since", &o->since, NULL},
                          {"--user", &o->user, NULL},
                          {"--limit", &o->limit, NULL}};
  int rc = cli_args_read(argc, argv, argv[0], opts, sizeof opts / sizeof *opts, o->args, 3,
                         &o->nargs, usage);
  if (rc >= 0)
    exit(rc);
}

/* Sends the request (body, stolen, may be NULL) and prints the answer:
 * as it came with --json, else through print. The exit code. */
static int call(const uopts *o, const char *method, const char *path, json_t *body,
                void (*print)(json_t *j)) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  char *raw = NULL;
  int rc;
  json_t *j = cli_call(o->url, o->state, o->token_file, method, path, text, text ? strlen(text) : 0,
                       &rc, &raw);
  free(text);
  json_decref(body);
  if (j && o->json)
    printf("%s\n", raw);
  else if (j)
    print(j);
  free(raw);
  json_decref(j);
  return j ? 0 : rc;
}

static const char *str(json_t *j, const char *k) {
  const char *v = json_string_value(json_object_get(j, k));
  return v ? v : "-";
}

static long long num(json_t *j, const char *k) {
  return (long long)json_number_value(json_object_get(j, k));
}

static void print_users(json_t *list) {
  printf("%-5s %-20s %-7s %-17s %-7s %s\n", "ID", "NAME", "ROLE", "PRIORITY", "SWEEPS", "REVOKED");
  size_t i;
  json_t *u;
  json_array_foreach(list, i, u) {
    char range[40];
    snprintf(range, sizeof range, "%lld..%lld", num(u, "priority_min"), num(u, "priority_max"));
    printf("%-5lld %-20s %-7s %-17s %-7lld %s\n", num(u, "id"), str(u, "name"), str(u, "role"),
           range, num(u, "sweeps"), str(u, "revoked_at"));
  }
}

/* "MIN:MAX" into a request body, or NULL (said why) */
static json_t *range_body(const char *range) {
  long long lo, hi;
  char tail;
  if (!range || sscanf(range, "%lld:%lld%c", &lo, &hi, &tail) != 2 || lo > hi) {
    cli_usage_error("user", "set", "--priority-range '%s': expected MIN:MAX with MIN <= MAX",
                    range ? range : "");
    return NULL;
  }
  return json_pack("{s:I,s:I}", "min", (json_int_t)lo, "max", (json_int_t)hi);
}

/* a user as a change answered it; a new token alone on stdout */
static void print_user(json_t *j) {
  const char *token = json_string_value(json_object_get(j, "token"));
  if (token) /* printed once: only its hash is kept */
    printf("%s\n", token);
  fprintf(token ? stderr : stdout, "user %s: %s, priority %lld..%lld%s%s\n", str(j, "name"),
          str(j, "role"), num(j, "priority_min"), num(j, "priority_max"),
          json_is_true(json_object_get(j, "revoked")) ? ", revoked" : "",
          token ? " (the token above is shown only now)" : "");
}

static int user_change(const uopts *o, const char *sub) {
  char path[160];
  json_t *body = NULL;
  const char *name = o->args[1];
  if (!strcmp(sub, "add")) {
    if (o->role && strcmp(o->role, "admin") && strcmp(o->role, "member") &&
        strcmp(o->role, "viewer"))
      return cli_usage_error("user", sub, "--role '%s': expected admin, member or viewer", o->role);
    snprintf(path, sizeof path, "/api/users");
    body = json_pack("{s:s,s:s}", "name", name, "role", o->role ? o->role : "member");
  } else if (!strcmp(sub, "set")) {
    if (!(body = range_body(o->range)))
      return SS_EXIT_USAGE;
    snprintf(path, sizeof path, "/api/users/%.64s/priority", name);
  } else {
    snprintf(path, sizeof path, "/api/users/%.64s/%s", name, sub);
  }
  return call(o, "POST", path, body, print_user);
}

int cmd_user(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep user add NAME [--role admin|member|viewer]\n"
      "       scalesweep user list\n"
      "       scalesweep user revoke NAME\n"
      "       scalesweep user token NAME\n"
      "       scalesweep user set NAME --priority-range MIN:MAX\n"
      "  (each also [--json] [--url URL] [--state DIR] [--token-file F]; an admin's token)\n"
      "  add and token print a new token once (only its SHA-256 is stored); revoke\n"
      "  refuses the user's tokens at once, open event streams included\n";
  uopts o;
  parse(argc, argv, &o, usage);
  const char *sub = o.nargs ? o.args[0] : "";
  static const char *const subs[] = {"add", "list", "revoke", "token", "set"};
  int k = -1;
  for (int i = 0; i < 5; i++)
    if (!strcmp(sub, subs[i]))
      k = i;
  if (k < 0)
    return cli_usage_error("user", NULL, "expected add, list, revoke, token or set, found '%s'",
                           sub);
  if (o.nargs != (k == 1 ? 1 : 2))
    return cli_usage_error("user", sub, k == 1 ? "takes no NAME" : "expected one NAME");
  return k == 1 ? call(&o, "GET", "/api/users", NULL, print_users) : user_change(&o, sub);
}

static void print_audit(json_t *list) {
  printf("%-20s %-12s %-21s %-13s %-12s %-7s %s\n", "AT", "USER", "FROM", "ACTION", "TARGET",
         "OUTCOME", "DETAIL");
  size_t i;
  json_t *a;
  json_array_foreach(list, i, a) {
    printf("%-20.19s %-12s %-21s %-13s %-12s %-7s %s\n", str(a, "at"), str(a, "user"),
           str(a, "peer"), str(a, "action"), str(a, "target"), str(a, "outcome"), str(a, "detail"));
  }
}

int cmd_audit(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep audit [--since DATE] [--user NAME] [--limit N] [--json]\n"
      "                        [--url URL] [--state DIR] [--token-file F]\n"
      "  the audit trail, newest first (an admin's token): who changed or tried to change\n"
      "  what, when, from which address, and the outcome\n";
  uopts o;
  parse(argc, argv, &o, usage);
  if (o.nargs)
    return cli_usage_error("audit", NULL, "unexpected argument '%s'", o.args[0]);
  /* the values go in the query as they are, so only characters that need
   * no escaping: a date ("2026-12-01", "2026-12-01T10:00:00Z") or a name */
  static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:._-";
  if ((o.since && strspn(o.since, plain) != strlen(o.since)) ||
      (o.user && strspn(o.user, plain) != strlen(o.user)))
    return cli_usage_error("audit", NULL,
                           "--since and --user take letters, digits and ':', '.', '_', '-' "
                           "(a date such as 2026-12-01 or 2026-12-01T10:00:00Z; a user's name)");
  char path[512];
  int n = snprintf(path, sizeof path, "/api/audit?limit=%s", o.limit ? o.limit : "1000");
  if (o.since)
    n += snprintf(path + n, sizeof path - (size_t)n, "&since=%.100s", o.since);
  if (o.user)
    snprintf(path + n, sizeof path - (size_t)n, "&user=%.64s", o.user);
  return call(&o, "GET", path, NULL, print_audit);
}

static void print_priority(json_t *j) {
  printf("sweep %lld: priority %lld\n", num(j, "id"), num(j, "priority"));
}

int cmd_priority(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep priority SWEEP N [--json] [--url URL] [--state DIR] [--token-file F]\n"
      "  sets sweep SWEEP's priority (and its queued runs') to N: an admin any, a member\n"
      "  on their own sweeps within the range an admin allows them\n";
  uopts o;
  parse(argc, argv, &o, usage);
  char *end1, *end2;
  long long id = o.nargs == 2 ? strtoll(o.args[0], &end1, 10) : 0;
  long long prio = o.nargs == 2 ? strtoll(o.args[1], &end2, 10) : 0;
  if (o.nargs != 2 || id <= 0 || *end1 || *end2 || !*o.args[1])
    return cli_usage_error("priority", NULL, "expected SWEEP (a positive id) and N (an integer)");
  char path[64];
  snprintf(path, sizeof path, "/api/sweeps/%lld/priority", id);
  return call(&o, "POST", path, json_pack("{s:I}", "priority", (json_int_t)prio), print_priority);
}

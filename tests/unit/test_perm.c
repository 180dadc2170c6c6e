/* common/perm.c: the permission rules against a plain table of them (the
 * README's "A shared cluster"), over random (role, owner, action) triples,
 * values out of range included, and the properties the table implies: a
 * higher role may do all a lower one may; owning a thing never takes a
 * right away; every refusal says why. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "common/perm.h"

/* The rules as the README states them, one cell per (role, action):
 * Y allowed, O allowed on one's own sweeps only, N refused, R allowed
 * unless reads are closed. Columns in ss_action's order: read, submit,
 * cancel, priority, next, reproduce, users, limits, audit, usage_all. */
static const char *const table[4] = {
    /* none   */ "RNNNNNNNNN",
    /* viewer */ "YNNNNNNNNN",
    /* member */ "YYOOOYNNNN",
    /* admin  */ "YYYYYYYYYY",
};

static int allowed(int role, int owns, int action, int closed) {
  if (role < 0 || role > 3 || action < 0 || action >= SS_ACT_N)
    return 0;
  char c = table[role][action];
  return c == 'Y' || (c == 'O' && owns) || (c == 'R' && !closed);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void test_random_triples(void) {
  int refused = 0, granted = 0;
  for (int i = 0; i < 200000; i++) {
    int role = (int)(next_u32() % 7) - 1;                /* -1..5: two out of range each side */
    int action = (int)(next_u32() % (SS_ACT_N + 3)) - 1; /* -1..SS_ACT_N+1 */
    int owns = (int)(next_u32() % 2), closed = (int)(next_u32() % 2);
    const char *why = ss_perm_refusal((ss_role)role, owns, (ss_action)action, closed);
    int want = allowed(role, owns, action, closed);
    if ((why == NULL) != want || (why && strlen(why) < 10)) { /* the first mismatch */
      fprintf(stderr, "role %d owns %d action %d closed %d: got %s, table says %s\n", role, owns,
              action, closed, why ? why : "allowed", want ? "allowed" : "refused");
      CHECK(0);
      return;
    }
    want ? granted++ : refused++;
  }
  CHECK(granted > 10000 && refused > 10000); /* both sides were drawn */
}

static void test_properties(void) {
  for (int a = 0; a < SS_ACT_N; a++)
    for (int closed = 0; closed < 2; closed++)
      for (int r = SS_ROLE_NONE; r <= SS_ROLE_ADMIN; r++)
        for (int owns = 0; owns < 2; owns++) {
          int ok = !ss_perm_refusal((ss_role)r, owns, (ss_action)a, closed);
          if (ok && r < SS_ROLE_ADMIN) /* the role above may too */
            CHECK(!ss_perm_refusal((ss_role)(r + 1), owns, (ss_action)a, closed));
          if (ok && !owns) /* owning takes nothing away */
            CHECK(!ss_perm_refusal((ss_role)r, 1, (ss_action)a, closed));
          if (ok && closed) /* closing reads takes, never gives */
            CHECK(!ss_perm_refusal((ss_role)r, owns, (ss_action)a, 0));
        }
}

static void test_names(void) {
  for (int r = SS_ROLE_VIEWER; r <= SS_ROLE_ADMIN; r++)
    CHECK_INT_EQ(ss_role_parse(ss_role_name((ss_role)r)), r);
  CHECK_INT_EQ(ss_role_parse("root"), SS_ROLE_NONE);
  CHECK_INT_EQ(ss_role_parse("none"), SS_ROLE_NONE);
  CHECK_INT_EQ(ss_role_parse(NULL), SS_ROLE_NONE);
  CHECK_INT_EQ(ss_role_parse("Admin"), SS_ROLE_NONE);
  CHECK(!strcmp(ss_action_name(SS_ACT_CANCEL), "cancel"));
  CHECK(!strcmp(ss_action_name(SS_ACT_N), "unknown"));
}

int main(void) {
  test_random_triples();
  test_properties();
  test_names();
  CHECK_DONE();
}

/* What the spec tests share (test_spec.c, test_lr_tune.c): a spec text
 * parsed expecting problems, or expecting none, and a problem looked up. Static, after check.h:
 * the checks count against the including test's failures. */
#ifndef SS_TESTS_SPEC_CHECK_H
#define SS_TESTS_SPEC_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "sweeps/spec.h"

/* Parses text (named t.json) expecting failure; the problems (caller frees). */
static inline spec_problems bad(const char *text) {
  spec_problems pr = {0};
  spec *s = NULL;
  int rc = spec_parse(text, "t.json", &s, &pr);
  CHECK(rc == SS_EINVAL);
  CHECK(s == NULL);
  CHECK(pr.n > 0);
  spec_free(s);
  return pr;
}

/* Parses text (named t.json) expecting no problem, printing any; the spec. */
static inline spec *good(const char *text) {
  spec_problems pr = {0};
  spec *s = NULL;
  int rc = spec_parse(text, "t.json", &s, &pr);
  if (rc) {
    char *m = spec_problems_format(&pr, "t.json");
    fprintf(stderr, "unexpected problems:\n%s\n", m);
    free(m);
  }
  CHECK(rc == 0);
  CHECK(s != NULL);
  spec_problems_free(&pr);
  return s;
}

/* The problem at path exists and its message holds both needles. */
static inline int has(const spec_problems *pr, const char *path, const char *needle1,
                      const char *needle2) {
  for (size_t i = 0; i < pr->n; i++) {
    if (strcmp(pr->items[i].path, path))
      continue;
    const char *m = pr->items[i].message;
    if ((!needle1 || strstr(m, needle1)) && (!needle2 || strstr(m, needle2)))
      return 1;
    fprintf(stderr, "  %s: message lacks '%s'/'%s': %s\n", path, needle1 ? needle1 : "",
            needle2 ? needle2 : "", m);
    return 0;
  }
  fprintf(stderr, "  no problem at %s; problems:\n", path);
  for (size_t j = 0; j < pr->n; j++)
    fprintf(stderr, "    %s: %s\n", pr->items[j].path, pr->items[j].message);
  return 0;
}

#endif

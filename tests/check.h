/* A minimal assertion layer for scalesweep's C tests. Each test is one
 * program run by ctest; a failed CHECK prints file:line and the values and
 * marks the program failed; exit code 77 means skipped (ctest SKIP_RETURN_CODE). */
#ifndef SS_TESTS_CHECK_H
#define SS_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check__failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check__failures++;                                                       \
    }                                                                          \
  } while (0)

#define CHECK_INT_EQ(a, b)                                                                  \
  do {                                                                                      \
    long long check__a = (long long)(a), check__b = (long long)(b);                         \
    if (check__a != check__b) {                                                             \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b, \
              check__a, check__b);                                                          \
      check__failures++;                                                                    \
    }                                                                                       \
  } while (0)

/* |a - b| <= tol + rtol * |b| */
#define CHECK_NEAR(a, b, tol, rtol)                                                        \
  do {                                                                                     \
    double check__a = (double)(a), check__b = (double)(b);                                 \
    if (!(fabs(check__a - check__b) <= (tol) + (rtol)*fabs(check__b))) {                   \
      fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g vs %.9g (tol %g, rtol %g)\n", __FILE__, \
              __LINE__, #a, #b, check__a, check__b, (double)(tol), (double)(rtol));        \
      check__failures++;                                                                   \
    }                                                                                      \
  } while (0)

#define CHECK_DONE()                                            \
  do {                                                          \
    if (check__failures) {                                      \
      fprintf(stderr, "%d check(s) failed\n", check__failures); \
      return 1;                                                 \
    }                                                           \
    printf("all checks passed\n");                              \
    return 0;                                                   \
  } while (0)

#define SKIP(reason)                 \
  do {                               \
    printf("skipped: %s\n", reason); \
    return 77;                       \
  } while (0)

/* A fresh directory $TMPDIR/<name>.XXXXXX ($TMPDIR unset: /tmp) written
 * into buf (size n); 0, or -1 after saying why on stderr. A test's main
 * makes its scratch directory with this before any test runs. */
static inline int check_tmpdir(char *buf, size_t n, const char *name) {
  const char *base = getenv("TMPDIR");
  if (snprintf(buf, n, "%s/%s.XXXXXX", base ? base : "/tmp", name) >= (int)n) {
    fprintf(stderr, "check_tmpdir: path for %s too long\n", name);
    return -1;
  }
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    return -1;
  }
  return 0;
}

/* dir/name, in the next of 8 static buffers taken in turn, so that one call
 * may be given several such paths (a symlink's target and its name). */
static inline const char *check_path(const char *dir, const char *name) {
  static char buf[8][4400];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

#endif

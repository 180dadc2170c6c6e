/* How validation time grows with a hostile spec (issue 14, hole 2): a list
 * of repeated values, a spec of unknown keys, deep nesting. Each input is
 * validated at sizes n, 2n, 4n and 8n; the test prints the times and
 * checks that the 8x input costs at most LIMIT_FACTOR times what an
 * n log n algorithm would (8 log(8n) / log n). Pairwise duplicate
 * reports with a scan of the problem list per report (the old code) grow
 * as n^4 for one repeated value (4096x) and n^2 for unknown keys (64x).
 *
 * Each kind runs at two scales: a small one at which the old code still
 * finishes (in seconds), so that it fails here rather than hanging, then,
 * only when the small one passed, a large one where constant costs cannot
 * hide a superlinear term. Times are CPU times of this thread, medians of
 * 5 rounds over the sizes, each measurement repeating the call for at
 * least 30 ms: ratios of stable figures, never absolute bounds.
 *
 * Also: the cap on the problems shown (SPEC_PROBLEMS_LISTED), and one
 * problem for a value repeated thousands of times or for thousands of
 * identical planned runs. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "common/err.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

/* Margin over n log n growth, for the cache misses of an 8x larger working
 * set (measured: up to 11x for 8x the unknown keys, 12x under ASan) and
 * what is left of a shared machine's noise in CPU time; quadratic growth
 * (64x; 48 to 63x measured with the old code, whose constant costs weigh
 * at the small sizes) stays well above it: 8 log(8n)/log(n) * 2.5 is 24 to
 * 31 at the sizes below. */
#define LIMIT_FACTOR 2.5

/* ---- growing text -------------------------------------------------------- */

typedef struct buf {
  char *s;
  size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int w = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (b->s && (size_t)w < b->cap - b->len) {
      b->len += (size_t)w;
      return;
    }
    b->cap = b->cap ? 2 * b->cap + (size_t)w : 4096 + (size_t)w;
    b->s = realloc(b->s, b->cap);
    if (!b->s) {
      fprintf(stderr, "out of memory\n");
      exit(1);
    }
  }
}

static const char HEAD[] = "{\"name\": \"hostile\", \"method\": \"grid\", \"base\": {\"model\": "
                           "{\"seq_len\": 16}}, ";

/* $.grid.tokens: n values, each of them `copies` times in a row */
static char *repeated_values(size_t n, size_t copies) {
  buf b = {0};
  put(&b, "%s\"grid\": {\"params\": [1e4], \"tokens\": [", HEAD);
  for (size_t i = 0; i < n; i++)
    put(&b, "%s%zu", i ? ", " : "", 1000000 + i / copies);
  put(&b, "]}}");
  return b.s;
}

static char *one_value(size_t n) { return repeated_values(n, n); }
static char *fours(size_t n) { return repeated_values(n, 4); }

/* n unknown top-level keys */
static char *unknown_keys(size_t n) {
  buf b = {0};
  put(&b, "%s\"grid\": {\"params\": [1e4], \"tokens\": [1e6]}", HEAD);
  for (size_t i = 0; i < n; i++)
    put(&b, ", \"k%zu\": %zu", i, i);
  put(&b, "}");
  return b.s;
}

/* $.priority: n nested lists (Jansson refuses more than 2048 levels) */
static char *nested(size_t n) {
  buf b = {0};
  put(&b, "%s\"grid\": {\"params\": [1e4], \"tokens\": [1e6]}, \"priority\": ", HEAD);
  for (size_t i = 0; i < n; i++)
    put(&b, "[");
  for (size_t i = 0; i < n; i++)
    put(&b, "]");
  put(&b, "}");
  return b.s;
}

/* ---- timing -------------------------------------------------------------- */

/* This thread's CPU time: other processes on a shared machine slow the
 * wall clock down, not this (only through caches). */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Validates text once; the number of problems. */
static size_t validate(const char *text) {
  spec_problems pr = {0};
  spec *s = NULL;
  if (spec_parse(text, "hostile.json", &s, &pr) == 0) {
    plan *p = NULL;
    plan_spec(s, &p, &pr);
    plan_free(p);
  }
  size_t n = pr.n;
  spec_free(s);
  spec_problems_free(&pr);
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The mean time of one validation over calls repeated for at least 30 ms. */
static double time_validate(const char *text, size_t *problems) {
  int calls = 0;
  double t0 = now_s(), el;
  do {
    *problems = validate(text);
    calls++;
    el = now_s() - t0;
  } while (el < 0.03);
  return el / calls;
}

#define ROUNDS 5

/* Times make(n0), make(2 n0), make(4 n0), make(8 n0), each the median of
 * ROUNDS rounds that time every size once (so that a slower spell of the
 * machine falls on all sizes alike); checks the growth from n0 to 8 n0
 * against LIMIT_FACTOR x the n log n growth. Returns 1 when it was
 * within. */
static int growth(const char *what, char *(*make)(size_t), size_t n0) {
  double t[4], r[4][ROUNDS];
  size_t probs[4];
  char *text[4];
  for (int i = 0; i < 4; i++)
    text[i] = make(n0 << i);
  for (int k = 0; k < ROUNDS; k++)
    for (int i = 0; i < 4; i++)
      r[i][k] = time_validate(text[i], &probs[i]);
  printf("%s:\n", what);
  for (int i = 0; i < 4; i++) {
    qsort(r[i], ROUNDS, sizeof r[i][0], cmp_double);
    t[i] = r[i][ROUNDS / 2];
    printf("  n = %6zu (%8zu bytes): %10.3f ms, %zu problem(s)\n", n0 << i, strlen(text[i]),
           1e3 * t[i], probs[i]);
    free(text[i]);
  }
  double nlogn = 8.0 * log((double)(8 * n0)) / log((double)n0);
  double limit = LIMIT_FACTOR * nlogn, ratio = t[3] / t[0];
  printf("  8x input: %.2fx the time (n log n: %.1fx; limit %.1fx; quadratic: 64x, quartic: "
         "4096x)\n",
         ratio, nlogn, limit);
  int ok = ratio < limit;
  if (!ok)
    fprintf(stderr, "%s: the 8x input took %.1fx the time, above %.1fx: superlinear validation\n",
            what, ratio, limit);
  CHECK(ok);
  return ok;
}

/* ---- what the problems say ------------------------------------------------ */

static void test_one_report_per_value(void) {
  char *text = repeated_values(3000, 3000);
  spec_problems pr = {0};
  spec *s = NULL;
  CHECK(spec_parse(text, "t.json", &s, &pr) == SS_EINVAL);
  CHECK_INT_EQ(pr.n, 1);
  CHECK(pr.n && !strcmp(pr.items[0].path, "$.grid.tokens[1]"));
  CHECK(pr.n && strstr(pr.items[0].message, "found 1000000 again (also at [0])"));
  CHECK(pr.n && strstr(pr.items[0].message, "3000 copies in all, at [0], [1], [2], [3], [4] and "
                                            "2995 more"));
  if (pr.n)
    printf("a value 3000 times: %s: %s\n", pr.items[0].path, pr.items[0].message);
  spec_problems_free(&pr);
  free(text);

  /* [a, b, a, c, b, b]: a at 2, b at 4 (3 copies), in list order; c alone */
  pr = (spec_problems){0};
  CHECK(spec_parse("{\"name\": \"r\", \"method\": \"grid\", \"grid\": {\"params\": [1e4], "
                   "\"tokens\": [1e6, 2e6, 1e6, 3e6, 2e6, 2e6]}}",
                   "t.json", &s, &pr) == SS_EINVAL);
  CHECK_INT_EQ(pr.n, 2);
  CHECK(pr.n == 2 && !strcmp(pr.items[0].path, "$.grid.tokens[2]") &&
        strstr(pr.items[0].message, "again (also at [0]); expected distinct"));
  CHECK(pr.n == 2 && !strcmp(pr.items[1].path, "$.grid.tokens[4]") &&
        strstr(pr.items[1].message, "again (also at [1]); 3 copies in all, at [1], [4], [5];"));
  spec_problems_free(&pr);

  /* an invalid element is reported as such, never as a repeat of 0 */
  pr = (spec_problems){0};
  CHECK(spec_parse("{\"name\": \"r\", \"method\": \"grid\", \"grid\": {\"params\": [1e4], "
                   "\"tokens\": [1e6], \"seeds\": [\"x\", 0]}}",
                   "t.json", &s, &pr) == SS_EINVAL);
  CHECK_INT_EQ(pr.n, 1);
  CHECK(pr.n == 1 && !strcmp(pr.items[0].path, "$.grid.seeds[0]"));
  spec_problems_free(&pr);
}

static void test_cap(void) {
  char *text = unknown_keys(40000);
  spec_problems pr = {0};
  spec *s = NULL;
  CHECK(spec_parse(text, "t.json", &s, &pr) == SS_EINVAL);
  CHECK_INT_EQ(pr.n, 40000);
  char sum[128];
  spec_problems_summary(&pr, sum, sizeof sum);
  CHECK(!strcmp(sum, "40000 problem(s), the first 50 listed"));
  json_t *j = spec_problems_to_json(&pr);
  CHECK_INT_EQ(json_array_size(j), SPEC_PROBLEMS_LISTED);
  json_decref(j);
  char *m = spec_problems_format(&pr, "t.json");
  size_t lines = 1;
  for (const char *c = m; c && *c; c++)
    lines += *c == '\n';
  CHECK_INT_EQ(lines, SPEC_PROBLEMS_LISTED + 1);
  CHECK(m && strstr(m, "t.json: $.k0: unknown key"));
  CHECK(m && strstr(m, "\nt.json: ... and 39950 more problem(s) not listed"));
  free(m);
  /* under the cap: everything, no tail line */
  spec_problems few = {0};
  spec_problem_add(&few, "$.a", "one");
  spec_problem_add(&few, "$.a", "one"); /* an exact repeat is dropped */
  spec_problem_add(&few, "$.a", "two");
  CHECK_INT_EQ(few.n, 2);
  spec_problems_summary(&few, sum, sizeof sum);
  CHECK(!strcmp(sum, "2 problem(s)"));
  m = spec_problems_format(&few, "f.json");
  CHECK(m && !strcmp(m, "f.json: $.a: one\nf.json: $.a: two"));
  free(m);
  spec_problems_free(&few);
  spec_problems_free(&pr);
  free(text);
}

/* 2000 identical runs: one problem naming the first two and counting the
 * rest (it was 1999 pairwise problems) */
static void test_identical_runs(void) {
  buf b = {0};
  put(&b, "{\"name\": \"same\", \"method\": \"runs\", \"base\": {\"model\": {\"n_layer\": 1, "
          "\"d_model\": 16, \"n_head\": 2, \"seq_len\": 16}, \"train\": {\"batch_size\": 4, "
          "\"lr\": 0.001, \"tokens\": 4096}}, \"runs\": [");
  for (int i = 0; i < 2000; i++)
    put(&b, "%s{}", i ? ", " : "");
  put(&b, "]}");
  spec_problems pr = {0};
  spec *s = NULL;
  plan *p = NULL;
  CHECK(spec_parse(b.s, "t.json", &s, &pr) == 0);
  CHECK(s && plan_spec(s, &p, &pr) == SS_EINVAL);
  CHECK_INT_EQ(pr.n, 1);
  CHECK(pr.n && strstr(pr.items[0].message, "planned runs 0 and 1 are identical, as are runs 2, 3, "
                                            "4, 5, 6 and 1993 more (2000 copies)"));
  if (pr.n)
    printf("2000 identical runs: %s: %.140s...\n", pr.items[0].path, pr.items[0].message);
  plan_free(p);
  spec_free(s);
  spec_problems_free(&pr);
  free(b.s);
}

int main(void) {
  test_one_report_per_value();
  test_cap();
  test_identical_runs();
  /* the small scales: the old code took seconds at their top sizes */
  int ok = growth("one value repeated n times ($.grid.tokens)", one_value, 40);
  ok &= growth("n/4 values 4 times each ($.grid.tokens)", fours, 500);
  ok &= growth("n unknown keys", unknown_keys, 2000);
  ok &= growth("n nested lists ($.priority)", nested, 250);
  if (ok) {
    growth("one value repeated n times ($.grid.tokens), large", one_value, 4000);
    growth("n/4 values 4 times each ($.grid.tokens), large", fours, 4000);
    growth("n unknown keys, large", unknown_keys, 12500);
  }
  CHECK_DONE();
}

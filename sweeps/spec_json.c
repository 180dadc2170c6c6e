/* Sweep specs: the problem list, the JSON field readers every section of
 * a spec is parsed with, spec_walk, and the mapping of run config problems
 * onto spec paths. */
#include "sweeps/spec_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "runcfg/runcfg.h"
#include "sweeps/internal.h"

/* ---- problems --------------------------------------------------------- */

char *spec__dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

/* FNV-1a over path, a NUL, message */
static uint64_t problem_hash(const char *path, const char *msg) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = path;; c++) {
    h = (h ^ (unsigned char)*c) * 1099511628211ull;
    if (!*c)
      break;
  }
  for (const char *c = msg; *c; c++)
    h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

struct spec__problem_slot {
  uint64_t hash;
  size_t item; /* index + 1; 0: empty */
};

/* Puts item (index + 1) with hash into a set known to have room. */
static void set_put(struct spec__problem_slot *set, size_t cap, uint64_t hash, size_t item) {
  size_t i = (size_t)hash & (cap - 1);
  while (set[i].item)
    i = (i + 1) & (cap - 1);
  set[i] = (struct spec__problem_slot){hash, item};
}

/* Keeps the set at most half full (capacity a power of two). */
static int set_grow(spec_problems *pr) {
  if (2 * (pr->n + 1) <= pr->set_cap)
    return 0;
  size_t cap = pr->set_cap ? 2 * pr->set_cap : 64;
  struct spec__problem_slot *set = calloc(cap, sizeof *set);
  if (!set)
    return -1;
  for (size_t i = 0; i < pr->set_cap; i++)
    if (pr->set[i].item)
      set_put(set, cap, pr->set[i].hash, pr->set[i].item);
  free(pr->set);
  pr->set = set;
  pr->set_cap = cap;
  return 0;
}

static int listed(const spec_problems *pr, uint64_t hash, const char *path, const char *msg) {
  if (!pr->set_cap)
    return 0;
  for (size_t i = (size_t)hash & (pr->set_cap - 1); pr->set[i].item;
       i = (i + 1) & (pr->set_cap - 1)) {
    const spec_problem *p = &pr->items[pr->set[i].item - 1];
    if (pr->set[i].hash == hash && !strcmp(p->path, path) && !strcmp(p->message, msg))
      return 1;
  }
  return 0;
}

void spec_problem_add(spec_problems *pr, const char *path, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  uint64_t hash = problem_hash(path, msg);
  if (listed(pr, hash, path, msg) || set_grow(pr))
    return;
  if (pr->n == pr->cap) {
    size_t cap = pr->cap ? 2 * pr->cap : 16;
    spec_problem *it = realloc(pr->items, cap * sizeof *it);
    if (!it)
      return;
    pr->items = it;
    pr->cap = cap;
  }
  char *p = spec__dupstr(path), *m = spec__dupstr(msg);
  if (!p || !m) {
    free(p);
    free(m);
    return;
  }
  pr->items[pr->n].path = p;
  pr->items[pr->n].message = m;
  pr->n++;
  set_put(pr->set, pr->set_cap, hash, pr->n);
}

void spec_problems_free(spec_problems *pr) {
  for (size_t i = 0; i < pr->n; i++) {
    free(pr->items[i].path);
    free(pr->items[i].message);
  }
  free(pr->items);
  free(pr->set);
  memset(pr, 0, sizeof *pr);
}

static size_t shown(const spec_problems *pr) {
  return pr->n < SPEC_PROBLEMS_LISTED ? pr->n : SPEC_PROBLEMS_LISTED;
}

char *spec_problems_format(const spec_problems *pr, const char *name) {
  size_t k = shown(pr), len = strlen(name) + 80;
  for (size_t i = 0; i < k; i++)
    len += strlen(name) + strlen(pr->items[i].path) + strlen(pr->items[i].message) + 8;
  char *out = malloc(len);
  if (!out)
    return NULL;
  size_t at = 0;
  out[0] = 0;
  for (size_t i = 0; i < k; i++) {
    const spec_problem *p = &pr->items[i];
    /* a malformed-JSON problem already carries FILE:line:column */
    if (p->path[0] == '$')
      at += (size_t)snprintf(out + at, len - at, "%s%s: %s: %s", i ? "\n" : "", name, p->path,
                             p->message);
    else
      at += (size_t)snprintf(out + at, len - at, "%s%s: %s", i ? "\n" : "", p->path, p->message);
  }
  if (pr->n > k)
    snprintf(out + at, len - at, "\n%s: ... and %zu more problem(s) not listed", name, pr->n - k);
  return out;
}

void spec_problems_summary(const spec_problems *pr, char *out, size_t n) {
  if (pr->n > SPEC_PROBLEMS_LISTED)
    snprintf(out, n, "%zu problem(s), the first %d listed", pr->n, SPEC_PROBLEMS_LISTED);
  else
    snprintf(out, n, "%zu problem(s)", pr->n);
}

json_t *spec_problems_to_json(const spec_problems *pr) {
  json_t *a = json_array();
  for (size_t i = 0; i < shown(pr); i++)
    json_array_append_new(
        a, json_pack("{s:s, s:s}", "path", pr->items[i].path, "message", pr->items[i].message));
  return a;
}

char *spec_problems_answer(const spec_problems *pr, const char *lead) {
  char sum[96], msg[160];
  spec_problems_summary(pr, sum, sizeof sum);
  snprintf(msg, sizeof msg, "%s: %s", lead, sum);
  json_t *e = json_pack("{s:{s:s,s:s?,s:o,s:I}}", "error", "message", msg, "path",
                        pr->n ? pr->items[0].path : NULL, "problems", spec_problems_to_json(pr),
                        "problems_total", (json_int_t)pr->n);
  char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
  json_decref(e);
  return text;
}

/* ---- JSON helpers ----------------------------------------------------- */

const char *spec__type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "a list";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  default:
    return "null";
  }
}

/* The value as compact JSON, cut at 48 characters, for "found ..." */
void spec__found(const json_t *v, char *out, size_t n) {
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
  if (!s) {
    snprintf(out, n, "?");
    return;
  }
  if (strlen(s) > 48)
    snprintf(out, n, "%.45s...", s);
  else
    snprintf(out, n, "%s", s);
  free(s);
}

static void join(char *out, size_t n, const char *a, const char *b) {
  snprintf(out, n, "%s.%s", a, b);
}

/* Flags keys of obj not in the NULL-terminated list allowed. */
void spec__check_keys(spec_problems *pr, const json_t *obj, const char *path,
                      const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      ok |= !strcmp(key, *a);
    if (ok)
      continue;
    char list[512] = "";
    for (const char *const *a = allowed; *a; a++) {
      strncat(list, *a, sizeof list - strlen(list) - 1);
      if (a[1])
        strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    char full[160];
    join(full, sizeof full, path, key);
    spec_problem_add(pr, full, "unknown key; expected one of: %s", list);
  }
}

/* obj[key] as an object: NULL when absent (a problem when required) or not
 * an object (a problem). */
/* obj[key] with its path in full; NULL when absent (a problem when
 * required: "missing; expected what") */
static json_t *lookup(spec_problems *pr, const json_t *obj, const char *path, const char *key,
                      int required, const char *what, char full[160]) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  join(full, 160, path, key);
  if (!v && required)
    spec_problem_add(pr, full, "missing; expected %s", what);
  return v;
}

json_t *spec__get_object(spec_problems *pr, json_t *obj, const char *path, const char *key,
                         int required, const char *what) {
  char full[160];
  json_t *v = lookup(pr, obj, path, key, required, what, full);
  if (!v)
    return NULL;
  if (!json_is_object(v)) {
    char f[64];
    spec__found(v, f, sizeof f);
    spec_problem_add(pr, full, "found %s %s, expected %s", spec__type_name(v), f, what);
    return NULL;
  }
  return v;
}

/* A number in [lo, hi] (integer when integer). Returns 1 when set. */
int spec__get_number(spec_problems *pr, const json_t *obj, const char *path, const char *key,
                     double *out, double lo, double hi, int integer, int required,
                     const char *allowed) {
  char full[160];
  json_t *v = lookup(pr, obj, path, key, required, allowed, full);
  if (!v)
    return 0;
  char f[64];
  spec__found(v, f, sizeof f);
  if (!json_is_number(v)) {
    spec_problem_add(pr, full, "found %s %s, expected %s", spec__type_name(v), f, allowed);
    return 0;
  }
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi) || (integer && x != floor(x))) {
    spec_problem_add(pr, full, "found %s, expected %s", f, allowed);
    return 0;
  }
  *out = x;
  return 1;
}

int spec__get_int(spec_problems *pr, const json_t *obj, const char *path, const char *key, int *out,
                  int lo, int hi, int required) {
  char allowed[96];
  snprintf(allowed, sizeof allowed, "an integer from %d to %d", lo, hi);
  double x;
  if (!spec__get_number(pr, obj, path, key, &x, lo, hi, 1, required, allowed))
    return 0;
  *out = (int)x;
  return 1;
}

/* A string; with choices, one of them. Returns the borrowed string or NULL. */
const char *spec__get_string(spec_problems *pr, const json_t *obj, const char *path,
                             const char *key, const char *const *choices, int required,
                             const char *what) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  char full[160], allowed[256] = "";
  join(full, sizeof full, path, key);
  for (const char *const *c = choices; c && *c; c++) {
    if (*allowed)
      strncat(allowed, ", ", sizeof allowed - strlen(allowed) - 1);
    strncat(allowed, "\"", sizeof allowed - strlen(allowed) - 1);
    strncat(allowed, *c, sizeof allowed - strlen(allowed) - 1);
    strncat(allowed, "\"", sizeof allowed - strlen(allowed) - 1);
  }
  if (!v) {
    if (required)
      spec_problem_add(pr, full, "missing; expected %s%s%s", what, choices ? ": one of " : "",
                       allowed);
    return NULL;
  }
  if (!json_is_string(v)) {
    char f[64];
    spec__found(v, f, sizeof f);
    spec_problem_add(pr, full, "found %s %s, expected %s%s%s", spec__type_name(v), f, what,
                     choices ? ": one of " : "", allowed);
    return NULL;
  }
  const char *s = json_string_value(v);
  if (!choices)
    return s;
  for (const char *const *c = choices; *c; c++)
    if (!strcmp(*c, s))
      return s;
  char f[64];
  spec__found(v, f, sizeof f);
  spec_problem_add(pr, full, "found %s, expected one of %s", f, allowed);
  return NULL;
}

/* ---- walking ----------------------------------------------------------- */

void spec_walk(json_t *v, const char *path, spec_visit_fn visit, void *ud) {
  char sub[512];
  if (json_is_array(v)) {
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      snprintf(sub, sizeof sub, "%s[%zu]", path, i);
      spec_walk(e, sub, visit, ud);
    }
    return;
  }
  if (!json_is_object(v))
    return;
  const char *key;
  json_t *e;
  json_object_foreach(v, key, e) {
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    visit(ud, sub, key, e);
    spec_walk(e, sub, visit, ud);
  }
}

/* ---- values ----------------------------------------------------------- */

void spec_values_path(const spec_values *v, size_t i, char *out, size_t n) {
  if (v->range)
    snprintf(out, n, "%s (point %zu of %zu)", v->path, i + 1, v->n);
  else if (v->scalar)
    snprintf(out, n, "%s", v->path);
  else
    snprintf(out, n, "%s[%zu]", v->path, i);
}

static void describe(const spec__kind *k, char *out, size_t n) {
  if (k->integer)
    snprintf(out, n, "%s: an integer from %.17g to %.17g", k->what, k->lo, k->hi);
  else
    snprintf(out, n, "%s: a number from %.6g to %.6g", k->what, k->lo, k->hi);
}

/* A value listed more than once: where it is first, its copies, in list
 * order, at at[from..from + copies). */
typedef struct repeat {
  size_t first, second, from, copies;
} repeat;

static int cmp_repeat(const void *a, const void *b) {
  const repeat *p = a, *q = b;
  return (p->second > q->second) - (p->second < q->second);
}

/* Later positions named in a repeat's message; the rest are counted. */
#define REPEATS_NAMED 5

/* Reports each value the list (JSON array list, its valid numbers in
 * out->v) holds more than once, once: at its second position, naming the
 * first, the number of copies and a few of their positions (ok[i]: element
 * i is a valid number; the others are reported already). Sorting
 * (value, position) pairs keeps this O(n log n): a list of 300 copies of
 * one value would otherwise give 45,000 pairwise reports. Returns 1 when
 * there was one. */
static int report_repeats(spec_problems *pr, const json_t *list, const unsigned char *ok,
                          spec_values *out) {
  size_t n = out->n, m = 0, nrep = 0;
  sweeps__ranked *at = malloc(n * sizeof *at);
  repeat *reps = malloc(n * sizeof *reps);
  if (!at || !reps) {
    free(at);
    free(reps);
    spec_problem_add(pr, out->path, "out of memory checking for repeated values");
    return 1;
  }
  for (size_t i = 0; i < n; i++)
    if (ok[i])
      at[m++] = (sweeps__ranked){out->v[i], i};
  qsort(at, m, sizeof *at, sweeps__by_rank);
  for (size_t g = 0, e; g < m; g = e) {
    for (e = g + 1; e < m && at[e].x == at[g].x;)
      e++;
    if (e - g > 1)
      reps[nrep++] = (repeat){at[g].i, at[g + 1].i, g, e - g};
  }
  qsort(reps, nrep, sizeof *reps, cmp_repeat);
  for (size_t r = 0; r < nrep; r++) {
    const repeat *p = &reps[r];
    char ep[192], f[64], copies[160] = "";
    spec_values_path(out, p->second, ep, sizeof ep);
    spec__found(json_array_get(list, p->second), f, sizeof f);
    if (p->copies > 2) {
      size_t w = (size_t)snprintf(copies, sizeof copies, "; %zu copies in all, at", p->copies);
      size_t named = p->copies < REPEATS_NAMED ? p->copies : REPEATS_NAMED;
      for (size_t c = 0; c < named && w < sizeof copies; c++)
        w += (size_t)snprintf(copies + w, sizeof copies - w, "%s [%zu]", c ? "," : "",
                              at[p->from + c].i);
      if (p->copies > named && w < sizeof copies)
        snprintf(copies + w, sizeof copies - w, " and %zu more", p->copies - named);
    }
    spec_problem_add(pr, ep, "found %s again (also at [%zu])%s; expected distinct values", f,
                     p->first, copies);
  }
  free(at);
  free(reps);
  return nrep > 0;
}

/* The values of v, a number or a non-empty list of numbers, into out; each
 * element outside k, and each value listed twice, a problem. 0 when all are
 * valid, 1 when some are not, -1 when v gives no values (the problem said). */
static int values_list(spec_problems *pr, const json_t *v, const spec__kind *k, const char *allowed,
                       spec_values *out) {
  size_t n = json_is_array(v) ? json_array_size(v) : 1;
  if (json_is_array(v) && n == 0) {
    spec_problem_add(pr, out->path, "found an empty list, expected %s (at least %d)", allowed,
                     k->min_count);
    return -1;
  }
  out->v = calloc(n, sizeof *out->v);
  unsigned char *ok = calloc(n, 1);
  if (!out->v || !ok) {
    free(ok);
    free(out->v);
    out->v = NULL;
    return -1;
  }
  out->n = n;
  out->scalar = !json_is_array(v);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
    char ep[192], f[64];
    if (!json_is_number(e)) {
      spec_values_path(out, i, ep, sizeof ep);
      spec__found(e, f, sizeof f);
      spec_problem_add(pr, ep, "found %s %s, expected %s", spec__type_name(e), f, allowed);
      bad = 1;
      continue;
    }
    double x = json_number_value(e);
    if (!(x >= k->lo && x <= k->hi) || (k->integer && x != floor(x))) {
      spec_values_path(out, i, ep, sizeof ep);
      spec__found(e, f, sizeof f);
      spec_problem_add(pr, ep, "found %s, expected %s", f, allowed);
      bad = 1;
      continue;
    }
    out->v[i] = x;
    ok[i] = 1;
  }
  if (json_is_array(v) && n > 1)
    bad |= report_repeats(pr, v, ok, out);
  free(ok);
  return bad;
}

/* The n log-spaced points from from to to (both kept exactly), rounded
 * where k asks for integers, into out; 1 when rounding repeats one (a
 * problem), else 0. */
static int range_points(spec_problems *pr, const spec__kind *k, double from, double to, size_t n,
                        spec_values *out) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double x = n == 1 ? from : exp(log(from) + (log(to) - log(from)) * (double)i / (double)(n - 1));
    if (i == 0)
      x = from;
    if (i == n - 1)
      x = to;
    if (k->integer)
      x = round(x);
    out->v[i] = x;
    if (i > 0 && out->v[i - 1] == x && !bad) {
      spec_problem_add(pr, out->path,
                       "the range from %.6g to %.6g with %zu points repeats %.17g after rounding "
                       "to integers; expected fewer points or a wider range",
                       from, to, n, x);
      bad = 1;
    }
  }
  return bad;
}

/* The values of v, a range {"from": a, "to": b, "points": k}, into out; as
 * values_list. */
static int values_range(spec_problems *pr, const json_t *v, const spec__kind *k,
                        const char *allowed, spec_values *out) {
  static const char *const range_keys[] = {"from", "to", "points", NULL};
  spec__check_keys(pr, v, out->path, range_keys);
  double from = 0, to = 0, points = 0;
  double lo = k->lo > 0 ? k->lo : 1e-300;
  int ok = spec__get_number(pr, v, out->path, "from", &from, lo, k->hi, 0, 1, allowed);
  ok &= spec__get_number(pr, v, out->path, "to", &to, lo, k->hi, 0, 1, allowed);
  ok &= spec__get_number(pr, v, out->path, "points", &points, 1, 1000, 1, 1,
                         "the number of log-spaced points: an integer from 1 to 1000");
  if (!ok)
    return -1;
  if (points == 1 && from != to) {
    spec_problem_add(pr, out->path,
                     "found a range from %.6g to %.6g with 1 point; expected from = to for one "
                     "point, or at least 2 points",
                     from, to);
    return -1;
  }
  if (points > 1 && !(from < to)) {
    spec_problem_add(pr, out->path, "found from %.6g and to %.6g; expected from < to", from, to);
    return -1;
  }
  size_t n = (size_t)points;
  out->v = calloc(n, sizeof *out->v);
  if (!out->v)
    return -1;
  out->n = n;
  out->range = 1;
  return range_points(pr, k, from, to, n, out);
}

/* obj[key] as values: a number, a non-empty list of numbers, or a log-spaced
 * range {"from": a, "to": b, "points": k} with 0 < a < b (a = b with k = 1).
 * Returns 1 when the key is present and valid. A scalar number is a list of
 * one (its elements' paths are path[0]). */
int spec__get_values(spec_problems *pr, const json_t *obj, const char *path, const char *key,
                     const spec__kind *k, int required, spec_values *out) {
  memset(out, 0, sizeof *out);
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  join(out->path, sizeof out->path, path, key);
  char allowed[192];
  describe(k, allowed, sizeof allowed);
  if (!v) {
    if (required)
      spec_problem_add(pr, out->path,
                       "missing; expected %s, as a number, a list or a range "
                       "{\"from\", \"to\", \"points\"}",
                       allowed);
    return 0;
  }
  int bad;
  if (json_is_number(v) || json_is_array(v)) {
    bad = values_list(pr, v, k, allowed, out);
  } else if (json_is_object(v)) {
    bad = values_range(pr, v, k, allowed, out);
  } else {
    char f[64];
    spec__found(v, f, sizeof f);
    spec_problem_add(pr, out->path,
                     "found %s %s, expected %s, as a number, a list or a range "
                     "{\"from\", \"to\", \"points\"}",
                     spec__type_name(v), f, allowed);
    return 0;
  }
  if (bad < 0)
    return 0;
  if (!bad && out->n < (size_t)k->min_count) {
    spec_problem_add(pr, out->path, "found %zu value%s, expected at least %d (%s)", out->n,
                     out->n == 1 ? "" : "s", k->min_count, k->what);
    bad = 1;
  }
  if (bad) {
    free(out->v);
    out->v = NULL;
    out->n = 0;
    return 0;
  }
  return 1;
}

/* ---- mapping the trainer's problems onto spec paths -------------------- */

/* 1 when the dotted trainer path ("$.model.d_model") names a key set in obj */
int spec__sets_key(const json_t *obj, const char *path) {
  if (!obj || strncmp(path, "$.", 2) != 0)
    return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path + 2);
  const json_t *at = obj;
  char *save = NULL;
  for (char *seg = strtok_r(buf, ".", &save); seg; seg = strtok_r(NULL, ".", &save)) {
    if (!json_is_object(at))
      return 0;
    at = json_object_get(at, seg);
    if (!at)
      return 0;
  }
  return 1;
}

/* One run config problem under the first layer that sets its key (the
 * layer's path, then the key's path below $), else under fallback with
 * context in front. */
static void report_config_problem(const rcfg_problem *it, const json_t *const *layers,
                                  const char *const *layer_paths, int n_layers,
                                  const char *fallback, const char *context, spec_problems *pr) {
  if (!it->path[0]) { /* malformed JSON: the planner's own text, never the spec's */
    spec_problem_add(pr, fallback, "%s: run config : config:%d:%d: %s", context, it->line, it->col,
                     it->message);
    return;
  }
  for (int i = 0; i < n_layers; i++)
    if (spec__sets_key(layers[i], it->path)) {
      char full[320];
      snprintf(full, sizeof full, "%s%s", layer_paths[i], it->path + 1);
      spec_problem_add(pr, full, "%s", it->message);
      return;
    }
  spec_problem_add(pr, fallback, "%s: run config %s: %s", context, it->path, it->message);
}

int spec_resolve_config(const json_t *merged, struct rcfg *cfg, const json_t *const *layers,
                        const char *const *layer_paths, int n_layers, const char *fallback,
                        const char *context, spec_problems *pr) {
  char *text = json_dumps(merged, JSON_COMPACT | JSON_REAL_PRECISION(17));
  if (!text)
    return SS_ENOMEM;
  rcfg_problems *found = malloc(sizeof *found);
  if (!found) {
    free(text);
    return SS_ENOMEM;
  }
  int rc = rcfg_parse_problems(text, cfg, found);
  free(text);
  int n = found->n < RCFG_PROBLEMS_MAX ? found->n : RCFG_PROBLEMS_MAX;
  for (int k = 0; k < n; k++)
    report_config_problem(&found->items[k], layers, layer_paths, n_layers, fallback, context, pr);
  free(found);
  return rc;
}

/* Internal to sweeps/ (spec.c, spec_json.c, plan*.c): the readers a spec's
 * sections are parsed with. Each reads obj[key] at JSON path path.key, adds
 * a problem (found vs expected) when it is of the wrong type or out of
 * range, and leaves *out alone unless the value is valid. */
#ifndef SS_SWEEPS_SPEC_JSON_H
#define SS_SWEEPS_SPEC_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "sweeps/spec.h"

/* What a list of values may hold ($.grid.tokens, $.isoflop.flops, ...). */
typedef struct spec__kind {
  double lo, hi;
  int integer;
  int min_count;    /* fewest values allowed */
  const char *what; /* "a compute budget in FLOPs" */
} spec__kind;

/* malloc'd copy (NULL when out of memory) */
char *spec__dupstr(const char *s);
/* "an object", "a list", "a string", "a number", "a boolean", "null" */
const char *spec__type_name(const json_t *v);
/* The value as compact JSON, cut at 48 characters, for "found ..." */
void spec__found(const json_t *v, char *out, size_t n);
/* Flags keys of obj not in the NULL-terminated list allowed. */
void spec__check_keys(spec_problems *pr, const json_t *obj, const char *path,
                      const char *const *allowed);
/* obj[key] as an object: NULL when absent (a problem when required) or not
 * an object (a problem). */
json_t *spec__get_object(spec_problems *pr, json_t *obj, const char *path, const char *key,
                         int required, const char *what);
/* A number in [lo, hi] (integer when integer). Returns 1 when set. */
int spec__get_number(spec_problems *pr, const json_t *obj, const char *path, const char *key,
                     double *out, double lo, double hi, int integer, int required,
                     const char *allowed);
int spec__get_int(spec_problems *pr, const json_t *obj, const char *path, const char *key, int *out,
                  int lo, int hi, int required);
/* A string; with choices, one of them. Returns the borrowed string or NULL. */
const char *spec__get_string(spec_problems *pr, const json_t *obj, const char *path,
                             const char *key, const char *const *choices, int required,
                             const char *what);
/* obj[key] as values: a number, a non-empty list of numbers, or a log-spaced
 * range {"from": a, "to": b, "points": k}. Returns 1 when present and valid
 * (out owns its values). */
int spec__get_values(spec_problems *pr, const json_t *obj, const char *path, const char *key,
                     const spec__kind *k, int required, spec_values *out);
/* 1 when the dotted path ("$.model.d_model") names a key set in obj */
int spec__sets_key(const json_t *obj, const char *path);

/* Whole-number reals as integers, recursively, in place. A stored spec is
 * the canonical one (spec_canonical: every number a real, so that 8 and 8.0
 * hash alike), and the planner takes sizes and counts from integers only
 * (base.train.batch_size 8.0 would be planned as unset). next.c and
 * lr_tune.c plan from stored specs. */
void sweeps__integral(json_t *v);

#endif

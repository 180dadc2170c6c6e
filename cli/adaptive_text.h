/* An adaptive design's rounds as text (GET /api/sweeps/{id}'s "adaptive";
 * docs/sweeps.md "An adaptive design"), for `scalesweep status`, `up
 * --wait` and `scalesweep fit SWEEP`. */
#ifndef SS_CLI_ADAPTIVE_TEXT_H
#define SS_CLI_ADAPTIVE_TEXT_H

#include <jansson.h>
#include <stdio.h>

/* Writes the design ad (NULL or not an object: nothing), each line
 * prefixed by indent. */
void cli_print_adaptive(FILE *f, const json_t *ad, const char *indent);

struct cli_target;

/* The sweep's adaptive design from GET /api/sweeps/{id} (new reference),
 * or NULL: no such sweep, no design, or no answer. */
json_t *cli_get_adaptive(const struct cli_target *t, long long id);

#endif

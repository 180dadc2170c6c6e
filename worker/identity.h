/* The worker's identity (identity.c): the name's secret, read from the
 * work directory at start (with a new instance string), and kept there
 * when a welcome gives one. */
#ifndef SS_WORKER_IDENTITY_H
#define SS_WORKER_IDENTITY_H

#include <jansson.h>

typedef struct wrk__worker wrk__worker;

void wrk__identity_load(wrk__worker *w);
void wrk__identity_welcome(wrk__worker *w, const json_t *welcome);

#endif

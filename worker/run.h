/* Run objects (run.c): an assignment becomes a run in the worker's list, a
 * cancel reaches its attempts; lookup and lifetime (a run is freed with its
 * last handle once it has left the list). What happens to a run between is
 * lifecycle.h's. */
#ifndef SS_WORKER_RUN_H
#define SS_WORKER_RUN_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__conn wrk__conn;
typedef struct wrk__run wrk__run;

/* A new run of w's, last in its list, assigned (lifecycle.h) with room for
 * ngpus GPUs (r->gpus to fill); NULL when out of memory. The assignment
 * handler's, and a test's. */
wrk__run *wrk__run_new(wrk__worker *w, int64_t id, int64_t attempt, size_t ngpus);
/* The scheduler's assign and cancel (wrk__handler's). */
void wrk__on_assign(wrk__conn *c, json_t *m);
void wrk__on_cancel(wrk__conn *c, json_t *m);
/* The run with that id and attempt in w's list, or NULL. */
wrk__run *wrk__run_find(wrk__worker *w, int64_t id, int64_t attempt);
/* Closes h, one of r's handles; r goes with its last one once unlinked. */
void wrk__run_close_handle(wrk__run *r, uv_handle_t *h);
/* Takes r out of the worker's list once it is released or lost
 * (lifecycle.c); its memory goes with its last handle. */
void wrk__run_unlink(wrk__run *r);
/* A run spread over workers (its assignment's "dist": {"ranks": [..],
 * "addr": HOST:PORT, "secret": S}): this worker's ranks as "2,3" into buf;
 * how many, or 0 for a run of this worker alone. */
int wrk__run_dist_ranks(const wrk__run *r, char *buf, size_t len);

#endif

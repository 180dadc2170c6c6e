/* Leases (lease.c): numbered heartbeats, the scheduler's answers that renew
 * the leases of the runs listed, and fencing (trainers whose lease lapsed
 * are killed before their run can go elsewhere). */
#ifndef SS_WORKER_LEASE_H
#define SS_WORKER_LEASE_H

#include <jansson.h>
#include <uv.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__conn wrk__conn;

/* After a welcome: takes its lease and starts heartbeats (the first at once,
 * then every heartbeat_s or the --heartbeat override). Returns the
 * heartbeat period in seconds. */
double wrk__lease_welcome(wrk__worker *w, json_t *welcome);
/* The heartbeat's answer (a wrk__handler). */
void wrk__on_lease_renewed(wrk__conn *c, json_t *m);
/* Every FENCE_CHECK_MS from start-up: SIGKILL to trainers whose lease lapsed
 * (and the hang check, trainers.c). */
void wrk__on_fence_timer(uv_timer_t *t);

#endif

/* Shared between the scheduler's files (not exported). */
#ifndef SS_SCHEDULER_INTERNAL_H
#define SS_SCHEDULER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "common/proto.h"
#include "store/db.h"
#include "store/migrate.h"
#include "http/http.h"
#include "scheduler/refit.h"
#include "scheduler/sched.h"

#define SCHED__MAX_GPUS 64
#define SCHED__EVENT_RING 1024
#define SCHED__MAX_AUTH_FAILURES 5 /* per peer address per minute */

typedef struct sched sched;

/* A run a connected worker is executing (as the scheduler believes). */
typedef struct sched__wrun {
  int64_t run_id;
  int attempt;
  int ngpus;
  int gpus[8];
  int cancelling;       /* a cancel was sent: its end is "cancelled" */
  int metrics_inflight; /* metric batches sent to the database, not yet stored */
  json_t *finished;     /* a finished message held until those are stored */
  struct sched__wrun *next;
} sched__wrun;

/* One worker connection. The uv_tcp_t is embedded; the struct is freed in
 * the close callback. */
typedef struct sched__wconn {
  uv_tcp_t tcp;
  sched *s;
  proto_reader rd;
  int authed;
  int closing;
  int64_t worker_id;
  char name[128], host[128], peer[64];
  int ngpus;
  char gpu_busy[SCHED__MAX_GPUS];
  int cpu_slots, cpu_busy;
  json_t *gpus_json;
  sched__wrun *runs;
  uint64_t connected_ns;
  uint64_t last_msg_ns; /* the last complete line from the peer */
  struct sched__wconn *next;
} sched__wconn;

/* The worker port's limits: a peer must say hello within a lease, an
 * authenticated worker that sends nothing (no heartbeat) for two leases is
 * dropped, and at most SCHED__MAX_UNAUTHED connections may wait for their
 * hello at once (more are closed at accept), so that idle or slow peers
 * cannot hold the scheduler's descriptors. */
#define SCHED__MAX_UNAUTHED 64
void sched__workers_reap(sched *s);

/* A recent event kept for SSE resumption (Last-Event-ID). */
typedef struct sched__event {
  uint64_t id;
  char *name;
  char *data;
} sched__event;

typedef struct sched__sse {
  http_sse *stream;
  struct sched__sse *next;
} sched__sse;

/* Failed authentication attempts of one peer address. */
typedef struct sched__authfail {
  char addr[64];
  int count;
  uint64_t window_start_ns;
  struct sched__authfail *next;
} sched__authfail;

#define SCHED__METRIC_DBS 2
#define SCHED__BLOCKED 64

struct sched {
  uv_loop_t *loop;
  sched_options o;
  db *db; /* everything but metric rows */
  /* metric rows: connections of their own, so that a stream of metrics
   * neither delays placement nor caps at one server process; a run's batches
   * all go to one of them (run_id % SCHED__METRIC_DBS), which keeps them in
   * order, so an acknowledgement covers every earlier batch */
  db *db_metrics[SCHED__METRIC_DBS];
  http_server *http;
  int http_port, workers_port;
  uv_tcp_t listener;
  uv_timer_t lease_timer;
  uv_signal_t sigint, sigterm;
  char token[512], api_token[512];
  sched__wconn *conns;
  sched__authfail *authfails;
  int placing, place_again;
  int db_was_down; /* the lease timer saw the database unavailable */
  /* refit.c: refits under way, asked for or cooling; sweeps touched */
  sched__refits refits;
  int predict_ticks; /* lease-timer seconds since the last prediction pass */
  /* multi-GPU runs found waiting, and since when (placement's reservation) */
  struct {
    int64_t run_id;
    uint64_t since_ms;
  } blocked[SCHED__BLOCKED];
  int nblocked;
  int stopping;

  sched__sse *sse;
  sched__event events[SCHED__EVENT_RING];
  uint64_t next_event_id;

  /* counters for /metrics */
  uint64_t runs_finished, runs_failed, runs_requeued, metric_rows, assigns;
  uint64_t lat_count, lat_buckets[12]; /* request latencies, le 1,2,5,...ms */
  double lat_sum_s;
};

/* sched.c */
void sched__place(sched *s);
void sched__emit(sched *s, const char *name, json_t *data); /* steals data */

/* predict.c: predict every running run's final loss from its curve so far
 * and flag those far off their sweep's fitted surface (one pass at a time) */
void sched__predict(sched *s);

/* refit.c: refit a sweep's laws (after a run of it succeeded) */
void sched__refit(sched *s, int64_t sweep_id);
/* starts the refits asked for while their sweep was being refitted or
 * cooling down (once a second, from sched__sweep_flush) */
void sched__refit_due(sched *s);
/* recomputes sweeps.status from its runs */
void sched__sweep_status(sched *s, int64_t sweep_id);
/* Marks a sweep for a status update (and a refit when refit is set) at the
 * next tick of the lease timer: finishes arriving together cost one of each. */
void sched__sweep_touch(sched *s, int64_t sweep_id, int refit);
void sched__sweep_flush(sched *s);

/* workers.c */
int sched__workers_listen(sched *s, const char *hostport, char *err, size_t errlen);
void sched__send(sched__wconn *c, json_t *msg); /* steals msg */
void sched__conn_drop(sched__wconn *c, const char *why);
sched__wconn *sched__conn_by_worker(sched *s, int64_t worker_id);
sched__wrun *sched__conn_find_run(sched__wconn *c, int64_t run_id);
void sched__conn_release_run(sched__wconn *c, int64_t run_id);
void sched__cancel_running(sched *s, int64_t run_id);

/* the main connection and every metrics connection are up */
int sched__db_up(const sched *s);

/* api.c */
void sched__http(http_request *r, void *ud);

#endif

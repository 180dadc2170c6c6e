/* The worker port (internal): connections of workers, their messages, and
 * what the scheduler believes each worker executes.
 *
 * wport.c is the connection I/O (accept, read, write, close, reap, the
 * limit on failed authentications); wmsg.c handles the messages (hello,
 * heartbeat, started, checkpoint, metrics, finished, stopping). Neither knows
 * placement, leases or refits: what they must hear of comes back through
 * sched__wport_hooks, set up by the scheduler's start-up. Placement reads
 * the connections and takes their capacity with sched__conn_add_run. */
#ifndef SS_SCHEDULER_WPORT_H
#define SS_SCHEDULER_WPORT_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "common/proto.h"
#include "scheduler/counters.h"
#include "scheduler/events.h"
#include "store/store.h"

#define SCHED__MAX_GPUS 64
/* Wrong tokens: after SCHED__MAX_AUTH_FAILURES of them from one address
 * within its window (auth_block_s from the first), that address's wrong
 * hellos are refused unread until the window ends; a right token is always
 * welcome. At most SCHED__AUTH_TRACKED addresses are remembered (the oldest
 * goes first), so that many addresses cannot grow the list without bound. */
#define SCHED__MAX_AUTH_FAILURES 5
#define SCHED__AUTH_TRACKED 4096
#define SCHED__METRIC_DBS 2
/* The worker port's limits on connections that have not said hello yet
 * (docs/runtime.md, "The worker port's limits"): each must send its hello
 * within SCHED__HELLO_S seconds; one address may hold at most
 * SCHED__UNAUTHED_PER_ADDR of them and all together SCHED__MAX_UNAUTHED.
 * A new connection over a limit is never refused: SCHED__TRIM_MS later the
 * oldest connections under that limit that have sent nothing are closed
 * until it holds again (those that have sent something keep to the hello
 * deadline); at twice the limit, at once, the oldest idle one or else the
 * oldest. A worker sends its hello the moment it
 * connects, and by then it has been read, while a flood's connections sit
 * idle: idle or slow peers cannot keep a worker with the right token out. An
 * authenticated worker that sends nothing (no heartbeat) for two leases is
 * dropped. */
#define SCHED__HELLO_S 5
#define SCHED__UNAUTHED_PER_ADDR 16
#define SCHED__MAX_UNAUTHED 256
#define SCHED__TRIM_MS 100

typedef struct sched__wport sched__wport;

/* A run a connected worker is executing (as the scheduler believes). */
typedef struct sched__wrun {
  int64_t run_id;
  int attempt;
  int ngpus;
  int gpus[8];
  int slots;            /* CPU slots it holds (a CPU run's ranks; 0 for a GPU run) */
  int secondary;        /* it runs ranks of a run whose rank 0 is another worker's: what it
                         * reports is not stored (rank 0's worker reports the run) */
  int cancelling;       /* a cancel was sent: its end is "cancelled" */
  int metrics_inflight; /* metric batches sent to the database, not yet stored */
  json_t *finished;     /* a finished message held until those are stored */
  struct sched__wrun *next;
} sched__wrun;

/* One worker connection. The uv_tcp_t is embedded; the struct is freed in
 * the close callback. */
typedef struct sched__wconn {
  uv_tcp_t tcp;
  sched__wport *wp;
  proto_reader rd;
  int authed;
  int registering; /* its hello is being registered: a second one is refused */
  int closing;
  int draining; /* the worker said it is stopping: placement gives it nothing */
  int64_t worker_id;
  char name[128], host[128], peer[64];
  char instance[72]; /* hello.instance: the worker process ("" from an older worker) */
  int ngpus;
  int cuda_ok;          /* its GPUs run "backend": "cuda" (hello.backends) */
  char cuda_error[256]; /* why not, when it has GPUs and cuda_ok is 0 */
  char slurm_job[32];   /* the Slurm job it runs in (hello.slurm_job; "" when none) */
  /* the trainers it runs (hello.trainers; an older worker's: "builtin") */
  char trainers[PROTO_MAX_TRAINERS][33];
  int ntrainers;
  char gpu_busy[SCHED__MAX_GPUS];
  /* by position (placement's numbering): each GPU's device index as the
   * worker numbers it (its hello's gpus[].index; what assign sends) */
  int gpu_index[SCHED__MAX_GPUS];
  int cpu_slots, cpu_busy;
  json_t *gpus_json;
  sched__wrun *runs;
  uint64_t connected_ns;
  uint64_t last_msg_ns; /* the last complete line from the peer */
  uint64_t rx_bytes;    /* received, before its hello: a flood's connections send none */
  struct sched__wconn *next;
} sched__wconn;

/* Failed authentication attempts of one peer address. */
typedef struct sched__authfail {
  char addr[64];
  int count;
  uint64_t window_start_ns;
  struct sched__authfail *next;
} sched__authfail;

/* What the worker port reports to the scheduler's core. */
typedef struct sched__wport_hooks {
  void *ud;
  /* capacity may be free: a worker connected, a run ended, runs were
   * re-queued (placement runs a pass) */
  void (*on_capacity)(void *ud);
  /* a run ended and left the queue's order as it was (it succeeded,
   * failed for good or was cancelled): capacity is free, nothing was
   * re-queued; NULL: on_capacity */
  void (*on_freed)(void *ud);
  /* a run of the sweep changed status; refit: it succeeded; now: update
   * the sweep's status at once rather than at the next tick */
  void (*on_sweep_changed)(void *ud, int64_t sweep_id, int refit, int now);
} sched__wport_hooks;

/* The port's state. The caller sets the fields up to hooks before
 * sched__wport_listen; the rest is the port's. */
struct sched__wport {
  uv_loop_t *loop;
  db *db; /* everything but metric rows */
  /* metric rows: connections of their own, so that a stream of metrics
   * neither delays placement nor caps at one server process; a run's batches
   * all go to one of them (run_id % SCHED__METRIC_DBS), which keeps them in
   * order, so an acknowledgement covers every earlier batch */
  db *db_metrics[SCHED__METRIC_DBS];
  const char *token; /* the cluster token */
  int lease_s, heartbeat_s;
  int retry_after_s; /* a failed run's first retry waits this long, doubling (0: none) */
  /* --data-dir: told to every worker in its welcome (data_dirs) */
  const char *const *data_dirs;
  int ndata_dirs;
  /* --checkpoints: where a trunk's branch points must lie (checkpoint
   * messages with "branch": true) */
  const char *checkpoint_root;
  int auth_block_s; /* the window of failed authentications (seconds) */
  sched__events *ev;
  sched__counters *n;
  sched__wport_hooks hooks;

  uv_tcp_t listener;
  uv_timer_t trim_timer; /* brings pre-hello connections back within their limits */
  int listening;
  int port; /* bound */
  int stopping;
  sched__wconn *conns;
  sched__authfail *authfails; /* newest first */
  int nauthfails;
  int auth_pruned, auth_evicted; /* since the last log line about them */
  int unauthed_replaced;         /* pre-hello connections that made room, likewise */
};

/* wport.c */

/* Binds HOST:PORT (port 0: any; the bound one goes to wp->port) and
 * accepts workers. */
int sched__wport_listen(sched__wport *wp, const char *hostport, char *err, size_t errlen);
/* Drops the peers that said no hello within a lease and the workers not
 * heard from for two (called once a second). */
void sched__wport_reap(sched__wport *wp);
/* Stops accepting and drops every connection (their runs keep their
 * leases); sched__wport_free after the loop has closed the handles. */
void sched__wport_close(sched__wport *wp);
void sched__wport_free(sched__wport *wp);
/* The main connection and every metrics connection are up. */
int sched__wport_db_up(const sched__wport *wp);
/* Cancels a running run: SIGTERM on its worker (it checkpoints); the
 * finished message then records it as cancelled. */
void sched__wport_cancel(sched__wport *wp, int64_t run_id);

/* A wrong token from addr: counted, unless addr has already failed
 * SCHED__MAX_AUTH_FAILURES times in its window. Returns 0 when counted, or
 * the seconds until addr's window ends (its wrong tokens are refused
 * without more ado until then). Expired records are forgotten first. */
int sched__wport_auth_failed(sched__wport *wp, const char *addr);
/* Forgets the records whose window is over, with a log line (once a
 * second, from the reaper). */
void sched__wport_auth_prune(sched__wport *wp);
/* A line on stderr about the connection's worker. */
void sched__wlog(const sched__wconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sends one message; steals msg. */
void sched__send(sched__wconn *c, json_t *msg);
/* Disconnects (why: an error message sent to the peer first, or NULL).
 * The worker's runs keep their leases: a worker that reconnects in time
 * reports them and carries on; otherwise they expire and are re-queued. */
void sched__conn_drop(sched__wconn *c, const char *why);
/* The live, authenticated connection of a worker, or NULL: database
 * callbacks carry the worker's id, since the connection may be gone when
 * the answer comes. */
sched__wconn *sched__conn_by_worker(sched__wport *wp, int64_t worker_id);
/* 1 when c runs the trainer of that name. */
int sched__conn_offers(const sched__wconn *c, const char *trainer);
sched__wrun *sched__conn_find_run(sched__wconn *c, int64_t run_id);
/* Marks the run's GPUs busy, or (ngpus 0) `slots` CPU slots (at least
 * one), and returns its record (NULL when out of memory). */
sched__wrun *sched__conn_add_run(sched__wconn *c, int64_t run_id, int attempt, int ngpus,
                                 const int *gpus, int slots);
/* Frees the run's slots and record. */
void sched__conn_release_run(sched__wconn *c, int64_t run_id);

/* wmsg.c: one authenticated (or hello) message of type t. */
void sched__wmsg_handle(sched__wconn *c, proto_type t, json_t *m);

#endif

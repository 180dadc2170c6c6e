/* Shared between the scheduler's files (not exported). */
#ifndef SS_SCHEDULER_INTERNAL_H
#define SS_SCHEDULER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "http/http.h"
#include "scheduler/auth.h"
#include "scheduler/counters.h"
#include "scheduler/events.h"
#include "scheduler/lease.h"
#include "scheduler/log.h"
#include "scheduler/place.h"
#include "scheduler/predict.h"
#include "scheduler/refit.h"
#include "scheduler/sweepq.h"
#include "scheduler/sched.h"
#include "scheduler/slurm.h"
#include "scheduler/wport.h"
#include "store/store.h"

typedef struct sched sched;

/* The scheduler's state, one struct per concern; the core (sched.c) owns
 * it, sets the concerns up and wires them together (the worker port
 * reports through its hooks). */
struct sched {
  uv_loop_t *loop;
  sched_options o;
  db *db;         /* the control connection: workers' messages, placement, leases, every write (the
                   * worker port's metric connections: wp) */
  db_pool *reads; /* reads: the API's, the page's, the refits' and the predictor's */
  http_server *http;
  int http_port;
  uv_signal_t sigint, sigterm;
  char token[512], api_token[512];
  int stopping;

  sched__events ev;     /* events.h */
  sched__wport wp;      /* wport.h: worker connections, auth failures */
  sched__placement pl;  /* place.h */
  sched__leases ls;     /* lease.h */
  sched__predictor pr;  /* predict.h */
  sched__refits refits; /* refit.h: refits under way, asked for or cooling; sweeps touched */
  sched__sweepq tunes;  /* sweepq.h: sweeps whose lr tune may have ended (lr_tune.c) */
  sched__sweepq adapt;  /* sweepq.h: sweeps whose adaptive round may have ended (adaptive.c) */
  sched__counters n;    /* counters.h: for /metrics */
  sched__slurm slurm;   /* slurm.h: elastic workers (--slurm) */
  sched__auth auth;     /* auth.h: users and their live tokens */

  /* the API's request latencies, le 1,2,5,...ms (for /metrics) */
  uint64_t lat_count, lat_buckets[12];
  double lat_sum_s;

  int submits; /* submit.c: spec jobs on the thread pool */
  int designs; /* next.c: next-budget designs under way */
  /* submit.c: sweep inserts, on their own connection: 10,000 runs take
   * PostgreSQL a second or more, and heartbeats (lease renewals, on db)
   * must not queue behind them */
  db *db_submit;
  /* usage.c: changes that add queued runs, waiting for their turn (the
   * limits' check and the store, one at a time) */
  struct sched__add *adds, **adds_tail;
  int adding;
};

/* place.c: a placement pass (one at a time; asked for during one, another
 * follows it) */
void sched__place(sched *s);
/* A pass for capacity a finished run freed, the queue otherwise unchanged:
 * from the runs the last read returned when they still fill the free
 * capacity, else as sched__place. */
void sched__place_freed(sched *s);
void sched__place_free(sched *s);
/* Why a queued run needing `gpus` GPUs (0: `slots` CPU slots) cannot run
 * on any connected worker, whatever finishes: no worker connected, none
 * with that many CPU slots, none with that many GPUs the CUDA backend runs on (naming the
 * workers whose GPUs it cannot run on, and why), or none that runs one of
 * trainers (the queued runs' trainers, comma-separated; NULL: not asked);
 * or sweep_id's owner is at their GPU limit (the last placement pass).
 * 1 with the reason in buf,
 * 0 when some connected worker could take it (busy or not). */
int sched__place_why(sched *s, int64_t sweep_id, int gpus, int slots, const char *trainers,
                     char *buf, size_t len);

/* slurm.c: elastic workers through Slurm, when o.slurm_partition is set:
 * check (before anything starts) says whether Slurm's commands are there
 * (SS_EINVAL with a message if not); start once the worker port is bound;
 * close at stop */
int sched__slurm_check(const sched_options *o, char *err, size_t errlen);
int sched__slurm_start(sched *s, char *err, size_t errlen);
void sched__slurm_close(sched *s);

/* lease.c: the lease timer (lease.h), started once serving, closed at stop */
void sched__lease_start(sched *s);
void sched__lease_close(sched *s);

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
/* At start: touches every unfinished sweep, with a refit (refit.c). */
void sched__sweeps_settle(sched *s);

/* The checks a run's start or end may conclude (sweepq.c), each kind one
 * at a time, the next when the last is over or at sched__sweepq_flush:
 * its sweep's lr tune (lr_tune.c: when every tune run has ended, decided
 * and its study added) and its adaptive round (adaptive.c: when every run
 * has ended, the next round designed and added, or the design stopped). */
void sched__sweepq_touch(sched *s, int64_t sweep_id);
void sched__sweepq_flush(sched *s);
void sched__lr_tune_due(sched *s);
void sched__adaptive_due(sched *s);

/* api.c */
void sched__http(http_request *r, void *ud);
/* The HTTP server's limits from the options (sched_options' http fields). */
void sched__http_limits(const sched_options *o, http_limits *lim);
/* Its hooks: the reserved slots admit the API token and /healthz; its
 * lines go to the scheduler's log. ud: the sched. */
void sched__http_hooks(sched *s, http_hooks *h);

/* port_hooks.c: the worker port's hooks into the rest of the scheduler
 * (placement, the sweeps a run's start or end touches), s their ud. */
sched__wport_hooks sched__port_hooks(sched *s);

#endif

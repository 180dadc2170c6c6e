/* A run's life on this worker (lifecycle.c): its states, the transitions
 * between them, and the events that cause them. The other files do the
 * I/O (run.c builds the run from its assignment, proc.c spawns and signals
 * its trainer, report.c turns its lines and its end into messages,
 * outbox.c keeps them until acked) and call in here at each event.
 *
 *   assigned -> spawning    start (once no older attempt of the run has a
 *                           trainer: two never share a checkpoint directory)
 *   assigned -> finished    cancelled before it started (exit code 143)
 *   spawning -> running     its trainer spawned
 *   spawning -> finished    its start failed (a GPU, trainer or backend this
 *                           worker does not offer, too little memory, ...)
 *   running  -> stopping    cancelled: SIGTERM, SIGKILL after the grace period
 *   running, stopping -> fenced      its lease lapsed: SIGKILL
 *   running, stopping, fenced -> finished   its trainer exited, its stdout
 *                           drained: the finished message is in the outbox
 *   finished -> released    that message acknowledged
 *   assigned ... finished -> lost
 *
 * Lost: the worker let the run go without its finished message
 * acknowledged (it stopped before the ack, or the message could not be
 * encoded); the scheduler learns the attempt's end from its lease.
 * Released and lost are the ends: the run has left the worker's list and
 * its memory goes with its last handle (run.c).
 *
 * Beside the state, two facts about why it ends, which the finished
 * message reports: interrupting (it stops because the worker is stopping)
 * and broken (its trainer broke the contract: the attempt fails); and two
 * about its trainer's I/O, proc.c's: proc_alive (spawned, not yet reaped)
 * and out_open (its stdout still read). A trainer that ended is both
 * reaped and drained. */
#ifndef SS_WORKER_LIFECYCLE_H
#define SS_WORKER_LIFECYCLE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "common/proto.h"

typedef struct wrk__worker wrk__worker;
typedef struct wrk__wbuf wrk__wbuf;
typedef struct wrk__qmsg wrk__qmsg;

enum wrk__run_state {
  WRK__RUN_ASSIGNED, /* in the list, no trainer yet (an older attempt may be stopping) */
  WRK__RUN_SPAWNING, /* its start checked, its files written, its trainer spawned */
  WRK__RUN_RUNNING,  /* its trainer runs (or has exited, its output still read) */
  WRK__RUN_STOPPING, /* cancelled: SIGTERM sent, SIGKILL after the grace period */
  WRK__RUN_FENCED,   /* its lease lapsed: SIGKILL sent */
  WRK__RUN_FINISHED, /* its finished message is in the outbox, waiting for its ack */
  WRK__RUN_RELEASED, /* the finished message acknowledged: out of the list */
  WRK__RUN_LOST,     /* let go without that ack: out of the list */
  WRK__RUN_NSTATES
};

typedef struct wrk__run wrk__run;
struct wrk__run {
  wrk__run *next;
  wrk__worker *w;
  int64_t id, attempt;
  enum wrk__run_state state; /* changed by wrk__run_transition only */
  json_t *assign;            /* the assign message */
  int *gpus;
  int ngpus;

  uv_pipe_t out;
  uv_timer_t flush_timer, kill_timer;
  int nopen;           /* handles initialised and not yet closed */
  int proc_alive;      /* spawned and not yet reaped (worker.c's SIGCHLD watcher) */
  int out_open;        /* stdout pipe open */
  int interrupting;    /* stopped because the worker is stopping: reported as interrupted */
  int64_t ckpt_step;   /* the step of this attempt's last checkpoint; -1: none yet */
  uint64_t renewed_ms; /* loop time from which its lease surely runs */
  /* the lease told when it was renewed: the fence judges each renewal by its
   * own (a restarted scheduler may tell a shorter one, but it keeps the
   * leases it finds) */
  int64_t renewed_for_ms;
  int pid;

  proto_reader rd;
  int out_broken;        /* a line over the limit: the rest of stdout is drained */
  int broken;            /* its trainer broke the contract (trainers.c): the attempt fails */
  int64_t lines;         /* stdout lines read */
  uint64_t last_line_ms; /* loop time of the last one (or of the start) */
  /* rows not yet sealed into a metrics message (outbox.c) */
  struct wrk__batch *batch;
  int64_t next_seq;
  wrk__qmsg *q_head, *q_tail; /* unacked metrics / finished, by seq */
  wrk__wbuf *started, *ckpt;  /* resent after each reconnect */
  wrk__wbuf *branch;          /* the latest kept branch point (a trunk's), resent too */
  int64_t finished_seq;       /* 0 until the finished message exists */
  json_t *done;
  char *error;
  int64_t exit_status;
  int term_signal;

  char dir[PATH_MAX + 32];
  char log_path[PATH_MAX + 64];
  char obuf[64 << 10];
};

/* "running" for WRK__RUN_RUNNING; "?" for a value out of range. */
const char *wrk__run_state_name(enum wrk__run_state s);
/* 1 when a run may go from one state to the other (the table in
 * lifecycle.c), else 0. */
int wrk__run_transition_legal(enum wrk__run_state from, enum wrk__run_state to);
/* Moves r to state to on event (a few words, for the log). An illegal
 * move is a bug of the worker's: logged, and r stays where it is;
 * SS_EINVAL then, else 0. */
int wrk__run_transition(wrk__run *r, enum wrk__run_state to, const char *event);
/* r has a trainer that has not ended: RUNNING, STOPPING or FENCED. */
int wrk__run_has_trainer(const wrk__run *r);
/* r's lease can fence it: its trainer is alive and not fenced yet. */
int wrk__run_fenceable(const wrk__run *r);

/* ---- events -------------------------------------------------------------- */

/* A new run in the list (run.c): refused when the worker is stopping; an
 * older attempt of the same run still here is stopped first, and this one
 * starts once none has a trainer. */
void wrk__run_assigned(wrk__run *r);
/* ASSIGNED -> SPAWNING, and RUNNING once proc.c spawned its trainer. */
void wrk__run_start(wrk__run *r);
/* Ends a run that never started (or failed to): a finished message with the
 * reason, so that the scheduler reaches a decision either way. */
void wrk__run_fail_start(wrk__run *r, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A run that has not started ends at once (exit code 143); a running one
 * gets SIGTERM (STOPPING); one already stopping or ended is left alone. */
void wrk__run_cancel(wrk__run *r, const char *why);
/* Its lease lapsed: SIGKILL (FENCED). */
void wrk__run_fence(wrk__run *r);
/* The trainer has exited and its stdout is drained (or it never started):
 * the last rows go, then one finished message that continues the seq; a
 * newer attempt that waited for this one starts. */
void wrk__run_complete(wrk__run *r);
/* Its finished message was acknowledged: RELEASED, out of the list. */
void wrk__run_acked(wrk__run *r);
/* At exit: its trainer killed, its unacked messages dropped (logged): LOST. */
void wrk__run_abandon(wrk__run *r);

#endif

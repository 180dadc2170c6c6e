/* A run's states and transitions (lifecycle.h): the one place that decides
 * what happens to a run next; the I/O is the other files'. */
#include "worker/lifecycle.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "worker/internal.h"
#include "worker/log.h"
#include "worker/outbox.h"
#include "worker/proc.h"
#include "worker/report.h"
#include "worker/run.h"

static const char *const state_names[WRK__RUN_NSTATES] = {
    [WRK__RUN_ASSIGNED] = "assigned", [WRK__RUN_SPAWNING] = "spawning",
    [WRK__RUN_RUNNING] = "running",   [WRK__RUN_STOPPING] = "stopping",
    [WRK__RUN_FENCED] = "fenced",     [WRK__RUN_FINISHED] = "finished",
    [WRK__RUN_RELEASED] = "released", [WRK__RUN_LOST] = "lost",
};

#define TO(s) (1u << WRK__RUN_##s)
/* The states each one may go to (lifecycle.h draws them), by event. */
static const unsigned legal[WRK__RUN_NSTATES] = {
    /* start; cancelled before it started; dropped at exit */
    [WRK__RUN_ASSIGNED] = TO(SPAWNING) | TO(FINISHED) | TO(LOST),
    /* spawned; its start failed; a finished message that cannot be encoded */
    [WRK__RUN_SPAWNING] = TO(RUNNING) | TO(FINISHED) | TO(LOST),
    /* cancel; lease lapsed; the trainer ended; dropped at exit */
    [WRK__RUN_RUNNING] = TO(STOPPING) | TO(FENCED) | TO(FINISHED) | TO(LOST),
    [WRK__RUN_STOPPING] = TO(FENCED) | TO(FINISHED) | TO(LOST),
    [WRK__RUN_FENCED] = TO(FINISHED) | TO(LOST),
    /* acknowledged; dropped at exit before the ack */
    [WRK__RUN_FINISHED] = TO(RELEASED) | TO(LOST),
};
#undef TO

const char *wrk__run_state_name(enum wrk__run_state s) {
  return s >= 0 && s < WRK__RUN_NSTATES ? state_names[s] : "?";
}

int wrk__run_transition_legal(enum wrk__run_state from, enum wrk__run_state to) {
  if (from < 0 || from >= WRK__RUN_NSTATES || to < 0 || to >= WRK__RUN_NSTATES)
    return 0;
  return (legal[from] >> to) & 1u;
}

int wrk__run_transition(wrk__run *r, enum wrk__run_state to, const char *event) {
  if (!wrk__run_transition_legal(r->state, to)) {
    wrk__log("BUG: run %" PRId64 " attempt %" PRId64 ": %s while %s: no way to %s; ignored", r->id,
             r->attempt, event, wrk__run_state_name(r->state), wrk__run_state_name(to));
    return SS_EINVAL;
  }
  r->state = to;
  return 0;
}

int wrk__run_has_trainer(const wrk__run *r) {
  return r->state == WRK__RUN_RUNNING || r->state == WRK__RUN_STOPPING ||
         r->state == WRK__RUN_FENCED;
}

int wrk__run_fenceable(const wrk__run *r) {
  return (r->state == WRK__RUN_RUNNING || r->state == WRK__RUN_STOPPING) && r->proc_alive;
}

/* ---- events -------------------------------------------------------------- */

void wrk__run_assigned(wrk__run *r) {
  wrk__worker *w = r->w;
  if (w->stopping) {
    /* sent before the scheduler heard that this worker is stopping: it
     * goes back at once, as interrupted */
    wrk__log("run %" PRId64 " attempt %" PRId64 ": assignment refused: the worker is stopping",
             r->id, r->attempt);
    r->interrupting = 1;
    wrk__run_cancel(r, "the worker is stopping");
    return;
  }
  /* an older attempt of the same run still here stops first: two trainers
   * must never share a checkpoint directory */
  int blocked = 0;
  for (wrk__run *x = w->runs; x; x = x->next) {
    if (x == r || x->id != r->id || x->state == WRK__RUN_FINISHED)
      continue;
    char why[64];
    snprintf(why, sizeof why, "superseded by attempt %" PRId64, r->attempt);
    if (wrk__run_has_trainer(x))
      blocked = 1;
    wrk__run_cancel(x, why);
  }
  wrk__log("run %" PRId64 " attempt %" PRId64 ": assigned (%d GPU%s)%s", r->id, r->attempt,
           r->ngpus, r->ngpus == 1 ? "" : "s",
           blocked ? "; waiting for the previous attempt to stop" : "");
  if (!blocked)
    wrk__run_start(r);
}

void wrk__run_start(wrk__run *r) {
  if (wrk__run_transition(r, WRK__RUN_SPAWNING, "start"))
    return;
  if (wrk__proc_spawn(r) == 0)
    wrk__run_transition(r, WRK__RUN_RUNNING, "its trainer spawned");
}

void wrk__run_fail_start(wrk__run *r, int exit_code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  wrk__log("run %" PRId64 " attempt %" PRId64 ": %s", r->id, r->attempt, msg);
  free(r->error);
  r->error = strdup(msg);
  r->exit_status = exit_code;
  r->term_signal = 0;
  wrk__run_complete(r);
}

void wrk__run_cancel(wrk__run *r, const char *why) {
  switch (r->state) {
  case WRK__RUN_ASSIGNED:
    wrk__run_fail_start(r, 128 + SIGTERM, "%s before it started", why);
    return;
  case WRK__RUN_RUNNING:
    wrk__run_transition(r, WRK__RUN_STOPPING, "cancel");
    wrk__proc_stop(r, why);
    return;
  case WRK__RUN_STOPPING: /* already on its way out */
  case WRK__RUN_FENCED:
  case WRK__RUN_FINISHED:
    return;
  default:
    wrk__run_transition(r, WRK__RUN_STOPPING, "cancel");
  }
}

void wrk__run_fence(wrk__run *r) {
  /* no SIGTERM: a checkpoint written now could race the next attempt's */
  if (wrk__run_transition(r, WRK__RUN_FENCED, "lease lapsed") == 0)
    wrk__run_signal(r, SIGKILL);
}

/* interrupted: stopped by a signal after its checkpoint (the trainer's
 * 128 + SIGTERM or SIGINT) and not on the scheduler's or this worker's
 * own cancel, or stopped in any way because this worker is stopping, or
 * fenced: killed because no scheduler renewed its lease (one stopped for
 * an upgrade, its database away), which is no failure of the run. If the
 * scheduler has meanwhile given the run up as lost, the report changes
 * nothing there (docs/runtime.md, "Fencing"). from: its state when its
 * trainer ended. */
static int ended_interrupted(const wrk__run *r, enum wrk__run_state from, int64_t code) {
  int fenced = from == WRK__RUN_FENCED;
  int cancelled = from == WRK__RUN_ASSIGNED || from == WRK__RUN_STOPPING || fenced;
  int ok = code == 0 && r->done && !r->broken;
  int stop_code = code == 128 + SIGTERM || code == 128 + SIGINT;
  return !ok && !r->broken &&
         (fenced || (stop_code ? r->interrupting || !cancelled
                               : r->interrupting && r->term_signal == SIGKILL));
}

/* A newer attempt of r's run waited for r to stop: it starts once no
 * attempt of the run has a trainer. (An attempt that waited and was itself
 * superseded ends while the oldest may still be stopping: the newest waits
 * on for that one.) */
static void start_waiting(wrk__run *r) {
  wrk__run *next = NULL;
  for (wrk__run *x = r->w->runs; x; x = x->next) {
    if (x->id != r->id)
      continue;
    if (wrk__run_has_trainer(x))
      return;
    if (!next && x->state == WRK__RUN_ASSIGNED)
      next = x;
  }
  if (next)
    wrk__run_start(next);
}

void wrk__run_complete(wrk__run *r) {
  wrk__worker *w = r->w;
  enum wrk__run_state from = r->state;
  if (wrk__run_transition(r, WRK__RUN_FINISHED, "its trainer ended"))
    return;
  wrk__outbox_flush(r);
  uv_timer_stop(&r->kill_timer);
  int64_t code = r->term_signal ? 128 + r->term_signal : r->exit_status;
  char *tail = wrk__report_settle(r, code);
  int interrupted = ended_interrupted(r, from, code);
  int queued = wrk__report_finished(r, code, interrupted, from == WRK__RUN_FENCED, tail);
  wrk__run_close_handle(r, (uv_handle_t *)&r->flush_timer);
  wrk__run_close_handle(r, (uv_handle_t *)&r->kill_timer);
  if (!queued && !wrk__run_transition(r, WRK__RUN_LOST, "its finished message failed"))
    wrk__run_unlink(r);
  if (!w->stopping)
    start_waiting(r);
  wrk__maybe_finish_shutdown(w);
}

void wrk__run_acked(wrk__run *r) {
  wrk__worker *w = r->w;
  if (wrk__run_transition(r, WRK__RUN_RELEASED, "its finished message acknowledged"))
    return;
  wrk__log("run %" PRId64 " attempt %" PRId64 ": finished and acknowledged", r->id, r->attempt);
  wrk__run_unlink(r);
  wrk__maybe_finish_shutdown(w);
}

void wrk__run_abandon(wrk__run *r) {
  int unacked = wrk__outbox_unacked(r);
  if (unacked)
    wrk__log("run %" PRId64 " attempt %" PRId64 ": %d unacknowledged message%s dropped at exit",
             r->id, r->attempt, unacked, unacked == 1 ? "" : "s");
  wrk__proc_kill_now(r);
  /* a run already lost or released is out of the list: never here */
  wrk__run_transition(r, WRK__RUN_LOST, "the worker's exit");
  wrk__run_unlink(r);
}

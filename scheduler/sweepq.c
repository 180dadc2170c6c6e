/* The sweeps waiting for a check (sweepq.h). */
#include "scheduler/sweepq.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "scheduler/internal.h"

static void out_of_memory(const sched__sweepq *q, int64_t sweep_id) {
  fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its %s\n", sweep_id, q->what);
}

/* Adds sweep_id to the list ids (n of cap) unless it is there; 0, or -1
 * out of memory. */
static int ids_add(int64_t **ids, int *n, int *cap, int64_t sweep_id) {
  for (int i = 0; i < *n; i++)
    if ((*ids)[i] == sweep_id)
      return 0;
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 16;
    int64_t *p = realloc(*ids, (size_t)c * sizeof *p);
    if (!p)
      return -1;
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n)++] = sweep_id;
  return 0;
}

/* Queues sweep_id unless it is queued already. Out of memory: logged, the
 * sweep left out (it is touched again by its next run's start or end). */
static void add(sched__sweepq *q, int64_t sweep_id) {
  if (ids_add(&q->pending, &q->n, &q->cap, sweep_id))
    out_of_memory(q, sweep_id);
}

/* The sweeps whose check failed, queued again (at a flush). */
static void retry(sched__sweepq *q) {
  for (int i = 0; i < q->nlater; i++)
    add(q, q->later[i]);
  q->nlater = 0;
}

void sched__sweepq_touch(sched *s, int64_t sweep_id) {
  s->tunes.what = "lr tune check";
  s->adapt.what = "adaptive design";
  add(&s->tunes, sweep_id);
  add(&s->adapt, sweep_id);
}

void sched__sweepq_flush(sched *s) {
  retry(&s->tunes); /* the checks that failed at the last flush */
  retry(&s->adapt);
  sched__lr_tune_due(s);
  sched__adaptive_due(s);
}

/* The next sweep to check, taken off the queue, the queue then busy; 0
 * while a check is under way or none is queued. */
static int64_t take(sched__sweepq *q) {
  if (q->busy || q->n == 0)
    return 0;
  int64_t sweep_id = q->pending[0];
  memmove(q->pending, q->pending + 1, (size_t)(q->n - 1) * sizeof *q->pending);
  q->n--;
  q->busy = 1;
  return sweep_id;
}

void sched__sweepq_free(sched__sweepq *q) {
  free(q->pending);
  free(q->later);
  q->pending = q->later = NULL;
  q->n = q->cap = q->busy = q->nlater = q->caplater = 0;
}

void *sched__sweepq_job_new(sched *s, sched__sweepq *q, size_t size,
                            void (*release)(sched__sweepq_job *), void (*due)(sched *)) {
  int64_t sweep_id = s->stopping ? 0 : take(q);
  if (!sweep_id)
    return NULL;
  sched__sweepq_job *j = calloc(1, size);
  if (!j) { /* queued again for the next flush */
    out_of_memory(q, sweep_id);
    q->busy = 0;
    add(q, sweep_id);
    return NULL;
  }
  *j = (sched__sweepq_job){.s = s, .q = q, .sweep_id = sweep_id, .release = release, .due = due};
  j->work.data = j;
  return j;
}

void sched__sweepq_done(sched__sweepq_job *j) {
  sched *s = j->s;
  sched__sweepq *q = j->q;
  void (*due)(sched *) = j->due;
  j->release(j);
  free(j->spec);
  free(j);
  q->busy = 0;
  due(s);
}

int sched__sweepq_job_failed(sched__sweepq_job *j, int status, const char *doing,
                             const char *errmsg) {
  if (status == 0)
    return 0;
  /* queued again at the next flush (a lease tick away) when the connection
   * was lost or the statement ran too long (a check stores nothing twice,
   * so it may run again). Not at once: with the database down every check
   * fails at once, and an immediate retry would spin the loop and the log. */
  fprintf(stderr, "scheduler: sweep %" PRId64 ": %s failed: %s\n", j->sweep_id, doing, errmsg);
  if ((status == SS_ECONN || status == SS_ETIMEOUT) &&
      ids_add(&j->q->later, &j->q->nlater, &j->q->caplater, j->sweep_id))
    out_of_memory(j->q, j->sweep_id);
  sched__sweepq_done(j);
  return 1;
}

void sched__sweepq_job_queue(sched__sweepq_job *j, uv_work_cb work, uv_after_work_cb after,
                             const char *what) {
  int rc = uv_queue_work(j->s->loop, &j->work, work, after);
  if (rc) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": its %s: %s\n", j->sweep_id, what,
            uv_strerror(rc));
    sched__sweepq_done(j);
  }
}

int sched__sweepq_job_ended(sched__sweepq_job *j, int status, const char *undone,
                            const char *reason) {
  if (status != 0 || j->s->stopping) {
    sched__sweepq_done(j);
    return 1;
  }
  if (j->rc) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": its %s: %s\n", j->sweep_id, undone,
            j->rc == SS_ENOMEM ? "out of memory" : reason);
    sched__sweepq_done(j);
    return 1;
  }
  return 0;
}

void sched__sweepq_stored(sched__sweepq_job *j, int64_t sweep_id, json_t *ev, int64_t added) {
  sched *s = j->s;
  sched__events_emit(&s->ev, "sweep", ev);
  sched__sweep_status(s, sweep_id);
  if (added > 0)
    sched__place(s);
  sched__sweepq_done(j);
}

store_sweep_new sched__sweepq_new_runs(int priority, int gpus, int max_attempts,
                                       const char *runs_json) {
  return (store_sweep_new){.priority = priority,
                           .gpus = gpus,
                           .max_attempts = max_attempts > 0 ? max_attempts : 3,
                           .runs_json = runs_json};
}

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

void sched__sweepq_add(sched__sweepq *q, int64_t sweep_id) {
  for (int i = 0; i < q->n; i++)
    if (q->pending[i] == sweep_id)
      return;
  if (q->n == q->cap) {
    int cap = q->cap ? 2 * q->cap : 16;
    int64_t *p = realloc(q->pending, (size_t)cap * sizeof *p);
    if (!p)
      return out_of_memory(q, sweep_id);
    q->pending = p;
    q->cap = cap;
  }
  q->pending[q->n++] = sweep_id;
}

int64_t sched__sweepq_take(sched__sweepq *q) {
  if (q->busy || q->n == 0)
    return 0;
  int64_t sweep_id = q->pending[0];
  memmove(q->pending, q->pending + 1, (size_t)(q->n - 1) * sizeof *q->pending);
  q->n--;
  q->busy = 1;
  return sweep_id;
}

void sched__sweepq_failed(sched__sweepq *q, int64_t sweep_id, int status, const char *doing,
                          const char *errmsg) {
  fprintf(stderr, "scheduler: sweep %" PRId64 ": %s failed: %s\n", sweep_id, doing, errmsg);
  if (status == SS_ECONN || status == SS_ETIMEOUT)
    sched__sweepq_add(q, sweep_id);
}

void sched__sweepq_put_back(sched__sweepq *q, int64_t sweep_id) {
  out_of_memory(q, sweep_id);
  q->busy = 0;
  sched__sweepq_add(q, sweep_id);
}

void sched__sweepq_free(sched__sweepq *q) {
  free(q->pending);
  q->pending = NULL;
  q->n = q->cap = q->busy = 0;
}

int sched__sweepq_queue(sched *s, uv_work_t *w, uv_work_cb work, uv_after_work_cb after,
                        int64_t sweep_id, const char *what) {
  int rc = uv_queue_work(s->loop, w, work, after);
  if (rc)
    fprintf(stderr, "scheduler: sweep %" PRId64 ": its %s: %s\n", sweep_id, what, uv_strerror(rc));
  return rc;
}

void sched__sweepq_stored(sched *s, int64_t sweep_id, json_t *ev, int64_t added) {
  sched__events_emit(&s->ev, "sweep", ev);
  sched__sweep_status(s, sweep_id);
  if (added > 0)
    sched__place(s);
}

store_sweep_new sched__sweepq_new_runs(int priority, int gpus, int max_attempts,
                                       const char *runs_json) {
  return (store_sweep_new){.priority = priority,
                           .gpus = gpus,
                           .max_attempts = max_attempts > 0 ? max_attempts : 3,
                           .runs_json = runs_json};
}

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

void sched__sweepq_add(sched__sweepq *q, int64_t sweep_id) {
  if (ids_add(&q->pending, &q->n, &q->cap, sweep_id))
    out_of_memory(q, sweep_id);
}

void sched__sweepq_retry(sched__sweepq *q) {
  for (int i = 0; i < q->nlater; i++)
    sched__sweepq_add(q, q->later[i]);
  q->nlater = 0;
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
  if ((status == SS_ECONN || status == SS_ETIMEOUT) &&
      ids_add(&q->later, &q->nlater, &q->caplater, sweep_id))
    out_of_memory(q, sweep_id);
}

void sched__sweepq_put_back(sched__sweepq *q, int64_t sweep_id) {
  out_of_memory(q, sweep_id);
  q->busy = 0;
  sched__sweepq_add(q, sweep_id);
}

void sched__sweepq_free(sched__sweepq *q) {
  free(q->pending);
  free(q->later);
  q->pending = q->later = NULL;
  q->n = q->cap = q->busy = q->nlater = q->caplater = 0;
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

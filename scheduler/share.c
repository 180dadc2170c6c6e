/* Fair share (share.h). */
#include "scheduler/share.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

double sched__share_expected_s(const store_queued *q) {
  double devices = q->gpus > 0 ? q->gpus : (q->slots > 0 ? q->slots : 1);
  double s = q->flops > 0 && q->throughput > 0 ? q->flops / q->throughput : SCHED__SHARE_EST_S;
  return devices * s;
}

/* one person's runs in the read, as a list of indices into it, and what
 * the ordering charged them */
typedef struct share_person {
  int64_t owner_id;
  int head, tail; /* their next run still to take, and their last (-1: none) */
  double usage;
} share_person;

/* 1 when a's next run goes before b's: less usage, then today's order */
static int before(const store_queued *runs, const share_person *a, const share_person *b) {
  if (a->usage != b->usage)
    return a->usage < b->usage;
  const store_queued *x = &runs[a->head], *y = &runs[b->head];
  if (x->priority != y->priority)
    return x->priority > y->priority;
  if (x->sweep_id != y->sweep_id)
    return x->sweep_id < y->sweep_id;
  if (x->flops != y->flops)
    return x->flops > y->flops;
  return x->id < y->id;
}

/* Links each run to the next of its owner (next[i]) in the order given,
 * one share_person per owner (at most n); the number of people. */
static int group(const store_queued *runs, int n, share_person *p, int *next) {
  int people = 0, last = 0;
  for (int i = 0; i < n; i++) {
    int k = last < people && p[last].owner_id == runs[i].owner_id ? last : 0;
    while (k < people && p[k].owner_id != runs[i].owner_id)
      k++;
    if (k == people)
      p[people++] = (share_person){runs[i].owner_id, i, -1, runs[i].owner_usage};
    else
      next[p[k].tail] = i;
    next[i] = -1;
    p[k].tail = i;
    last = k;
  }
  return people;
}

int sched__share_order(store_queued *runs, int n) {
  if (n < 2)
    return 0;
  share_person *p = malloc((size_t)n * sizeof *p);
  int *next = malloc((size_t)n * sizeof *next);
  store_queued *out = malloc((size_t)n * sizeof *out);
  if (!p || !next || !out) {
    free(p);
    free(next);
    free(out);
    return SS_ENOMEM;
  }
  int people = group(runs, n, p, next);
  for (int taken = 0; taken < n && people > 1; taken++) {
    int best = -1;
    for (int j = 0; j < people; j++)
      if (p[j].head >= 0 && (best < 0 || before(runs, &p[j], &p[best])))
        best = j;
    out[taken] = runs[p[best].head];
    p[best].head = next[p[best].head];
    p[best].usage += sched__share_expected_s(&out[taken]);
  }
  if (people > 1) /* one person: their own order, as it is */
    memcpy(runs, out, (size_t)n * sizeof *out);
  free(out);
  free(next);
  free(p);
  return 0;
}

/* q's owner's entry, added when they have a GPU limit; NULL without one
 * (or when the table is full: then no limit is kept for them this pass,
 * which the next pass, reading the GPUs in use afresh, corrects) */
static int entry(sched__share_pass *p, const store_queued *q) {
  if (q->owner_max_gpus < 0)
    return -1;
  for (int i = 0; i < p->n; i++)
    if (p->o[i].owner_id == q->owner_id)
      return i;
  if (p->n == SCHED__SHARE_LIMITED)
    return -1;
  p->o[p->n].owner_id = q->owner_id;
  p->o[p->n].gpus = q->owner_gpus;
  p->o[p->n].max = q->owner_max_gpus;
  return p->n++;
}

int sched__share_allows(sched__share_pass *p, const store_queued *q) {
  int i = q->gpus > 0 ? entry(p, q) : -1;
  return i < 0 || p->o[i].gpus + q->gpus <= p->o[i].max;
}

void sched__share_took(sched__share_pass *p, const store_queued *q) {
  int i = q->gpus > 0 ? entry(p, q) : -1;
  if (i >= 0)
    p->o[i].gpus += q->gpus;
}

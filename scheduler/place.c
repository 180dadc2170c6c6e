/* Placement (place.h): queued runs onto the connected workers' capacity. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/internal.h"
#include "store/runs.h"

/* GPUs of a connection that GPU runs may use: none unless the worker's
 * trainer can run the CUDA backend on them */
static int usable_gpus(const sched__wconn *c) { return c->cuda_ok ? c->ngpus : 0; }

/* free usable GPUs of a connection */
static int free_gpus(const sched__wconn *c) {
  int n = 0;
  for (int g = 0; g < usable_gpus(c); g++)
    n += !c->gpu_busy[g];
  return n;
}

/* a worker that said it is stopping takes nothing new */
static int placeable(const sched__wconn *c) { return c->authed && !c->closing && !c->draining; }

/* A worker with room for a run that needs `gpus` GPUs (0: `slots` CPU
 * slots, one per rank); fills the chosen GPU indices. Prefers the fullest
 * worker that fits, so large holes stay open for large runs. */
static sched__wconn *find_room(sched *s, int gpus, int slots, int *chosen,
                               const sched__wconn *exclude) {
  sched__wconn *best = NULL;
  int best_free = 1 << 30;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!placeable(c) || c == exclude)
      continue;
    int free_n = gpus == 0 ? c->cpu_slots - c->cpu_busy : free_gpus(c);
    if (free_n < (gpus == 0 ? slots : gpus))
      continue;
    if (free_n < best_free) {
      best = c;
      best_free = free_n;
    }
  }
  if (best && gpus > 0) {
    int k = 0;
    for (int g = 0; g < usable_gpus(best) && k < gpus; g++)
      if (!best->gpu_busy[g])
        chosen[k++] = g;
  }
  return best;
}

static int total_free(sched *s) {
  int n = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    if (placeable(c))
      n += c->cpu_slots - c->cpu_busy + free_gpus(c);
  return n;
}

/* When a waiting run was first found blocked (uv_now ms). */
static uint64_t blocked_since(sched__placement *pl, int64_t run_id, uint64_t now) {
  for (int i = 0; i < pl->nblocked; i++)
    if (pl->blocked[i].run_id == run_id)
      return pl->blocked[i].since_ms;
  if (pl->nblocked == SCHED__BLOCKED) {
    memmove(pl->blocked, pl->blocked + 1, sizeof pl->blocked[0] * (SCHED__BLOCKED - 1));
    pl->nblocked--;
  }
  pl->blocked[pl->nblocked].run_id = run_id;
  pl->blocked[pl->nblocked++].since_ms = now;
  return now;
}

static void unblocked(sched__placement *pl, int64_t run_id) {
  for (int i = 0; i < pl->nblocked; i++)
    if (pl->blocked[i].run_id == run_id) {
      pl->blocked[i] = pl->blocked[--pl->nblocked];
      return;
    }
}

/* The worker a waiting run of `gpus` GPUs is kept for: of those with at
 * least that many GPUs, the one with the most free (the soonest to drain). */
static const sched__wconn *reserve_for(sched *s, int gpus) {
  const sched__wconn *best = NULL;
  int best_free = -1;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!placeable(c) || usable_gpus(c) < gpus)
      continue;
    int free_n = free_gpus(c);
    if (free_n > best_free) {
      best = c;
      best_free = free_n;
    }
  }
  return best;
}

typedef struct assign_ctx {
  sched *s;
  int64_t worker_id, run_id;
  int ngpus, gpus[8];
  int pending; /* last of a placement pass */
} assign_ctx;

static void place_done(sched *s) {
  s->pl.placing = 0;
  if (s->pl.again) {
    s->pl.again = 0;
    sched__place(s);
  }
}

/* Sends the assignment of a claimed run: its config exactly as stored (the
 * planner chose its checkpoint interval before hashing it), where its
 * checkpoints go, and for a resumed attempt where to resume. */
static void send_assign(sched *s, sched__wconn *c, const assign_ctx *a, const store_claim *cl) {
  json_error_t je;
  json_t *config = json_loads(cl->config, 0, &je);
  json_t *gl = json_array();
  for (int i = 0; i < a->ngpus; i++) /* placement's positions, as the worker's device indices */
    json_array_append_new(gl, json_integer(c->gpu_index[a->gpus[i]]));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/run-%" PRId64, s->o.checkpoint_root, a->run_id);
  json_t *msg =
      json_pack("{s:s,s:I,s:i,s:o,s:o,s:s,s:b}", "type", "assign", "run_id", (json_int_t)a->run_id,
                "attempt", cl->attempt, "config", config ? config : json_object(), "gpus", gl,
                "checkpoint_dir", dir, "resume", cl->attempt > 1);
  if (cl->attempt > 1 && cl->resume_max_step >= 0)
    json_object_set_new(msg, "resume_max_step", json_integer(cl->resume_max_step));
  sched__send(c, msg);
}

static void on_given_back(void *ud, int status, const char *run_status, int64_t sweep_id,
                          const char *errmsg) {
  sched *s = ud;
  if (status != 0)
    sched__logf("giving a run back from a stopping worker failed: %s", errmsg);
  else if (run_status) {
    sched__sweep_touch(s, sweep_id, 0);
    sched__place(s);
  }
}

/* The claim of a queued run returned: send the assignment, or give the
 * capacity back when another pass took the run first; a run claimed for a
 * worker that has since said it is stopping goes straight back to the
 * queue, as interrupted (no attempt spent). */
static void on_claimed(void *ud, int status, const store_claim *cl, const char *errmsg) {
  assign_ctx *a = ud;
  sched *s = a->s;
  sched__wconn *c = sched__conn_by_worker(&s->wp, a->worker_id);
  if (status != 0)
    sched__logf("claiming run %" PRId64 " failed: %s", a->run_id, errmsg);
  if (!cl || !c) {
    if (c)
      sched__conn_release_run(c, a->run_id);
    if (cl && !c) /* the worker went away: its lease will expire and re-queue it */
      sched__logf("run %" PRId64 " claimed for a worker that disconnected", a->run_id);
  } else if (c->draining) {
    sched__conn_release_run(c, a->run_id);
    sched__logf("run %" PRId64 " attempt %d: claimed for worker %s as it said it is stopping; "
                "back to the queue (no attempt spent)",
                a->run_id, cl->attempt, c->name);
    store_runs_requeue_interrupted(s->db, a->run_id, cl->attempt, a->worker_id,
                                   "interrupted: its worker was stopping", on_given_back, s);
  } else {
    sched__wrun *w = sched__conn_find_run(c, a->run_id);
    if (w)
      w->attempt = cl->attempt;
    send_assign(s, c, a, cl);
    s->n.assigns++;
    if (cl->attempt == 1)
      sched__sweep_touch(s, cl->sweep_id, 0);
    sched__events_emit(&s->ev, "run",
                       json_pack("{s:I,s:s,s:i,s:I}", "id", (json_int_t)a->run_id, "status",
                                 "running", "attempt", cl->attempt, "worker",
                                 (json_int_t)a->worker_id));
  }
  if (a->pending)
    place_done(s);
  free(a);
}

/* Takes the capacity at once, before the database answers, and claims the
 * run; NULL when out of memory. */
static assign_ctx *assign(sched *s, sched__wconn *c, int64_t run_id, int gpus, const int *chosen,
                          int slots) {
  assign_ctx *a = calloc(1, sizeof *a);
  if (!a || !sched__conn_add_run(c, run_id, 0, gpus, chosen, slots)) {
    free(a);
    return NULL;
  }
  a->s = s;
  a->worker_id = c->worker_id;
  a->run_id = run_id;
  a->ngpus = gpus;
  memcpy(a->gpus, chosen, sizeof a->gpus);
  store_runs_claim(s->db, run_id, c->worker_id, s->o.lease_s, on_claimed, a);
  return a;
}

static void on_queue(void *ud, int status, const store_queued *runs, int n, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    sched__logf("reading the queue failed: %s", errmsg);
    place_done(s);
    return;
  }
  assign_ctx *last = NULL;
  int blocked_gpus = 0; /* backfill: the smallest GPU count that did not fit */
  /* reservation: the first multi-GPU run that has waited reserve_after_s
   * keeps the worker it will run on from smaller runs behind it, so that
   * worker drains and backfill cannot starve it */
  const sched__wconn *reserved = NULL;
  uint64_t now = uv_now(s->loop);
  for (int i = 0; i < n; i++) {
    int64_t run_id = runs[i].id;
    int gpus = runs[i].gpus;
    int chosen[8] = {0};
    if (gpus > 8)
      continue;
    if (blocked_gpus && gpus >= blocked_gpus)
      continue;
    int slots = runs[i].slots > 0 ? runs[i].slots : 1;
    sched__wconn *c = find_room(s, gpus, slots, chosen, gpus > 0 ? reserved : NULL);
    if (!c) {
      /* a larger run waits; smaller ones behind it may still start */
      if (gpus > 0 && (!blocked_gpus || gpus < blocked_gpus))
        blocked_gpus = gpus;
      if (gpus == 0)
        blocked_gpus = 1;
      if (gpus > 1 && !reserved &&
          now - blocked_since(&s->pl, run_id, now) >= (uint64_t)s->o.reserve_after_s * 1000)
        reserved = reserve_for(s, gpus);
      continue;
    }
    unblocked(&s->pl, run_id);
    assign_ctx *a = assign(s, c, run_id, gpus, chosen, slots);
    if (a)
      last = a;
    if (total_free(s) == 0)
      break;
  }
  if (last)
    last->pending = 1;
  else
    place_done(s);
}

void sched__place(sched *s) {
  if (s->stopping)
    return;
  if (s->pl.placing) {
    s->pl.again = 1;
    return;
  }
  int room = total_free(s);
  if (room == 0 || !db_ready(s->db))
    return;
  s->pl.placing = 1;
  store_runs_queue(s->db, room * 4 + 16, on_queue, s);
}

int sched__place_why(sched *s, int gpus, int slots, char *buf, size_t len) {
  int workers = 0, cpu = 0, fit = 0;
  size_t off = 0;
  char others[768] = "";
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    workers++;
    cpu += c->cpu_slots >= (slots > 0 ? slots : 1);
    fit += usable_gpus(c) >= gpus;
    if (gpus > 0 && off < sizeof others) {
      if (c->ngpus > 0 && !c->cuda_ok)
        off += (size_t)snprintf(others + off, sizeof others - off,
                                "; worker %s has %d GPU(s) but cannot run CUDA: %s", c->name,
                                c->ngpus, c->cuda_error[0] ? c->cuda_error : "no reason given");
      else if (usable_gpus(c) < gpus)
        off += (size_t)snprintf(others + off, sizeof others - off, "; worker %s has %d GPU(s)",
                                c->name, usable_gpus(c));
    }
  }
  if (workers == 0)
    snprintf(buf, len, "waiting for a worker: none is connected");
  else if (gpus == 0 && cpu == 0 && slots > 1)
    snprintf(buf, len,
             "no connected worker has %d CPU slots, one for each of a run's %d ranks (a worker "
             "takes them with --cpu-slots)",
             slots, slots);
  else if (gpus == 0 && cpu == 0)
    snprintf(buf, len, "no connected worker has a CPU slot (workers take one with --cpu-slots)");
  else if (gpus > 0 && fit == 0)
    snprintf(buf, len, "no connected worker can run a run of %d GPU(s) with the CUDA backend%s",
             gpus, others);
  else
    return 0;
  return 1;
}

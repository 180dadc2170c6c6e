/* Placement (place.h): queued runs onto the connected workers' capacity. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/token.h"
#include "scheduler/internal.h"
#include "scheduler/share.h"
#include "store/runs.h"

/* the distinct trainers placement reads the queue for, at most */
#define SCHED__OFFERED_MAX 64

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

/* A worker that may take run q: it runs q's trainer and, for a run that
 * must run on one worker (a reproduction with --on), it is that worker, by
 * name or host. */
static int takes(const sched__wconn *c, const store_queued *q) {
  return sched__conn_offers(c, q->trainer) &&
         (!q->on[0] || !strcmp(c->name, q->on) || !strcmp(c->host, q->on));
}

/* A worker with room for a run that needs `gpus` GPUs (0: `slots` CPU
 * slots, one per rank); fills the chosen GPU indices. Prefers the fullest
 * worker that fits, so large holes stay open for large runs. */
static sched__wconn *find_room(sched *s, int gpus, int slots, int *chosen,
                               const sched__wconn *exclude, const store_queued *q) {
  sched__wconn *best = NULL;
  int best_free = 1 << 30;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!placeable(c) || c == exclude || !takes(c, q))
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

/* The trainers the placeable workers run, as a PostgreSQL text array
 * ("{\"builtin\",\"torch\"}"; names are letters, digits, '_', '-' and '.',
 * quoted all the same: unquoted, a trainer named "null" would be a NULL
 * element): the queue read leaves out runs that no connected worker could
 * take. */
static void offered_trainers(sched *s, char *buf, size_t len) {
  const char *names[SCHED__OFFERED_MAX];
  int n = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    for (int i = 0; placeable(c) && i < c->ntrainers; i++) {
      int seen = 0;
      for (int k = 0; k < n && !seen; k++)
        seen = !strcmp(names[k], c->trainers[i]);
      if (!seen && n < SCHED__OFFERED_MAX)
        names[n++] = c->trainers[i];
    }
  size_t off = (size_t)snprintf(buf, len, "{");
  for (int k = 0; k < n && off < len; k++)
    off += (size_t)snprintf(buf + off, len - off, "%s\"%s\"", k ? "," : "", names[k]);
  if (off < len)
    snprintf(buf + off, len - off, "}");
}

/* appends text to a PostgreSQL array literal at off (just after its '{'
 * or its last element) as a quoted element, '"' and '\\' escaped; the new
 * offset. buf holds 2 * strlen(text) + 4 more bytes (offered_workers). */
static size_t array_item(char *buf, size_t off, const char *text) {
  if (buf[off - 1] != '{')
    buf[off++] = ',';
  buf[off++] = '"';
  for (const char *p = text; *p; p++) {
    if (*p == '"' || *p == '\\')
      buf[off++] = '\\';
    buf[off++] = *p;
  }
  buf[off++] = '"';
  buf[off] = 0;
  return off;
}

/* The placeable workers' names and hosts as a PostgreSQL text array, for
 * the runs that must run on one worker (malloc'd; NULL when out of
 * memory: then every run is read). */
static char *offered_workers(sched *s) {
  size_t len = 3;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    if (placeable(c))
      len += 2 * (strlen(c->name) + strlen(c->host)) + 8;
  char *buf = malloc(len);
  if (!buf)
    return NULL;
  size_t off = 1;
  buf[0] = '{';
  buf[1] = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    if (placeable(c)) {
      off = array_item(buf, off, c->name);
      off = array_item(buf, off, c->host);
    }
  snprintf(buf + off, len - off, "}");
  return buf;
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
static const sched__wconn *reserve_for(sched *s, int gpus, const store_queued *q) {
  const sched__wconn *best = NULL;
  int best_free = -1;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!placeable(c) || usable_gpus(c) < gpus || !takes(c, q))
      continue;
    int free_n = free_gpus(c);
    if (free_n > best_free) {
      best = c;
      best_free = free_n;
    }
  }
  return best;
}

/* A CPU run's ranks spread over several workers (gang placement): part 0
 * (rank 0 on) is the worker the run is claimed for. */
typedef struct gang_part {
  int64_t worker_id;
  int first, count; /* ranks first .. first + count - 1 */
  int gpus[8];      /* a GPU run's: one GPU a rank (placement's positions) */
} gang_part;

typedef struct assign_ctx {
  sched *s;
  int64_t worker_id, run_id;
  int ngpus, gpus[8];
  int pending;    /* last of a placement pass */
  int from_cache; /* the run came from placement's cache, not a fresh read */
  int nparts;     /* > 1: spread over these workers */
  gang_part part[SCHED__GANG_MAX];
} assign_ctx;

static void place_done(sched *s) {
  s->pl.placing = 0;
  if (s->pl.again) {
    int fresh = s->pl.again == 2;
    s->pl.again = 0;
    if (fresh)
      sched__place(s);
    else
      sched__place_freed(s);
  }
}

/* Sends the assignment of a claimed run: its config exactly as stored (the
 * planner chose its checkpoint interval before hashing it), where its
 * checkpoints go, and for a resumed attempt where to resume. */
/* A gang's "dist": this part's ranks, rank 0's address (its worker's, as
 * this scheduler sees it, and a port of the run's) and the run's secret. */
static json_t *gang_dist(const assign_ctx *a, int p, const store_claim *cl, const char *secret) {
  sched *s = a->s;
  sched__wconn *c0 = sched__conn_by_worker(&s->wp, a->part[0].worker_id);
  char addr[128];
  int port = SCHED__GANG_PORT_BASE + (int)((a->run_id * 31 + cl->attempt) % SCHED__GANG_PORTS);
  snprintf(addr, sizeof addr, strchr(c0->peer, ':') ? "[%s]:%d" : "%s:%d", c0->peer, port);
  json_t *ranks = json_array();
  for (int r = 0; r < a->part[p].count; r++)
    json_array_append_new(ranks, json_integer(a->part[p].first + r));
  return json_pack("{s:o,s:s,s:s}", "ranks", ranks, "addr", addr, "secret", secret);
}

static void send_assign(sched *s, sched__wconn *c, const assign_ctx *a, const store_claim *cl,
                        int ngpus, const int *gpus, json_t *dist) {
  json_error_t je;
  json_t *config = json_loads(cl->config, 0, &je);
  json_t *gl = json_array();
  for (int i = 0; i < ngpus; i++) /* placement's positions, as the worker's device indices */
    json_array_append_new(gl, json_integer(c->gpu_index[gpus[i]]));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/run-%" PRId64, s->o.checkpoint_root, a->run_id);
  json_t *msg =
      json_pack("{s:s,s:I,s:i,s:o,s:o,s:s,s:b}", "type", "assign", "run_id", (json_int_t)a->run_id,
                "attempt", cl->attempt, "config", config ? config : json_object(), "gpus", gl,
                "checkpoint_dir", dir, "resume", cl->attempt > 1);
  if (cl->attempt > 1 && cl->resume_max_step >= 0)
    json_object_set_new(msg, "resume_max_step", json_integer(cl->resume_max_step));
  if (cl->branch_path) /* a wsd branch whose trunk reported its branch point */
    json_object_set_new(msg, "branch_from", json_string(cl->branch_path));
  json_t *ks = cl->keep_steps ? json_loads(cl->keep_steps, 0, NULL) : NULL;
  if (json_array_size(ks) > 0) /* a trunk with branches waiting */
    json_object_set_new(msg, "keep_steps", ks);
  else
    json_decref(ks);
  if (dist)
    json_object_set_new(msg, "dist", dist);
  sched__send(c, msg);
}

static void on_given_back(void *ud, int status, const char *run_status, int64_t sweep_id,
                          double retry_s, const char *errmsg) {
  (void)retry_s; /* an interruption: at once */
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
/* the other workers of a gang: their capacity back */
static void release_parts(sched *s, const assign_ctx *a) {
  for (int p = 1; p < a->nparts; p++) {
    sched__wconn *c = sched__conn_by_worker(&s->wp, a->part[p].worker_id);
    if (c)
      sched__conn_release_run(c, a->run_id);
  }
}

/* every worker of a gang still there and taking work */
static int gang_whole(sched *s, const assign_ctx *a) {
  for (int p = 1; p < a->nparts; p++) {
    sched__wconn *c = sched__conn_by_worker(&s->wp, a->part[p].worker_id);
    if (!c || c->draining)
      return 0;
  }
  return 1;
}

/* Sends a gang's assignments: the same run, each worker its ranks. */
static void send_gang(sched *s, const assign_ctx *a, const store_claim *cl) {
  char secret[33];
  if (token_random_hex(secret, 16) != 0) /* getrandom cannot fail on Linux; still */
    snprintf(secret, sizeof secret, "%016llx%016llx", (unsigned long long)uv_hrtime(),
             (unsigned long long)a->run_id);
  for (int p = 0; p < a->nparts; p++) {
    sched__wconn *c = sched__conn_by_worker(&s->wp, a->part[p].worker_id);
    sched__wrun *w = sched__conn_find_run(c, a->run_id);
    if (w)
      w->attempt = cl->attempt;
    send_assign(s, c, a, cl, a->ngpus ? a->part[p].count : 0, a->part[p].gpus,
                gang_dist(a, p, cl, secret));
  }
  sched__logf("run %" PRId64 " attempt %d: %d ranks over %d workers", a->run_id, cl->attempt,
              a->part[a->nparts - 1].first + a->part[a->nparts - 1].count, a->nparts);
}

static void on_claimed(void *ud, int status, const store_claim *cl, const char *errmsg) {
  assign_ctx *a = ud;
  sched *s = a->s;
  sched__wconn *c = sched__conn_by_worker(&s->wp, a->worker_id);
  if (status != 0)
    sched__logf("claiming run %" PRId64 " failed: %s", a->run_id, errmsg);
  if (!cl && a->from_cache) {
    /* the cache was stale (the run was cancelled or taken meanwhile): the
     * capacity goes back, and a fresh read places it */
    s->pl.ncache = 0;
    if (s->pl.placing)
      s->pl.again = 2;
    else
      sched__place(s);
  }
  if (!cl || !c || (a->nparts > 1 && !gang_whole(s, a)))
    release_parts(s, a);
  if (c && cl && a->nparts > 1 && !gang_whole(s, a)) {
    /* a worker of the gang left meanwhile: back to the queue, no attempt spent */
    sched__conn_release_run(c, a->run_id);
    sched__logf("run %" PRId64 " attempt %d: a worker of its gang left before it started; back "
                "to the queue (no attempt spent)",
                a->run_id, cl->attempt);
    store_runs_requeue_interrupted(s->db, a->run_id, cl->attempt, a->worker_id,
                                   "interrupted: a worker of its gang left", on_given_back, s);
  } else if (!cl || !c) {
    if (c)
      sched__conn_release_run(c, a->run_id);
    if (cl && !c) /* the worker went away: its lease will expire and re-queue it */
      sched__logf("run %" PRId64 " claimed for a worker that disconnected", a->run_id);
  } else if (c->draining) {
    sched__conn_release_run(c, a->run_id);
    release_parts(s, a);
    sched__logf("run %" PRId64 " attempt %d: claimed for worker %s as it said it is stopping; "
                "back to the queue (no attempt spent)",
                a->run_id, cl->attempt, c->name);
    store_runs_requeue_interrupted(s->db, a->run_id, cl->attempt, a->worker_id,
                                   "interrupted: its worker was stopping", on_given_back, s);
  } else {
    sched__wrun *w = sched__conn_find_run(c, a->run_id);
    if (w)
      w->attempt = cl->attempt;
    if (a->nparts > 1)
      send_gang(s, a, cl);
    else
      send_assign(s, c, a, cl, a->ngpus, a->gpus, NULL);
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

/* What a worker can give a gang now: free CPU slots, or free usable GPUs. */
static int gang_free(const sched__wconn *c, int gpu, const store_queued *q) {
  if (!takes(c, q))
    return 0;
  return gpu ? free_gpus(c) : c->cpu_slots - c->cpu_busy;
}

/* What all placeable workers have together, busy or not: CPU slots, or
 * usable GPUs (gpu set). A gang larger than that can never start. */
static int gang_capacity(sched *s, int gpu, const store_queued *q) {
  int n = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    if (placeable(c) && takes(c, q))
      n += gpu ? usable_gpus(c) : c->cpu_slots;
  return n;
}

/* Gang placement of a run of `ranks` ranks (a CPU slot or, gpu set, a GPU
 * each) that no one worker has room for: the workers with the most free,
 * most first, until the ranks fit (rank 0 and the first ranks on the one
 * with the most). NULL when all they have free together is too little, or
 * out of memory. */
static assign_ctx *assign_gang(sched *s, int64_t run_id, int ranks, int gpu,
                               const store_queued *q) {
  sched__wconn *pick[SCHED__GANG_MAX];
  int n = 0, have = 0, slots = ranks;
  while (have < slots && n < SCHED__GANG_MAX) {
    sched__wconn *best = NULL;
    for (sched__wconn *c = s->wp.conns; c; c = c->next) {
      int taken = 0;
      for (int i = 0; i < n; i++)
        taken |= pick[i] == c;
      if (placeable(c) && !taken && gang_free(c, gpu, q) > 0 &&
          (!best || gang_free(c, gpu, q) > gang_free(best, gpu, q)))
        best = c;
    }
    if (!best)
      break;
    pick[n++] = best;
    have += gang_free(best, gpu, q);
  }
  if (have < slots || n < 2)
    return NULL;
  assign_ctx *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  a->s = s;
  a->run_id = run_id;
  a->worker_id = pick[0]->worker_id;
  a->ngpus = gpu ? ranks : 0;
  int next = 0;
  for (int i = 0; i < n && next < slots; i++) {
    int k = gang_free(pick[i], gpu, q);
    k = k < slots - next ? k : slots - next;
    k = gpu && k > 8 ? 8 : k;
    int g = 0;
    for (int p = 0; gpu && p < usable_gpus(pick[i]) && g < k; p++)
      if (!pick[i]->gpu_busy[p])
        a->part[i].gpus[g++] = p;
    sched__wrun *w = sched__conn_add_run(pick[i], run_id, 0, gpu ? k : 0, a->part[i].gpus, k);
    if (!w) {
      a->nparts = i;
      release_parts(s, a);
      if (i > 0)
        sched__conn_release_run(pick[0], run_id);
      free(a);
      return NULL;
    }
    w->secondary = i > 0;
    a->part[i].worker_id = pick[i]->worker_id;
    a->part[i].first = next;
    a->part[i].count = k;
    a->nparts = i + 1;
    next += k;
  }
  store_runs_claim(s->db, run_id, a->worker_id, s->o.lease_s, on_claimed, a);
  return a;
}

/* Keeps the runs of a pass's queue that it did not claim, in order, as
 * placement's cache (runs may be the cache itself); none when out of memory. */
static void cache_keep(sched *s, const store_queued *runs, int n, const unsigned char *claimed) {
  sched__placement *pl = &s->pl;
  if (!claimed) {
    pl->ncache = 0;
    return;
  }
  if (runs != pl->cache && n > 0) {
    store_queued *c = realloc(pl->cache, (size_t)n * sizeof *c);
    if (!c) {
      pl->ncache = 0;
      return;
    }
    pl->cache = c;
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!claimed[i])
      pl->cache[k++] = runs[i];
  pl->ncache = k;
}

/* 1 when runs are of more than one person */
static int several_people(const store_queued *runs, int n) {
  for (int i = 1; i < n; i++)
    if (runs[i].owner_id != runs[0].owner_id)
      return 1;
  return 0;
}

/* Notes that q's sweep waits for its owner's GPU limit. */
static void limited(sched__placement *pl, const store_queued *q) {
  for (int i = 0; i < pl->nlimited; i++)
    if (pl->limited[i].sweep_id == q->sweep_id)
      return;
  if (pl->nlimited < SCHED__BLOCKED) {
    pl->limited[pl->nlimited].sweep_id = q->sweep_id;
    pl->limited[pl->nlimited++].max_gpus = q->owner_max_gpus;
  }
}

/* What a placement pass holds back for the runs that wait before the one
 * it looks at (place_runs). */
typedef struct pass_hold {
  int blocked_gpus; /* backfill: the smallest GPU count that did not fit */
  /* reservation: the first multi-GPU run that has waited reserve_after_s
   * keeps the worker it will run on from smaller runs behind it, so that
   * worker drains and backfill cannot starve it */
  const sched__wconn *reserved;
  /* a gang (ranks spread over workers) that has waited reserve_after_s
   * keeps what frees up likewise: no CPU run behind a waiting CPU gang
   * starts (hold_cpu), no GPU run behind a waiting GPU gang (blocked_gpus
   * 1), until it has room; only a gang that all the workers together can
   * hold, else it would stop everything behind it for good */
  int hold_cpu;
  uint64_t now, reserve_ms;
} pass_hold;

/* Whether a waiting run has waited reserve_after_s (asked last, as the
 * first ask starts its clock). */
static int waited_long(sched *s, const pass_hold *h, const store_queued *q) {
  return h->now - blocked_since(&s->pl, q->id, h->now) >= h->reserve_ms;
}

/* A run that found no room waits: a larger run waits, smaller ones behind
 * it may still start; one that has waited long enough holds back what
 * frees up. */
static void hold_for(sched *s, pass_hold *h, const store_queued *q, int slots) {
  int gpus = q->gpus;
  if (gpus > 0 && (!h->blocked_gpus || gpus < h->blocked_gpus))
    h->blocked_gpus = gpus;
  if (gpus == 0)
    h->blocked_gpus = 1;
  if (gpus > 1 && !h->reserved && waited_long(s, h, q))
    h->reserved = reserve_for(s, gpus, q);
  if (gpus == 0 && slots > 1 && !h->hold_cpu && slots <= gang_capacity(s, 0, q) &&
      waited_long(s, h, q))
    h->hold_cpu = 1;
  if (gpus > 1 && (gpus > 8 || !reserve_for(s, gpus, q)) && gpus <= gang_capacity(s, 1, q) &&
      waited_long(s, h, q))
    h->blocked_gpus = 1;
}

/* A pass over queued runs in placement order, from a fresh read of the
 * queue (store_runs_queue's callback) or from the cache (from_cache). */
static void place_runs(sched *s, const store_queued *runs, int n, int from_cache) {
  unsigned char *claimed = n > 0 ? calloc((size_t)n, 1) : NULL;
  assign_ctx *last = NULL;
  pass_hold h = {.now = uv_now(s->loop), .reserve_ms = (uint64_t)s->o.reserve_after_s * 1000};
  /* an owner at their GPU limit: their runs wait, holding back no other */
  sched__share_pass *limits = calloc(1, sizeof *limits);
  if (!from_cache)
    s->pl.nlimited = 0;
  for (int i = 0; i < n; i++) {
    int gpus = runs[i].gpus;
    int chosen[8] = {0};
    if ((h.blocked_gpus && gpus >= h.blocked_gpus) || (h.hold_cpu && gpus == 0))
      continue;
    if (limits && !sched__share_allows(limits, &runs[i])) {
      limited(&s->pl, &runs[i]);
      continue;
    }
    int slots = runs[i].slots > 0 ? runs[i].slots : 1;
    /* only the workers that run its trainer, and the one it must run on
     * when it names one (the read left out the runs no connected worker
     * could take; one may have gone since) */
    const store_queued *tr = &runs[i];
    /* over 8 GPUs: only spread over workers (an assignment holds 8 at most) */
    sched__wconn *c =
        gpus > 8 ? NULL : find_room(s, gpus, slots, chosen, gpus > 0 ? h.reserved : NULL, tr);
    /* none has room: a CPU run's ranks spread over workers now; a GPU run's
     * only when no worker has that many GPUs at all (else it waits for one) */
    assign_ctx *a = NULL;
    if (!c && gpus == 0 && slots > 1)
      a = assign_gang(s, tr->id, slots, 0, tr);
    else if (!c && gpus > 1 && (gpus > 8 || !reserve_for(s, gpus, tr)))
      a = assign_gang(s, tr->id, gpus, 1, tr);
    if (!c && !a) {
      if (!tr->on[0]) /* one that waits for its worker alone holds back no other run */
        hold_for(s, &h, tr, slots);
      continue;
    }
    unblocked(&s->pl, tr->id);
    if (!a)
      a = assign(s, c, tr->id, gpus, chosen, slots);
    if (a) {
      a->from_cache = from_cache;
      if (claimed)
        claimed[i] = 1;
      last = a;
      if (limits)
        sched__share_took(limits, tr);
    }
    if (total_free(s) == 0)
      break;
  }
  cache_keep(s, runs, n, claimed);
  free(claimed);
  /* the usage and the GPUs in use per person are the read's: with several
   * people queued (fair share's order) or a limit to keep, the next pass
   * reads them afresh rather than take runs from the cache */
  if (!limits || limits->n > 0 || several_people(runs, n))
    s->pl.ncache = 0;
  free(limits);
  /* what the cache held did not fill the free capacity: the queue beyond
   * it may (a smaller run behind, backfill) */
  if (from_cache && total_free(s) > 0)
    s->pl.again = 2;
  if (last)
    last->pending = 1;
  else
    place_done(s);
}

static void on_queue(void *ud, int status, const store_queued *runs, int n, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    sched__logf("reading the queue failed: %s", errmsg);
    s->pl.ncache = 0;
    place_done(s);
    return;
  }
  /* the fair-share order across people (share.h), on a copy: the read's
   * rows are the store's */
  store_queued *order = n > 0 ? malloc((size_t)n * sizeof *order) : NULL;
  if (order) {
    memcpy(order, runs, (size_t)n * sizeof *order);
    sched__share_order(order, n);
  }
  place_runs(s, order ? order : runs, n, 0);
  free(order);
}

void sched__place(sched *s) {
  s->pl.ncache = 0; /* the queue may have changed */
  if (s->stopping)
    return;
  if (s->pl.placing) {
    s->pl.again = 2;
    return;
  }
  int room = total_free(s);
  if (room == 0 || !db_ready(s->db))
    return;
  s->pl.placing = 1;
  /* the read costs about the same whatever the limit (a scan and a top-N
   * sort of every queued run): a longer one leaves more in the cache for
   * the passes of the next finished runs */
  int limit = room * 4 + 16;
  char trainers[SCHED__OFFERED_MAX * 36 + 4];
  offered_trainers(s, trainers, sizeof trainers);
  char *workers = offered_workers(s);
  store_runs_queue(s->db, limit < SCHED__QUEUE_READ ? SCHED__QUEUE_READ : limit, trainers, workers,
                   on_queue, s);
  free(workers);
}

void sched__place_freed(sched *s) {
  if (s->stopping)
    return;
  if (s->pl.placing) {
    if (!s->pl.again)
      s->pl.again = 1;
    return;
  }
  int room = total_free(s);
  if (room == 0 || !db_ready(s->db))
    return;
  if (s->pl.ncache < room) {
    sched__place(s);
    return;
  }
  s->pl.placing = 1;
  place_runs(s, s->pl.cache, s->pl.ncache, 1);
}

void sched__place_free(sched *s) {
  free(s->pl.cache);
  s->pl.cache = NULL;
  s->pl.ncache = 0;
}

/* 1 when name is an item of list ("a, b, c"; names hold no ',' or ' '),
 * not merely a part of one ("fake" of "fake2") */
static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
      return 1;
  return 0;
}

/* 1 with the reason in buf when no connected worker runs one of trainers
 * (comma-separated), else 0 */
static int trainer_why(sched *s, const char *trainers, char *buf, size_t len) {
  for (const char *p = trainers; p && *p;) {
    size_t n = strcspn(p, ",");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(n < 40 ? n : 40), p);
    p += n + (p[n] == ',');
    int offered = 0, workers = 0;
    char have[512] = "";
    size_t off = 0;
    for (sched__wconn *c = s->wp.conns; c && !offered; c = c->next) {
      if (!c->authed || c->closing)
        continue;
      workers++;
      offered = sched__conn_offers(c, name);
      for (int i = 0; i < c->ntrainers && off < sizeof have; i++)
        if (!listed(have, c->trainers[i]))
          off += (size_t)snprintf(have + off, sizeof have - off, "%s%s", off ? ", " : "",
                                  c->trainers[i]);
    }
    if (offered || workers == 0)
      continue;
    snprintf(buf, len,
             "no connected worker runs the trainer \"%s\" (the connected workers run %s; a "
             "worker's operator offers it with --trainer %s=COMMAND, docs/trainers.md)",
             name, have, name);
    return 1;
  }
  return 0;
}

int sched__place_why(sched *s, int64_t sweep_id, int gpus, int slots, const char *trainers,
                     char *buf, size_t len) {
  if (trainer_why(s, trainers, buf, len))
    return 1;
  for (int i = 0; i < s->pl.nlimited; i++)
    if (s->pl.limited[i].sweep_id == sweep_id) {
      snprintf(buf, len,
               "its owner is at their limit of %d GPU%s in use: its runs start as their "
               "running ones end (`scalesweep usage`; an admin changes it with `scalesweep "
               "limits`)",
               s->pl.limited[i].max_gpus, s->pl.limited[i].max_gpus == 1 ? "" : "s");
      return 1;
    }
  int workers = 0, cpu = 0, fit = 0, cpu_all = 0, gpu_all = 0;
  size_t off = 0;
  char others[768] = "";
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    workers++;
    cpu += c->cpu_slots >= (slots > 0 ? slots : 1);
    cpu_all += c->draining ? 0 : c->cpu_slots;
    gpu_all += c->draining ? 0 : usable_gpus(c);
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
  else if (gpus == 0 && cpu == 0 && slots > 1 && cpu_all < slots)
    snprintf(buf, len,
             "the connected workers have %d CPU slot%s in all, and a run has %d ranks, one slot "
             "each (on one worker or spread over several; a worker takes slots with "
             "--cpu-slots)",
             cpu_all, cpu_all == 1 ? "" : "s", slots);
  else if (gpus == 0 && slots > 1)
    return 0; /* spread over workers, it fits */
  else if (gpus == 0 && cpu == 0)
    snprintf(buf, len, "no connected worker has a CPU slot (workers take one with --cpu-slots)");
  else if (gpus > 1 && fit == 0 && gpu_all >= gpus)
    return 0; /* spread over workers, it fits */
  else if (gpus > 0 && fit == 0)
    snprintf(buf, len, "no connected worker can run a run of %d GPU(s) with the CUDA backend%s",
             gpus, others);
  else
    return 0;
  return 1;
}

/* The scheduler: start-up, placement, leases, events. */
#include "scheduler/sched.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/token.h"
#include "scheduler/internal.h"

void sched_options_default(sched_options *o) {
  memset(o, 0, sizeof *o);
  o->listen = "127.0.0.1:8080";
  o->workers = "127.0.0.1:8081";
  o->checkpoint_root = "./.scalesweep/checkpoints";
  o->lease_s = 30;
  o->heartbeat_s = 5;
  o->open_reads = 1;
  o->predict_s = 15;
  o->reserve_after_s = 300;
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  char ts[32];
  time_t t = time(NULL);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s scheduler: ", ts);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- events (SSE) --------------------------------------------------------- */

void sched__emit(sched *s, const char *name, json_t *data) {
  char *text = json_dumps(data, JSON_COMPACT);
  json_decref(data);
  if (!text)
    return;
  uint64_t id = ++s->next_event_id;
  sched__event *e = &s->events[id % SCHED__EVENT_RING];
  free(e->name);
  free(e->data);
  e->id = id;
  e->name = strdup(name);
  e->data = text;
  for (sched__sse *c = s->sse; c; c = c->next)
    http_sse_send(c->stream, id, name, text);
}

/* ---- placement ------------------------------------------------------------ */

/* A worker with room for a run that needs `gpus` GPUs (0: a CPU slot);
 * fills the chosen GPU indices. Prefers the fullest worker that fits, so
 * large holes stay open for large runs. */
static sched__wconn *find_room(sched *s, int gpus, int *chosen, const sched__wconn *exclude) {
  sched__wconn *best = NULL;
  int best_free = 1 << 30;
  for (sched__wconn *c = s->conns; c; c = c->next) {
    if (!c->authed || c->closing || c == exclude)
      continue;
    int free_n;
    if (gpus == 0) {
      free_n = c->cpu_slots - c->cpu_busy;
      if (free_n < 1)
        continue;
    } else {
      free_n = 0;
      for (int g = 0; g < c->ngpus; g++)
        free_n += !c->gpu_busy[g];
      if (free_n < gpus)
        continue;
    }
    if (free_n < best_free) {
      best = c;
      best_free = free_n;
    }
  }
  if (best && gpus > 0) {
    int k = 0;
    for (int g = 0; g < best->ngpus && k < gpus; g++)
      if (!best->gpu_busy[g])
        chosen[k++] = g;
  }
  return best;
}

static int total_free(sched *s) {
  int n = 0;
  for (sched__wconn *c = s->conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    n += c->cpu_slots - c->cpu_busy;
    for (int g = 0; g < c->ngpus; g++)
      n += !c->gpu_busy[g];
  }
  return n;
}

/* When each waiting run was first found blocked (uv_now ms), for the
 * reservation; a small table, oldest entries dropped when full. */
static uint64_t blocked_since(sched *s, int64_t run_id, uint64_t now) {
  for (int i = 0; i < s->nblocked; i++)
    if (s->blocked[i].run_id == run_id)
      return s->blocked[i].since_ms;
  if (s->nblocked == SCHED__BLOCKED) {
    memmove(s->blocked, s->blocked + 1, sizeof s->blocked[0] * (SCHED__BLOCKED - 1));
    s->nblocked--;
  }
  s->blocked[s->nblocked].run_id = run_id;
  s->blocked[s->nblocked++].since_ms = now;
  return now;
}

static void unblocked(sched *s, int64_t run_id) {
  for (int i = 0; i < s->nblocked; i++)
    if (s->blocked[i].run_id == run_id) {
      s->blocked[i] = s->blocked[--s->nblocked];
      return;
    }
}

/* The worker a waiting run of `gpus` GPUs is kept for: of those with at
 * least that many GPUs, the one with the most free (the soonest to drain). */
static const sched__wconn *reserve_for(sched *s, int gpus) {
  const sched__wconn *best = NULL;
  int best_free = -1;
  for (sched__wconn *c = s->conns; c; c = c->next) {
    if (!c->authed || c->closing || c->ngpus < gpus)
      continue;
    int free_n = 0;
    for (int g = 0; g < c->ngpus; g++)
      free_n += !c->gpu_busy[g];
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
  s->placing = 0;
  if (s->place_again) {
    s->place_again = 0;
    sched__place(s);
  }
}

/* The UPDATE that took a queued run returned: send the assignment, or
 * give the capacity back when another pass took the run first. */
static void on_claimed(void *ud, int status, PGresult *res, const char *errmsg) {
  assign_ctx *a = ud;
  sched *s = a->s;
  sched__wconn *c = sched__conn_by_worker(s, a->worker_id);
  int ok = status == 0 && PQntuples(res) == 1;
  if (status != 0)
    logf_("claiming run %" PRId64 " failed: %s", a->run_id, errmsg);
  if (!ok || !c) {
    if (c)
      sched__conn_release_run(c, a->run_id);
    if (ok && !c) /* the worker went away: its lease will expire and re-queue it */
      logf_("run %" PRId64 " claimed for a worker that disconnected", a->run_id);
  } else {
    int attempt = atoi(PQgetvalue(res, 0, 0));
    json_error_t je;
    json_t *config = json_loads(PQgetvalue(res, 0, 1), 0, &je);
    sched__wrun *w = sched__conn_find_run(c, a->run_id);
    if (w)
      w->attempt = attempt;
    json_t *gl = json_array();
    for (int i = 0; i < a->ngpus; i++)
      json_array_append_new(gl, json_integer(a->gpus[i]));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/run-%" PRId64, s->o.checkpoint_root, a->run_id);
    /* a re-queued run resumes from its last checkpoint: unless the spec
     * chose an interval, checkpoint about ten times per run (whole steps) */
    json_t *ck = json_object_get(config, "checkpoint");
    json_t *tr = json_object_get(config, "train");
    json_t *mo = json_object_get(config, "model");
    if (json_is_object(ck) && json_number_value(json_object_get(ck, "every_tokens")) <= 0) {
      double step = json_number_value(json_object_get(tr, "batch_size")) *
                    json_number_value(json_object_get(mo, "seq_len"));
      double tokens = json_number_value(json_object_get(tr, "tokens"));
      if (step > 0 && tokens > 0) {
        double every = ceil(tokens / 10.0 / step) * step;
        json_object_set_new(ck, "every_tokens", json_integer((json_int_t)every));
      }
    }
    json_t *msg = json_pack("{s:s,s:I,s:i,s:o,s:o,s:s,s:b}", "type", "assign", "run_id",
                            (json_int_t)a->run_id, "attempt", attempt, "config",
                            config ? config : json_object(), "gpus", gl, "checkpoint_dir", dir,
                            "resume", attempt > 1);
    if (attempt > 1 && !PQgetisnull(res, 0, 3))
      json_object_set_new(msg, "resume_max_step",
                          json_integer(strtoll(PQgetvalue(res, 0, 3), NULL, 10)));
    sched__send(c, msg);
    s->assigns++;
    if (attempt == 1)
      sched__sweep_touch(s, strtoll(PQgetvalue(res, 0, 2), NULL, 10), 0);
    sched__emit(s, "run",
                json_pack("{s:I,s:s,s:i,s:I}", "id", (json_int_t)a->run_id, "status", "running",
                          "attempt", attempt, "worker", (json_int_t)a->worker_id));
  }
  if (a->pending)
    place_done(s);
  free(a);
}

static void on_queue(void *ud, int status, PGresult *res, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    logf_("reading the queue failed: %s", errmsg);
    place_done(s);
    return;
  }
  int n = PQntuples(res);
  assign_ctx *last = NULL;
  int blocked_gpus = 0; /* backfill: the smallest GPU count that did not fit */
  /* reservation: the first multi-GPU run that has waited reserve_after_s
   * keeps the worker it will run on from smaller runs behind it, so that
   * worker drains and backfill cannot starve it */
  const sched__wconn *reserved = NULL;
  uint64_t now = uv_now(s->loop);
  for (int i = 0; i < n; i++) {
    int64_t run_id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
    int gpus = atoi(PQgetvalue(res, i, 1));
    int chosen[8] = {0};
    if (gpus > 8)
      continue;
    if (blocked_gpus && gpus >= blocked_gpus)
      continue;
    sched__wconn *c = find_room(s, gpus, chosen, gpus > 0 ? reserved : NULL);
    if (!c) {
      /* a larger run waits; smaller ones behind it may still start */
      if (gpus > 0 && (!blocked_gpus || gpus < blocked_gpus))
        blocked_gpus = gpus;
      if (gpus == 0)
        blocked_gpus = 1;
      if (gpus > 1 && !reserved &&
          now - blocked_since(s, run_id, now) >= (uint64_t)s->o.reserve_after_s * 1000)
        reserved = reserve_for(s, gpus);
      continue;
    }
    unblocked(s, run_id);
    /* take the capacity now, before the database answers */
    sched__wrun *w = calloc(1, sizeof *w);
    w->run_id = run_id;
    w->ngpus = gpus;
    memcpy(w->gpus, chosen, sizeof w->gpus);
    w->next = c->runs;
    c->runs = w;
    if (gpus == 0)
      c->cpu_busy++;
    for (int g = 0; g < gpus; g++)
      c->gpu_busy[chosen[g]] = 1;

    assign_ctx *a = calloc(1, sizeof *a);
    a->s = s;
    a->worker_id = c->worker_id;
    a->run_id = run_id;
    a->ngpus = gpus;
    memcpy(a->gpus, chosen, sizeof a->gpus);
    char rid[32], wid[32], lease[16];
    snprintf(rid, sizeof rid, "%" PRId64, run_id);
    snprintf(wid, sizeof wid, "%" PRId64, c->worker_id);
    snprintf(lease, sizeof lease, "%d", s->o.lease_s);
    const char *p[3] = {rid, wid, lease};
    db_query(s->db,
             "UPDATE runs SET status = 'running', worker = $2, attempt = attempt + 1, "
             "lease_until = now() + $3 * interval '1 second', "
             "started_at = coalesce(started_at, now()), error = NULL "
             "WHERE id = $1 AND status = 'queued' AND attempt < max_attempts "
             "RETURNING attempt, config, sweep_id, CASE WHEN attempt > 1 THEN "
             /* a resumed run: the last step of the stored metrics' gap-free
              * prefix 1, 2, ..., s (0 when step 1 is missing) */
             "(SELECT CASE WHEN min(step) = 1 THEN min(step) FILTER "
             "(WHERE nxt IS DISTINCT FROM step + 1) ELSE 0 END FROM (SELECT step, "
             "lead(step) OVER (ORDER BY step) AS nxt FROM metrics WHERE run_id = $1 "
             "AND step >= 1) t) END",
             3, p, on_claimed, a);
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
  if (s->placing) {
    s->place_again = 1;
    return;
  }
  int room = total_free(s);
  if (room == 0 || !db_ready(s->db))
    return;
  s->placing = 1;
  char lim[16];
  snprintf(lim, sizeof lim, "%d", room * 4 + 16);
  const char *p[1] = {lim};
  /* higher priority first, then submission order; within a sweep, smaller
   * runs first so the first fits appear early */
  db_query(s->db,
           "SELECT r.id, r.gpus FROM runs r JOIN sweeps sw ON sw.id = r.sweep_id "
           "WHERE r.status = 'queued' "
           "ORDER BY greatest(r.priority, sw.priority) DESC, r.sweep_id, r.flops NULLS LAST, "
           "r.id LIMIT $1",
           1, p, on_queue, s);
}

/* ---- leases ---------------------------------------------------------------- */

static void on_expired(void *ud, int status, PGresult *res, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    logf_("lease check failed: %s", errmsg);
    return;
  }
  for (int i = 0; i < PQntuples(res); i++) {
    int64_t id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
    const char *st = PQgetvalue(res, i, 1);
    int64_t wid = strtoll(PQgetvalue(res, i, 2), NULL, 10);
    sched__wconn *c = sched__conn_by_worker(s, wid);
    if (c)
      sched__conn_release_run(c, id);
    logf_("run %" PRId64 ": lease expired, now %s", id, st);
    if (!strcmp(st, "failed"))
      s->runs_failed++;
    else
      s->runs_requeued++;
    sched__emit(s, "run", json_pack("{s:I,s:s}", "id", (json_int_t)id, "status", st));
    sched__sweep_touch(s, strtoll(PQgetvalue(res, i, 3), NULL, 10), 0);
  }
  if (PQntuples(res) > 0)
    sched__place(s);
}

static void on_extended(void *ud, int status, PGresult *res, const char *errmsg) {
  (void)ud;
  (void)res;
  if (status != 0)
    logf_("extending leases failed: %s", errmsg);
}

static void on_lease_timer(uv_timer_t *t) {
  sched *s = t->data;
  sched__workers_reap(s);
  if (db_ready(s->db))
    sched__sweep_flush(s);
  if (db_ready(s->db) && s->o.predict_s > 0 && ++s->predict_ticks >= s->o.predict_s) {
    s->predict_ticks = 0;
    sched__predict(s);
  }
  if (!db_ready(s->db)) {
    s->db_was_down = 1;
    return;
  }
  if (s->db_was_down) {
    /* while the database (or this scheduler) was away no heartbeat could
     * renew a lease: give every running run a full lease before judging */
    s->db_was_down = 0;
    char lease[16];
    snprintf(lease, sizeof lease, "%d", s->o.lease_s);
    const char *p[1] = {lease};
    db_query(s->db,
             "UPDATE runs SET lease_until = greatest(lease_until, "
             "now() + $1 * interval '1 second') WHERE status = 'running'",
             1, p, on_extended, s);
    return;
  }
  db_query(s->db,
           "WITH x AS (SELECT id, worker FROM runs WHERE status = 'running' "
           "AND lease_until < now() FOR UPDATE) "
           "UPDATE runs r SET status = CASE WHEN r.attempt >= r.max_attempts "
           "THEN 'failed'::run_status ELSE 'queued'::run_status END, "
           "worker = NULL, lease_until = NULL, "
           "error = 'lease expired: worker lost', "
           "finished_at = CASE WHEN r.attempt >= r.max_attempts THEN now() END "
           "FROM x WHERE r.id = x.id RETURNING r.id, r.status, x.worker, r.sweep_id",
           0, NULL, on_expired, s);
  sched__place(s);
}

/* ---- start and stop ---------------------------------------------------------- */

static void on_closed_handle(uv_handle_t *h) { (void)h; }

static void on_http_stopped(void *ud) { (void)ud; }
static void on_db_closed(void *ud) { (void)ud; }

int sched__db_up(const sched *s) {
  int up = db_ready(s->db);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    up = up && db_ready(s->db_metrics[i]);
  return up;
}

static void stop(sched *s) {
  if (s->stopping)
    return;
  s->stopping = 1;
  logf_("stopping");
  uv_timer_stop(&s->lease_timer);
  uv_close((uv_handle_t *)&s->lease_timer, on_closed_handle);
  uv_close((uv_handle_t *)&s->sigint, on_closed_handle);
  uv_close((uv_handle_t *)&s->sigterm, on_closed_handle);
  uv_close((uv_handle_t *)&s->listener, on_closed_handle);
  while (s->conns)
    sched__conn_drop(s->conns, NULL);
  if (s->http)
    http_server_stop(s->http, on_http_stopped, s);
  db_close(s->db, on_db_closed, s);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    db_close(s->db_metrics[i], on_db_closed, s);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  stop(h->data);
}

static int write_ready_file(sched *s, char *err, size_t errlen) {
  if (!s->o.ready_file)
    return 0;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->o.ready_file);
  FILE *f = fopen(tmp, "w");
  if (!f ||
      fprintf(f, "{\"http_port\":%d,\"workers_port\":%d,\"pid\":%d}\n", s->http_port,
              s->workers_port, (int)getpid()) < 0 ||
      fclose(f) != 0 || rename(tmp, s->o.ready_file) != 0) {
    snprintf(err, errlen, "%s: cannot write: %s", s->o.ready_file, strerror(errno));
    return SS_EIO;
  }
  return 0;
}

int sched_run(const sched_options *opt, char *err, size_t errlen) {
  sched *s = calloc(1, sizeof *s);
  if (!s)
    return SS_ENOMEM;
  s->o = *opt;
  /* tokens shorter than 16 characters are refused: they can be guessed */
  int rc = token_read(opt->token_file, 16, s->token, sizeof s->token, NULL, err, errlen);
  if (!rc)
    rc = token_read(opt->api_token_file ? opt->api_token_file : opt->token_file, 16, s->api_token,
                    sizeof s->api_token, NULL, err, errlen);
  int applied = 0;
  if (!rc)
    rc = db_migrate(opt->database, &applied, err, errlen);
  if (rc) {
    free(s);
    return rc;
  }
  if (applied)
    logf_("applied %d migration(s)", applied);
  /* runs whose worker may have died while we were down: their leases
   * decide (the lease timer re-queues them); nothing else to recover */
  /* a peer that leaves mid-write must not kill the scheduler */
  signal(SIGPIPE, SIG_IGN);
  uv_loop_t loop;
  uv_loop_init(&loop);
  s->loop = &loop;
  s->db = db_open(&loop, opt->database);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    s->db_metrics[i] = db_open(&loop, opt->database);
  char host[256];
  int port;
  if (addr_split(opt->listen, "0.0.0.0", 0, host, sizeof host, &port, NULL, 0) != 0) {
    snprintf(err, errlen, "--listen %s: expected HOST:PORT", opt->listen);
    rc = SS_EINVAL;
  }
  http_limits lim;
  http_limits_default(&lim);
  if (!rc) {
    s->http =
        http_server_start(&loop, host, port, &lim, sched__http, s, &s->http_port, err, errlen);
    if (!s->http)
      rc = SS_EIO;
  }
  if (!rc)
    rc = sched__workers_listen(s, opt->workers, err, errlen);
  if (!rc)
    rc = write_ready_file(s, err, errlen);
  uv_timer_init(&loop, &s->lease_timer);
  s->lease_timer.data = s;
  uv_signal_init(&loop, &s->sigint);
  uv_signal_init(&loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  if (rc) {
    stop(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(s);
    return rc;
  }
  s->db_was_down = 1; /* a (re)started scheduler first extends the leases */
  uv_timer_start(&s->lease_timer, on_lease_timer, 1000, 1000);
  /* A SIGINT ignored by whoever started us stays ignored (the shell's rule
   * for background jobs): `scalesweep up` takes Ctrl-C itself and stops the
   * worker before the scheduler, so that the worker's last reports (its
   * trainers stopped, their runs back in the queue) still reach us. */
  struct sigaction old_int;
  if (!(sigaction(SIGINT, NULL, &old_int) == 0 && old_int.sa_handler == SIG_IGN))
    uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  logf_("serving the API on %s:%d and workers on port %d", host, s->http_port, s->workers_port);
  uv_run(&loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&loop) == 0 ? 0 : SS_EIO;
  if (rc)
    snprintf(err, errlen, "internal error: handles left open at exit");
  for (int i = 0; i < SCHED__EVENT_RING; i++) {
    free(s->events[i].name);
    free(s->events[i].data);
  }
  while (s->authfails) {
    sched__authfail *n = s->authfails->next;
    free(s->authfails);
    s->authfails = n;
  }
  sched__refits_free(&s->refits);
  free(s);
  return rc;
}

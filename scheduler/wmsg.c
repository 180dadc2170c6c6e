/* The worker port's messages (wport.h): hello, heartbeat, started,
 * checkpoint, metrics, finished, stopping. What they mean for the runs is stored
 * through store/; what placement and the sweeps must hear of goes to the
 * port's hooks. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/token.h"
#include "scheduler/wport.h"
#include "store/metrics.h"
#include "store/runs.h"
#include "store/workers.h"

/* ---- store callbacks carry the connection by worker id, since the
 * connection may be gone when the answer comes ----------------------------------- */

typedef struct wctx {
  sched__wport *wp;
  int64_t worker_id, run_id;
  int attempt;
  int64_t seq;
  uint64_t conn_ns; /* the connection the message came in on (its connected_ns) */
  int cancelled;    /* finished: the run was being cancelled */
} wctx;

static wctx *ctx(sched__wconn *c, int64_t run_id, int attempt, int64_t seq) {
  wctx *x = calloc(1, sizeof *x);
  if (!x)
    return NULL;
  x->wp = c->wp;
  x->worker_id = c->worker_id;
  x->run_id = run_id;
  x->attempt = attempt;
  x->seq = seq;
  x->conn_ns = c->connected_ns;
  return x;
}

/* Acknowledges a message once it is committed, on the connection it came in
 * on only. The worker lets go of every message up to the seq acknowledged,
 * so an ack that reached a newer connection of the worker (one store failed,
 * the worker was dropped and reconnected, then a later batch of the old
 * connection committed) could drop an earlier batch that was never stored:
 * the worker resends everything unacknowledged on its new connection, and
 * those copies are acknowledged there. */
/* The message is done with: stored, or (stored 0) refused for good, its
 * attempt no longer the worker's running one; the ack says which. */
static void ack_stored(wctx *x, int stored) {
  sched__wconn *c = sched__conn_by_worker(x->wp, x->worker_id);
  if (!c || c->connected_ns != x->conn_ns)
    return;
  json_t *m = json_pack("{s:s,s:I,s:i,s:I}", "type", "ack", "run_id", (json_int_t)x->run_id,
                        "attempt", x->attempt, "seq", (json_int_t)x->seq);
  if (m && !stored)
    json_object_set_new(m, "stored", json_false());
  sched__send(c, m);
}

static void ack(wctx *x) { ack_stored(x, 1); }

static void log_db_error(const char *what, int status, const char *errmsg) {
  if (status != 0)
    fprintf(stderr, "scheduler: %s failed: %s\n", what, errmsg);
}

/* A store failed: drop the worker so that it reconnects and resends what
 * was not acknowledged (it keeps every unacknowledged message). */
static void resend_later(wctx *x) {
  sched__wconn *c = sched__conn_by_worker(x->wp, x->worker_id);
  if (c)
    sched__conn_drop(c, "the scheduler could not store a message; reconnect and resend");
}

static void capacity(sched__wport *wp) {
  if (wp->hooks.on_capacity)
    wp->hooks.on_capacity(wp->hooks.ud);
}

static void sweep_changed(sched__wport *wp, int64_t sweep_id, int refit, int now) {
  if (wp->hooks.on_sweep_changed)
    wp->hooks.on_sweep_changed(wp->hooks.ud, sweep_id, refit, now);
}

/* ---- hello ------------------------------------------------------------------------ */

typedef struct hello_ctx {
  sched__wport *wp;
  sched__wconn *c; /* valid while it is in the port's list: checked there */
  json_t *runs;    /* the runs the worker says it is executing */
  char secret[65]; /* the secret the welcome gives when the name is taken anew */
} hello_ctx;

/* Worker identity (docs/runtime.md): a name is held by the worker that
 * took it and was given its secret; the secret's SHA-256 is stored. A hello
 * with the secret is that worker (its reconnect or its restart from the same
 * work directory); one without it takes the name only while no connection
 * holds it and no running run is leased to it, so the cluster token and a
 * name are not enough to take a live worker's runs, and two hosts given one
 * name do not take turns with each other's runs. */

/* Another authenticated connection of the worker called name, or NULL. */
static sched__wconn *holder(sched__wport *wp, const sched__wconn *c, const char *name) {
  for (sched__wconn *o = wp->conns; o; o = o->next)
    if (o != c && o->authed && !o->closing && !strcmp(o->name, name))
      return o;
  return NULL;
}

/* the seconds since the connection's last message */
static double silent_s(const sched__wconn *c) {
  return (double)(uv_hrtime() - c->last_msg_ns) / 1e9;
}

static int conn_alive(sched__wport *wp, sched__wconn *c) {
  for (sched__wconn *x = wp->conns; x; x = x->next)
    if (x == c)
      return 1;
  return 0;
}

static void on_reconciled(void *ud, int status, int64_t rows, const char *errmsg) {
  wctx *x = ud;
  sched__wconn *c = sched__conn_by_worker(x->wp, x->worker_id);
  if (status != 0 || !c) {
    log_db_error("reconciling a worker's run", status, errmsg);
  } else if (rows == 0) {
    /* not ours any more (re-queued or finished meanwhile): stop it */
    sched__conn_release_run(c, x->run_id);
    sched__send(c, json_pack("{s:s,s:I}", "type", "cancel", "run_id", (json_int_t)x->run_id));
  }
  free(x);
}

static void on_orphans(void *ud, int status, const store_run_change *runs, int n,
                       const char *errmsg) {
  sched__wport *wp = ud;
  if (status != 0) {
    log_db_error("re-queueing a restarted worker's runs", status, errmsg);
    return;
  }
  for (int i = 0; i < n; i++) {
    fprintf(stderr, "scheduler: run %lld: its worker restarted without it; now %s\n",
            (long long)runs[i].id, runs[i].status);
    wp->n->runs_requeued++;
    sched__events_emit(
        wp->ev, "run",
        json_pack("{s:I,s:s}", "id", (json_int_t)runs[i].id, "status", runs[i].status));
    sweep_changed(wp, runs[i].sweep_id, 0, 1);
  }
  if (n)
    capacity(wp);
}

/* The runs a reconnected worker reports: kept if they are still its (by
 * attempt), the others it was given go back to the queue. */
static void reconcile(sched__wconn *c, json_t *runs) {
  sched__wport *wp = c->wp;
  size_t i, n = json_array_size(runs);
  int64_t *kept = calloc(n ? n : 1, sizeof *kept);
  json_t *r;
  json_array_foreach(runs, i, r) {
    int64_t run_id = json_integer_value(json_object_get(r, "run_id"));
    int attempt = (int)json_integer_value(json_object_get(r, "attempt"));
    if (kept)
      kept[i] = run_id;
    int gpus[8], ngpus = 0;
    size_t j;
    json_t *gi;
    json_array_foreach(json_object_get(r, "gpus"), j, gi) {
      /* the worker's device index, back to placement's position */
      for (int p = 0; p < c->ngpus && ngpus < 8; p++)
        if (c->gpu_index[p] == (int)json_integer_value(gi)) {
          gpus[ngpus++] = p;
          break;
        }
    }
    /* a CPU run holds a slot per rank (an older worker does not say: 1) */
    json_t *sl = json_object_get(r, "slots");
    int slots = json_is_integer(sl) && json_integer_value(sl) > 0 && json_integer_value(sl) <= 1024
                    ? (int)json_integer_value(sl)
                    : 1;
    sched__wrun *w = sched__conn_add_run(c, run_id, attempt, ngpus, gpus, slots);
    /* its part of a run spread over workers: the run is rank 0's worker's */
    int part = json_is_true(json_object_get(r, "part"));
    if (w)
      w->secondary = part;
    wctx *x = ctx(c, run_id, attempt, 0);
    if (x && part)
      store_runs_reconcile_part(wp->db, run_id, attempt, on_reconciled, x);
    else if (x)
      store_runs_reconcile(wp->db, run_id, attempt, c->worker_id, wp->lease_s, on_reconciled, x);
  }
  /* runs the database gives this worker that it no longer has (its previous
   * process died): back to the queue now rather than at lease expiry */
  if (kept)
    store_runs_requeue_orphans(wp->db, c->worker_id, kept, (int)n, on_orphans, wp);
  free(kept);
}

static void on_worker_row(void *ud, int status, const store_worker_reg *r, const char *errmsg) {
  hello_ctx *h = ud;
  sched__wport *wp = h->wp;
  sched__wconn *c = conn_alive(wp, h->c) ? h->c : NULL;
  if (status != 0 || !c) {
    log_db_error("registering a worker", status, errmsg);
    if (c)
      sched__conn_drop(c, "the scheduler cannot reach its database; try again");
    json_decref(h->runs);
    free(h);
    return;
  }
  c->registering = 0;
  sched__wconn *o = holder(wp, c, c->name);
  int proven = !strcmp(r->how, "proven");
  char why[768];
  if (!strcmp(r->how, "live") || (o && !proven)) {
    snprintf(why, sizeof why,
             "worker name \"%s\" is held by a connected worker (from %s): a second worker "
             "needs a name of its own (--name); this one is not the holder (it did not present "
             "the name's secret, kept in the holder's work directory)",
             c->name, o ? o->peer : "another address");
  } else if (!strcmp(r->how, "leased")) {
    snprintf(why, sizeof why,
             "worker name \"%s\" has %d running run(s) leased until %s, and this worker did not "
             "present the name's secret (kept in the work directory of the worker that holds "
             "it): it may take the name once those leases have expired, or use another --name",
             c->name, r->leased, r->until ? r->until : "?");
  } else if (o && proven && c->instance[0] && o->instance[0] &&
             strcmp(c->instance, o->instance) != 0 && silent_s(o) < 2.0 * wp->heartbeat_s) {
    snprintf(why, sizeof why,
             "worker \"%s\" is already connected from %s and heartbeating: another worker "
             "process started with the same name and work directory (give each its own "
             "--work-dir and --name)",
             c->name, o->peer);
  } else {
    why[0] = 0;
  }
  if (why[0]) {
    sched__conn_drop(c, why);
    json_decref(h->runs);
    free(h);
    return;
  }
  c->worker_id = r->worker_id;
  /* the same worker's stale connection (it reconnected, or restarted from
   * its work directory): its runs are this connection's now */
  if (o)
    sched__conn_drop(o, "replaced by a new connection of the same worker (it presented the "
                        "name's secret)");
  c->authed = 1;
  json_t *dirs = json_array();
  for (int i = 0; i < wp->ndata_dirs; i++)
    json_array_append_new(dirs, json_string(wp->data_dirs[i]));
  json_t *welcome =
      json_pack("{s:s,s:I,s:i,s:i,s:o}", "type", "welcome", "worker_id", (json_int_t)c->worker_id,
                "heartbeat_s", wp->heartbeat_s, "lease_s", wp->lease_s, "data_dirs", dirs);
  if (welcome && !proven) /* the name is this worker's from now on */
    json_object_set_new(welcome, "secret", json_string(h->secret));
  sched__send(c, welcome);
  sched__wlog(c, "connected: %d GPU(s), %d CPU slot(s)%s", c->ngpus, c->cpu_slots,
              proven                   ? ""
              : !strcmp(r->how, "new") ? "; a new worker name"
                                       : "; the name taken anew");
  reconcile(c, h->runs);
  sched__events_emit(
      wp->ev, "worker",
      json_pack("{s:I,s:s,s:b}", "id", (json_int_t)c->worker_id, "name", c->name, "connected", 1));
  json_decref(h->runs);
  free(h);
  capacity(wp);
}

/* an optional string field of m, "" when absent */
static const char *optional_str(const json_t *m, const char *key) {
  const char *v = json_string_value(json_object_get(m, key));
  return v ? v : "";
}

/* A hello that cannot be taken, dropped: a wrong token (throttled per
 * address), another protocol version, or a name another connection is
 * registering; 1 when dropped, 0 when it may register. */
static int hello_refused(sched__wconn *c, json_t *m) {
  sched__wport *wp = c->wp;
  const char *token = json_string_value(json_object_get(m, "token"));
  /* the token first: a right one is welcome whatever others behind the
   * same address got wrong; only wrong ones are throttled */
  if (!token_equal(wp->token, token)) {
    int wait_s = sched__wport_auth_failed(wp, c->peer);
    if (!wait_s) {
      sched__conn_drop(c, "authentication failed: wrong cluster token");
      return 1;
    }
    char why[160];
    snprintf(why, sizeof why,
             "too many failed authentications from %s: wrong tokens refused; retry in %d s",
             c->peer, wait_s);
    /* answered, not logged: a blocked address could fill the log */
    sched__send(c, json_pack("{s:s,s:s,s:i}", "type", "error", "message", why, "retry_s", wait_s));
    sched__conn_drop(c, NULL);
    return 1;
  }
  if (json_integer_value(json_object_get(m, "version")) != PROTO_VERSION) {
    sched__conn_drop(c, "protocol version mismatch: upgrade the worker");
    return 1;
  }
  const char *name = json_string_value(json_object_get(m, "name"));
  for (sched__wconn *o = wp->conns; o; o = o->next)
    if (o != c && o->registering && !strcmp(o->name, name)) {
      sched__conn_drop(c, "another connection is registering the same worker name right now; "
                          "a second worker needs a name of its own (--name)");
      return 1;
    }
  return 0;
}

/* What the hello offers, onto c: its name and host, its GPUs and whether
 * CUDA runs on them, its trainers, its Slurm job and CPU slots. */
static void read_offer(sched__wconn *c, json_t *m) {
  snprintf(c->name, sizeof c->name, "%s", json_string_value(json_object_get(m, "name")));
  snprintf(c->instance, sizeof c->instance, "%s", optional_str(m, "instance"));
  snprintf(c->host, sizeof c->host, "%s", json_string_value(json_object_get(m, "host")));
  json_t *gpus = json_object_get(m, "gpus");
  c->ngpus = (int)json_array_size(gpus);
  if (c->ngpus > SCHED__MAX_GPUS)
    c->ngpus = SCHED__MAX_GPUS;
  c->gpus_json = json_incref(gpus);
  for (int i = 0; i < c->ngpus; i++)
    c->gpu_index[i] = (int)json_integer_value(json_object_get(json_array_get(gpus, i), "index"));
  /* backends (absent from an older worker: its GPUs are taken as CUDA's) */
  json_t *cuda = json_object_get(json_object_get(m, "backends"), "cuda");
  const char *cuda_err = json_string_value(json_object_get(cuda, "error"));
  c->cuda_ok = c->ngpus > 0 && !cuda_err;
  if (c->ngpus > 0 && cuda_err) {
    snprintf(c->cuda_error, sizeof c->cuda_error, "%s", cuda_err);
    char *nl = strchr(c->cuda_error, '\n'); /* the reason, without its HINT */
    if (nl)
      *nl = '\0';
  }
  json_t *tl = json_object_get(m, "trainers");
  c->ntrainers = 0;
  if (!tl) /* an older worker runs the built-in trainer only */
    snprintf(c->trainers[c->ntrainers++], sizeof c->trainers[0], "builtin");
  for (size_t i = 0; i < json_array_size(tl) && c->ntrainers < PROTO_MAX_TRAINERS; i++)
    snprintf(c->trainers[c->ntrainers++], sizeof c->trainers[0], "%s",
             json_string_value(json_array_get(tl, i)));
  snprintf(c->slurm_job, sizeof c->slurm_job, "%s", optional_str(m, "slurm_job"));
  c->cpu_slots = (int)json_integer_value(json_object_get(m, "cpu_slots"));
  if (c->cpu_slots < 0)
    c->cpu_slots = 0;
}

static void on_hello(sched__wconn *c, json_t *m) {
  sched__wport *wp = c->wp;
  if (hello_refused(c, m))
    return;
  c->registering = 1;
  read_offer(c, m);
  hello_ctx *h = calloc(1, sizeof *h);
  if (!h) {
    sched__conn_drop(c, "the scheduler is out of memory; reconnect");
    return;
  }
  h->wp = wp;
  h->c = c;
  h->runs = json_incref(json_object_get(m, "runs"));
  /* the secret presented (its hash is compared with the name's), and a new
   * one for the welcome should the name be this worker's anew */
  const char *secret = json_string_value(json_object_get(m, "secret"));
  char given[65], fresh[65];
  if (secret)
    digest_sha256_hex(secret, strlen(secret), given);
  if (token_random_hex(h->secret, 32) != 0) {
    sched__conn_drop(c, "the scheduler cannot draw a random secret; reconnect");
    json_decref(h->runs);
    free(h);
    return;
  }
  digest_sha256_hex(h->secret, 64, fresh);
  char *gj = json_dumps(c->gpus_json, JSON_COMPACT);
  store_workers_register(wp->db, c->name, c->host, gj, c->cpu_slots, secret ? given : NULL, fresh,
                         holder(wp, c, c->name) != NULL, on_worker_row, h);
  free(gj);
}

/* ---- heartbeat ---------------------------------------------------------------------- */

/* The leases are renewed: a heartbeat that carried "hb" is answered with
 * {"type":"heartbeat","hb":N,"runs":[the runs renewed]}, so that the worker
 * knows until when its runs are its own (it stops a trainer whose lease it
 * could not renew, before the run is given to another worker). */
static void on_heartbeat_done(void *ud, int status, const int64_t *ids, int n, const char *errmsg) {
  wctx *x = ud;
  log_db_error("renewing leases", status, errmsg);
  sched__wconn *c = status == 0 && x->attempt ? sched__conn_by_worker(x->wp, x->worker_id) : NULL;
  if (c) {
    json_t *runs = json_array();
    for (int i = 0; i < n; i++)
      json_array_append_new(runs, json_integer(ids[i]));
    /* its part of runs spread over workers: their lease is rank 0's
     * worker's; they live as long as this scheduler counts them here */
    for (sched__wrun *w = c->runs; w; w = w->next)
      if (w->secondary)
        json_array_append_new(runs, json_integer(w->run_id));
    sched__send(
        c, json_pack("{s:s,s:I,s:o}", "type", "heartbeat", "hb", (json_int_t)x->seq, "runs", runs));
  }
  free(x);
}

/* Renews the leases of the runs the worker says it is executing, and only
 * those: a run of a worker that died and came back under the same name is
 * not kept alive by the new process's heartbeats. */
static void on_heartbeat(sched__wconn *c, json_t *m) {
  if (!db_ready(c->wp->db))
    return;
  json_t *runs = json_object_get(m, "runs");
  size_t i, n = json_array_size(runs);
  int64_t *ids = calloc(n ? n : 1, sizeof *ids);
  json_t *r;
  int k = 0;
  json_array_foreach(runs, i, r) {
    if (ids && json_is_integer(r))
      ids[k++] = json_integer_value(r);
  }
  /* attempt: whether to answer (a worker that sends no "hb" expects none) */
  json_t *hb = json_object_get(m, "hb");
  wctx *x = ctx(c, 0, json_is_integer(hb), json_integer_value(hb));
  if (ids && x)
    store_runs_renew(c->wp->db, c->worker_id, c->wp->lease_s, ids, k, on_heartbeat_done, x);
  else
    free(x);
  free(ids);
}

/* ---- started / checkpoint ---------------------------------------------------------------- */

static void on_update_done(void *ud, int status, int64_t rows, const char *errmsg) {
  (void)ud;
  (void)rows;
  log_db_error("updating a run", status, errmsg);
}

/* The database refused what a worker reported for an attempt that is not
 * running on it any more (its lease expired, the run went elsewhere): if
 * this connection still counts the attempt as its own, its trainer is a
 * leftover, so the worker is told to stop it (as for a reconnected
 * worker's run that is no longer its own); its result is then stale too. */
static void refused(wctx *x, const char *what) {
  fprintf(stderr,
          "scheduler: run %lld attempt %d: %s from worker %lld refused: the attempt is not "
          "running on that worker\n",
          (long long)x->run_id, x->attempt, what, (long long)x->worker_id);
  sched__wconn *c = sched__conn_by_worker(x->wp, x->worker_id);
  sched__wrun *w = c ? sched__conn_find_run(c, x->run_id) : NULL;
  if (w && w->attempt == x->attempt && !w->cancelling)
    sched__send(c, json_pack("{s:s,s:I}", "type", "cancel", "run_id", (json_int_t)x->run_id));
}

static void on_checkpoint_done(void *ud, int status, int64_t rows, const char *errmsg) {
  wctx *x = ud;
  log_db_error("storing a checkpoint", status, errmsg);
  if (status == 0 && rows == 0)
    refused(x, "a checkpoint");
  free(x);
}

/* a trunk's branch point stored: the branches it frees may be placed now */
static void on_branch_point_done(void *ud, int status, int64_t rows, const char *errmsg) {
  wctx *x = ud;
  log_db_error("storing a branch point", status, errmsg);
  if (status == 0 && rows > 0) {
    fprintf(stderr, "scheduler: run %lld: branch point stored, %lld branch%s may start\n",
            (long long)x->run_id, (long long)rows, rows == 1 ? "" : "es");
    capacity(x->wp); /* new work to place */
  }
  free(x);
}

/* a number of the trainer's config line, or NAN when it did not report it */
static double reported(json_t *cfg, const char *key) {
  json_t *v = json_object_get(cfg, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* a message about a run of which this worker holds ranks but not rank 0:
 * rank 0's worker reports the run, so nothing of this one is stored */
static int of_secondary(sched__wconn *c, json_t *m) {
  sched__wrun *w = sched__conn_find_run(c, json_integer_value(json_object_get(m, "run_id")));
  return w && w->secondary;
}

/* acknowledges, as not stored, a message of a secondary (its worker drops it) */
static void ack_secondary(sched__wconn *c, json_t *m) {
  sched__send(c, json_pack("{s:s,s:O,s:O,s:O,s:b}", "type", "ack", "run_id",
                           json_object_get(m, "run_id"), "attempt", json_object_get(m, "attempt"),
                           "seq", json_object_get(m, "seq"), "stored", 0));
}

static void on_started(sched__wconn *c, json_t *m) {
  if (of_secondary(c, m))
    return;
  json_t *cfg = json_object_get(m, "config");
  store_started st = {.run_id = json_integer_value(json_object_get(m, "run_id")),
                      .attempt = (int)json_integer_value(json_object_get(m, "attempt")),
                      .worker_id = c->worker_id,
                      .params = json_number_value(json_object_get(cfg, "params")),
                      .nonembedding_params =
                          json_number_value(json_object_get(cfg, "nonembedding_params")),
                      .flops_per_token = json_number_value(json_object_get(cfg, "flops_per_token")),
                      .entropy_rate = reported(cfg, "entropy_rate"),
                      .window_floor = reported(cfg, "window_floor"),
                      .worker = c->name};
  /* where it runs: the trainer's own account (a declared trainer may give
   * none) and the worker it runs on, as this scheduler knows it */
  json_t *env = json_object_get(cfg, "environment");
  env = json_is_object(env) ? json_deep_copy(env) : json_object();
  json_object_set_new(env, "worker", json_string(c->name));
  char *text = json_dumps(env, JSON_COMPACT);
  json_decref(env);
  st.environment = text ? text : "{}";
  store_runs_started(c->wp->db, &st, on_update_done, NULL);
  free(text);
}

static void on_checkpoint(sched__wconn *c, json_t *m) {
  if (of_secondary(c, m))
    return;
  wctx *x = ctx(c, json_integer_value(json_object_get(m, "run_id")),
                (int)json_integer_value(json_object_get(m, "attempt")), 0);
  if (!x) {
    sched__conn_drop(c, "the scheduler is out of memory; reconnect and resend");
    return;
  }
  if (json_is_true(json_object_get(m, "branch"))) { /* a trunk's branch point */
    /* in the trunk's own branch-STEP directory (train.h; a declared
     * trainer names the file itself, docs/trainers.md): any other path is
     * refused, so that no worker chooses what another's trainer opens */
    char want[4400];
    json_int_t step = json_integer_value(json_object_get(m, "step"));
    const char *path = json_string_value(json_object_get(m, "path"));
    int n = snprintf(want, sizeof want, "%s/run-%" PRId64 "/branch-%" JSON_INTEGER_FORMAT "/",
                     c->wp->checkpoint_root ? c->wp->checkpoint_root : "", x->run_id, step);
    const char *file =
        n > 0 && (size_t)n < sizeof want && !strncmp(path, want, (size_t)n) ? path + n : NULL;
    if (!file || !*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..") ||
        strlen(path) >= sizeof want) {
      sched__wlog(c,
                  "run %" PRId64 ": branch point at step %" JSON_INTEGER_FORMAT
                  " refused: its path is not a file in %s",
                  x->run_id, step, want);
      free(x);
      return;
    }
    snprintf(want, sizeof want, "%s", path);
    store_runs_branch_point(c->wp->db, x->run_id, x->attempt, c->worker_id, step, want,
                            on_branch_point_done, x);
    return;
  }
  store_runs_checkpoint(c->wp->db, x->run_id, x->attempt, c->worker_id,
                        json_integer_value(json_object_get(m, "step")),
                        json_string_value(json_object_get(m, "path")), on_checkpoint_done, x);
}

/* ---- metrics ------------------------------------------------------------------------------ */

static void on_finished(sched__wconn *c, json_t *m);

static void on_metrics_stored(void *ud, int status, int64_t rows, const char *errmsg) {
  wctx *x = ud;
  sched__wconn *c = sched__conn_by_worker(x->wp, x->worker_id);
  sched__wrun *w = c ? sched__conn_find_run(c, x->run_id) : NULL;
  if (w && --w->metrics_inflight == 0 && w->finished && status == 0) {
    /* the result waited for the run's last rows: record it now */
    json_t *fin = w->finished;
    w->finished = NULL;
    on_finished(c, fin);
    json_decref(fin);
  }
  if (status != 0) {
    log_db_error("storing metrics", status, errmsg);
    resend_later(x);
  } else {
    /* a refused batch is acknowledged too, as not stored: resending it
     * cannot help */
    if (rows == STORE_FENCED)
      refused(x, "a metrics batch");
    else
      x->wp->n->metric_rows += (uint64_t)rows;
    ack_stored(x, rows != STORE_FENCED);
  }
  free(x);
}

static int cmp_step(const void *a, const void *b) {
  double x = ((const store_metric_row *)a)->v[SS_MCOL_step];
  double y = ((const store_metric_row *)b)->v[SS_MCOL_step];
  return x < y ? -1 : x > y;
}

/* The batch's lines (valid: proto_parse checked them) as one row per step,
 * sorted by step: each line is read once into a row by the metric table
 * (proto_metric_row), and the rows of one step (a step line and an eval
 * line) merge, each column taking the first value among them. *n: the
 * rows; NULL when out of memory. */
static store_metric_row *batch_rows(json_t *lines, size_t *n) {
  size_t total = json_array_size(lines), k = 0, out = 0;
  store_metric_row *rows = calloc(total ? total : 1, sizeof *rows);
  if (!rows)
    return NULL;
  for (size_t i = 0; i < total; i++)
    if (proto_metric_row(json_array_get(lines, i), &rows[k]))
      k++;
  qsort(rows, k, sizeof *rows, cmp_step);
  for (size_t i = 0; i < k;) {
    size_t end = i + 1;
    store_metric_row *row = &rows[out++];
    *row = rows[i];
    for (; end < k && rows[end].v[SS_MCOL_step] == row->v[SS_MCOL_step]; end++)
      for (int j = 0; j < SS_MCOL_N; j++)
        if (isnan(row->v[j]))
          row->v[j] = rows[end].v[j];
    i = end;
  }
  *n = out;
  return rows;
}

static void on_metrics(sched__wconn *c, json_t *m) {
  sched__wport *wp = c->wp;
  if (of_secondary(c, m)) {
    ack_secondary(c, m);
    return;
  }
  int64_t run_id = json_integer_value(json_object_get(m, "run_id"));
  int attempt = (int)json_integer_value(json_object_get(m, "attempt"));
  int64_t seq = json_integer_value(json_object_get(m, "seq"));
  json_t *lines = json_object_get(m, "rows");
  size_t n = 0;
  store_metric_row *rows = batch_rows(lines, &n);
  wctx *x = rows ? ctx(c, run_id, attempt, seq) : NULL;
  if (!x) {
    free(rows);
    sched__conn_drop(c, "the scheduler is out of memory; reconnect and resend");
    return;
  }
  sched__wrun *w = sched__conn_find_run(c, run_id);
  if (w)
    w->metrics_inflight++;
  store_metrics_insert(wp->db_metrics[(uint64_t)run_id % SCHED__METRIC_DBS], run_id, attempt,
                       c->worker_id, rows, n, on_metrics_stored, x);
  free(rows);
  if (n)
    sched__events_emit(wp->ev, "metrics",
                       json_pack("{s:I,s:I,s:O}", "run_id", (json_int_t)run_id, "rows",
                                 (json_int_t)n, "last",
                                 json_array_get(lines, json_array_size(lines) - 1)));
}

/* ---- finished ------------------------------------------------------------------------------ */

static void on_finished_stored(void *ud, int status, const char *st, int64_t sweep_id,
                               double retry_s, const char *errmsg) {
  wctx *x = ud;
  sched__wport *wp = x->wp;
  if (status != 0) {
    log_db_error("recording a finished run", status, errmsg);
    resend_later(x);
    free(x);
    return;
  }
  sched__wconn *c = sched__conn_by_worker(wp, x->worker_id);
  sched__wrun *held = c ? sched__conn_find_run(c, x->run_id) : NULL;
  /* a stale attempt's result (resent after a newer attempt of the run was
   * assigned to this worker) must not free the newer attempt's slot */
  if (held && (held->attempt == 0 || held->attempt == x->attempt))
    sched__conn_release_run(c, x->run_id);
  if (st) {
    if (!strcmp(st, "succeeded") || !strcmp(st, "failed"))
      wp->n->runs_finished++;
    if (!strcmp(st, "failed"))
      wp->n->runs_failed++;
    if (!strcmp(st, "queued"))
      wp->n->runs_requeued++;
    json_t *ev = json_pack("{s:I,s:s,s:i}", "id", (json_int_t)x->run_id, "status", st, "attempt",
                           x->attempt);
    if (retry_s > 0) {
      fprintf(stderr,
              "scheduler: run %" PRId64 " attempt %d failed: queued again, its next attempt in "
              "%.0f s\n",
              x->run_id, x->attempt, retry_s);
      json_object_set_new(ev, "retry_s", json_real(retry_s));
    }
    sched__events_emit(wp->ev, "run", ev);
    sweep_changed(wp, sweep_id, !strcmp(st, "succeeded"), 0);
  }
  ack(x);
  free(x);
  if (st && strcmp(st, "queued") && wp->hooks.on_freed)
    wp->hooks.on_freed(wp->hooks.ud);
  else
    capacity(wp);
}

static void on_finished(sched__wconn *c, json_t *m) {
  int64_t run_id = json_integer_value(json_object_get(m, "run_id"));
  sched__wrun *w = sched__conn_find_run(c, run_id);
  if (w && w->secondary) {
    /* its ranks ended (with the run, or because a rank elsewhere died: rank
     * 0's worker reports that); their slots are free */
    if (w->attempt == (int)json_integer_value(json_object_get(m, "attempt")))
      sched__conn_release_run(c, run_id);
    ack_secondary(c, m);
    capacity(c->wp);
    return;
  }
  if (w && w->metrics_inflight > 0) {
    /* its metric batches are still being stored (on their own connection):
     * the result is recorded after them, so a finished run's curve is whole */
    json_decref(w->finished);
    w->finished = json_incref(m);
    return;
  }
  int attempt = (int)json_integer_value(json_object_get(m, "attempt"));
  wctx *x = ctx(c, run_id, attempt, json_integer_value(json_object_get(m, "seq")));
  if (!x) {
    sched__conn_drop(c, "the scheduler is out of memory; reconnect and resend");
    return;
  }
  x->cancelled = w && w->cancelling;
  json_t *done = json_object_get(m, "done");
  json_t *ck = json_object_get(m, "checkpoint_step");
  if (!x->cancelled && json_is_true(json_object_get(m, "interrupted")) &&
      !(json_integer_value(json_object_get(m, "exit_code")) == 0 && json_is_object(done))) {
    /* its worker stopped it (or a signal from outside did) after a
     * checkpoint, or fenced it while no scheduler renewed its lease: back
     * to the queue, no attempt spent */
    const char *how = json_is_true(json_object_get(m, "fenced"))
                          ? "its worker fenced it (no scheduler renewed its lease in time)"
                          : "its worker stopped";
    char why[160];
    if (json_is_integer(ck))
      snprintf(why, sizeof why, "interrupted: %s; resumes from step %" JSON_INTEGER_FORMAT, how,
               json_integer_value(ck));
    else
      snprintf(why, sizeof why, "interrupted: %s", how);
    sched__wlog(c, "run %" PRId64 " attempt %d: %s (no attempt spent)", run_id, attempt, why);
    store_runs_requeue_interrupted(c->wp->db, run_id, attempt, c->worker_id, why,
                                   on_finished_stored, x);
    return;
  }
  int code = (int)json_integer_value(json_object_get(m, "exit_code"));
  const char *error = json_string_value(json_object_get(m, "error"));
  int ok = code == 0 && json_is_object(done);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", error ? error : ok ? "" : "trainer exited");
  if (!ok && !error)
    snprintf(msg, sizeof msg, "trainer exited with code %d", code);
  /* a failed run's log tail is kept for the status page */
  store_finish f = {.run_id = run_id,
                    .attempt = attempt,
                    .worker_id = c->worker_id,
                    .outcome = ok             ? "succeeded"
                               : x->cancelled ? "cancelled"
                                              : "failed",
                    .final_val_loss = json_number_value(json_object_get(done, "final_val_loss")),
                    .tokens = json_number_value(json_object_get(done, "tokens")),
                    .error = ok ? NULL : msg,
                    .log_tail = ok ? NULL : json_string_value(json_object_get(m, "log_tail")),
                    .retry_after_s = c->wp->retry_after_s};
  store_runs_finish(c->wp->db, &f, on_finished_stored, x);
}

/* ---- stopping ------------------------------------------------------------------------------ */

/* The worker is stopping (SIGTERM, Ctrl-C, the end of its Slurm job): it
 * gets no new work, and the attempts it lists are marked, so that they are
 * re-queued as interrupted even if their finished messages never come. */
static void on_stopping(sched__wconn *c, json_t *m) {
  json_t *runs = json_object_get(m, "runs");
  size_t i, n = json_array_size(runs);
  c->draining = 1;
  sched__wlog(c, "stopping: %zu run%s will checkpoint and go back to the queue; no new work for it",
              n, n == 1 ? "" : "s");
  if (!n)
    return;
  int64_t *ids = calloc(n, sizeof *ids);
  int *attempts = calloc(n, sizeof *attempts);
  json_t *r;
  if (ids && attempts) {
    json_array_foreach(runs, i, r) {
      ids[i] = json_integer_value(json_object_get(r, "run_id"));
      attempts[i] = (int)json_integer_value(json_object_get(r, "attempt"));
    }
    store_runs_mark_stopping(c->wp->db, c->worker_id, ids, attempts, (int)n, on_update_done, NULL);
  }
  free(ids);
  free(attempts);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

typedef void (*handler)(sched__wconn *c, json_t *m);

static const handler handlers[] = {
    [PROTO_HELLO] = on_hello,           [PROTO_HEARTBEAT] = on_heartbeat,
    [PROTO_STARTED] = on_started,       [PROTO_METRICS] = on_metrics,
    [PROTO_CHECKPOINT] = on_checkpoint, [PROTO_FINISHED] = on_finished,
    [PROTO_STOPPING] = on_stopping,
};

void sched__wmsg_handle(sched__wconn *c, proto_type t, json_t *m) {
  if ((size_t)t < sizeof handlers / sizeof handlers[0] && handlers[t])
    handlers[t](c, m);
  else
    sched__conn_drop(c, "unexpected message type from a worker");
}

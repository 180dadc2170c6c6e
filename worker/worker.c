/* The worker agent: see worker.h for what it does, internal.h for its
 * files. This one: options, start-up (address, token, GPUs, work
 * directory), signals and shutdown. */
#include "worker/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/fileio.h"
#include "common/token.h"
#include "worker/backends.h"
#include "worker/conn.h"
#include "worker/datadirs.h"
#include "worker/gpu.h"
#include "worker/identity.h"
#include "worker/internal.h"
#include "worker/lease.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/proc.h"
#include "worker/trainers.h"

#define FENCE_CHECK_MS 250

/* ---- shutdown ----------------------------------------------------------- */

static void on_worker_handle_closed(uv_handle_t *h) {}

static void close_all(wrk__worker *w) {
  if (w->closed_all)
    return;
  w->closed_all = 1;
  w->stopping = 2;
  uv_close((uv_handle_t *)&w->sigint, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->sigterm, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->sigchld, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->reconnect_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->welcome_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->hb_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->drain_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->fence_timer, on_worker_handle_closed);
  if (w->gai_active)
    uv_cancel((uv_req_t *)&w->gai);
  wrk__conn_close(w->c, NULL);
  while (w->runs)
    wrk__run_abandon(w->runs);
}

static void on_drain_timer(uv_timer_t *t) {
  wrk__worker *w = t->data;
  wrk__log("stopping without every acknowledgement (waited %d ms)", w->drain_ms);
  close_all(w);
}

/* While stopping: once no trainer runs, wait (up to drain_ms) for the acks
 * of what is left, then close everything. */
void wrk__maybe_finish_shutdown(wrk__worker *w) {
  if (w->stopping != 1)
    return;
  for (wrk__run *r = w->runs; r; r = r->next)
    if (r->state != WRK__RUN_FINISHED)
      return;
  if (!w->runs || !w->c || !w->c->welcomed) {
    close_all(w);
    return;
  }
  if (!uv_is_active((uv_handle_t *)&w->drain_timer))
    uv_timer_start(&w->drain_timer, on_drain_timer, (uint64_t)w->drain_ms, 0);
}

/* A trainer exited (the worker spawns them itself: proc.c) */
static void on_sigchld(uv_signal_t *s, int signum) {
  (void)signum;
  wrk__reap_children(s->data);
}

void wrk__stop_connecting(wrk__worker *w) {
  w->stopping = 1;
  uv_timer_stop(&w->reconnect_timer);
  if (w->gai_active)
    uv_cancel((uv_req_t *)&w->gai);
  if (w->c && !w->c->welcomed)
    wrk__conn_close(w->c, NULL);
}

static void on_signal(uv_signal_t *s, int signum) {
  wrk__worker *w = s->data;
  if (w->stopping) {
    wrk__log("%s again: stopping now", strsignal(signum));
    close_all(w);
    return;
  }
  wrk__log("%s: stopping (trainers get SIGTERM; a second signal stops at once)", strsignal(signum));
  wrk__stop_connecting(w);
  /* the scheduler hears it first: it assigns nothing more here, and the
   * runs listed are not charged an attempt even if their reports are lost */
  json_t *refs = json_array();
  for (wrk__run *r = w->runs; r; r = r->next)
    if (r->state != WRK__RUN_FINISHED)
      json_array_append_new(refs, json_pack("{s:I, s:I}", "run_id", (json_int_t)r->id, "attempt",
                                            (json_int_t)r->attempt));
  json_t *msg = json_pack("{s:s, s:o}", "type", "stopping", "runs", refs);
  wrk__send_json(w, msg);
  json_decref(msg);
  /* every attempt here ends as interrupted: a running trainer checkpoints
   * on SIGTERM; one that waited for an older attempt never starts */
  for (wrk__run *r = w->runs, *next; r; r = next) {
    next = r->next;
    if (r->state == WRK__RUN_FINISHED)
      continue;
    r->interrupting = 1;
    wrk__run_cancel(r, "the worker is stopping");
    if (w->closed_all) /* that was the last run and nothing waits for an ack */
      return;
  }
  wrk__maybe_finish_shutdown(w);
}

/* ---- startup ------------------------------------------------------------ */

static int read_token(wrk__worker *w, const wrk_options *o) {
  if (!o->token_file) {
    if (!o->token || !*o->token) {
      wrk__log("no cluster token: give --token-file");
      return SS_EINVAL;
    }
    w->token = strdup(o->token);
    return w->token ? 0 : SS_ENOMEM;
  }
  char buf[TOKEN_MAX + 1], err[512];
  int shared = 0;
  int rc = token_read(o->token_file, 1, buf, sizeof buf, &shared, err, sizeof err);
  if (shared)
    wrk__log("warning: the token file %s is readable by other users", o->token_file);
  if (rc) {
    wrk__log("%s", err);
    return rc;
  }
  w->token = strdup(buf);
  memset(buf, 0, sizeof buf);
  return w->token ? 0 : SS_ENOMEM;
}

static int parse_address(wrk__worker *w, const char *s) {
  if (!s || !*s) {
    wrk__log("no scheduler address: give --scheduler HOST:PORT");
    return SS_EINVAL;
  }
  int port;
  char err[512];
  if (addr_split(s, NULL, 1, w->sched_host, sizeof w->sched_host, &port, err, sizeof err)) {
    wrk__log("--scheduler %s", err);
    return SS_EINVAL;
  }
  snprintf(w->sched_port, sizeof w->sched_port, "%d", port);
  return 0;
}

void wrk_options_init(wrk_options *o) {
  memset(o, 0, sizeof *o);
  o->cpu_slots = -1;
  o->drain_ms = -1;
}

static void list_handle(uv_handle_t *h, void *arg) {
  wrk__log("BUG: handle %p of type %s left open at exit", (void *)h, uv_handle_type_name(h->type));
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

static void worker_free(wrk__worker *w) {
  if (w->token) {
    memset(w->token, 0, strlen(w->token));
    free(w->token);
  }
  free(w->gpus);
  wrk__trainers_free(w);
  free(w);
}

/* Who and where this worker is: its name, its host, its Slurm job, the
 * binary its built-in trainer runs. */
static void identify(wrk__worker *w, const wrk_options *o) {
  if (uv_os_gethostname(w->host, &(size_t){sizeof w->host}))
    snprintf(w->host, sizeof w->host, "localhost");
  if (o->name && *o->name)
    snprintf(w->name, sizeof w->name, "%s", o->name);
  else
    snprintf(w->name, sizeof w->name, "%s:%d", w->host, (int)getpid());
  const char *job = getenv("SLURM_JOB_ID"); /* digits; anything else is not Slurm's */
  if (job && *job && strlen(job) < sizeof w->slurm_job && strspn(job, "0123456789_") == strlen(job))
    snprintf(w->slurm_job, sizeof w->slurm_job, "%s", job);
  size_t bl = sizeof w->bin;
  if (o->binary && *o->binary)
    snprintf(w->bin, sizeof w->bin, "%s", o->binary);
  else if (uv_exepath(w->bin, &bl))
    snprintf(w->bin, sizeof w->bin, "/proc/self/exe");
}

/* The options into w (the scheduler's address, the token, the work
 * directory, the GPUs, data directories and trainers it offers); 0 or the
 * error, logged. */
static int configure(wrk__worker *w, const wrk_options *o) {
  int rc = parse_address(w, o->scheduler);
  if (!rc)
    rc = read_token(w, o);
  if (rc)
    return rc;
  identify(w, o);
  const char *wd = o->work_dir && *o->work_dir ? o->work_dir : "./.scalesweep/worker";
  if (fio_mkdirs(wd, 0755) != 0 || !realpath(wd, w->work_dir)) {
    wrk__log("cannot create the work directory %s: %s", wd, strerror(errno));
    return SS_EIO;
  }
  wrk__identity_load(w);
  wrk__gpu_discover(w);
  if ((rc = wrk__gpu_restrict(w, o->gpus, o->n_gpus)) != 0 ||
      (rc = wrk__data_dirs_init(w, o->data_dirs, o->n_data_dirs)) != 0 ||
      (rc = wrk__trainers_init(w, o->trainers, o->n_trainers, o->trainers_file)) != 0)
    return rc;
  w->hang_ms = o->hang_timeout_s < 0    ? 0
               : o->hang_timeout_s == 0 ? 1800 * 1000
                                        : (int)(o->hang_timeout_s * 1000);
  w->cpu_slots = o->cpu_slots >= 0 ? o->cpu_slots : w->ngpus == 0 ? 1 : 0;
  wrk__backends_probe(w);
  w->hb_override = o->heartbeat_s;
  w->kill_grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : 10000;
  w->drain_ms = o->drain_ms >= 0 ? o->drain_ms : 2000;
  w->backoff_ms = WRK__BACKOFF_MIN_MS;
  return 0;
}

int wrk__loop_init(wrk__worker *w) {
  int rc = uv_loop_init(&w->loop);
  if (rc)
    return rc;
  uv_signal_init(&w->loop, &w->sigint);
  uv_signal_init(&w->loop, &w->sigterm);
  uv_signal_init(&w->loop, &w->sigchld);
  uv_timer_init(&w->loop, &w->reconnect_timer);
  uv_timer_init(&w->loop, &w->welcome_timer);
  uv_timer_init(&w->loop, &w->hb_timer);
  uv_timer_init(&w->loop, &w->drain_timer);
  uv_timer_init(&w->loop, &w->fence_timer);
  w->sigint.data = w->sigterm.data = w->sigchld.data = w;
  w->reconnect_timer.data = w->welcome_timer.data = w->hb_timer.data = w->drain_timer.data = w;
  w->fence_timer.data = w;
  return 0;
}

/* The loop, its signal watchers and timers; the fence check starts. 0, or
 * SS_EIO (logged) when the loop cannot start. */
static int loop_start(wrk__worker *w) {
  /* A SIGINT ignored by whoever started us stays ignored (the shell's rule
   * for background jobs; `scalesweep up` stops its worker with SIGTERM). */
  struct sigaction old_int;
  int watch_int = !(sigaction(SIGINT, NULL, &old_int) == 0 && old_int.sa_handler == SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  int rc = wrk__loop_init(w);
  if (rc) {
    wrk__log("cannot start the event loop: %s", uv_strerror(rc));
    return SS_EIO;
  }
  uv_timer_start(&w->fence_timer, wrk__on_fence_timer, FENCE_CHECK_MS, FENCE_CHECK_MS);
  if (watch_int)
    uv_signal_start(&w->sigint, on_signal, SIGINT);
  uv_signal_start(&w->sigterm, on_signal, SIGTERM);
  uv_signal_start(&w->sigchld, on_sigchld, SIGCHLD);
  return 0;
}

int wrk_run(const wrk_options *o) {
  wrk__worker *w = calloc(1, sizeof *w);
  if (!w)
    return SS_ENOMEM;
  int rc = configure(w, o);
  if (!rc)
    rc = loop_start(w);
  if (rc) {
    worker_free(w);
    return rc;
  }
  char gl[256], tl[1024];
  wrk__gpu_list(w, ",", gl, sizeof gl);
  wrk__trainers_list(w, tl, sizeof tl);
  wrk__log("%s: GPUs [%s], %d CPU slot%s, work dir %s, trainers %s (builtin: %s)", w->name, gl,
           w->cpu_slots, w->cpu_slots == 1 ? "" : "s", w->work_dir, tl, w->bin);
  wrk__connect_start(w);

  uv_run(&w->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&w->loop);
  if (rc) {
    uv_walk(&w->loop, list_handle, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    worker_free(w);
    return SS_EIO;
  }
  wrk__log("stopped");
  worker_free(w);
  return 0;
}

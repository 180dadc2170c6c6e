/* The scheduler: start-up and shutdown (options, tokens, listeners,
 * signals, the ready file), and the wiring of its concerns. */
#include "scheduler/sched.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/token.h"
#include "scheduler/internal.h"
#include "store/migrate.h"
#include "store/usage.h"

void sched_options_default(sched_options *o) {
  memset(o, 0, sizeof *o);
  o->listen = "127.0.0.1:8080";
  o->workers = "127.0.0.1:8081";
  o->checkpoint_root = "./.scalesweep/checkpoints";
  o->lease_s = 30;
  o->heartbeat_s = 5;
  o->retry_after_s = 10;
  o->open_reads = 1;
  o->predict_s = 15;
  o->reserve_after_s = 300;
  o->share_half_life_s = 604800;
  o->db_read_connections = 2;
  o->read_timeout_ms = 5000;
  o->auth_block_s = 60;
  o->slurm_max_nodes = 4;
  o->slurm_cpu_slots = 1;
  o->slurm_idle_s = 120;
  o->slurm_interval_s = 10;
  o->slurm_max_minutes = 1440;
}

/* fair share's usage, recomputed with this scheduler's half-life */
static void on_share_started(void *ud, int status, int64_t rows, const char *errmsg) {
  (void)ud;
  (void)rows;
  if (status != 0) /* the attempts' trigger keeps it meanwhile, with the last half-life */
    sched__logf("recomputing fair share's usage failed: %s", errmsg);
}

/* ---- start and stop ---------------------------------------------------------- */

static void on_closed_handle(uv_handle_t *h) { (void)h; }

static void on_http_stopped(void *ud) { (void)ud; }
static void on_db_closed(void *ud) { (void)ud; }

static void stop(sched *s) {
  if (s->stopping)
    return;
  s->stopping = 1;
  s->pr.stopping = 1;
  sched__logf("stopping");
  sched__lease_close(s);
  sched__slurm_close(s);
  uv_close((uv_handle_t *)&s->sigint, on_closed_handle);
  uv_close((uv_handle_t *)&s->sigterm, on_closed_handle);
  sched__wport_close(&s->wp);
  if (s->http)
    http_server_stop(s->http, on_http_stopped, s);
  db_close(s->db, on_db_closed, s);
  db_close(s->db_submit, on_db_closed, s);
  if (s->reads)
    db_pool_close(s->reads, on_db_closed, s);
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    db_close(s->wp.db_metrics[i], on_db_closed, s);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  stop(h->data);
}

/* The concerns' state: the worker port's connections and the predictor
 * share the main connection and the event stream; the port reports to
 * placement and the sweeps through its hooks. */
static void setup(sched *s, uv_loop_t *loop) {
  sched__wport *wp = &s->wp;
  wp->loop = loop;
  wp->db = s->db;
  for (int i = 0; i < SCHED__METRIC_DBS; i++)
    wp->db_metrics[i] = db_open(loop, s->o.database);
  wp->token = s->token;
  wp->lease_s = s->o.lease_s;
  wp->heartbeat_s = s->o.heartbeat_s;
  wp->retry_after_s = s->o.retry_after_s;
  wp->data_dirs = s->o.data_dirs;
  wp->ndata_dirs = s->o.ndata_dirs;
  wp->checkpoint_root = s->o.checkpoint_root;
  wp->auth_block_s = s->o.auth_block_s;
  wp->ev = &s->ev;
  wp->n = &s->n;
  wp->hooks = sched__port_hooks(s);
  s->pr = (sched__predictor){.loop = loop, .db = s->db, .reads = s->reads, .ev = &s->ev};
}

static int write_ready_file(sched *s, char *err, size_t errlen) {
  if (!s->o.ready_file)
    return 0;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->o.ready_file);
  FILE *f = fopen(tmp, "w");
  if (!f ||
      fprintf(f, "{\"http_port\":%d,\"workers_port\":%d,\"pid\":%d}\n", s->http_port, s->wp.port,
              (int)getpid()) < 0 ||
      fclose(f) != 0 || rename(tmp, s->o.ready_file) != 0) {
    snprintf(err, errlen, "%s: cannot write: %s", s->o.ready_file, strerror(errno));
    return SS_EIO;
  }
  return 0;
}

/* Every HTTP slot and database or worker connection is a descriptor: the
 * soft limit is raised to the hard one, and the slots lowered (with a log
 * line) when even that cannot hold them with 128 to spare. */
static void fit_fd_limit(http_limits *lim) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (lim->max_connections <= 0) { /* http's default */
    http_limits d;
    http_limits_default(&d);
    lim->max_connections = d.max_connections;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)lim->max_connections + 256)
    return;
  int fit = rl.rlim_cur > 256 ? (int)rl.rlim_cur - 128 : (int)rl.rlim_cur / 2;
  if (fit >= lim->max_connections)
    return;
  sched__logf("open file limit %llu: the HTTP server gets %d connection slots instead of %d",
              (unsigned long long)rl.rlim_cur, fit, lim->max_connections);
  lim->max_connections = fit;
}

/* What must hold before anything listens: the tokens (shorter than 16
 * characters refused: they can be guessed), the Slurm options, the
 * database's schema (migrated); 0, or an error in err. */
static int prepare(sched *s, char *err, size_t errlen) {
  const sched_options *opt = &s->o;
  int rc = token_read(opt->token_file, 16, s->token, sizeof s->token, NULL, err, errlen);
  if (!rc)
    rc = token_read(opt->api_token_file ? opt->api_token_file : opt->token_file, 16, s->api_token,
                    sizeof s->api_token, NULL, err, errlen);
  int applied = 0;
  if (!rc)
    rc = sched__slurm_check(opt, err, errlen);
  if (!rc)
    rc = db_migrate(opt->database, &applied, err, errlen);
  if (!rc)
    rc = sched__auth_load(s, err, errlen); /* users and their live tokens (auth.h) */
  if (!rc && applied)
    sched__logf("applied %d migration(s)", applied);
  return rc;
}

/* The connections to the database: control, submissions, and the reads,
 * which have a time limit and may not write (the control connection keeps
 * the server's settings). */
static void open_db(sched *s, uv_loop_t *loop) {
  s->db = db_open(loop, s->o.database);
  s->db_submit = db_open(loop, s->o.database);
  db_options ro = {.timeout_ms = s->o.read_timeout_ms, .read_only = 1};
  s->reads = db_pool_open(loop, s->o.database, s->o.db_read_connections, &ro);
}

/* The API's server on --listen (its host in host), the worker port, the
 * Slurm poller and the ready file; 0, or an error in err. */
static int listen_all(sched *s, char *host, size_t hostlen, char *err, size_t errlen) {
  const sched_options *opt = &s->o;
  int rc = 0, port;
  if (!s->reads) {
    snprintf(err, errlen, "out of memory opening the read connections");
    rc = SS_ENOMEM;
  } else if (addr_split(opt->listen, "0.0.0.0", 0, host, hostlen, &port, NULL, 0) != 0) {
    snprintf(err, errlen, "--listen %s: expected HOST:PORT", opt->listen);
    rc = SS_EINVAL;
  }
  http_limits lim;
  sched__http_limits(opt, &lim);
  fit_fd_limit(&lim);
  if (!rc) {
    s->http =
        http_server_start(s->loop, host, port, &lim, sched__http, s, &s->http_port, err, errlen);
    if (!s->http)
      rc = SS_EIO;
  }
  if (s->http) {
    http_hooks hooks;
    sched__http_hooks(s, &hooks);
    http_server_hooks(s->http, &hooks);
  }
  if (!rc)
    rc = sched__wport_listen(&s->wp, opt->workers, err, errlen);
  if (!rc)
    rc = sched__slurm_start(s, err, errlen);
  if (!rc)
    rc = write_ready_file(s, err, errlen);
  return rc;
}

/* Serves until a signal stops the loop; 0, or SS_EIO when a handle was
 * left open. */
static int serve(sched *s, const char *host, char *err, size_t errlen) {
  sched__lease_start(s);
  store_usage_start(s->db, s->o.share_half_life_s, on_share_started, s);
  sched__sweeps_settle(s);
  /* A SIGINT ignored by whoever started us stays ignored (the shell's rule
   * for background jobs): `scalesweep up` takes Ctrl-C itself and stops the
   * worker before the scheduler, so that the worker's last reports (its
   * trainers stopped, their runs back in the queue) still reach us. */
  struct sigaction old_int;
  if (!(sigaction(SIGINT, NULL, &old_int) == 0 && old_int.sa_handler == SIG_IGN))
    uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  sched__logf("serving the API on %s:%d and workers on port %d", host, s->http_port, s->wp.port);
  uv_run(s->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(s->loop) == 0 ? 0 : SS_EIO;
  if (rc)
    snprintf(err, errlen, "internal error: handles left open at exit");
  return rc;
}

int sched_run(const sched_options *opt, char *err, size_t errlen) {
  sched *s = calloc(1, sizeof *s);
  if (!s)
    return SS_ENOMEM;
  s->o = *opt;
  int rc = prepare(s, err, errlen);
  if (rc) {
    sched__auth_free(&s->auth);
    free(s);
    return rc;
  }
  /* runs whose worker may have died while we were down: their leases
   * decide (the lease timer re-queues them); nothing else to recover */
  /* a peer that leaves mid-write must not kill the scheduler */
  signal(SIGPIPE, SIG_IGN);
  uv_loop_t loop;
  uv_loop_init(&loop);
  s->loop = &loop;
  open_db(s, &loop);
  setup(s, &loop);
  char host[256];
  rc = listen_all(s, host, sizeof host, err, errlen);
  uv_timer_init(&loop, &s->ls.timer);
  s->ls.timer.data = s;
  uv_signal_init(&loop, &s->sigint);
  uv_signal_init(&loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  if (rc) {
    stop(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  } else {
    rc = serve(s, host, err, errlen);
  }
  sched__events_free(&s->ev);
  sched__wport_free(&s->wp);
  sched__refits_free(&s->refits);
  sched__sweepq_free(&s->tunes);
  sched__sweepq_free(&s->adapt);
  sched__place_free(s);
  sched__auth_free(&s->auth);
  free(s);
  return rc;
}

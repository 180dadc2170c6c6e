/* Trainer processes (proc.h): the run's config file, the argv and
 * environment, the spawn, reading its stdout, its exit, and SIGTERM /
 * SIGKILL. */
#include "worker/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "worker/backends.h"
#include "worker/datadirs.h"
#include "worker/gpu.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/memcheck.h"
#include "worker/report.h"
#include "worker/run.h"
#include "worker/trainers.h"

extern char **environ;

static void on_out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  wrk__run *r = h->data;
  *buf = uv_buf_init(r->obuf, sizeof r->obuf);
}

static void on_out_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  wrk__run *r = s->data;
  if (nread > 0) {
    if (r->out_broken)
      return;
    int rc = proto_reader_feed(&r->rd, buf->base, (size_t)nread, wrk__on_trainer_line, r);
    if (rc && !r->broken)
      wrk__run_broke_contract(r, "stdout line %" PRId64 " is longer than %u bytes", r->lines + 1,
                              PROTO_MAX_LINE);
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF)
    wrk__log("run %" PRId64 ": reading the trainer's output failed: %s", r->id,
             uv_strerror((int)nread));
  r->out_open = 0;
  wrk__run_close_handle(r, (uv_handle_t *)&r->out);
  if (!r->proc_alive)
    wrk__run_complete(r);
}

/* The trainer's exit, reaped by wrk__reap_children: as libuv reports it,
 * the exit code when it exited, the signal when one ended it. */
static void on_child_exit(wrk__run *r, int wstatus) {
  r->proc_alive = 0;
  r->exit_status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
  r->term_signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
  uv_timer_stop(&r->kill_timer);
  if (!r->out_open)
    wrk__run_complete(r);
}

void wrk__reap_children(wrk__worker *w) {
  for (wrk__run *r = w->runs, *next; r; r = next) {
    next = r->next; /* the exit may complete and unlink r */
    int st;
    if (!r->proc_alive || r->pid <= 0)
      continue;
    pid_t got;
    do
      got = waitpid(r->pid, &st, WNOHANG);
    while (got < 0 && errno == EINTR);
    if (got == r->pid)
      on_child_exit(r, st);
    else if (got < 0 && errno == ECHILD) /* reaped elsewhere: its status is lost */
      on_child_exit(r, 0x7f00);          /* as an exit with code 127 */
  }
}

void wrk__run_signal(wrk__run *r, int sig) {
  if (r->proc_alive && r->pid > 0 && kill(r->pid, sig) != 0 && errno != ESRCH)
    wrk__log("run %" PRId64 ": signal %d to pid %d failed: %s", r->id, sig, r->pid,
             strerror(errno));
}

/* The trainer's process: posix_spawn, which glibc does with vfork
 * semantics, not fork: the worker's page tables are not copied nor its
 * atfork handlers (OpenBLAS stops its threads in one) run, which cost more
 * than a millisecond of a core per run (`fork` in libuv's uv_spawn) and
 * more on a busy host, time a GPU waits between runs. Its stdin is
 * /dev/null, its stdout a pipe to the worker (*out_fd), its stderr the
 * attempt's log; signal dispositions and mask are reset to the defaults;
 * the worker's own descriptors are all close-on-exec. 0 or an errno. */
static int spawn_trainer(const char *bin, char *const *args, char *const *env, int log_fd,
                         pid_t *pid, int *out_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return errno;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc) {
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  if ((rc = posix_spawnattr_init(&at)) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  if (!(rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0)) &&
      !(rc = posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO)) &&
      !(rc = posix_spawn_file_actions_adddup2(&fa, log_fd, STDERR_FILENO)) &&
      !(rc = posix_spawnattr_setsigdefault(&at, &all)) &&
      !(rc = posix_spawnattr_setsigmask(&at, &none)) &&
      !(rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)))
    rc = posix_spawn(pid, bin, &fa, &at, args, env);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    return rc;
  }
  *out_fd = fds[0];
  return 0;
}

/* When several CPU runs share the host, libgomp's spinning waits steal the
 * cores from each other (20-50x slower); passive waiting changes no result. */
static int cpu_shared(const wrk__run *r) {
  wrk__worker *w = r->w;
  if (w->cpu_slots > 1)
    return 1;
  for (const wrk__run *x = w->runs; x; x = x->next)
    if (x != r && wrk__run_has_trainer(x) && x->ngpus == 0)
      return 1;
  return 0;
}

/* The worker's secrets never reach a trainer (a run config is user input,
 * and a trainer's environment is readable by whatever it runs): the cluster
 * and API tokens under their names, a PostgreSQL password, and any variable
 * whose value is the cluster token, whatever its name. */
static int secret_var(const wrk__worker *w, const char *var) {
  static const char *const names[] = {
      "SCALESWEEP_WORKER_TOKEN=", "SCALESWEEP_TOKEN=", "PGPASSWORD=", NULL};
  for (int i = 0; names[i]; i++)
    if (!strncmp(var, names[i], strlen(names[i])))
      return 1;
  const char *eq = strchr(var, '=');
  return eq && w->token && *w->token && !strcmp(eq + 1, w->token);
}

/* The contract's variables (docs/trainers.md): a declared trainer gets
 * them from its worker and launcher only, never from the worker's own
 * environment. */
static int contract_var(const char *var) {
  static const char *const names[] = {
      "SCALESWEEP_CONFIG=",     "SCALESWEEP_CHECKPOINT_DIR=", "SCALESWEEP_DATA_DIRS=",
      "SCALESWEEP_RESUME_MAX_STEP=", "SCALESWEEP_BRANCH_FROM=", "SCALESWEEP_KEEP_STEPS=",
      "SCALESWEEP_RUN_ID=",     "SCALESWEEP_ATTEMPT=",        "SCALESWEEP_TRAINER=",
      "RANK=",                  "WORLD_SIZE=",                "LOCAL_RANK=",
      "LOCAL_WORLD_SIZE=",      "MASTER_ADDR=",               "MASTER_PORT=",
      NULL};
  for (int i = 0; names[i]; i++)
    if (!strncmp(var, names[i], strlen(names[i])))
      return 1;
  return 0;
}

/* The trainer's environment: the worker's, less its secrets and the
 * contract's variables, with the run's GPUs, and extra (NULL-terminated,
 * may be NULL) appended. The strings are borrowed; free the array. */
static char **child_env(const wrk__run *r, char *cvd, size_t cvdlen, char *secret,
                        size_t secretlen, char *const *extra) {
  size_t n = 0, nx = 0;
  while (environ[n])
    n++;
  while (extra && extra[nx])
    nx++;
  char **env = calloc(n + nx + 5, sizeof *env);
  if (!env)
    return NULL;
  int passive = r->ngpus == 0 && cpu_shared(r) && !getenv("OMP_WAIT_POLICY");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) &&
        strncmp(environ[i], "CUDA_DEVICE_ORDER=", 18) &&
        strncmp(environ[i], "SCALESWEEP_DIST_SECRET=", 23) && !secret_var(r->w, environ[i]) &&
        !contract_var(environ[i]))
      env[k++] = environ[i];
  wrk__gpu_visible(r, cvd, cvdlen);
  env[k++] = cvd;
  /* nvidia-smi numbers GPUs in PCI bus order; CUDA's default order differs */
  env[k++] = "CUDA_DEVICE_ORDER=PCI_BUS_ID";
  if (passive)
    env[k++] = "OMP_WAIT_POLICY=PASSIVE";
  /* a run spread over workers: its ranks' shared secret (the assignment's) */
  const char *s = json_string_value(json_object_get(json_object_get(r->assign, "dist"), "secret"));
  if (s) {
    snprintf(secret, secretlen, "SCALESWEEP_DIST_SECRET=%s", s);
    env[k++] = secret;
  }
  for (size_t i = 0; i < nx; i++)
    env[k++] = extra[i];
  env[k] = NULL;
  return env;
}

/* The config exactly as assigned, as config.json holds it: it is what the
 * planner hashed. Encoded once per start, for the memory check and the
 * file both. NULL when out of memory. */
static char *config_text(const wrk__run *r) {
  return json_dumps(json_object_get(r->assign, "config"), JSON_INDENT(2) | JSON_REAL_PRECISION(17));
}

/* text (config_text) into path. What the worker decides (the checkpoint
 * directory, resuming) goes as flags. */
static int write_config(const char *text, const char *path, char *err, size_t errlen) {
  if (!text) {
    snprintf(err, errlen, "cannot encode the run config");
    return SS_EINVAL;
  }
  /* not fsynced: the trainer reads it at once, and after a crash the run is
   * assigned again with its config (an fsync here cost tens of ms per run,
   * time a GPU would sit idle between runs) */
  int rc = 0;
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) == EOF || fputc('\n', f) == EOF) {
    snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
    rc = SS_EIO;
  }
  if (f && fclose(f) != 0 && !rc) {
    snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
    rc = SS_EIO;
  }
  return rc;
}

/* "---- worker: run N attempt M: BIN train --config ... (CUDA_VISIBLE_DEVICES=...)"
 * at the top of the attempt's log (fd), so that it can be run again by hand. */
static void log_header(const wrk__run *r, int fd, char *const *args, const char *cvd) {
  char head[2048];
  size_t n = (size_t)snprintf(
      head, sizeof head, "---- worker: run %" PRId64 " attempt %" PRId64 ":", r->id, r->attempt);
  for (int i = 0; args[i] && n < sizeof head; i++)
    n += (size_t)snprintf(head + n, sizeof head - n, " %s", args[i]);
  if (n < sizeof head)
    n += (size_t)snprintf(head + n, sizeof head - n, " (%s)\n", cvd);
  if (n >= sizeof head) {
    n = sizeof head - 1;
    head[n - 1] = '\n';
  }
  if (write(fd, head, n) < 0)
    wrk__log("run %" PRId64 ": cannot write to %s: %s", r->id, r->log_path, strerror(errno));
}

/* assign.keep_steps as the trainer's --keep-steps (ascending, comma
 * separated, at most the trainer's 256; a branch whose point is not kept
 * trains from scratch once its trunk ends): 1 when there are any, else 0 */
static int keep_steps_arg(const json_t *ks, char *out, size_t n) {
  size_t len = 0, i, kept = 0;
  json_t *v;
  json_int_t last = 0;
  out[0] = 0;
  json_array_foreach(ks, i, v) {
    json_int_t x = json_integer_value(v);
    if (x <= last || kept == 256) /* the protocol checked >= 0; the trainer wants ascending */
      continue;
    kept++;
    int k = snprintf(out + len, n - len, "%s%" JSON_INTEGER_FORMAT, len ? "," : "", x);
    if (k < 0 || (size_t)k >= n - len)
      return 0;
    len += (size_t)k;
    last = x;
  }
  return len > 0;
}

/* What a run's trainer is told beside its config: where its checkpoints
 * go, where it resumes from, its wsd branch point and kept steps, and this
 * worker's ranks of a run spread over workers. */
typedef struct start_info {
  const char *ckdir;  /* "" when none */
  int resume;         /* an earlier attempt's checkpoint is here */
  char maxs[32];      /* resume at most from this step ("": any) */
  const char *bfrom;  /* the branch point, or NULL */
  int has_keeps;
  char keeps[4096];   /* "10,20" */
  int nranks;         /* > 0: this worker's ranks of a run spread over workers */
  char ranks[4096];
  const char *dist;   /* rank 0's HOST:PORT then */
} start_info;

static void start_info_of(wrk__run *r, start_info *si) {
  memset(si, 0, sizeof *si);
  si->ckdir = json_string_value(json_object_get(r->assign, "checkpoint_dir"));
  si->resume = json_is_true(json_object_get(r->assign, "resume"));
  char ckfile[PATH_MAX + 32];
  if (si->resume) {
    char prev[PATH_MAX + 32];
    snprintf(ckfile, sizeof ckfile, "%s/checkpoint.bin", si->ckdir);
    snprintf(prev, sizeof prev, "%s/checkpoint.prev.bin", si->ckdir);
    /* a declared trainer's checkpoints have names of its own: it resumes
     * from its directory whatever is there (docs/trainers.md) */
    if (!*si->ckdir ||
        (!wrk__trainer_find(r->w, wrk__run_trainer(r)) && access(ckfile, R_OK) &&
         access(prev, R_OK))) {
      wrk__log("run %" PRId64 " attempt %" PRId64 ": resume asked but %s%s; starting from scratch",
               r->id, r->attempt, *si->ckdir ? ckfile : "no checkpoint_dir was given",
               *si->ckdir ? " is not here" : "");
      si->resume = 0;
    }
  }
  /* resume at most from the last step whose metrics the scheduler has
   * stored: a checkpoint past it would leave the steps between unrecorded */
  json_t *maxj = json_object_get(r->assign, "resume_max_step");
  if (si->resume && json_is_integer(maxj) && json_integer_value(maxj) >= 0)
    snprintf(si->maxs, sizeof si->maxs, "%" JSON_INTEGER_FORMAT, json_integer_value(maxj));
  /* wsd branches (docs/sweeps.md): where a branch starts, where a trunk
   * keeps checkpoints for its branches */
  si->bfrom = json_string_value(json_object_get(r->assign, "branch_from"));
  if (si->bfrom && *si->bfrom && access(si->bfrom, R_OK) != 0) {
    /* not on this host (checkpoints not shared) or gone: from scratch, to
     * the same result, rather than an attempt that fails */
    wrk__log("run %" PRId64 " attempt %" PRId64 ": branch point %s: %s; training from scratch",
             r->id, r->attempt, si->bfrom, strerror(errno));
    si->bfrom = NULL;
  }
  if (si->bfrom && !*si->bfrom)
    si->bfrom = NULL;
  si->has_keeps = *si->ckdir && keep_steps_arg(json_object_get(r->assign, "keep_steps"),
                                               si->keeps, sizeof si->keeps);
  si->nranks = wrk__run_dist_ranks(r, si->ranks, sizeof si->ranks);
  if (si->nranks > 0)
    si->dist = json_string_value(json_object_get(json_object_get(r->assign, "dist"), "addr"));
}

/* `scalesweep train`'s arguments for the built-in trainer (room: args[20 +
 * 2 * WRK__MAX_DATA_DIRS]) */
static void builtin_args(wrk__run *r, const start_info *si, const char *cfg_path, char **args) {
  wrk__worker *w = r->w;
  int na = 0;
  args[na++] = w->bin;
  args[na++] = "train";
  args[na++] = "--config";
  args[na++] = (char *)cfg_path;
  if (*si->ckdir) {
    args[na++] = "--checkpoint-dir";
    args[na++] = (char *)si->ckdir;
  }
  wrk__data_dirs_args(w, args, &na);
  if (si->resume) {
    args[na++] = "--resume";
    args[na++] = (char *)si->ckdir;
  }
  if (si->maxs[0]) {
    args[na++] = "--resume-max-step";
    args[na++] = (char *)si->maxs;
  }
  if (si->bfrom) {
    args[na++] = "--branch-from";
    args[na++] = (char *)si->bfrom;
  }
  if (si->has_keeps) {
    args[na++] = "--keep-steps";
    args[na++] = (char *)si->keeps;
  }
  if (si->nranks > 0) { /* this worker's part of the run */
    args[na++] = "--ranks";
    args[na++] = (char *)si->ranks;
    args[na++] = "--dist";
    args[na++] = (char *)si->dist;
  }
  args[na] = NULL;
}

/* A declared trainer: `scalesweep launch` of its command (its ranks with
 * torchrun's environment), and the contract's variables in vars (as
 * "NAME=value" strings in store, a buffer of storelen bytes; extra gets
 * pointers to them, NULL-terminated, room for 12). 0, or -1 when they do
 * not fit (a bug: the paths are bounded). */
static int declared_args(wrk__run *r, const wrk__trainer *t, const start_info *si,
                         const char *cfg_path, char **args, size_t maxargs, char *world,
                         size_t worldlen, char **extra, char *store, size_t storelen) {
  wrk__worker *w = r->w;
  size_t na = 0, off = 0;
  int ne = 0;
  json_t *ws = json_object_get(json_object_get(r->assign, "config"), "world_size");
  snprintf(world, worldlen, "%" JSON_INTEGER_FORMAT, json_is_integer(ws) ? json_integer_value(ws) : 1);
  args[na++] = w->bin;
  args[na++] = "launch";
  args[na++] = "--world-size";
  args[na++] = world;
  if (si->nranks > 0) {
    args[na++] = "--ranks";
    args[na++] = (char *)si->ranks;
    args[na++] = "--dist";
    args[na++] = (char *)si->dist;
  }
  args[na++] = "--";
  for (size_t i = 0; i < t->argv.we_wordc && na + 1 < maxargs; i++)
    args[na++] = t->argv.we_wordv[i];
  args[na] = NULL;
  if (na + 1 >= maxargs)
    return -1;
  char dirs[WRK__MAX_DATA_DIRS * (PATH_MAX + 1)] = "";
  size_t dl = 0;
  for (int i = 0; i < w->ndata_dirs && dl < sizeof dirs; i++)
    dl += (size_t)snprintf(dirs + dl, sizeof dirs - dl, "%s%s", i ? ":" : "", w->data_dirs[i]);
#define VAR(...)                                                                                  \
  do {                                                                                            \
    int k_ = snprintf(store + off, storelen - off, __VA_ARGS__);                                  \
    if (k_ < 0 || (size_t)k_ >= storelen - off)                                                   \
      return -1;                                                                                  \
    extra[ne++] = store + off;                                                                    \
    off += (size_t)k_ + 1;                                                                        \
  } while (0)
  VAR("SCALESWEEP_CONFIG=%s", cfg_path);
  VAR("SCALESWEEP_TRAINER=%s", t->name);
  VAR("SCALESWEEP_RUN_ID=%" PRId64, r->id);
  VAR("SCALESWEEP_ATTEMPT=%" PRId64, r->attempt);
  /* set, empty or not: a trainer reads token shards only under these */
  VAR("SCALESWEEP_DATA_DIRS=%s", dirs);
  if (*si->ckdir)
    VAR("SCALESWEEP_CHECKPOINT_DIR=%s", si->ckdir);
  if (si->maxs[0])
    VAR("SCALESWEEP_RESUME_MAX_STEP=%s", si->maxs);
  if (si->bfrom)
    VAR("SCALESWEEP_BRANCH_FROM=%s", si->bfrom);
  if (si->has_keeps)
    VAR("SCALESWEEP_KEEP_STEPS=%s", si->keeps);
#undef VAR
  extra[ne] = NULL;
  return 0;
}

/* 1 after failing r's start when this worker cannot run it: a GPU it does
 * not offer, a trainer it does not offer, the CUDA backend it lacks, more
 * memory than it has. *tp: r's declared trainer (NULL: the built-in). */
static int start_refused(wrk__run *r, const char *text, const wrk__trainer **tp) {
  wrk__worker *w = r->w;
  for (int i = 0; i < r->ngpus; i++)
    if (!wrk__gpu_offered(w, r->gpus[i])) {
      wrk__run_fail_start(r, SS_EXIT_USAGE, "assigned GPU %d, which this worker does not offer",
                          r->gpus[i]);
      return 1;
    }
  for (wrk__run *x = w->runs; x; x = x->next) {
    if (x == r || !wrk__run_has_trainer(x))
      continue;
    for (int i = 0; i < r->ngpus; i++)
      for (int j = 0; j < x->ngpus; j++)
        if (r->gpus[i] == x->gpus[j])
          wrk__log("run %" PRId64 ": warning: GPU %d is also used by run %" PRId64, r->id,
                   r->gpus[i], x->id);
  }

  /* the trainer: the built-in, or one this worker's operator declared */
  const char *tname = wrk__run_trainer(r);
  const wrk__trainer *t = strcmp(tname, "builtin") ? wrk__trainer_find(w, tname) : NULL;
  *tp = t;
  if (strcmp(tname, "builtin") && !t) {
    char list[1024];
    wrk__trainers_list(w, list, sizeof list);
    wrk__run_fail_start(r, SS_EXIT_USAGE,
                        "not started: this worker does not offer the trainer \"%.40s\" (it offers "
                        "%s; an operator declares one with --trainer NAME=COMMAND)",
                        tname, list);
    return 1;
  }
  if (wrk__run_backend_refused(r))
    return 1;
  if (!t && wrk__run_memory_refused(r, text))
    return 1;
  if (t) /* its memory is its own program's: nothing here can estimate it */
    wrk__log("run %" PRId64 " attempt %" PRId64 ": memory check skipped: the trainer \"%s\" "
             "declares no memory estimate",
             r->id, r->attempt, t->name);
  return 0;
}

/* The run's directory and config.json (its path into cfg_path), what its
 * trainer is told beside (si), and its attempt's log opened for appending:
 * the log's descriptor, or -1 after failing r's start. */
static int start_files(wrk__run *r, const char *text, char *cfg_path, size_t cfg_len,
                       start_info *si) {
  char err[1024];
  if (fio_mkdirs(r->dir, 0755) != 0) {
    wrk__run_fail_start(r, SS_EXIT_FAILURE, "cannot create %s: %s", r->dir, strerror(errno));
    return -1;
  }
  snprintf(cfg_path, cfg_len, "%s/config.json", r->dir);
  if (write_config(text, cfg_path, err, sizeof err)) {
    wrk__run_fail_start(r, SS_EXIT_FAILURE, "cannot write the run config: %s", err);
    return -1;
  }
  start_info_of(r, si);
  int fd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    wrk__run_fail_start(r, SS_EXIT_FAILURE, "cannot open %s: %s", r->log_path, strerror(errno));
  return fd;
}

/* The spawned trainer's stdout, read into report.c's line handler. With no
 * stdout to read, the trainer is stopped (its exit is still reaped): -1. */
static int read_stdout(wrk__run *r, int out_fd) {
  wrk__worker *w = r->w;
  r->last_line_ms = uv_now(&w->loop);
  uv_pipe_init(&w->loop, &r->out, 0);
  r->out.data = r;
  r->nopen++;
  r->out_open = 1;
  int prc = uv_pipe_open(&r->out, out_fd);
  if (prc) {
    close(out_fd);
    wrk__log("run %" PRId64 ": reading the trainer's output: %s; SIGKILL to pid %d", r->id,
             uv_strerror(prc), r->pid);
    r->out_open = 0;
    wrk__run_close_handle(r, (uv_handle_t *)&r->out);
    wrk__run_signal(r, SIGKILL);
    return -1;
  }
  uv_read_start((uv_stream_t *)&r->out, on_out_alloc, on_out_read);
  return 0;
}

int wrk__proc_spawn(wrk__run *r) {
  wrk__worker *w = r->w;
  const wrk__trainer *t = NULL;
  char *text = config_text(r); /* once: the memory check's and config.json's */
  if (start_refused(r, text, &t)) {
    free(text);
    return -1;
  }
  char cfg_path[PATH_MAX + 64];
  start_info si;
  int fd = start_files(r, text, cfg_path, sizeof cfg_path, &si);
  free(text);
  if (fd < 0)
    return -1;

  enum { MAX_ARGS = 64 + 2 * WRK__MAX_DATA_DIRS };
  char *args[MAX_ARGS], *extra[16], world[24];
  static char vars[WRK__MAX_DATA_DIRS * (PATH_MAX + 1) + 6 * PATH_MAX];
  extra[0] = NULL;
  if (!t)
    builtin_args(r, &si, cfg_path, args);
  else if (declared_args(r, t, &si, cfg_path, args, MAX_ARGS, world, sizeof world, extra, vars,
                         sizeof vars)) {
    close(fd);
    wrk__run_fail_start(r, SS_EXIT_FAILURE, "the trainer \"%s\"'s command or paths are too long",
                        t->name);
    return -1;
  }
  char cvd[256], secret[320];
  char **env = child_env(r, cvd, sizeof cvd, secret, sizeof secret, extra);
  log_header(r, fd, args, cvd);

  pid_t pid = 0;
  int out_fd = -1;
  int rc = env ? spawn_trainer(w->bin, args, env, fd, &pid, &out_fd) : ENOMEM;
  free(env);
  close(fd);
  if (rc) {
    wrk__run_fail_start(r, 127, "cannot start %s: %s", w->bin, strerror(rc));
    return -1;
  }
  r->pid = pid;
  r->proc_alive = 1;
  if (read_stdout(r, out_fd))
    return 0;
  wrk__log("run %" PRId64 " attempt %" PRId64 ": started pid %d (%s)%s%s%s", r->id, r->attempt,
           r->pid, cvd, si.resume ? ", resuming" : "", t ? ", trainer " : "", t ? t->name : "");
  return 0;
}

static void on_kill_timer(uv_timer_t *t) {
  wrk__run *r = t->data;
  if (!r->proc_alive)
    return;
  wrk__log("run %" PRId64 " attempt %" PRId64 ": still running %d ms after SIGTERM; SIGKILL", r->id,
           r->attempt, r->w->kill_grace_ms);
  wrk__run_signal(r, SIGKILL);
}

void wrk__proc_stop(wrk__run *r, const char *why) {
  wrk__log("run %" PRId64 " attempt %" PRId64 ": %s: SIGTERM to pid %d", r->id, r->attempt, why,
           r->pid);
  wrk__run_signal(r, SIGTERM);
  uv_timer_start(&r->kill_timer, on_kill_timer, (uint64_t)r->w->kill_grace_ms, 0);
}

void wrk__proc_kill_now(wrk__run *r) {
  if (r->proc_alive) {
    wrk__log("run %" PRId64 ": SIGKILL to pid %d at exit", r->id, r->pid);
    wrk__run_signal(r, SIGKILL);
    r->proc_alive = 0;
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  if (r->out_open) {
    r->out_open = 0;
    wrk__run_close_handle(r, (uv_handle_t *)&r->out);
  }
}

/* Elastic workers through Slurm (slurm.h). Every --slurm-interval-seconds,
 * one pass: read the queue, list the scheduler's jobs with squeue, then
 * either submit one job (sbatch) for the runs nothing can take, or cancel
 * (scancel) the jobs nothing needs. Slurm's commands run as child processes
 * on the loop, one at a time, each with a time limit. */
#include "scheduler/slurm.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/addr.h"
#include "scheduler/internal.h"
#include "sweeps/spec.h"

#define CMD_TIMEOUT_MS 30000
#define HOLD_MS 60000 /* after a failed sbatch, or a job whose workers never came */

static uint64_t now_ms(sched *s) { return uv_now(s->loop); }

/* ---- running one of Slurm's commands ------------------------------------- */

static void cmd_finish(sched *s) {
  sched__slurm *sl = &s->slurm;
  if (!uv_is_closing((uv_handle_t *)&sl->kill_timer))
    uv_timer_stop(&sl->kill_timer);
  if (sl->script[0]) {
    unlink(sl->script);
    sl->script[0] = '\0';
  }
  sl->obuf[sl->olen < sizeof sl->obuf ? sl->olen : sizeof sl->obuf - 1] = '\0';
  sl->ebuf[sl->elen < sizeof sl->ebuf ? sl->elen : sizeof sl->ebuf - 1] = '\0';
  void (*done)(void *, int) = sl->done;
  sl->done = NULL;
  if (done)
    done(s, !s->stopping && sl->exit_status == 0 && sl->term_signal == 0);
}

static void on_cmd_closed(uv_handle_t *h) {
  sched *s = h->data;
  if (--s->slurm.open_handles == 0)
    cmd_finish(s);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  sched *s = p->data;
  s->slurm.running = 0;
  s->slurm.exit_status = status;
  s->slurm.term_signal = sig;
  uv_close((uv_handle_t *)p, on_cmd_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  sched *s = h->data;
  sched__slurm *sl = &s->slurm;
  int is_out = h == (uv_handle_t *)&sl->out;
  char *b = is_out ? sl->obuf : sl->ebuf;
  size_t cap = is_out ? sizeof sl->obuf : sizeof sl->ebuf, *len = is_out ? &sl->olen : &sl->elen;
  static char sink[4096]; /* past the buffer: read and dropped */
  if (*len + 1 >= cap)
    *buf = uv_buf_init(sink, sizeof sink);
  else
    *buf = uv_buf_init(b + *len, (unsigned)(cap - 1 - *len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  sched *s = st->data;
  sched__slurm *sl = &s->slurm;
  if (n > 0) {
    size_t *len = st == (uv_stream_t *)&sl->out ? &sl->olen : &sl->elen;
    char *b = st == (uv_stream_t *)&sl->out ? sl->obuf : sl->ebuf;
    if (buf->base >= b &&
        buf->base < b + (st == (uv_stream_t *)&sl->out ? sizeof sl->obuf : sizeof sl->ebuf))
      *len += (size_t)n;
    return;
  }
  if (n < 0) {
    uv_read_stop(st);
    uv_close((uv_handle_t *)st, on_cmd_closed);
  }
}

static void on_cmd_timeout(uv_timer_t *t) {
  sched *s = t->data;
  sched__logf("slurm: %s did not finish in %d s: killed", s->slurm.cmd, CMD_TIMEOUT_MS / 1000);
  if (s->slurm.running)
    uv_process_kill(&s->slurm.proc, SIGKILL);
}

/* Runs argv; done(s, ok) once it has exited and its output is read (ok:
 * exit 0), its standard output in sl->obuf, its errors in sl->ebuf. 0, or -1
 * when it could not start (logged; done is not called). */
static int run_cmd(sched *s, char **argv, void (*done)(void *, int)) {
  sched__slurm *sl = &s->slurm;
  sl->olen = sl->elen = 0;
  sl->exit_status = 0;
  sl->term_signal = 0;
  uv_pipe_init(s->loop, &sl->out, 0);
  uv_pipe_init(s->loop, &sl->err, 0);
  sl->out.data = sl->err.data = sl->proc.data = s;
  uv_stdio_container_t io[3] = {
      {.flags = UV_IGNORE},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&sl->out},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&sl->err}};
  uv_process_options_t po = {
      .file = argv[0], .args = argv, .exit_cb = on_exit_cb, .stdio_count = 3, .stdio = io};
  int rc = uv_spawn(s->loop, &sl->proc, &po);
  if (rc) {
    sched__logf("slurm: cannot run %s: %s", argv[0], uv_strerror(rc));
    uv_close((uv_handle_t *)&sl->proc, NULL);
    uv_close((uv_handle_t *)&sl->out, NULL);
    uv_close((uv_handle_t *)&sl->err, NULL);
    if (sl->script[0]) {
      unlink(sl->script);
      sl->script[0] = '\0';
    }
    return -1;
  }
  sl->open_handles = 3;
  sl->running = 1;
  sl->done = done;
  snprintf(sl->cmd, sizeof sl->cmd, "%s", argv[0]);
  uv_read_start((uv_stream_t *)&sl->out, on_alloc, on_read);
  uv_read_start((uv_stream_t *)&sl->err, on_alloc, on_read);
  uv_timer_start(&sl->kill_timer, on_cmd_timeout, CMD_TIMEOUT_MS, 0);
  return 0;
}

/* The first line of a command's errors, for a log line. */
static const char *first_error(sched__slurm *sl) {
  char *nl = strchr(sl->ebuf, '\n');
  if (nl)
    *nl = '\0';
  return sl->ebuf[0] ? sl->ebuf : "(no message)";
}

/* ---- the pass -------------------------------------------------------------- */

static void pass_end(sched *s) {
  sched__slurm *sl = &s->slurm;
  free(sl->queue);
  sl->queue = NULL;
  sl->nqueue = 0;
  sl->busy = 0;
}

/* Logs why no job is asked for, once until the reason changes. */
static void say(sched__slurm *sl, const char *why) {
  if (strncmp(sl->said, why, sizeof sl->said - 1) != 0) {
    snprintf(sl->said, sizeof sl->said, "%.*s", (int)sizeof sl->said - 1, why);
    if (why[0])
      sched__logf("slurm: %s", why);
  }
}

static double run_seconds(const store_queued *q) {
  double tput = q->throughput > 0 ? q->throughput
                : q->gpus > 0     ? SPEC_GPU_FLOPS * q->gpus
                                  : SPEC_CPU_FLOPS;
  return q->flops > 0 ? q->flops / tput : 0;
}

/* What the queue needs beyond free CPU slots cpu and free GPUs gpu (both
 * consumed, in queue order): the runs left over, as counts and sizes. */
typedef struct need {
  int cpu_runs, cpu_slots, cpu_max; /* CPU runs left, their slots, the most one needs */
  int gpu_runs, gpu_gpus, gpu_max;  /* GPU runs left, their GPUs, the most one needs */
  double cpu_secs, gpu_secs, cpu_secs_max, gpu_secs_max;
  int first_gpu; /* the first run left needs GPUs */
} need;

static need needs(const sched__slurm *sl, int cpu, int gpu) {
  need n = {0};
  int first = 1;
  for (int i = 0; i < sl->nqueue; i++) {
    const store_queued *q = &sl->queue[i];
    int slots = q->slots > 0 ? q->slots : 1;
    double secs = run_seconds(q);
    if (q->gpus > 0 && gpu >= q->gpus) {
      gpu -= q->gpus;
    } else if (q->gpus == 0 && cpu >= slots) {
      cpu -= slots;
    } else if (q->gpus > 0) {
      n.gpu_runs++;
      n.gpu_gpus += q->gpus;
      n.gpu_max = q->gpus > n.gpu_max ? q->gpus : n.gpu_max;
      n.gpu_secs += secs;
      n.gpu_secs_max = secs > n.gpu_secs_max ? secs : n.gpu_secs_max;
      if (first)
        n.first_gpu = 1;
      first = 0;
    } else {
      n.cpu_runs++;
      n.cpu_slots += slots;
      n.cpu_max = slots > n.cpu_max ? slots : n.cpu_max;
      n.cpu_secs += secs;
      n.cpu_secs_max = secs > n.cpu_secs_max ? secs : n.cpu_secs_max;
      first = 0;
    }
  }
  return n;
}

static int job_live(const sched__sjob *j) {
  return !j->cancelling && (!strcmp(j->state, "PENDING") || !strcmp(j->state, "CONFIGURING") ||
                            !strcmp(j->state, "RUNNING") || !strcmp(j->state, "REQUEUED") ||
                            !strcmp(j->state, "RESIZING") || !strcmp(j->state, "SUSPENDED"));
}

static void on_sbatch(void *ud, int ok);
static void on_scancel(void *ud, int ok);

/* Appends 'text' to the script, quoted for sh. */
static void sh_quote(FILE *f, const char *text) {
  fputc('\'', f);
  for (const char *p = text; *p; p++) {
    if (*p == '\'')
      fputs("'\\''", f);
    else
      fputc(*p, f);
  }
  fputc('\'', f);
}

/* Writes sbatch's script (sl->script, its name): one worker per node of
 * gpn GPUs (0: of spn CPU slots); 0, or -1 logged, no script left. */
static int write_script(sched *s, int gpn, int spn) {
  sched__slurm *sl = &s->slurm;
  const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(sl->script, sizeof sl->script, "%s/scalesweep-sbatch-XXXXXX", tmpdir);
  int fd = mkstemp(sl->script);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    sched__logf("slurm: cannot write sbatch's script under %s: %s", tmpdir, strerror(errno));
    if (fd >= 0)
      close(fd);
    sl->script[0] = '\0';
    return -1;
  }
  /* one worker per node, offering the GPUs Slurm gave it; named after its
   * node and job, so that two never share a name */
  fprintf(f, "#!/bin/sh\n# scalesweep workers, asked for by `scalesweep scheduler --slurm`\n"
             "exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 /bin/sh -c '"
             "node=${SLURMD_NODENAME:-$(hostname -s)}; "
             "exec \"$0\" worker --scheduler \"$1\" --token-file \"$2\" "
             "--work-dir \"${TMPDIR:-/tmp}/scalesweep-$SLURM_JOB_ID/$node\" "
             "--gpus \"${CUDA_VISIBLE_DEVICES:-none}\" --cpu-slots \"$3\" "
             "--name \"$node-$SLURM_JOB_ID\"' ");
  sh_quote(f, sl->bin);
  fputc(' ', f);
  sh_quote(f, sl->addr);
  fputc(' ', f);
  sh_quote(f, sl->token);
  fprintf(f, " %d\n", gpn > 0 ? 0 : spn);
  if (fclose(f) != 0) {
    sched__logf("slurm: cannot write %s: %s", sl->script, strerror(errno));
    unlink(sl->script);
    sl->script[0] = '\0';
    return -1;
  }
  return 0;
}

/* The job's time limit in minutes for secs seconds of work per node: a
 * quarter more and 5 minutes for start-up and checkpoints, within [10
 * minutes, --slurm-max-minutes]; a job that ends first loses nothing
 * (SIGTERM: its runs checkpoint). */
static int time_limit(const sched *s, double secs) {
  double minutes = ceil((secs * 1.25 + 300) / 60);
  if (minutes < 10)
    minutes = 10;
  if (minutes > s->o.slurm_max_minutes)
    minutes = s->o.slurm_max_minutes;
  return (int)minutes;
}

/* sbatch for nodes workers of gpn GPUs (0: CPU workers of spn slots each)
 * for about secs seconds of work per node. */
static void submit(sched *s, int nodes, int gpn, int spn, double secs, int runs) {
  sched__slurm *sl = &s->slurm;
  if (write_script(s, gpn, spn))
    return pass_end(s);
  int minutes = time_limit(s, secs);
  char a_part[256], a_nodes[32], a_time[32], a_comment[512], a_res[64];
  snprintf(a_part, sizeof a_part, "--partition=%s", s->o.slurm_partition);
  snprintf(a_nodes, sizeof a_nodes, "--nodes=%d", nodes);
  snprintf(a_time, sizeof a_time, "--time=%d", minutes);
  snprintf(a_comment, sizeof a_comment, "--comment=%s gpus=%d slots=%d", sl->comment, gpn,
           gpn > 0 ? 0 : spn);
  if (gpn > 0)
    snprintf(a_res, sizeof a_res, "--gres=gpu:%d", gpn);
  else
    snprintf(a_res, sizeof a_res, "--cpus-per-task=%d", spn);
  char *argv[32 + SCHED_MAX_SLURM_OPTIONS];
  int k = 0;
  argv[k++] = "sbatch";
  argv[k++] = "--parsable";
  argv[k++] = "--job-name=" SCHED__SLURM_JOB_NAME;
  argv[k++] = a_part;
  argv[k++] = a_nodes;
  argv[k++] = "--ntasks-per-node=1";
  argv[k++] = a_res;
  argv[k++] = a_time;
  /* at the time limit, or when preempted: SIGTERM 2 minutes ahead, and a
   * requeued job's workers come back under the same names */
  argv[k++] = "--signal=TERM@120";
  argv[k++] = "--requeue";
  argv[k++] = a_comment;
  for (int i = 0; i < s->o.nslurm_options; i++)
    argv[k++] = (char *)s->o.slurm_options[i];
  argv[k++] = sl->script;
  argv[k] = NULL;
  sched__logf("slurm: asking for %d node(s) of %s %d (%d queued run%s nothing connected can take; "
              "time limit %d min)",
              nodes, gpn > 0 ? "GPUs" : "CPU slots", gpn > 0 ? gpn : spn, runs,
              runs == 1 ? "" : "s", minutes);
  if (run_cmd(s, argv, on_sbatch) != 0) {
    sl->hold_until_ms = now_ms(s) + HOLD_MS;
    pass_end(s);
  }
}

static void on_sbatch(void *ud, int ok) {
  sched *s = ud;
  sched__slurm *sl = &s->slurm;
  if (!ok) {
    if (!s->stopping) {
      sched__logf("slurm: sbatch failed (exit %lld): %s; trying again in %d s",
                  (long long)sl->exit_status, first_error(sl), HOLD_MS / 1000);
      sl->hold_until_ms = now_ms(s) + HOLD_MS;
    }
    pass_end(s);
    return;
  }
  char id[32] = "";
  sscanf(sl->obuf, "%31[0-9_]", id);
  sched__logf("slurm: submitted job %s", id[0] ? id : sl->obuf);
  sl->said[0] = '\0';
  pass_end(s);
}

static void on_scancel(void *ud, int ok) {
  sched *s = ud;
  if (!ok && !s->stopping)
    sched__logf("slurm: scancel failed (exit %lld): %s", (long long)s->slurm.exit_status,
                first_error(&s->slurm));
  pass_end(s);
}

/* The connected workers' free CPU slots and GPUs (draining ones' not), and
 * per job its workers connected (jobs[i].connected) and idle (idle_of[i]). */
static void count_workers(sched *s, int *idle_of, int *cpu_free, int *gpu_free, int *returning) {
  sched__slurm *sl = &s->slurm;
  *cpu_free = *gpu_free = *returning = 0;
  for (int i = 0; i < sl->njobs; i++)
    sl->jobs[i].connected = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    for (int i = 0; i < sl->njobs; i++)
      if (c->slurm_job[0] && !strcmp(c->slurm_job, sl->jobs[i].id)) {
        sl->jobs[i].connected++;
        sl->jobs[i].ever_connected = 1;
        idle_of[i] += c->runs == NULL;
      }
    if (c->draining) {
      *returning += c->runs != NULL;
      continue;
    }
    *cpu_free += c->cpu_slots - c->cpu_busy;
    if (c->cuda_ok)
      for (int g = 0; g < c->ngpus; g++)
        *gpu_free += !c->gpu_busy[g];
  }
}

/* The nodes the live jobs hold, and the CPU slots and GPUs of those whose
 * workers have not connected yet (*cpu_coming, *gpu_coming). */
static int nodes_held(const sched__slurm *sl, int *cpu_coming, int *gpu_coming) {
  int nodes_used = 0;
  *cpu_coming = *gpu_coming = 0;
  for (int i = 0; i < sl->njobs; i++) {
    const sched__sjob *j = &sl->jobs[i];
    if (!job_live(j))
      continue;
    nodes_used += j->nodes;
    int missing = j->nodes - j->connected;
    if (missing > 0) {
      *cpu_coming += missing * j->slots_per_node;
      *gpu_coming += missing * j->gpus_per_node;
    }
  }
  return nodes_used;
}

/* Cancels pending jobs nothing waits for (now_need: what the connected
 * workers cannot take) and running jobs whose workers have all been idle
 * for --slurm-idle-seconds; 1 when a scancel was started or failed to (the
 * pass then over), 0 when none is to go. */
static int cancel_idle(sched *s, const int *idle_of, need now_need, uint64_t now) {
  sched__slurm *sl = &s->slurm;
  char *cancel[SCHED__SLURM_MAX_JOBS + 2];
  int nc = 0;
  cancel[nc++] = "scancel";
  for (int i = 0; i < sl->njobs; i++) {
    sched__sjob *j = &sl->jobs[i];
    if (!job_live(j))
      continue;
    int all_idle = j->connected >= j->nodes && idle_of[i] == j->connected;
    if (!all_idle)
      j->idle_since_ms = 0;
    else if (!j->idle_since_ms)
      j->idle_since_ms = now;
    int pending = !strcmp(j->state, "PENDING");
    if ((pending && now_need.cpu_runs + now_need.gpu_runs == 0) ||
        (all_idle && now - j->idle_since_ms >= (uint64_t)s->o.slurm_idle_s * 1000)) {
      sched__logf("slurm: cancelling job %s (%s)", j->id,
                  pending ? "pending, and the connected workers can take every queued run"
                          : "its workers have been idle");
      j->cancelling = 1;
      cancel[nc++] = j->id;
    }
  }
  if (nc == 1)
    return 0;
  cancel[nc] = NULL;
  if (run_cmd(s, cancel, on_scancel) != 0)
    pass_end(s);
  return 1;
}

/* Says why nothing is asked for (sl->said), and ends the pass. */
static void hold(sched *s, const char *why) {
  say(&s->slurm, why);
  pass_end(s);
}

/* Asks for one job for what is left waiting (left), the jobs holding
 * nodes_used nodes: a GPU job when a GPU run is first in line or only GPU
 * runs wait, as many nodes as the runs fill within --slurm-max-nodes. */
static void ask(sched *s, need left, int nodes_used) {
  int room = s->o.slurm_max_nodes - nodes_used;
  int gpn = s->o.slurm_gpus_per_node, spn = s->o.slurm_cpu_slots;
  char why[512];
  int gpu_job = left.gpu_runs > 0 && (left.first_gpu || left.cpu_runs == 0);
  if (gpu_job && gpn == 0) {
    snprintf(why, sizeof why,
             "%d queued run(s) need GPUs, and --slurm-gpus-per-node is 0: no GPU job is asked "
             "for",
             left.gpu_runs);
    say(&s->slurm, why);
    if (left.cpu_runs == 0)
      return pass_end(s);
    gpu_job = 0;
  }
  int per = gpu_job ? gpn : spn;
  int units = gpu_job ? left.gpu_gpus : left.cpu_slots,
      most = gpu_job ? left.gpu_max : left.cpu_max;
  int nodes = (units + per - 1) / per, least = (most + per - 1) / per;
  if (least > s->o.slurm_max_nodes) {
    snprintf(why, sizeof why,
             "a queued run needs %d %s, %d node(s) of %d, over --slurm-max-nodes %d", most,
             gpu_job ? "GPUs" : "CPU slots", least, per, s->o.slurm_max_nodes);
    return hold(s, why);
  }
  if (nodes > room)
    nodes = room;
  if (nodes < least) {
    snprintf(why, sizeof why,
             "runs wait, and the jobs asked for already hold %d of --slurm-max-nodes %d",
             nodes_used, s->o.slurm_max_nodes);
    return hold(s, why);
  }
  double secs = gpu_job ? left.gpu_secs : left.cpu_secs;
  double most_secs = gpu_job ? left.gpu_secs_max : left.cpu_secs_max;
  double per_node = secs / nodes > most_secs ? secs / nodes : most_secs;
  submit(s, nodes, gpu_job ? gpn : 0, spn, per_node, gpu_job ? left.gpu_runs : left.cpu_runs);
}

/* The decision, from the queue (sl->queue), the jobs (sl->jobs) and the
 * connected workers: ask for one job, cancel idle ones, or nothing. */
static void decide(sched *s) {
  sched__slurm *sl = &s->slurm;
  uint64_t now = now_ms(s);
  int cpu_free, gpu_free, cpu_coming, gpu_coming, returning;
  int idle_of[SCHED__SLURM_MAX_JOBS] = {0};
  count_workers(s, idle_of, &cpu_free, &gpu_free, &returning);
  /* what the connected workers cannot take; then what the jobs on their way
   * (their workers not connected yet) cannot either */
  need now_need = needs(sl, cpu_free, gpu_free);
  int nodes_used = nodes_held(sl, &cpu_coming, &gpu_coming);
  need left = needs(sl, cpu_free + cpu_coming, gpu_free + gpu_coming);
  if (cancel_idle(s, idle_of, now_need, now))
    return;
  /* stopping workers (a preempted job's) still hold runs that come back to
   * the queue within their kill grace: one job for them all once they are
   * back, not one for each as it comes */
  if (returning > 0)
    return pass_end(s);
  if (left.cpu_runs + left.gpu_runs == 0)
    return hold(s, "");
  if (now < sl->hold_until_ms)
    return pass_end(s);
  ask(s, left, nodes_used);
}

/* squeue's listing of the scheduler's jobs: id|state|nodes|comment lines */
static void on_squeue(void *ud, int ok) {
  sched *s = ud;
  sched__slurm *sl = &s->slurm;
  if (!ok) {
    if (!s->stopping)
      say(sl, sl->ebuf[0] ? first_error(sl) : "squeue failed");
    pass_end(s);
    return;
  }
  sched__sjob seen[SCHED__SLURM_MAX_JOBS];
  int n = 0;
  size_t clen = strlen(sl->comment);
  for (char *line = strtok(sl->obuf, "\n"); line && n < SCHED__SLURM_MAX_JOBS;
       line = strtok(NULL, "\n")) {
    char id[32], state[24];
    int nodes = 0, consumed = 0;
    if (sscanf(line, "%31[^|]|%23[^|]|%d|%n", id, state, &nodes, &consumed) != 3 || !consumed)
      continue;
    const char *comment = line + consumed;
    if (strncmp(comment, sl->comment, clen) != 0 || comment[clen] != ' ')
      continue; /* another scheduler's, or not ours */
    int gpn = 0, spn = 0;
    if (sscanf(comment + clen, " gpus=%d slots=%d", &gpn, &spn) != 2)
      continue;
    sched__sjob j = {
        .nodes = nodes, .gpus_per_node = gpn, .slots_per_node = spn, .first_seen_ms = now_ms(s)};
    snprintf(j.id, sizeof j.id, "%s", id);
    snprintf(j.state, sizeof j.state, "%s", state);
    for (int i = 0; i < sl->njobs; i++)
      if (!strcmp(sl->jobs[i].id, id)) { /* known: keep what was learnt of it */
        j.first_seen_ms = sl->jobs[i].first_seen_ms;
        j.idle_since_ms = sl->jobs[i].idle_since_ms;
        j.ever_connected = sl->jobs[i].ever_connected;
        j.cancelling = sl->jobs[i].cancelling;
      }
    seen[n++] = j;
  }
  /* jobs gone from the listing ended: one whose workers never connected
   * (they could not start or reach the scheduler) holds off the next */
  for (int i = 0; i < sl->njobs; i++) {
    int still = 0;
    for (int k = 0; k < n && !still; k++)
      still = !strcmp(seen[k].id, sl->jobs[i].id);
    if (still)
      continue;
    if (!sl->jobs[i].ever_connected && !sl->jobs[i].cancelling) {
      sl->failed_starts++;
      int hold = HOLD_MS * (sl->failed_starts < 4 ? 1 << (sl->failed_starts - 1) : 8);
      sched__logf("slurm: job %s ended before any of its workers connected (see its output "
                  "file, slurm-%s.out by default); no new job for %d s",
                  sl->jobs[i].id, sl->jobs[i].id, hold / 1000);
      sl->hold_until_ms = now_ms(s) + (uint64_t)hold;
    } else if (sl->jobs[i].ever_connected) {
      sl->failed_starts = 0;
    }
  }
  memcpy(sl->jobs, seen, (size_t)n * sizeof *seen);
  sl->njobs = n;
  decide(s);
}

static void on_queue(void *ud, int status, const store_queued *runs, int n, const char *errmsg) {
  sched *s = ud;
  sched__slurm *sl = &s->slurm;
  if (status != 0 || s->stopping) {
    if (!s->stopping)
      sched__logf("slurm: reading the queue failed: %s", errmsg);
    pass_end(s);
    return;
  }
  sl->queue = n ? malloc((size_t)n * sizeof *runs) : NULL;
  if (n && !sl->queue) {
    pass_end(s);
    return;
  }
  if (n) /* an empty queue: runs may be NULL */
    memcpy(sl->queue, runs, (size_t)n * sizeof *runs);
  sl->nqueue = n;
  char *argv[] = {
      "squeue", "--noheader", "--me", "--name=" SCHED__SLURM_JOB_NAME, "--format=%i|%T|%D|%k",
      NULL};
  if (run_cmd(s, argv, on_squeue) != 0)
    pass_end(s);
}

static void on_tick(uv_timer_t *t) {
  sched *s = t->data;
  sched__slurm *sl = &s->slurm;
  if (sl->busy || s->stopping || !db_ready(s->db))
    return;
  sl->busy = 1;
  /* no run that must run on one worker: a new job would not be it */
  store_runs_queue(s->db, 1024, NULL, "{}", on_queue, s);
}

/* ---- start and stop --------------------------------------------------------- */

int sched__slurm_check(const sched_options *o, char *err, size_t errlen) {
  if (!o->slurm_partition)
    return 0;
  const char *need[] = {"sbatch", "squeue", "scancel"};
  for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
    char path[PATH_MAX];
    int found = 0;
    const char *p = getenv("PATH");
    for (const char *d = p ? p : "/usr/bin:/bin"; d && *d && !found;) {
      const char *e = strchr(d, ':');
      size_t dl = e ? (size_t)(e - d) : strlen(d);
      snprintf(path, sizeof path, "%.*s/%s", (int)dl, d, need[i]);
      found = access(path, X_OK) == 0;
      d = e ? e + 1 : NULL;
    }
    if (!found) {
      snprintf(err, errlen,
               "--slurm %s: %s is not on PATH (HINT: run the scheduler where Slurm's commands "
               "are, e.g. Debian's slurm-client)",
               o->slurm_partition, need[i]);
      return SS_EINVAL;
    }
  }
  return 0;
}

int sched__slurm_start(sched *s, char *err, size_t errlen) {
  sched__slurm *sl = &s->slurm;
  if (!s->o.slurm_partition)
    return 0;
  size_t bl = sizeof sl->bin;
  if (uv_exepath(sl->bin, &bl) != 0) {
    snprintf(err, errlen, "--slurm: cannot find this program's path");
    return SS_EIO;
  }
  if (!realpath(s->o.token_file, sl->token)) {
    snprintf(err, errlen, "--slurm: %s: %s", s->o.token_file, strerror(errno));
    return SS_EIO;
  }
  if (s->o.slurm_address) {
    snprintf(sl->addr, sizeof sl->addr, "%s", s->o.slurm_address);
  } else {
    char host[256] = "";
    int port = 0;
    addr_split(s->o.workers, "127.0.0.1", 0, host, sizeof host, &port, NULL, 0);
    if (!host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
      gethostname(host, sizeof host);
    snprintf(sl->addr, sizeof sl->addr, "%s:%d", host, s->wp.port);
  }
  snprintf(sl->comment, sizeof sl->comment, "scalesweep %s", sl->addr);
  sl->on = 1;
  uv_timer_init(s->loop, &sl->timer);
  uv_timer_init(s->loop, &sl->kill_timer);
  sl->timer.data = sl->kill_timer.data = s;
  uv_timer_start(&sl->timer, on_tick, 1000, (uint64_t)s->o.slurm_interval_s * 1000);
  sched__logf("slurm: elastic workers on partition %s (up to %d nodes; workers reach %s)",
              s->o.slurm_partition, s->o.slurm_max_nodes, sl->addr);
  return 0;
}

static void on_closed(uv_handle_t *h) { (void)h; }

void sched__slurm_close(sched *s) {
  sched__slurm *sl = &s->slurm;
  if (!sl->on)
    return;
  sl->on = 0;
  uv_close((uv_handle_t *)&sl->timer, on_closed);
  if (sl->running) /* a command runs: killed; its handles close in their callbacks */
    uv_process_kill(&sl->proc, SIGKILL);
  uv_timer_stop(&sl->kill_timer);
  uv_close((uv_handle_t *)&sl->kill_timer, on_closed);
}

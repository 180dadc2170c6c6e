/* The worker's trainer processes (worker/proc.c) without processes, for the
 * worker's harnesses (fuzz_wconn, fuzz_tline): linked beside ss_worker, it
 * defines proc.h's functions, so the linker never takes proc.o and no
 * harness ever spawns a trainer. A run "starts" when its directory lies
 * in the work directory (anything else aborts: a finding) and its GPUs are
 * offered; what follows happens on later loop turns, on the run's
 * kill_timer (proc.c's own, unused here), as a child's output and exit
 * would: with worker_stub_trainer set, the trainer prints a config, a
 * step, an eval and a checkpoint line and, for an odd run id, its done
 * line and exits 0 (an even one runs until it is cancelled); a cancel ends
 * it as SIGTERM would. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/fuzz/worker_stub.h"

int worker_stub_trainer = 1;

static void feed(wrk__run *r, const char *line) { wrk__on_trainer_line(r, line, strlen(line)); }

static void on_output(uv_timer_t *t) {
  wrk__run *r = t->data;
  if (!wrk__run_has_trainer(r))
    return;
  char ck[PATH_MAX + 128];
  feed(r, "{\"event\":\"config\",\"config\":{\"model\":{\"n_layer\":2}},\"params\":1000,"
          "\"nonembedding_params\":800,\"flops_per_token\":6000,\"entropy_rate\":1.5}");
  feed(r, "{\"event\":\"step\",\"step\":1,\"tokens\":256,\"train_loss\":5.5,\"lr\":0.001,"
          "\"grad_norm\":1.0,\"tok_per_s\":1000}");
  feed(r, "{\"event\":\"eval\",\"step\":1,\"tokens\":256,\"val_loss\":5.6}");
  snprintf(ck, sizeof ck, "{\"event\":\"checkpoint\",\"step\":1,\"path\":\"run-%" PRId64 "/ckpt\"}",
           r->id);
  feed(r, ck);
  wrk__outbox_flush(r);
  if (r->id % 2) {
    feed(r, "{\"event\":\"done\",\"final_val_loss\":5.0,\"params\":1000,"
            "\"nonembedding_params\":800,\"flops\":1e9,\"flops_6nd\":1e9,\"tokens\":256,"
            "\"steps\":1,\"wall_s\":0.1,\"peak_rss_bytes\":1}");
    r->exit_status = 0;
    r->term_signal = 0;
    wrk__run_complete(r);
  }
}

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && !strncmp(path + n, "/runs/", 6) && !strstr(path, "/../");
}

int wrk__proc_spawn(wrk__run *r) {
  wrk__worker *w = r->w;
  if (!under(r->dir, w->work_dir) || !under(r->log_path, w->work_dir)) {
    fprintf(stderr, "worker_stub: run %" PRId64 " would start in %s, outside %s\n", r->id, r->dir,
            w->work_dir);
    abort();
  }
  for (int i = 0; i < r->ngpus; i++)
    if (!wrk__gpu_offered(w, r->gpus[i])) {
      wrk__run_fail_start(r, SS_EXIT_USAGE, "assigned GPU %d, which this worker does not offer",
                          r->gpus[i]);
      return -1;
    }
  if (worker_stub_trainer)
    uv_timer_start(&r->kill_timer, on_output, 0, 0);
  return 0;
}

static void on_term(uv_timer_t *t) {
  wrk__run *r = t->data;
  r->exit_status = 0;
  r->term_signal = SIGTERM;
  wrk__run_complete(r);
}

void wrk__proc_stop(wrk__run *r, const char *why) {
  (void)why;
  uv_timer_start(&r->kill_timer, on_term, 0, 0);
}

/* nothing was spawned: nothing to kill at exit */
void wrk__proc_kill_now(wrk__run *r) { (void)r; }

/* no trainer processes here: nothing to signal or reap (a fenced run's
 * SIGKILL ends it as the kill timer's SIGTERM does) */
void wrk__run_signal(wrk__run *r, int sig) {
  if (sig == SIGKILL && wrk__run_has_trainer(r) && !uv_is_active((uv_handle_t *)&r->kill_timer))
    uv_timer_start(&r->kill_timer, on_term, 0, 0);
}

void wrk__reap_children(wrk__worker *w) { (void)w; }

int worker_stub_busy(const wrk__worker *w) {
  for (const wrk__run *r = w->runs; r; r = r->next)
    if (uv_is_active((const uv_handle_t *)&r->kill_timer))
      return 1;
  return 0;
}

wrk__worker *worker_stub_new(const char *work_dir, int port) {
  wrk__worker *w = calloc(1, sizeof *w);
  if (!w || !(w->token = strdup(WORKER_STUB_TOKEN)) || !(w->gpus = calloc(2, sizeof *w->gpus)))
    abort();
  snprintf(w->name, sizeof w->name, "fuzz-worker");
  snprintf(w->host, sizeof w->host, "fuzzhost");
  snprintf(w->sched_host, sizeof w->sched_host, "127.0.0.1");
  snprintf(w->sched_port, sizeof w->sched_port, "%d", port);
  snprintf(w->bin, sizeof w->bin, "/nonexistent/scalesweep");
  snprintf(w->work_dir, sizeof w->work_dir, "%s", work_dir);
  for (int i = 0; i < 2; i++) {
    w->gpus[i].index = i;
    snprintf(w->gpus[i].name, sizeof w->gpus[i].name, "Fuzz GPU");
    w->gpus[i].memory_bytes = (int64_t)1 << 30;
  }
  w->ngpus = 2;
  w->cpu_slots = 1;
  w->hb_override = 3600; /* no heartbeat during an input: the answers are the input's */
  w->kill_grace_ms = 10000;
  w->drain_ms = 0;
  w->backoff_ms = WRK__BACKOFF_MIN_MS;
  if (wrk__loop_init(w) != 0) /* the watchers closed with the others; never started here */
    abort();
  return w;
}

void worker_stub_stop(wrk__worker *w) {
  wrk__stop_connecting(w);
  for (wrk__run *r = w->runs, *next; r; r = next) {
    next = r->next;
    if (r->state == WRK__RUN_ASSIGNED)
      wrk__run_abandon(r);
    else if (wrk__run_has_trainer(r))
      wrk__run_cancel(r, "the worker is stopping");
  }
  wrk__maybe_finish_shutdown(w);
}

void worker_stub_free(wrk__worker *w) {
  uv_run(&w->loop, UV_RUN_DEFAULT);
  if (!w->closed_all || uv_loop_close(&w->loop) != 0) {
    fprintf(stderr, "worker_stub: the worker left a handle open\n");
    abort();
  }
  free(w->token);
  free(w->gpus);
  free(w);
}

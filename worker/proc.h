/* Trainer processes (proc.c): the run's config file, the argv and
 * environment, the spawn, reading its stdout, its exit, and SIGTERM /
 * SIGKILL. The I/O of a run's life: lifecycle.c decides when. (The fuzz
 * harnesses replace this file: tests/fuzz/worker_stub.c.) */
#ifndef SS_WORKER_PROC_H
#define SS_WORKER_PROC_H

typedef struct wrk__worker wrk__worker;
typedef struct wrk__run wrk__run;

/* Checks that this worker can run r (its GPUs, its trainer, the backend,
 * the memory), writes its config.json and spawns its trainer, whose stdout
 * goes to report.c. 0 once spawned; otherwise the run has been ended with
 * the reason (wrk__run_fail_start) and -1. */
int wrk__proc_spawn(wrk__run *r);
/* Reaps the runs' trainers that exited (on SIGCHLD); a run whose trainer
 * exited and whose stdout is drained is complete (wrk__run_complete). */
void wrk__reap_children(wrk__worker *w);
/* sig to the run's trainer while it is alive. */
void wrk__run_signal(wrk__run *r, int sig);
/* SIGTERM (the trainer writes a checkpoint and exits 143; why is logged),
 * then SIGKILL after the grace period. */
void wrk__proc_stop(wrk__run *r, const char *why);
/* At exit: SIGKILL to a live trainer, reaped at once, and its stdout closed. */
void wrk__proc_kill_now(wrk__run *r);

#endif

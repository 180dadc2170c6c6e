/* Elastic workers through Slurm (internal; slurm.c). With --slurm PARTITION
 * the scheduler asks Slurm for worker jobs when the queue holds more than
 * the connected workers and the jobs on their way can take, each job sized
 * to the waiting runs (nodes, GPUs per node, a time limit from the plan's
 * estimate), and cancels a job whose workers have all been idle for a while
 * or that is still pending when nothing waits for it. Its jobs are found by
 * squeue (name and comment), so a restarted scheduler adopts them. */
#ifndef SS_SCHEDULER_SLURM_H
#define SS_SCHEDULER_SLURM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "store/runs.h"

#define SCHED__SLURM_MAX_JOBS 64
#define SCHED__SLURM_OUT_MAX 65536
#define SCHED__SLURM_JOB_NAME "scalesweep-workers"

/* One of the scheduler's worker jobs, as squeue last listed it. */
typedef struct sched__sjob {
  char id[32];
  char state[24]; /* PENDING, CONFIGURING, RUNNING, COMPLETING, ... */
  int nodes;
  int gpus_per_node, slots_per_node; /* what each of its workers offers */
  uint64_t first_seen_ms;
  uint64_t idle_since_ms; /* all its workers connected and without runs since (0: not) */
  int connected;          /* its workers connected now */
  int ever_connected;     /* a worker of it has connected */
  int cancelling;         /* scancel sent */
} sched__sjob;

typedef struct sched__slurm {
  int on;
  uv_timer_t timer;
  int busy; /* a pass is under way (the queue read, squeue, then sbatch or scancel) */
  uint64_t hold_until_ms; /* no sbatch before then (after a failure) */
  int failed_starts;      /* jobs in a row that ended before a worker of them connected */
  /* the command being run */
  uv_process_t proc;
  uv_pipe_t out, err;
  uv_timer_t kill_timer;
  int open_handles; /* of proc, out, err: the command is over when all are closed */
  int running;      /* the process has not exited */
  char cmd[16];     /* its name, for log lines */
  int64_t exit_status;
  int term_signal;
  char obuf[SCHED__SLURM_OUT_MAX], ebuf[4096];
  size_t olen, elen;
  void (*done)(void *s, int ok);
  char script[PATH_MAX]; /* sbatch's script, a temporary file ("" when none) */
  /* what jobs are asked to run, fixed at start */
  char addr[300];       /* the worker port as the nodes reach it */
  char comment[400];    /* "scalesweep ADDR": marks the scheduler's jobs */
  char bin[PATH_MAX];   /* this scalesweep */
  char token[PATH_MAX]; /* the cluster token file (on a filesystem the nodes share) */
  sched__sjob jobs[SCHED__SLURM_MAX_JOBS];
  int njobs;
  store_queued *queue; /* this pass's copy of the queue */
  int nqueue;
  char said[512]; /* the last reason logged for not asking (logged when it changes) */
} sched__slurm;

#endif

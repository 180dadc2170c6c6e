/* The worker itself, as its files share it (worker.h says what the agent
 * does). One file per concern, each with its header:
 *   worker.c  options, start-up, signals, shutdown (this header)
 *   log.c     the log line, UTF-8 cleaning
 *   wbuf.c    refcounted, validated wire buffers
 *   conn.c    the scheduler connection: resolve, connect, hello/welcome,
 *             reading and dispatching, writing, reconnect with backoff
 *   lease.c   heartbeats, lease renewals, fencing
 *   run.c     run objects: built from an assign, found, freed
 *   lifecycle.c  a run's states and transitions (and the run's struct)
 *   proc.c    trainer processes: config file, spawn, stdout, exit, kill
 *   report.c  trainer events turned into started / checkpoint / finished
 *   outbox.c  metric batching, sequence numbers, unacked messages, resends
 *   gpu.c     nvidia-smi discovery, --gpus, CUDA_VISIBLE_DEVICES
 *   backends.c  the backends the trainer can run here (CUDA or not)
 *   trainers.c  declared trainers and the trainer contract
 *   datadirs.c  the token-shard directories trainers may read (--data-dir)
 *   identity.c  the worker name's secret
 *   memcheck.c  an assignment's memory against the host's, before it starts
 *
 * Ownership: the worker struct is heap-allocated by wrk_run and freed after
 * its loop is closed. A connection (conn) and a run are heap objects with
 * their libuv handles embedded; each is freed only in the close callback of
 * its last handle. A run leaves the worker's list when its finished message
 * is acknowledged (or at shutdown); its memory goes when its handles are
 * closed too. */
#ifndef SS_WORKER_INTERNAL_H
#define SS_WORKER_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uv.h>
#include <wordexp.h>

#include "common/proto.h"

#define WRK__BACKOFF_MIN_MS 100
#define WRK__MAX_ADDRS 8
#define WRK__HB_RING 64
#define WRK__MAX_DATA_DIRS 16
/* declared trainers beside the built-in one (hello.trainers holds all) */
#define WRK__MAX_TRAINERS (PROTO_MAX_TRAINERS - 1)

typedef struct wrk__worker wrk__worker;
typedef struct wrk__conn wrk__conn;
typedef struct wrk__run wrk__run;

/* A declared trainer: its name and its command's words. */
typedef struct wrk__trainer {
  char name[33];
  wordexp_t argv;
} wrk__trainer;

typedef struct wrk__gpu {
  int index;
  char name[128];
  int64_t memory_bytes;
  char cc[16]; /* compute capability, "9.0"; "" until the CUDA probe saw it */
} wrk__gpu;

struct wrk__worker {
  uv_loop_t loop;
  char *token;
  char name[512], host[256];
  char secret[128];   /* the name's secret (identity.c; "" until a welcome gives one) */
  char instance[40];  /* this process's random string (hello.instance) */
  char slurm_job[32]; /* SLURM_JOB_ID when it runs in a Slurm job ("" otherwise) */
  char sched_host[256], sched_port[16];
  char bin[PATH_MAX];
  char work_dir[PATH_MAX];
  wrk__gpu *gpus;
  int ngpus;
  int cuda_ok;           /* the trainer can run "backend": "cuda" on the GPUs */
  char cuda_error[1024]; /* why not, when cuda_ok is 0 */
  int cpu_slots;
  double hb_override;
  int kill_grace_ms, drain_ms;
  int hang_ms; /* a trainer silent this long has hung (trainers.c); 0: never */
  wrk__trainer trainers[WRK__MAX_TRAINERS];
  int ntrainers;

  uv_signal_t sigint, sigterm, sigchld;
  uv_timer_t reconnect_timer, welcome_timer, hb_timer, drain_timer, fence_timer;
  uv_getaddrinfo_t gai;
  int gai_active;
  struct sockaddr_storage addrs[WRK__MAX_ADDRS];
  int naddrs, addr_i;
  wrk__conn *c;
  int backoff_ms;
  int64_t worker_id;
  int64_t lease_ms; /* from the last welcome; 0 before one */
  /* heartbeats carry a number "hb"; the scheduler answers each once it has
   * renewed the leases. Send times by number, to date the answers. */
  int64_t hb_next;
  struct {
    int64_t hb;
    uint64_t sent_ms;
  } hb_sent[WRK__HB_RING];
  int fencing; /* the scheduler answers heartbeats: trainers are fenced */

  /* token-shard directories (datadirs.c): --data-dir, realpath'd (none:
   * the scheduler's choice stands), and what trainers get, the last
   * welcome's data_dirs narrowed by those */
  char own_dirs[WRK__MAX_DATA_DIRS][PATH_MAX];
  int n_own;
  char data_dirs[WRK__MAX_DATA_DIRS][PATH_MAX];
  int ndata_dirs;

  wrk__run *runs; /* in order of assignment */
  int stopping;   /* 1: stopping runs and draining; 2: closing every handle */
  int closed_all;
};

/* worker.c: while stopping, once no trainer runs, waits (up to drain_ms)
 * for the acks of what is left, then closes everything. Does nothing
 * otherwise. */
void wrk__maybe_finish_shutdown(wrk__worker *w);

/* w's loop, its signal watchers and timers, initialised and not started
 * (the worker's start, and the fuzz harnesses' stand-in worker). 0, or
 * libuv's error. */
int wrk__loop_init(wrk__worker *w);

/* The worker stops: it connects no more, and a connection not yet welcomed
 * is closed (a welcomed one stays, to report the runs' ends). */
void wrk__stop_connecting(wrk__worker *w);

#endif

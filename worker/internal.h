/* What the worker's files share (worker.h says what the agent does). One
 * file per concern:
 *   worker.c  options, start-up, signals, shutdown
 *   log.c     the log line, UTF-8 cleaning
 *   wbuf.c    refcounted, validated wire buffers
 *   conn.c    the scheduler connection: resolve, connect, hello/welcome,
 *             reading and dispatching, writing, reconnect with backoff
 *   lease.c   heartbeats, lease renewals, fencing
 *   run.c     run objects: assign, cancel, lookup, lifetime
 *   proc.c    trainer processes: config file, spawn, stdout, exit, kill
 *   report.c  trainer events turned into started / checkpoint / finished
 *   outbox.c  metric batching, sequence numbers, unacked messages, resends
 *   gpu.c     nvidia-smi discovery, --gpus, CUDA_VISIBLE_DEVICES
 *   datadirs.c  the token-shard directories trainers may read (--data-dir)
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
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>
#include <uv.h>
#include <wordexp.h>

#include "common/proto.h"

#define WRK__BACKOFF_MIN_MS 100
#define WRK__MAX_ADDRS 8
#define WRK__HB_RING 64
#define WRK__MAX_DATA_DIRS 16
/* declared trainers beside the built-in one (hello.trainers holds all) */
#define WRK__MAX_TRAINERS (PROTO_MAX_TRAINERS - 1)

/* ---- log.c -------------------------------------------------------------- */

/* One line per event on stderr: "2024-05-01T12:00:00.123Z worker: ...".
 * Built in one buffer and written with one call so lines never interleave. */
void wrk__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A malloc'd copy of s[0..n) that is valid UTF-8 (json_string refuses
 * anything else): a sequence cut by the start of the window is dropped, any
 * other invalid byte becomes '?'. NULL when out of memory. */
char *wrk__utf8_clean(const char *s, size_t n);

/* ---- wbuf.c ------------------------------------------------------------- */

/* An encoded message line, shared by the unacked queue and in-flight
 * writes: freed when the last of them lets go. */
typedef struct wrk__wbuf {
  int refs;
  size_t len;
  char data[];
} wrk__wbuf;

/* Encodes msg and checks it against the protocol's own validation, so that a
 * message the scheduler would refuse (and the worker would then resend
 * forever) never leaves. One reference, or NULL with the reason in err. */
wrk__wbuf *wrk__wbuf_encode(const json_t *msg, char *err, size_t errlen);
/* Both take NULL; ref returns b. */
wrk__wbuf *wrk__wbuf_ref(wrk__wbuf *b);
void wrk__wbuf_unref(wrk__wbuf *b);

/* ---- types -------------------------------------------------------------- */

typedef struct wrk__worker wrk__worker;
typedef struct wrk__run wrk__run;

typedef struct wrk__conn {
  uv_tcp_t tcp;
  uv_connect_t creq;
  wrk__worker *w;
  proto_reader rd;
  int connected; /* TCP established */
  int welcomed;
  int closing;
  char rbuf[64 << 10];
} wrk__conn;

/* A kept message (metrics or finished) waiting for its ack. */
typedef struct wrk__qmsg {
  struct wrk__qmsg *next;
  int64_t seq;
  wrk__wbuf *b;
} wrk__qmsg;

enum wrk__run_state { WRK__RUN_WAITING, WRK__RUN_RUNNING, WRK__RUN_EXITED };

struct wrk__run {
  wrk__run *next;
  wrk__worker *w;
  int64_t id, attempt;
  enum wrk__run_state state;
  json_t *assign; /* the assign message */
  int *gpus;
  int ngpus;

  uv_pipe_t out;
  uv_timer_t flush_timer, kill_timer;
  int nopen;      /* handles initialised and not yet closed */
  int in_list;    /* still in w->runs */
  int proc_alive; /* spawned and not yet reaped (worker.c's SIGCHLD watcher) */
  int out_open;   /* stdout pipe open */
  int cancelled;
  int interrupting;    /* stopped because the worker is stopping: reported as interrupted */
  int64_t ckpt_step;   /* the step of this attempt's last checkpoint; -1: none yet */
  int fenced;          /* killed because its lease could not be renewed */
  uint64_t renewed_ms; /* loop time from which its lease surely runs */
  /* the lease told when it was renewed: the fence judges each renewal by its
   * own (a restarted scheduler may tell a shorter one, but it keeps the
   * leases it finds) */
  int64_t renewed_for_ms;
  int pid;

  proto_reader rd;
  int out_broken;        /* a line over the limit: the rest of stdout is drained */
  int broken;            /* its trainer broke the contract (trainers.c): the attempt fails */
  int64_t lines;         /* stdout lines read */
  uint64_t last_line_ms; /* loop time of the last one (or of the start) */
  json_t *batch;         /* rows not yet sealed into a metrics message */
  size_t batch_bytes;
  int64_t next_seq;
  wrk__qmsg *q_head, *q_tail; /* unacked metrics / finished, by seq */
  wrk__wbuf *started, *ckpt;  /* resent after each reconnect */
  wrk__wbuf *branch;          /* the latest kept branch point (a trunk's), resent too */
  int64_t finished_seq;       /* 0 until the finished message exists */
  json_t *done;
  char *error;
  int64_t exit_status;
  int term_signal;

  char dir[PATH_MAX + 32];
  char log_path[PATH_MAX + 64];
  char obuf[64 << 10];
};

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

/* A handler of one scheduler message type; m is valid (proto_parse). */
typedef void wrk__handler(wrk__conn *c, json_t *m);

/* ---- worker.c ----------------------------------------------------------- */

/* While stopping: once no trainer runs, waits (up to drain_ms) for the acks
 * of what is left, then closes everything. Does nothing otherwise. */
void wrk__maybe_finish_shutdown(wrk__worker *w);

/* ---- conn.c ------------------------------------------------------------- */

/* Resolves and connects unless stopping or already connecting. */
void wrk__connect_start(wrk__worker *w);
/* Closes c (NULL: nothing; a reason is logged when given); its close
 * callback reconnects or carries on the shutdown. */
void wrk__conn_close(wrk__conn *c, const char *why);
/* Writes b on c now (before a welcome too: the hello). */
void wrk__conn_write(wrk__conn *c, wrk__wbuf *b);
/* Sends when there is a welcomed connection; otherwise the message waits in
 * its run (for the kinds that are kept) or is dropped (heartbeats). */
void wrk__send(wrk__worker *w, wrk__wbuf *b);
/* Encodes and sends msg (a message that fails validation is a bug, logged). */
void wrk__send_json(wrk__worker *w, json_t *msg);

/* ---- lease.c ------------------------------------------------------------ */

/* After a welcome: takes its lease and starts heartbeats (the first at once,
 * then every heartbeat_s or the --heartbeat override). Returns the
 * heartbeat period in seconds. */
double wrk__lease_welcome(wrk__worker *w, json_t *welcome);
wrk__handler wrk__on_lease_renewed; /* heartbeat answer */
/* Every FENCE_CHECK_MS from start-up: SIGKILL to trainers whose lease lapsed
 * (and the hang check, trainers.c). */
void wrk__on_fence_timer(uv_timer_t *t);

/* ---- run.c -------------------------------------------------------------- */

wrk__handler wrk__on_assign, wrk__on_cancel;
/* The run with that id and attempt in w's list, or NULL. */
wrk__run *wrk__run_find(wrk__worker *w, int64_t id, int64_t attempt);
/* Closes h, one of r's handles; r goes with its last one once unlinked. */
void wrk__run_close_handle(wrk__run *r, uv_handle_t *h);
/* Takes r out of the worker's list; its memory goes with its last handle. */
void wrk__run_unlink(wrk__run *r);
/* Ends a run that never started (or failed to): a finished message with the
 * reason, so that the scheduler reaches a decision either way. */
void wrk__run_fail_start(wrk__run *r, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- proc.c ------------------------------------------------------------- */

/* Writes the run's config.json and spawns its trainer; a run that cannot
 * start gets its finished message (wrk__run_fail_start). */
void wrk__run_start(wrk__run *r);
/* Reaps the runs' trainers that exited (on SIGCHLD) and completes them. */
void wrk__reap_children(wrk__worker *w);
/* sig to the run's trainer while it is alive. */
void wrk__run_signal(wrk__run *r, int sig);
/* SIGTERM (the trainer writes a checkpoint and exits 143), then SIGKILL
 * after the grace period. A run that has not started ends at once. */
void wrk__run_cancel(wrk__run *r, const char *why);

/* ---- report.c ----------------------------------------------------------- */

/* proto_reader callback for the trainer's stdout (ud: the run). */
int wrk__on_trainer_line(void *ud, const char *line, size_t len);
/* The trainer has exited and its stdout is drained (or it never started):
 * the last rows go, then one finished message that continues the seq; a
 * newer attempt that waited for this one starts. */
void wrk__run_complete(wrk__run *r);

/* ---- outbox.c ----------------------------------------------------------- */

/* {"type": type, "run_id": ..., "attempt": ...}: a new reference. */
json_t *wrk__run_header(const wrk__run *r, const char *type);
/* Adds a step or eval event (len bytes on the wire) to the current batch,
 * which is sealed after 500 rows, 512 KiB or 200 ms. */
void wrk__outbox_add_row(wrk__run *r, json_t *row, size_t len);
/* Seals the current batch into the next metrics message now. */
void wrk__outbox_flush(wrk__run *r);
/* Keeps b as message seq until its ack and sends it when connected. */
void wrk__outbox_push(wrk__run *r, int64_t seq, wrk__wbuf *b);
/* After a welcome: every run's last started and checkpoint messages and its
 * unacked ones, in order, on c. Returns how many unacked ones went. */
int wrk__outbox_resend(wrk__worker *w, wrk__conn *c);
/* Messages still waiting for their ack. */
int wrk__outbox_unacked(const wrk__run *r);
/* Frees every kept message (the run is being freed). */
void wrk__outbox_free(wrk__run *r);
wrk__handler wrk__on_ack;

/* ---- datadirs.c --------------------------------------------------------- */

/* Resolves the worker's own --data-dir directories into w->own_dirs;
 * SS_EINVAL, logged, for one that is not a directory or too many. */
int wrk__data_dirs_init(wrk__worker *w, const char *const *dirs, int n);
/* After a welcome: w->data_dirs = its data_dirs (resolved here; those that
 * do not exist on this host dropped), each narrowed to the worker's own
 * directories when it has any (its choice narrows, never widens). */
void wrk__data_dirs_welcome(wrk__worker *w, const json_t *welcome);

/* identity.c: the name's secret, read from the work directory at start
 * (with a new instance string), and kept there when a welcome gives one */
void wrk__identity_load(wrk__worker *w);
void wrk__identity_welcome(wrk__worker *w, const json_t *welcome);
/* The trainer's flags for them, appended to args at *na (room for
 * 2 * WRK__MAX_DATA_DIRS + 1): --data-dir DIR ..., or --no-data-dirs. */
void wrk__data_dirs_args(wrk__worker *w, char **args, int *na);

/* ---- memcheck.c --------------------------------------------------------- */

/* 1 after failing r's start (wrk__run_fail_start, exit code 2) when its
 * memory (runcfg/memory.h) exceeds what it would run on: MemAvailable for a
 * CPU run, the smallest of its GPUs' reported memory for a GPU run; 0 when
 * it fits or that cannot be told. */
int wrk__run_memory_refused(wrk__run *r);

/* ---- run.c (more) ------------------------------------------------------------ */

/* A run spread over workers (its assignment's "dist": {"ranks": [..],
 * "addr": HOST:PORT, "secret": S}): this worker's ranks as "2,3" into buf;
 * how many, or 0 for a run of this worker alone. */
int wrk__run_dist_ranks(const wrk__run *r, char *buf, size_t len);

/* ---- backends.c --------------------------------------------------------- */

/* How long `BIN devices --json` may take (loading CUDA, counting devices). */
#define WRK__PROBE_TIMEOUT_MS 60000

/* Asks the trainer (w->bin devices --json) whether CUDA runs on the offered
 * GPUs: sets cuda_ok and the GPUs' compute capability, or cuda_error (and
 * logs it). No GPU: nothing is run. */
void wrk__backends_probe(wrk__worker *w);
/* The hello's "backends": {"cpu": {"slots": K}, "cuda": {"devices": [...]}
 * or {"error": WHY}}. */
json_t *wrk__backends_json(const wrk__worker *w);
/* 1 after failing r's start (exit code 1) when its config asks for the CUDA
 * backend and this worker cannot run it (the scheduler does not place such
 * a run here; an assignment from elsewhere is refused with the reason). */
int wrk__run_backend_refused(wrk__run *r);

/* ---- trainers.c -------------------------------------------------------- */

/* Reads the operator's declarations (NAME=COMMAND each, from --trainer and
 * then the lines of file, which may be NULL; '#' starts a comment line)
 * into w->trainers; SS_EINVAL / SS_ENOENT, logged with where, for a bad
 * one. */
int wrk__trainers_init(wrk__worker *w, const char *const *decls, int n, const char *file);
void wrk__trainers_free(wrk__worker *w);
/* hello.trainers: "builtin", then the declared ones. */
json_t *wrk__trainers_json(const wrk__worker *w);
/* "builtin, torch" into buf */
void wrk__trainers_list(const wrk__worker *w, char *buf, size_t len);
/* The trainer r's config names ("builtin" when none). */
const char *wrk__run_trainer(const wrk__run *r);
/* The declared trainer of that name, or NULL. */
const wrk__trainer *wrk__trainer_find(const wrk__worker *w, const char *name);
/* r's trainer broke the contract (what, printf-style, says how): logged,
 * kept as the attempt's error, its output no longer read, SIGKILL; the
 * attempt is reported failed, never interrupted. Once. */
void wrk__run_broke_contract(wrk__run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Breaks the contract of every running trainer silent for w->hang_ms. */
void wrk__runs_check_hang(wrk__worker *w);

/* ---- gpu.c -------------------------------------------------------------- */

/* The GPUs nvidia-smi lists into w->gpus (none when it is missing or fails:
 * a CPU host is fine). */
void wrk__gpu_discover(wrk__worker *w);
/* Keeps only the n GPUs listed (gpus NULL: all); SS_EINVAL, logged, for an
 * index that does not exist. */
int wrk__gpu_restrict(wrk__worker *w, const int *gpus, int n);
int wrk__gpu_offered(const wrk__worker *w, int index);
/* The offered GPUs' indices joined by sep into buf ("" when none). */
void wrk__gpu_list(const wrk__worker *w, const char *sep, char *buf, size_t len);
/* "CUDA_VISIBLE_DEVICES=1,3" for r's GPUs into buf. */
void wrk__gpu_visible(const wrk__run *r, char *buf, size_t len);

#endif

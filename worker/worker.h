/* The worker agent (`scalesweep worker`): one libuv loop on a GPU (or CPU)
 * host that connects to the scheduler, runs each assigned run as a
 * `scalesweep train` child process, and streams its metrics back
 * (docs/runtime.md, "Scheduler <-> worker protocol").
 *
 * What it does, in order:
 * - offers the GPUs that `nvidia-smi` lists (none when it is missing or
 *   fails; `gpus` restricts them) and `cpu_slots` CPU slots;
 * - connects over TCP and says hello with the cluster token (read once; it
 *   never appears in a log); after a lost connection, a refused connection
 *   or a scheduler `error` it reconnects forever with exponential backoff
 *   (100 ms doubling to 5 s, or to a quarter of the lease once a welcome
 *   has told it; back to 100 ms after a welcome);
 * - per assign: writes WORK_DIR/runs/RUN_ID/config.json (the config exactly
 *   as assigned: what the planner hashed), spawns BINARY train --config ...
 *   --checkpoint-dir DIR --data-dir D ... (or --no-data-dirs: the
 *   welcome's data_dirs narrowed by data_dirs below)
 *   [--resume DIR [--resume-max-step N]] with
 *   CUDA_VISIBLE_DEVICES set to the run's GPUs (empty for a CPU run),
 *   appends its stderr to WORK_DIR/runs/RUN_ID/attempt-A.log, and turns
 *   its stdout into started / metrics (batched: 500 rows or 200 ms) /
 *   checkpoint messages and, when it exits, one finished message;
 * - keeps every metrics and finished message until the scheduler acks it,
 *   and resends them in order after a reconnect (with the last started and
 *   checkpoint messages of each run, which the scheduler must treat as
 *   idempotent); hello and heartbeats list every run whose trainer is alive
 *   or whose finished message still awaits its ack;
 * - finished: exit_code is the trainer's exit status, or 128+N when signal
 *   N killed it (then signal is N; else 0); error is the trainer's error
 *   event, else its last stderr line when it failed; a run the worker could
 *   not start (a GPU it does not offer: exit_code 2; spawn failure: 127)
 *   gets a finished message too;
 * - cancel: SIGTERM (the trainer checkpoints), SIGKILL after kill_grace_ms.
 *
 * It stops on SIGINT or SIGTERM: it tells the scheduler first (a
 * `stopping` message listing its runs: it gets no new work, and those runs
 * are not charged an attempt), trainers get SIGTERM (they checkpoint; SIGKILL
 * after the grace period), their finished messages go marked
 * "interrupted" with the last checkpoint step (an assignment that arrives
 * meanwhile is answered the same way), acks are awaited for up to
 * drain_ms, then every handle is closed. A trainer that exits 143 or 130
 * (a SIGTERM or SIGINT from outside, such as Slurm's or a terminal's,
 * after its checkpoint) is reported as interrupted too. A second signal stops at once
 * (SIGKILL). Messages from the scheduler that fail validation are logged
 * and ignored; nothing a peer sends can crash the worker. */
#ifndef SS_WORKER_WORKER_H
#define SS_WORKER_WORKER_H

typedef struct wrk_options {
  const char *scheduler;  /* "HOST:PORT" or "[V6ADDR]:PORT"; required */
  const char *token_file; /* the cluster token's file (trailing whitespace dropped) */
  const char *token;      /* the token itself, used when token_file is NULL */
  const int *gpus;        /* GPU indices to offer; NULL: every GPU found */
  int n_gpus;             /* entries in gpus (0 with gpus non-NULL: none) */
  int cpu_slots;          /* < 0: 1 when no GPU is offered, else 0 */
  const char *work_dir;   /* NULL: ./.scalesweep/worker */
  const char *name;       /* NULL: HOSTNAME:PID */
  const char *binary;     /* the scalesweep binary that trains; NULL: this program */
  double heartbeat_s;     /* > 0: overrides the welcome's heartbeat_s */
  int kill_grace_ms;      /* <= 0: 10000 */
  int drain_ms;           /* ack wait at shutdown; < 0: 2000 */
  /* --data-dir: token shards only under these, of the directories the
   * scheduler allows (its welcome's data_dirs); none: the scheduler's */
  const char *const *data_dirs;
  int n_data_dirs;
  /* the trainers beside the built-in one (docs/trainers.md): NAME=COMMAND
   * each, and a file of such lines (NULL: none) */
  const char *const *trainers;
  int n_trainers;
  const char *trainers_file;
  /* a trainer that prints no line for this long has hung: killed, its
   * attempt failed (0: 1800 s; < 0: never) */
  double hang_timeout_s;
} wrk_options;

/* Every field unset: the defaults above. */
void wrk_options_init(wrk_options *o);

/* Runs the agent until SIGINT or SIGTERM (the caller's signal handlers for
 * those are replaced while it runs, except that a SIGINT the process
 * inherited as ignored stays ignored; SIGPIPE is ignored). Blocks.
 * Returns 0 after a clean stop, in which every libuv handle was closed and
 * uv_loop_close() succeeded; SS_EINVAL / SS_ENOENT for bad options (a
 * malformed address, a missing token file, a --gpus index that does not
 * exist), with the reason logged; SS_EIO when the work directory cannot be
 * created or a handle was left open at the end (a bug, logged). */
int wrk_run(const wrk_options *o);

#endif

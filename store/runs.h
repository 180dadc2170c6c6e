/* The runs' life cycle in the store: the placement queue, claiming a run
 * for a worker, leases (renewal, expiry, recovery), what a trainer reports
 * (started, checkpoint) and the result (finish). Every write names the
 * attempt and the worker it is for, so a stale message changes nothing.
 *
 * Strings in callbacks' structs are valid during the callback only. */
#ifndef SS_STORE_RUNS_H
#define SS_STORE_RUNS_H

#include <stdint.h>

#include "store/store.h"

/* A queued run as placement sees it: its id, how many GPUs, and for a CPU
 * run (gpus 0) how many CPU slots: one per data-parallel rank. */
typedef struct store_queued {
  int64_t id;
  int gpus;
  int slots;
  double flops;      /* the run's training FLOPs (0: unknown) */
  double throughput; /* its sweep spec's throughput_flops, FLOP/s per run (0: not given) */
  char trainer[33];  /* its config's trainer ("builtin" when none) */
  char on[128];      /* the worker (name or host) it must run on; "" any (runs.on_worker) */
  int64_t owner_id;  /* its sweep's owner (users.id) */
  int64_t sweep_id;
  int priority;
  /* its owner's, the same on each of their runs: decayed device-seconds
   * of ended attempts plus those of running ones so far (fair share), the
   * GPUs their running attempts hold, and their limit (-1: none) */
  double owner_usage;
  int owner_gpus, owner_max_gpus;
} store_queued;

typedef void (*store_queue_cb)(void *ud, int status, const store_queued *runs, int n,
                               const char *errmsg);

/* Queued runs, each person's in their placement order: higher priority
 * first (a run's priority is its sweep's, set at submission; a
 * reproduction keeps the original's), then submission order; within a
 * sweep, the largest runs first (migration 012). Grouped by owner: of
 * each person with queued runs, their first max(limit / people, 16) runs,
 * read from the runs_queue_owner index (migration 023), so that one
 * person's backlog does not hide another's runs; with one person (every
 * sweep the admin's) that is today's read of the first limit runs. The
 * fair-share order across people is the scheduler's (scheduler/share.c),
 * from the owner figures on each row. A wsd branch waits (is not read)
 * until its trunk has reported the checkpoint it starts from, or has
 * ended without it (migration 010).
 * trainers: a PostgreSQL text array ("{builtin,torch}") of the trainers
 * whose runs are read (the connected workers'), or NULL for every run;
 * workers: one of the connected workers' names and hosts, for the runs that
 * must run on one (runs.on_worker; the others are left out), or NULL for
 * every run. */
void store_runs_queue(db *d, int limit, const char *trainers, const char *workers,
                      store_queue_cb cb, void *ud);

/* A run just claimed for a worker: its attempt (counted from 1), its config
 * (JSON text, exactly as stored), its sweep, and for a resumed attempt the
 * last step of the stored metrics' gap-free prefix 1, 2, ..., s (0 when
 * step 1 is missing; -1 for a first attempt). */
typedef struct store_claim {
  int attempt;
  const char *config;
  int64_t sweep_id;
  int64_t resume_max_step;
  /* WSD branches (migration 010): the trunk's checkpoint a branch starts
   * from (NULL: none, it trains from scratch), and the steps, a JSON list in
   * ascending order, at which this run is to keep checkpoints for its
   * branches still waiting ("[]" when none) */
  const char *branch_path;
  const char *keep_steps;
} store_claim;

/* claim is NULL when the run was not claimed (another pass took it, it was
 * cancelled, or it has no attempts left). */
typedef void (*store_claim_cb)(void *ud, int status, const store_claim *claim, const char *errmsg);

/* Takes a queued run for worker_id with a lease of lease_s seconds: status
 * running, the next attempt, started_at kept from the first attempt. */
void store_runs_claim(db *d, int64_t run_id, int64_t worker_id, int lease_s, store_claim_cb cb,
                      void *ud);

/* A run that left the running state without its worker's word: its new
 * status ("queued", or "failed" with no attempts left), the worker it had
 * and its sweep. */
typedef struct store_run_change {
  int64_t id;
  const char *status;
  int64_t worker;
  int64_t sweep_id;
} store_run_change;

typedef void (*store_changes_cb)(void *ud, int status, const store_run_change *runs, int n,
                                 const char *errmsg);

/* Re-queues (or fails, with no attempts left) every running run whose lease
 * has expired, with the error "lease expired: worker lost"; an attempt
 * whose worker said it was stopping is re-queued as interrupted (not
 * charged). */
void store_runs_expire(db *d, store_changes_cb cb, void *ud);

/* Gives every running run at least lease_s seconds more: after the
 * database or the scheduler was away no heartbeat could renew a lease.
 * rows: the runs extended. */
void store_runs_extend_leases(db *d, int lease_s, store_done_cb cb, void *ud);

/* A reconnected worker says it still executes this attempt: renews its
 * lease if the run is still that worker's attempt and running (rows 1),
 * else rows 0 (the worker should stop it). */
void store_runs_reconcile(db *d, int64_t run_id, int attempt, int64_t worker_id, int lease_s,
                          store_done_cb cb, void *ud);
/* A reconnected worker's part of a run spread over workers (ranks without
 * rank 0, whose worker holds the run and its lease): rows 1 when the run
 * still runs that attempt, so the part is kept; 0: it is stale. */
void store_runs_reconcile_part(db *d, int64_t run_id, int attempt, store_done_cb cb, void *ud);

/* The runs the database gives worker_id that it no longer executes (not
 * among kept[0..nkept-1]: its previous process died) go back to the queue
 * (or fail, with no attempts left), with the error "worker restarted: run
 * lost". */
void store_runs_requeue_orphans(db *d, int64_t worker_id, const int64_t *kept, int nkept,
                                store_changes_cb cb, void *ud);

typedef void (*store_ids_cb)(void *ud, int status, const int64_t *ids, int n, const char *errmsg);

/* A heartbeat, in one transaction: the worker's last_seen, and the leases
 * of the runs it names (runs[0..nruns-1]) that are running on it, and only
 * those, renewed to lease_s seconds from now. ids: the runs renewed. */
void store_runs_renew(db *d, int64_t worker_id, int lease_s, const int64_t *runs, int nruns,
                      store_ids_cb cb, void *ud);

/* What a trainer reports when it starts (its first line): sizes, FLOPs per
 * token and, for the synthetic corpus, its entropy rate and window floor
 * (NAN: not reported, stored as NULL). */
typedef struct store_started {
  int64_t run_id;
  int attempt;
  int64_t worker_id;
  double params, nonembedding_params, flops_per_token;
  double entropy_rate, window_floor;
  const char *environment; /* JSON object text: where the attempt runs (migration 014) */
  const char *worker;      /* the worker's name */
} store_started;

/* Records st on the run's attempt (flops: flops_per_token times the run's
 * tokens, unless already known), its environment on the run (and its
 * scalesweep version as code_version) and in attempts; a repeated started
 * message changes nothing more. */
void store_runs_started(db *d, const store_started *st, store_done_cb cb, void *ud);

/* A trunk's checkpoint kept for its wsd branches at step (migration 010):
 * the branches waiting for that step may start from path. Stored only for
 * the attempt running on worker_id; rows: the branches it frees. */
void store_runs_branch_point(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                             const char *path, store_done_cb cb, void *ud);

/* The attempt's latest checkpoint: its step and path, kept only while the
 * attempt is running on worker_id (rows 1; else 0: a fenced trainer's
 * checkpoint must not become the one the next attempt resumes from). */
void store_runs_checkpoint(db *d, int64_t run_id, int attempt, int64_t worker_id, int64_t step,
                           const char *path, store_done_cb cb, void *ud);

/* The end of an attempt as its worker reports it. outcome is "succeeded"
 * (final_val_loss and tokens are kept), "failed" (back to the queue while
 * attempts are left: it resumes from its checkpoint, no sooner than
 * retry_after_s * 2^(n-1) seconds later for its n-th failed attempt, at
 * most an hour; 0: at once) or "cancelled"; error and log_tail (NULL:
 * none) are kept for the status page. */
typedef struct store_finish {
  int64_t run_id;
  int attempt;
  int64_t worker_id;
  const char *outcome;
  double final_val_loss, tokens;
  const char *error, *log_tail;
  int retry_after_s;
} store_finish;

/* run_status: the run's new status, or NULL when the attempt was no longer
 * this worker's running one (nothing changed); retry_s: for a failed run
 * queued again, the seconds before its next attempt may start (0: at once). */
typedef void (*store_finish_cb)(void *ud, int status, const char *run_status, int64_t sweep_id,
                                double retry_s, const char *errmsg);

void store_runs_finish(db *d, const store_finish *f, store_finish_cb cb, void *ud);

/* Interruptions: an attempt that ends because its worker stopped is not a
 * failure. attempt still grows with each claim (it fences stale messages);
 * runs.interruptions counts the attempts that were interrupted, and every
 * budget check (claims, expiry, orphans, finish) counts attempt -
 * interruptions against max_attempts. */

/* The worker says it is stopping: each listed attempt (runs[i] at
 * attempts[i]) that is still running on worker_id gets stopping_attempt,
 * so that if its report never comes (the lease expires, the worker comes
 * back without it) it is re-queued as interrupted, not charged. */
void store_runs_mark_stopping(db *d, int64_t worker_id, const int64_t *runs, const int *attempts,
                              int n, store_done_cb cb, void *ud);

/* Back to the queue without spending an attempt (interruptions + 1), with
 * why as the run's error, if the attempt is still worker_id's running one;
 * else nothing changes (run_status NULL in the callback): a report that
 * comes after the lease expired is not charged twice. */
void store_runs_requeue_interrupted(db *d, int64_t run_id, int attempt, int64_t worker_id,
                                    const char *why, store_finish_cb cb, void *ud);

#endif

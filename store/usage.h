/* Compute accounting and fair share's figures (README, "A shared
 * cluster"): device-seconds, FLOPs trained and lost per attempt, run,
 * sweep and person (the view attempt_accounting, migrations 022-023), each
 * person's decayed usage and limits. */
#ifndef SS_STORE_USAGE_H
#define SS_STORE_USAGE_H

#include <stdint.h>

#include "store/store.h"

/* The scheduler's start: sets the half-life (seconds) of fair share's
 * decayed usage and recomputes every person's decayed usage from their
 * ended attempts with it (share_usage). */
void store_usage_start(db *d, int half_life_s, store_done_cb cb, void *ud);

/* The usage document (GET /api/usage): {"since", "by", "half_life_s",
 * "rows": [...]}, a row a person (by "person": their attempts, runs,
 * gpu_s, cpu_slot_s, device_s, steps and FLOPs trained and lost, their
 * effective usage now and their standing among the people with queued
 * runs, what they have queued and in use, their limits) or a sweep (by
 * "sweep"); since: ISO 8601 date or time, or NULL (every attempt: those
 * that started from then on); only: a person's id, or 0 for everyone. */
void store_usage_json(db *d, const char *since, const char *by, int64_t only, store_json_cb cb,
                      void *ud);

/* A sweep's cost and waste (its page, GET /api/sweeps/{id}/usage):
 * {"device_s", "gpu_s", "cpu_slot_s", "flops_trained", "flops_lost",
 * "steps_kept", "steps_lost", "attempts", "failed_attempts",
 * "failed_device_s"}; json NULL when there is no such sweep. */
void store_usage_sweep(db *d, int64_t sweep_id, store_json_cb cb, void *ud);

/* A person's limits (user_limits); a NULL figure: no limit. cb's rows: 1,
 * or 0 when there is no such (unrevoked) person. */
typedef struct store_limits {
  const char *max_gpus, *max_queued_runs, *max_queued_flops; /* text, or NULL: none */
} store_limits;
void store_usage_set_limits(db *d, const char *name, const store_limits *l, store_done_cb cb,
                            void *ud);

/* What a submission of the runs runs_json (a JSON array of objects with
 * "flops" and "config_hash", store_sweep_new's) by person owner (0: sweep
 * sweep_id's owner, for runs added to it; the runs it has already, which
 * are not added again, left out) would break: json NULL when nothing (or
 * they have no limits), else {"limit": "max_queued_runs" or "max_queued_flops",
 * "max": X, "queued": X, "adding": X}. */
void store_usage_check_submit(db *d, int64_t owner, int64_t sweep_id, const char *runs_json,
                              store_json_cb cb, void *ud);

#endif

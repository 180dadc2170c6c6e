/* Sweeps (store/sweeps.c): submitting a sweep with its runs, finding one by
 * its spec's hash, recomputing a sweep's status from its runs, and listing
 * the unfinished ones. */
#ifndef SS_STORE_SWEEPS_H
#define SS_STORE_SWEEPS_H

#include <stdint.h>

#include "store/runs.h"
#include "store/store.h"

/* A planned sweep to store. The strings are copied before
 * store_sweeps_insert returns. */
typedef struct store_sweep_new {
  const char *name;
  const char *spec_json; /* the canonical spec */
  const char *spec_hash; /* its digest: one sweep per spec */
  int priority;
  int gpus;         /* per run */
  int max_attempts; /* per run */
  int64_t owner_id; /* users.id: who submitted it (insert only) */
  /* the plan's runs: a JSON array of objects with config, config_hash,
   * params, nonembedding_params, tokens, batch_size, flops, part and
   * target_loss (sweeps/plan.h, plan_runs_json) */
  const char *runs_json;
} store_sweep_new;

/* sweep_id 0 (and runs 0) when a sweep of the same spec hash is stored
 * already: nothing was inserted. */
typedef void (*store_sweeps_inserted_cb)(void *ud, int status, int64_t sweep_id, int64_t runs,
                                         const char *errmsg);

/* Stores the sweep and all its runs (queued), or nothing: one statement,
 * so a lost connection never leaves a sweep without some of its runs. An
 * identical spec submitted before is not an error: sweep_id is 0. */
void store_sweeps_insert(db *d, const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud);

/* A sweep's id: 0 when there is none (or no longer). */
typedef void (*store_sweeps_id_cb)(void *ud, int status, int64_t sweep_id, const char *errmsg);

/* The sweep whose spec has this hash (the one an identical submission
 * collided with). */
void store_sweeps_find_by_hash(db *d, const char *spec_hash, store_sweeps_id_cb cb, void *ud);

/* new_status is NULL when the sweep's status did not change (or the sweep
 * is cancelled, or gone); valid during the callback only. */
typedef void (*store_sweeps_status_cb)(void *ud, int status, int64_t sweep_id,
                                       const char *new_status, const char *errmsg);

/* Recomputes sweeps.status from its runs: running while anything runs or
 * waits after a start (queued while nothing has started), or while its lr
 * tune's runs have all ended but the tune has not decided (the study's
 * runs are still to come), or while its adaptive design is running (its
 * next round is to come); failed when the tune could not decide or the
 * design failed; succeeded once the design has stopped and a run succeeded
 * (a failed run was replaced by a later round); failed when a run failed
 * (a decided tune's diverged rates aside: they are what a tune is for);
 * else succeeded; a cancelled sweep stays cancelled. */
void store_sweeps_update_status(db *d, int64_t sweep_id, store_sweeps_status_cb cb, void *ud);

/* A sweep's canonical spec (JSON text) and status; both NULL when there is
 * no such sweep. Valid during the callback only. A sweep whose lr tune has
 * decided gives its study's spec: without "lr_tune", base.train.lr the
 * chosen rate (sweeps/lr_tune.h); one still tuning, its spec as stored. */
typedef void (*store_sweeps_spec_cb)(void *ud, int status, const char *spec_json,
                                     const char *sweep_status, const char *errmsg);
void store_sweeps_spec(db *d, int64_t sweep_id, store_sweeps_spec_cb cb, void *ud);

/* Adds runs to a sweep that is not cancelled (`scalesweep next`): sw's
 * runs_json (as store_sweeps_insert takes it, each object with "designed"
 * too), gpus, priority and max_attempts; its name, spec and hash are not
 * used. A run whose config_hash the sweep has already is skipped, so the
 * same budget added twice adds nothing. One statement; send it on the
 * connection that cancels sweeps (see store/sweeps.c). sweep_id is 0 when
 * there is no such sweep or it is cancelled; runs counts those added. */
void store_sweeps_extend(db *d, int64_t sweep_id, const store_sweep_new *sw,
                         store_sweeps_inserted_cb cb, void *ud);

/* A tune run of a sweep whose learning rate is tuned on a muP proxy
 * (sweeps/lr_tune.h). Strings are valid during the callback only. */
typedef struct store_lr_tune_run {
  int64_t id;
  double lr;          /* its config's train.lr */
  const char *status; /* run_status */
  double loss;        /* final validation loss, NAN when none */
  int n_layer, d_model, n_head, batch_size;
  int64_t nonembedding_params, tokens;
} store_lr_tune_run;

/* spec_json: the sweep's canonical spec; NULL with n 0 when the sweep has
 * no tune waiting for a decision (no "lr_tune" in its spec, a decision made
 * already, cancelled, or gone). */
typedef void (*store_sweeps_lr_tune_cb)(void *ud, int status, const char *spec_json,
                                        const store_lr_tune_run *runs, int n, const char *errmsg);

/* The tune runs (part 'lr_tune') of a sweep whose tune has not decided yet
 * (sweeps.lr_tune NULL, or not "decided"), in id order, with its spec. */
void store_sweeps_lr_tune_runs(db *d, int64_t sweep_id, store_sweeps_lr_tune_cb cb, void *ud);

/* The tune's decision (decision_json, sweeps.lr_tune, with "decided_at"
 * added) and the study's runs (sw as store_sweeps_extend takes it; "[]"
 * when the tune did not decide), in one statement: both, or neither.
 * Nothing happens when the sweep is cancelled or its tune has decided
 * already (sweep_id 0 then): a decision made again after a restart, or
 * twice at once, adds nothing; a run whose config_hash the sweep has
 * already is skipped, as in store_sweeps_extend. Send it on the connection
 * that cancels sweeps. runs counts the runs added. */
void store_sweeps_lr_tuned(db *d, int64_t sweep_id, const char *decision_json,
                           const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud);

/* A run of an adaptive sweep as its next round's design sees it. Strings
 * are valid during the callback only. */
typedef struct store_adaptive_run {
  int64_t id;
  const char *config_hash;
  const char *status; /* run_status */
  const char *kept;   /* runs.kept: {"STEP": "PATH"} of its branch points, or NULL */
} store_adaptive_run;

/* spec_json: the sweep's canonical spec; adaptive_json: sweeps.adaptive
 * (NULL before the first decision); both NULL with n 0 when the sweep has
 * no design waiting (no "adaptive" in its spec, a design stopped already,
 * cancelled, or gone). */
typedef void (*store_sweeps_adaptive_cb)(void *ud, int status, const char *spec_json,
                                         const char *adaptive_json, const store_adaptive_run *runs,
                                         int n, const char *errmsg);

/* The isoflop runs of a sweep whose adaptive design is still running,
 * in id order, with its spec and its rounds so far. */
void store_sweeps_adaptive_runs(db *d, int64_t sweep_id, store_sweeps_adaptive_cb cb, void *ud);

/* A round of the adaptive design: adaptive_json (the whole new
 * sweeps.adaptive, its last round stamped "decided_at") and the round's
 * runs (sw as store_sweeps_extend takes it), in one statement, only while
 * the sweep holds `rounds` rounds (0: none yet) and its design is running:
 * a round decided again after a restart, or twice at once, adds nothing
 * (sweep_id 0). Send it on the connection that cancels sweeps. */
void store_sweeps_adaptive_round(db *d, int64_t sweep_id, int rounds, const char *adaptive_json,
                                 const store_sweep_new *sw, store_sweeps_inserted_cb cb, void *ud);

/* The sweeps whose status is queued or running. */
void store_sweeps_unfinished(db *d, store_ids_cb cb, void *ud);

#endif

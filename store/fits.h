/* Fits (store/fits.c): what a sweep's refits read (the loss laws' points,
 * the batch ladder's evaluations, the corpus's figures) and store (one fit
 * per law), and the latest fits for GET /api/sweeps/{id}/fit. */
#ifndef SS_STORE_FITS_H
#define SS_STORE_FITS_H

#include <stdint.h>

#include "store/store.h"

/* One succeeded run as a point of the loss laws. */
typedef struct store_fit_point {
  double params;     /* non-embedding parameters */
  double tokens;     /* trained on */
  double flops;      /* the run's compute budget */
  double loss;       /* final validation loss */
  double batch_size; /* in tokens (sequences x seq_len), as the laws expect */
  double steps;      /* tokens / batch_size; NAN when unknown */
  double lr;         /* the config's train.lr; NAN when absent */
  int isoflop;       /* the plan's isoflop part */
} store_fit_point;

/* The synthetic corpus's figures as the trainer reported them when the
 * runs started (SCIENCE.md section 5, runs.entropy_rate and window_floor). */
typedef struct store_corpus {
  double entropy_rate; /* NAN: not reported (real text, or a run older than migration 006) */
  double window_floor; /* at seq_len; NAN likewise */
  int seq_len;         /* the runs' (the first point's); 0 without points */
} store_corpus;

/* pts and corpus are valid during the callback only; n is 0 on an error. */
typedef void (*store_fits_points_cb)(void *ud, int status, const store_fit_point *pts, int n,
                                     const store_corpus *corpus, const char *errmsg);

/* The loss laws' points of a sweep, in run order: every succeeded run with
 * a positive final loss, parameters and tokens, except the batch ladder's,
 * an lr tune's (the proxy at each rate tried: not the study's design) and
 * reproductions (a run trained again is the same observation, not a new
 * one). One corpus per sweep: its figures are the first run's at the first
 * run's seq_len that reported them. */
void store_fits_points(db *d, int64_t sweep_id, store_fits_points_cb cb, void *ud);

/* One succeeded run of the batch ladder. */
typedef struct store_ladder_run {
  double batch_tokens;     /* batch size in tokens */
  const char *target_loss; /* JSON array of the losses it aims at */
  const char *evals;       /* JSON [[step, val_loss], ...] in step order */
  double b_noise;          /* median b_noise of its second half, in tokens; NAN: none */
} store_ladder_run;

/* runs is valid during the callback only (its strings too). */
typedef void (*store_fits_ladder_cb)(void *ud, int status, const store_ladder_run *runs, int n,
                                     const char *errmsg);

/* The batch ladder's runs of a sweep, in run order. */
void store_fits_ladder(db *d, int64_t sweep_id, store_fits_ladder_cb cb, void *ud);

/* One succeeded run of a branched batch ladder (part 'bcrit'): a trunk
 * (branch_of 0) or a rung that started from its checkpoint. */
typedef struct store_bcrit_run {
  int64_t id, branch_of;
  int64_t branch_step;       /* the trunk's step the rung started from (0: a trunk) */
  double batch_tokens;       /* its batch size in tokens */
  double trunk_batch_tokens; /* its trunk's (its own for a trunk) */
  double train_tokens;       /* train.tokens of its config */
  int64_t first_step;        /* its first stored step: 1 when it trained from scratch */
  const char *evals;         /* JSON [[tokens, val_loss], ...] in step order */
  const char *b_noise;       /* a trunk's: JSON [[tokens, b_noise in tokens], ...]; "[]" else */
} store_bcrit_run;

typedef void (*store_fits_bcrit_cb)(void *ud, int status, const store_bcrit_run *runs, int n,
                                    const char *errmsg);

/* The branched batch ladder's succeeded runs of a sweep, in run order. */
void store_fits_bcrit(db *d, int64_t sweep_id, store_fits_bcrit_cb cb, void *ud);

/* Stores one fit of a law (fit_json: the fit's object, with its ci95 and
 * stderr, which also go to fits.intervals). */
void store_fits_insert(db *d, int64_t sweep_id, const char *law, const char *fit_json, int n_points,
                       store_done_cb cb, void *ud);

/* The latest fit of each law of a sweep, as one JSON object by law ({} when
 * none); json NULL when there is no such sweep. */
void store_fits_latest(db *d, int64_t sweep_id, store_json_cb cb, void *ud);

#endif

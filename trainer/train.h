/* One training run: `scalesweep train`. Prints JSON lines
 * (docs/design.md#output-events) to out and returns 0 or a negative SS_E* code:
 * SS_EINVAL/SS_ECORRUPT/SS_ENOENT for bad input (config, data, checkpoint),
 * SS_ENUMERIC when the loss stops being finite, SS_ETERM when stopped by
 * SIGTERM/SIGINT after writing a checkpoint. Every error is also printed as
 * an "error" event and copied into err. */
#ifndef SS_TRAINER_TRAIN_H
#define SS_TRAINER_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/kern.h"
#include "runcfg/runcfg.h"

/* How one run is started, beside its config. */
typedef struct trn_train_opts {
  /* continue from resume_dir/checkpoint.bin, or checkpoint.prev.bin when
   * that one is corrupt (said on stderr) (NULL: fresh run; a directory
   * without a checkpoint starts fresh; one whose checkpoints are all
   * corrupt fails, or with resume_max_step >= 0 starts fresh) */
  const char *resume_dir;
  /* >= 0: from the newest of checkpoint.bin and checkpoint.prev.bin whose
   * step is at most that, else fresh (the worker passes the last step whose
   * metrics the scheduler has stored, so that no step's metrics go
   * missing); < 0: the newest */
  int64_t resume_max_step;
  /* where checkpoints go, overriding the config's checkpoint.dir (NULL: the
   * config's). The config itself is reported and hashed as given, so a
   * planned run's config_hash is the planner's wherever the worker puts its
   * checkpoints. */
  const char *checkpoint_dir;
  /* a wsd run's start (docs/sweeps.md, "WSD branches"): when nothing was
   * resumed, the run starts from this checkpoint of a longer wsd run of the
   * same config but train.tokens, taken at most at both runs' stable steps
   * (rcfg_wsd_stable_steps), and trains what is left: the same weights,
   * losses and events from there on as a run from scratch. NULL: none. */
  const char *branch_from;
  /* wsd branches' points: after each of these steps (ascending) a
   * checkpoint is kept in checkpoint_dir/branch-STEP/ and reported as a
   * checkpoint event with "branch": true (nkeep_steps 0: none) */
  const int64_t *keep_steps;
  int nkeep_steps;
  /* confine_data 1: token shards only under data_dirs[0..ndata_dirs)
   * (`--data-dir`, common/shardpath.h; none: every shard is refused,
   * synthetic data still works); 0: any file the user can read */
  int confine_data;
  const char *const *data_dirs;
  int ndata_dirs;
  /* world_size > 1 (trainer/dist.h): this process's rank, where rank 0
   * listens (dist_addr, or dist_listen_fd >= 0: a socket already listening,
   * rank 0's), the run's secret, the longest wait for a peer (<= 0: 600 s) */
  int rank;
  int local_rank; /* this rank's place among this host's: its CUDA device */
  const char *dist_addr;
  int dist_listen_fd;
  const char *dist_secret;
  int dist_timeout_ms;
} trn_train_opts;

/* Trains cfg. The config event reports the config as given, its
 * config_hash (rcfg_hash) and, when opts->checkpoint_dir is set, that
 * directory. checkpoint.every_tokens > 0 with no directory from either
 * place is SS_EINVAL. */
int trn_train(const rcfg *cfg, const trn_train_opts *opts, FILE *out, char *err, size_t errlen);

/* The kernels' precision of a run config's. */
kern_prec trn_kern_prec(rcfg_prec p);

/* Installs the SIGTERM/SIGINT handlers that make trn_train checkpoint and
 * stop at the end of the current step. */
void trn_train_install_signals(void);

/* The signal that stopped the run (0 if none). */
int trn_train_stop_signal(void);

#endif

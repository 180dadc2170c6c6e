/* The state of one training run, shared by the files of the training loop
 * (train.c: the loop; dp.c: what data parallelism adds to it). Internal to
 * trainer/. */
#ifndef SS_TRAINER_RUN_H
#define SS_TRAINER_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda_module.h"
#include "runcfg/runcfg.h"
#include "trainer/ckpt.h"
#include "trainer/data.h"
#include "trainer/dist.h"
#include "trainer/model.h"
#include "trainer/optim.h"

/* The collectives on the model's buffers (kern.h's kern_coll_ops): the CPU
 * twin's for a CPU run (ctx: the trn_dist), NCCL's (the CUDA module's) for
 * a CUDA run (ctx: its communicator). */
typedef struct trn_dcoll {
  void *ctx;
  const kern_coll_ops *ops;
} trn_dcoll;

typedef struct run {
  const rcfg *cfg;
  FILE *out;
  kern_ctx k;
  trn_lexicon *lex;
  trn_loader *train, *val;
  trn_model model;
  trn_optim optim; /* ZeRO-1: this rank's shard */
  int32_t *batch;   /* (micro_batch_size * T + 1) */
  int32_t *val_tok; /* (nval * T + 1) */
  int nval;         /* validation windows */
  char *config_json;
  char config_hash[65];
  const char *ckpt_dir;         /* the flag's, else the config's checkpoint.dir */
  const char *ckpt_dir_flag;    /* --checkpoint-dir, or NULL */
  const char *const *data_dirs; /* the shards' allowed directories */
  int ndata_dirs;               /* SPATH_ANY: unconfined */
  const kern_cuda_module *cuda; /* the CUDA module of a cuda run, else NULL */
  int device;                   /* its CUDA ordinal (of the visible devices) */
  const char *resume_dir;       /* what trn_train_opts asks to resume from */
  int64_t resume_max_step;
  const char *branch_from;   /* trn_train_opts': a longer wsd run's checkpoint, or NULL */
  const int64_t *keep_steps; /* trn_train_opts': steps to keep a checkpoint at */
  int nkeep_steps;
  double started; /* when trn_train began (CLOCK_MONOTONIC, s): the step lines' wall_s */

  /* data parallelism (dp.c): this rank of world; dist (the host values:
   * losses, flags, the training state) is NULL at world 1; dc moves the
   * model's buffers */
  int rank, world;
  trn_dist *dist;
  trn_dcoll dc;
  size_t shard[1025]; /* ZeRO-1: the ranks' parameter bounds (trn_optim_shards) */
  /* this step's gradient buckets (trn_dp_buckets) */
  int bucketed, bucket_init, bucket_failed;
  float bucket_scale; /* mgrads into grads at this scale (0: they are one buffer) */
  int64_t buckets;    /* buckets reduced during backward, over the run (the done line) */
} run;

/* ---- dp.c ---------------------------------------------------------------------- */

/* Joins the other ranks (opts' dist settings); 0, or an SS_E* code with
 * err. Nothing to do at world 1. */
struct trn_train_opts;
int trn_dp_open(run *r, const struct trn_train_opts *o, char *err, size_t errlen);
void trn_dp_close(run *r);

/* The step's gradient and figures summed over the ranks, in rank order:
 * grads (all of it, or this rank's shard under ZeRO-1), and ctl[0..2] =
 * loss sum, micro-batch gradient sumsq sum, ranks asking to stop. gnorm2
 * gets the whole gradient's sum of squares. */
int trn_dp_reduce(run *r, double ctl[3], double *gnorm2, char *err, size_t errlen);

/* Overlapping the reduction with backward (dp.c's header): trn_dp_overlap
 * says whether this run does; trn_dp_buckets before the backward of a
 * rank's last micro-batch of a step (scale, init: how its gradient joins
 * the step's, as kern_ops.accumulate) starts each bucket's reduction as
 * backward finishes it; trn_dp_buckets_end after it. trn_dp_reduce then
 * waits for them instead of reducing. */
int trn_dp_overlap(const run *r);
void trn_dp_buckets(run *r, float scale, int init);
void trn_dp_buckets_end(run *r);
/* After the optimizer step: ZeRO-1's shards of the parameters to every
 * rank. */
int trn_dp_after_step(run *r, char *err, size_t errlen);
/* The validation loss rank 0 computed, to every rank. */
int trn_dp_share(run *r, double *v, char *err, size_t errlen);

/* Writes a checkpoint: every rank calls it at the same step; rank 0 writes
 * (gathering ZeRO-1's shards first). Returns save()'s answer on rank 0, 0
 * elsewhere, or an SS_E* code. */
typedef int (*trn_dp_save_fn)(run *r, const trn_optim *o, const trn_ckpt_state *st, char *err,
                              size_t errlen);
int trn_dp_save(run *r, const trn_ckpt_state *st, trn_dp_save_fn save, char *err, size_t errlen);

/* Resumes: rank 0 reads the checkpoint (load, into an optimizer holding
 * every parameter's state) and hands every rank the weights, its optimizer
 * state and the training state. 1 when resumed, 0 for a fresh start, or an
 * SS_E* code (every rank gets rank 0's). */
typedef int (*trn_dp_load_fn)(run *r, trn_optim *o, trn_ckpt_state *st, char *err,
                              size_t errlen);
int trn_dp_resume(run *r, trn_ckpt_state *st, trn_dp_load_fn load, char *err, size_t errlen);

#endif

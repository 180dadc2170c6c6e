/* Optimizer state and the update step: AdamW with fp32 moments, or
 * adamw8bit with moments quantised blockwise to 8 bits (kernels/kern.h).
 * Weight decay applies to the tensors the model marks (not biases or
 * LayerNorm). The state is owned here and allocated from the model's
 * kern_ctx. */
#ifndef SS_TRAINER_OPTIM_H
#define SS_TRAINER_OPTIM_H

#include <stddef.h>

#include "trainer/model.h"

typedef struct trn_optim {
  int q8;
  kern_ctx *k;
  /* the parameters whose state this holds, [lo, hi) (ZeRO-1: one rank's
   * shard; else all), and their blocks [blo, bhi) for 8-bit */
  size_t lo, hi, blo, bhi;
  void *mem;      /* the one allocation the buffers below are carved from */
  float *m, *v;   /* fp32: (nparams) each */
  int8_t *qm;     /* 8-bit: (nparams) */
  uint8_t *qv;    /* 8-bit: (nparams) */
  float *sm, *sv; /* 8-bit: one absmax per block, (nblocks) each */
  size_t nblocks;                  /* blocks held: bhi - blo */
  size_t block_off[TRN_NTENSORS]; /* first block of each tensor (blocks never span tensors) */
  size_t state_bytes;             /* bytes of optimizer state, for the report */
} trn_optim;

int trn_optim_init(trn_optim *o, const trn_model *m, int q8);
/* The state of parameters [lo, hi) only (ZeRO-1): lo and hi must be shard
 * bounds (trn_optim_shards), so that no 8-bit block is split. */
int trn_optim_init_shard(trn_optim *o, const trn_model *m, int q8, size_t lo, size_t hi);
/* ZeRO-1's shard bounds for world ranks: off[0] = 0 < ... < off[world] =
 * nparams, nearly equal, each at a tensor's start or a whole number of
 * 8-bit blocks into one. */
void trn_optim_shards(const trn_model *m, int world, size_t *off);
/* The first block of parameter index at (a shard bound). */
size_t trn_optim_block_of(const trn_optim *o, const trn_model *m, size_t at);
void trn_optim_free(trn_optim *o);

/* One update of every tensor the state covers ([lo, hi)). grad_scale multiplies the gradients first
 * (loss-scale undo times the clipping factor), or *grad_scale_dev when that is not NULL (backend
 * memory, step_scale's answer; 0 skips the update); step is 1-based. */
void trn_optim_step(trn_optim *o, trn_model *m, double lr, double beta1, double beta2, double eps,
                    double weight_decay, float grad_scale, const float *grad_scale_dev, int step);

/* The state as host bytes and back (checkpoints): a flat copy of the
 * buffers in a fixed order, trn_optim.state_bytes long. */
void trn_optim_save(const trn_optim *o, void *host);
void trn_optim_load(trn_optim *o, const void *host);

#endif

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
  void *mem;      /* the one allocation the buffers below are carved from */
  float *m, *v;   /* fp32: (nparams) each */
  int8_t *qm;     /* 8-bit: (nparams) */
  uint8_t *qv;    /* 8-bit: (nparams) */
  float *sm, *sv; /* 8-bit: one absmax per block, (nblocks) each */
  size_t nblocks;
  size_t block_off[TRN_NTENSORS]; /* first block of each tensor (blocks never span tensors) */
  size_t state_bytes;             /* bytes of optimizer state, for the report */
} trn_optim;

int trn_optim_init(trn_optim *o, const trn_model *m, int q8);
void trn_optim_free(trn_optim *o);

/* One update of every tensor. grad_scale multiplies the gradients first
 * (loss-scale undo times the clipping factor); step is 1-based. */
void trn_optim_step(trn_optim *o, trn_model *m, double lr, double beta1, double beta2, double eps,
                    double weight_decay, float grad_scale, int step);

/* The state as host bytes and back (checkpoints): a flat copy of the
 * buffers in a fixed order, trn_optim.state_bytes long. */
void trn_optim_save(const trn_optim *o, void *host);
void trn_optim_load(trn_optim *o, const void *host);

#endif

/* Parameter and FLOP counts of the GPT (SCIENCE.md section 1): the model
 * shape arithmetic the planner and the trainer share. */
#ifndef SS_RUNCFG_FLOPS_H
#define SS_RUNCFG_FLOPS_H

#include <stdint.h>

#include "runcfg/runcfg.h"

typedef struct rcfg_shape {
  int n_layer, d_model, n_head, seq_len, vocab_size;
} rcfg_shape;

/* The model section of a resolved config. */
rcfg_shape rcfg_shape_of(const rcfg *cfg);

/* Exact parameter counts: params includes the token and position
 * embeddings (the head is tied); nonembedding_params = 12 L d^2 + 13 L d + 2d
 * (biases and LayerNorm gains included). */
int64_t rcfg_params(const rcfg_shape *s);
int64_t rcfg_nonembedding_params(const rcfg_shape *s);

/* Training FLOPs per token: 6 (12 L d^2 + d V) + 6 L T d (forward plus
 * backward of every matrix product, the output head included, causal
 * attention at half of the full T x T work). */
double rcfg_flops_per_token(const rcfg_shape *s);

#endif

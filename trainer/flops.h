/* Parameter and FLOP counts of the GPT (SCIENCE.md section 1). */
#ifndef SS_TRAINER_FLOPS_H
#define SS_TRAINER_FLOPS_H

#include <stdint.h>

typedef struct trn_shape {
  int n_layer, d_model, n_head, seq_len, vocab_size;
} trn_shape;

/* Exact parameter counts: params includes the token and position
 * embeddings (the head is tied); nonembedding_params = 12 L d^2 + 13 L d + 2d
 * (biases and LayerNorm gains included). */
int64_t trn_params(const trn_shape *s);
int64_t trn_nonembedding_params(const trn_shape *s);

/* Training FLOPs per token: 6 (12 L d^2 + d V) + 6 L T d (forward plus
 * backward of every matrix product, the output head included, causal
 * attention at half of the full T x T work). */
double trn_flops_per_token(const trn_shape *s);

#endif

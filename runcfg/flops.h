/* Parameter and FLOP counts of the built-in trainer's two model families
 * (SCIENCE.md section 1, docs/models.md): the shape arithmetic the planner
 * and the trainer share. */
#ifndef SS_RUNCFG_FLOPS_H
#define SS_RUNCFG_FLOPS_H

#include <stddef.h>
#include <stdint.h>

#include "runcfg/runcfg.h"

/* A model's shape. The fields after vocab_size are zero for GPT-2 in
 * standard parametrisation, so {L, d, NH, T, V} is a gpt2 shape. */
typedef struct rcfg_shape {
  int n_layer, d_model, n_head, seq_len, vocab_size;
  int family;          /* RCFG_GPT2 or RCFG_LLAMA */
  int parametrization; /* RCFG_SP or RCFG_MUP */
  int base_width;      /* mup: the proxy's width */
  /* llama: the SwiGLU rule (rcfg_ffn_hidden), rotary base, heads, QK-norm */
  double mlp_ratio, rope_theta;
  int mlp_multiple_of, untied, qk_norm;
} rcfg_shape;

/* The model section of a resolved config. */
rcfg_shape rcfg_shape_of(const rcfg *cfg);

/* The family and parametrisation as the plan and the web pages name them:
 * "gpt2, SP", "llama, SP", "llama, muP (base width 64)". */
void rcfg_model_text(const rcfg_shape *s, char *buf, size_t n);

/* The MLP's hidden width: 4 d for gpt2; for llama mlp_multiple_of x
 * ceil(mlp_ratio x d / mlp_multiple_of) (Llama's 8/3 d rounded up). */
int rcfg_ffn_hidden(const rcfg_shape *s);

/* Exact parameter counts. params: every parameter the trainer allocates.
 * nonembedding_params: all but the token embedding, the position embedding
 * (gpt2) and an untied output head (llama):
 *   gpt2:  12 L d^2 + 13 L d + 2 d (biases and LayerNorm gains included);
 *   llama: L (4 d^2 + 3 F d + 2 d [+ 2 hs with QK-norm]) + d (no biases;
 *          RMSNorm gains; F = rcfg_ffn_hidden). */
int64_t rcfg_params(const rcfg_shape *s);
int64_t rcfg_nonembedding_params(const rcfg_shape *s);

/* Training FLOPs per token, forward plus backward (3x the forward) of every
 * matrix product, the output head included, causal attention at half of the
 * full T x T work:
 *   gpt2:  6 (12 L d^2 + d V) + 6 L T d;
 *   llama: 6 ((4 d^2 + 3 F d) L + d V) + 6 L T d + 12 L d, the last the
 *          rotary embedding (q and k: d channel pairs, 6 FLOPs a pair, once
 *          forward and once, transposed, backward). */
double rcfg_flops_per_token(const rcfg_shape *s);

#endif

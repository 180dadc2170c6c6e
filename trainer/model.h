/* The decoder, in two families (runcfg.h model.family, docs/models.md):
 *
 *   gpt2:  token and learned position embeddings, pre-LayerNorm blocks
 *          (causal multi-head attention, 4x GELU MLP, biases), final
 *          LayerNorm, output head tied to the token embedding;
 *   llama: token embedding, pre-RMSNorm blocks (optional per-head RMSNorm
 *          of q and k, rotary positions, causal attention, SwiGLU MLP of
 *          rcfg_ffn_hidden, no biases), final RMSNorm, output head of its
 *          own unless tie_embeddings.
 *
 * Either in standard parametrisation or muP (trainer/mup.h): initial
 * scales, per-tensor learning rates, the output multiplier and attention's
 * 1/hs. The tensors a family lacks have size 0 (gpt2: qnw, knw, head;
 * llama: wpe and every bias, the norms' biases, and head when tied), so a
 * gpt2 model's layout is the one it had before llama existed.
 *
 * All parameters live in one allocation carved into named tensors
 * (trn_weights); gradients and the micro-batch gradients use the same
 * carving, the rounded low-precision copy (kern_x) the same offsets. The model owns every buffer
 * it allocates, all from its kern_ctx; trn_model_free releases them. */
#ifndef SS_TRAINER_MODEL_H
#define SS_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "runcfg/flops.h"

#define TRN_NTENSORS 19
/* trn_weights' per-block tensors, (L, ...) each: ln1w .. knw */
#define TRN_FIRST_BLOCK_TENSOR 2
#define TRN_LAST_BLOCK_TENSOR 15

typedef struct trn_weights {
  float *wte;      /* (V, C) token embedding, also the output head when tied */
  float *wpe;      /* (T, C); llama: none */
  float *ln1w;     /* (L, C) LayerNorm or RMSNorm gain */
  float *ln1b;     /* (L, C); llama: none */
  float *qkvw;     /* (L, 3C, C) */
  float *qkvb;     /* (L, 3C); llama: none */
  float *attprojw; /* (L, C, C) */
  float *attprojb; /* (L, C); llama: none */
  float *ln2w;     /* (L, C) */
  float *ln2b;     /* (L, C); llama: none */
  float *fcw;      /* (L, 4C, C); llama (L, 2F, C): gate rows, then up rows */
  float *fcb;      /* (L, 4C); llama: none */
  float *fcprojw;  /* (L, C, 4C); llama (L, C, F) */
  float *fcprojb;  /* (L, C); llama: none */
  float *qnw;      /* (L, hs) QK-norm gain of q; llama with qk_norm only */
  float *knw;      /* (L, hs) of k */
  float *lnfw;     /* (C) */
  float *lnfb;     /* (C); llama: none */
  float *head;     /* (V, C) output head; llama untied only */
} trn_weights;

/* The tensors' indices, in trn_weights order. */
enum {
  TRN_WTE,
  TRN_WPE,
  TRN_LN1W,
  TRN_LN1B,
  TRN_QKVW,
  TRN_QKVB,
  TRN_ATTPROJW,
  TRN_ATTPROJB,
  TRN_LN2W,
  TRN_LN2B,
  TRN_FCW,
  TRN_FCB,
  TRN_FCPROJW,
  TRN_FCPROJB,
  TRN_QNW,
  TRN_KNW,
  TRN_LNFW,
  TRN_LNFB,
  TRN_HEAD
};

/* Where one tensor sits in the flat parameter array. */
typedef struct trn_tensor_info {
  const char *name;
  size_t offset, size;
  int decay; /* weight decay applies (matrices and embeddings, not biases/LN) */
  /* the learning rate's factor (muP's hidden matrices 1 / width_mult; else 1) */
  float lr_scale;
} trn_tensor_info;

/* Activations are kern_x (the backend's storage at the run's precision,
 * kernels/kern.h); statistics and attention's saved scores are fp32. */
typedef struct trn_layer_acts {
  kern_x *ln1;      /* (B, T, C) */
  float *ln1_mean;  /* (B, T); llama: none */
  float *ln1_rstd;  /* (B, T) */
  kern_x *qkv;      /* (B, T, 3C) attention's input (llama: after QK-norm and rotation) */
  kern_x *qkv_pre;  /* (B, T, 3C) before QK-norm (llama with qk_norm; else NULL) */
  float *qk_rstd;   /* (B, T, 2, NH) QK-norm's (llama with qk_norm; else NULL) */
  float *att;       /* (B, NH, T, T); NULL with flash attention */
  float *lse;       /* (B, NH, T) with flash attention (else NULL) */
  kern_x *atty;     /* (B, T, C) */
  kern_x *resid2;   /* (B, T, C) residual after attention */
  kern_x *ln2;      /* (B, T, C) */
  float *ln2_mean;  /* (B, T); llama: none */
  float *ln2_rstd;  /* (B, T) */
  kern_x *fch;      /* (B, T, 4C); llama (B, T, 2F) gate | up */
  kern_x *fch_gelu; /* (B, T, 4C) after GELU; llama (B, T, F) after SwiGLU */
} trn_layer_acts;

typedef struct trn_model {
  kern_ctx *k;
  rcfg_shape shape;
  int B;     /* capacity: most sequences per forward/backward */
  int cur_B; /* sequences in the last forward */
  int recompute;
  int llama;         /* shape.family == RCFG_LLAMA */
  int F;             /* the MLP's hidden width (rcfg_ffn_hidden) */
  float out_mult;    /* logits multiplier: muP's 1 / width_mult, else 1 */
  float attn_qscale; /* q's multiplier before attention's 1/sqrt(hs): muP's 1/sqrt(hs), else 1 */
  size_t nparams;
  trn_tensor_info tensors[TRN_NTENSORS];

  float *params; /* fp32 master weights, one allocation */
  /* the rounded copy the kernels use, as kern_x (== params in fp32);
   * tensor t's element i at kern_x_at(k, params_low, tensors[t].offset + i) */
  kern_x *params_low;
  float *grads;  /* gradient of the whole batch */
  float *mgrads; /* gradient of one micro-batch (== grads without accumulation) */
  trn_weights p, g, mg;

  void *acts_mem;
  size_t acts_bytes;
  kern_x **resid;             /* L + 1 pointers, each (B, T, C): block inputs */
  trn_layer_acts *layer;      /* L entries; all alias one scratch set with recompute */
  kern_x *proj;               /* (B, T, C) output of a projection, before the residual */
  kern_x *lnf;                /* (B, T, C) */
  float *lnf_mean, *lnf_rstd; /* (B, T), (B, T) */
  kern_x *logits;             /* (B, T, V); holds dlogits after backward */
  float *losses;              /* (B, T) */
  /* the step's scalars in backend memory (one allocation, kern.h's
   * mean_into / sumsq_into / step_scale): trn_model_forward's loss; the
   * training step's loss, micro-batch and whole gradient sums of squares;
   * the update's gradient factor */
  double *loss_acc, *step_acc; /* 1, 3 */
  float head_dscale; /* the forward's classifier pass left dlogits of this dscale (0: none) */
  float *grad_scale;
  int32_t *tokens, *targets; /* (B, T) backend copies of the batch */

  void *grad_mem;                             /* backward scratch for one layer */
  kern_x *dresid, *dln, *dqkv, *datty, *dfch; /* dfch (B,T,4C); llama (B,T,2F) */
  kern_x *dact;                               /* llama: (B, T, F) SwiGLU's output gradient */
  float *datt;                                /* NULL with flash attention */

  /* When set, trn_model_backward calls it as parts of mgrads become final:
   * after each block (the slices of the block tensors its family has, last
   * block first), then after the embeddings (wte, wpe, lnfw, lnfb, head;
   * those it has), with the ranges [lo, hi) of
   * parameter indices; the ranges of all calls cover every parameter once.
   * Data parallelism starts reducing a bucket there while backward goes on. */
  void (*grads_ready)(void *ud, const size_t (*ranges)[2], int n);
  void *grads_ready_ud;
} trn_model;

/* Allocates a model for micro-batches of B sequences. accumulate: keep a
 * separate micro-batch gradient buffer. Returns 0 or SS_ENOMEM. */
int trn_model_init(trn_model *m, kern_ctx *k, const rcfg_shape *s, int B, int recompute,
                   int accumulate);
void trn_model_free(trn_model *m);

/* GPT-2's initialisation from seed, for both families: N(0, 0.02), the
 * residual projections N(0, 0.02 / sqrt(2L)), biases 0, norm gains 1;
 * under muP the hidden matrices' scales divided by sqrt(width_mult)
 * (trainer/mup.h). */
void trn_model_init_weights(trn_model *m, uint64_t seed);

/* Re-derives params_low from params (after loading weights). */
void trn_model_sync_low(trn_model *m);

/* Forward pass on nseq <= B sequences of T tokens (host arrays, nseq*T
 * each); with targets, computes the per-token losses and returns their mean. */
double trn_model_forward(trn_model *m, int nseq, const int32_t *tokens, const int32_t *targets);

/* The same without reading the device: with targets (and loss_acc, backend
 * memory), adds the mean loss to *loss_acc (kern.h mean_into). A nonzero
 * dscale (training) forms the head's gradient for trn_model_backward of the
 * same dscale in the loss's pass over the logits (one pass, not two). */
void trn_model_forward_into(trn_model *m, int nseq, const int32_t *tokens, const int32_t *targets,
                            double *loss_acc, float dscale);

/* Backward pass after trn_model_forward with targets: writes the gradient
 * of dscale x (mean loss) into mgrads (zeroed first). */
void trn_model_backward(trn_model *m, float dscale);

/* Bytes of the activation and backward buffers (the memory recompute saves). */
size_t trn_model_activation_bytes(const trn_model *m);

#endif

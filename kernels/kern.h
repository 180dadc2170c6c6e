/* The compute kernels behind one interface.
 *
 * Every kernel of the GPT trainer (forward and backward) is a call through a
 * kern_ops table: the CPU backend (kernels/cpu, the reference, OpenBLAS sgemm
 * plus OpenMP) fills one table, the CUDA backend (kernels/cuda) another, and
 * the trainer never knows which it holds. Buffers are backend memory
 * (host memory for the CPU, device memory for CUDA) obtained from ops->alloc;
 * a kern_ctx carries the backend's execution state (threads, or the stream).
 *
 * Shapes: N rows (N = B*T), C channels, OC output channels, V vocabulary,
 * NH heads, hs = C/NH head size. Row-major throughout; weights are (OC, C)
 * as in nn.Linear, applied as out = inp @ W^T + b.
 *
 * Precision: activations (every kernel output that later feeds a kernel),
 * their gradients and the weights' rounded copy are kern_x values, stored
 * rounded to ctx->prec: KERN_BF16 rounds to bfloat16 and KERN_FP16 to IEEE
 * half (overflow to infinity) with round-to-nearest-even. Their storage is
 * the backend's (ctx->xbytes bytes each): fp32 containers on the CPU, so a
 * CPU run has the numerics of a GPU run whose matrix products take bf16/fp16
 * inputs and accumulate in fp32; on CUDA the bf16 or fp16 values themselves
 * (half the memory and traffic; the GEMMs read them as they are). Storing a
 * value already rounded to ctx->prec is exact, so the two storages hold the
 * same numbers. Parameters (fp32 master), parameter gradients, optimizer
 * state, LayerNorm statistics, attention's saved scores and reductions stay
 * fp32 (sums of squares in fp64). "+=" below marks outputs that accumulate;
 * the rest overwrite.
 *
 * Determinism: for a fixed backend and thread count every kernel returns the
 * same bits on every call (no reductions whose order depends on scheduling). */
#ifndef SS_KERNELS_KERN_H
#define SS_KERNELS_KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kern_prec { KERN_FP32 = 0, KERN_BF16 = 1, KERN_FP16 = 2 } kern_prec;

typedef struct kern_ops kern_ops;

/* A value at the run's precision in the backend's storage (see Precision):
 * a kern_x pointer addresses ctx->xbytes-byte elements (kern_x_at). */
typedef void kern_x;

typedef struct kern_ctx {
  const kern_ops *ops;
  kern_prec prec;
  int xbytes;    /* bytes of one kern_x: 4 on the CPU, 2 on CUDA at bf16/fp16 */
  int threads;   /* CPU: OpenMP and OpenBLAS threads */
  void *backend; /* CUDA: stream and library handles */
} kern_ctx;

/* Element i of the kern_x buffer x. */
static inline kern_x *kern_x_at(const kern_ctx *k, const kern_x *x, size_t i) {
  return (char *)x + i * (size_t)k->xbytes;
}

/* 8-bit AdamW moments are quantised in blocks of this many values, each
 * block with its own absolute maximum (bitsandbytes' blockwise scheme). */
#define KERN_Q8_BLOCK 256

typedef struct kern_adamw_args {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale; /* multiplies every gradient first (loss-scale undo x clip) */
  int step;         /* 1-based, for bias correction */
  /* Backend memory, or NULL: when given, *grad_scale_dev replaces grad_scale
   * (the step's clip and loss-scale factor, decided on the backend by
   * step_scale without a host round trip), and 0 there skips the update:
   * p, plow and the moments stay as they are. */
  const float *grad_scale_dev;
} kern_adamw_args;

/* The tensors of one fused AdamW launch: part i updates parameters
 * [off, off + n) of p, plow and g with moments from index state (m, v, qm,
 * qv) and, 8-bit, quantisation blocks from index block (sm, sv), at its own
 * weight decay (kern_adamw_args.weight_decay is not used). */
#define KERN_ADAMW_MAX_PARTS 24
typedef struct kern_adamw_parts {
  int n;
  struct {
    size_t off, n, state, block;
    float weight_decay;
    /* the part's learning rate is kern_adamw_args.lr times this (muP's
     * per-tensor rates, trainer/mup.h; 1 in standard parametrisation) */
    float lr_scale;
  } part[KERN_ADAMW_MAX_PARTS];
} kern_adamw_parts;

struct kern_ops {
  const char *name;

  /* memory */
  void *(*alloc)(kern_ctx *k, size_t bytes); /* zeroed; NULL when out of memory */
  void (*free)(kern_ctx *k, void *p);
  void (*zero)(kern_ctx *k, void *p, size_t bytes);
  /* to_host and sync wait for the backend's queued work (a host sync on a
   * device: a training step makes one, tests/integration/test_syncs.py);
   * from_host returns as soon as src may be reused, without waiting */
  void (*to_host)(kern_ctx *k, void *dst, const void *src, size_t bytes);
  void (*from_host)(kern_ctx *k, void *dst, const void *src, size_t bytes);
  void (*sync)(kern_ctx *k);

  /* out(B,T,C) = wte[tokens] + wpe[t]; wpe NULL: wte[tokens] alone (the llama
   * family has no learned positions) */
  void (*encoder_forward)(kern_ctx *k, kern_x *out, const int32_t *tokens, const kern_x *wte,
                          const kern_x *wpe, int B, int T, int C);
  /* dwte += scatter(dout), dwpe += sum over batch (dwpe may be NULL) */
  void (*encoder_backward)(kern_ctx *k, float *dwte, float *dwpe, const kern_x *dout,
                           const int32_t *tokens, int B, int T, int C);

  /* out = (inp - mean) * rstd * w + b, eps 1e-5; mean, rstd (N) saved */
  void (*layernorm_forward)(kern_ctx *k, kern_x *out, float *mean, float *rstd, const kern_x *inp,
                            const kern_x *w, const kern_x *b, int N, int C);
  /* dinp +=, dw +=, db += */
  void (*layernorm_backward)(kern_ctx *k, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                             const kern_x *inp, const kern_x *w, const float *mean,
                             const float *rstd, int N, int C);
  /* resid = a + b (rounded), then out = layernorm(resid) with mean, rstd saved, as
   * residual_forward followed by layernorm_forward. NULL where a backend has none. */
  void (*residual_layernorm_forward)(kern_ctx *k, kern_x *resid, kern_x *out, float *mean,
                                     float *rstd, const kern_x *a, const kern_x *b, const kern_x *w,
                                     const kern_x *bias, int N, int C);

  /* out(N,OC) = inp(N,C) @ w(OC,C)^T + b (b may be NULL) */
  void (*matmul_forward)(kern_ctx *k, kern_x *out, const kern_x *inp, const kern_x *w,
                         const kern_x *b, int N, int C, int OC);
  /* dinp = dout @ w (overwrite); dw += dout^T @ inp; db += colsum(dout) (db may be NULL) */
  void (*matmul_backward)(kern_ctx *k, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                          const kern_x *inp, const kern_x *w, int N, int C, int OC);
  /* out = gelu(pre) with pre(N,OC) = inp @ w^T + b also saved (for backward); both rounded
   * to ctx->prec. NULL where a backend has none (the model calls matmul_forward then
   * gelu_forward). */
  void (*matmul_gelu_forward)(kern_ctx *k, kern_x *out, kern_x *pre, const kern_x *inp,
                              const kern_x *w, const kern_x *b, int N, int C, int OC);

  /* causal self-attention. qkv (B,T,3C) holds q|k|v, each split into NH
   * heads of hs; att (B,NH,T,T) saves the softmax probabilities (upper
   * triangle zero, rounded to ctx->prec in fp32); out (B,T,C). */
  void (*attention_forward)(kern_ctx *k, kern_x *out, float *att, const kern_x *qkv, int B, int T,
                            int C, int NH);
  /* dqkv overwrite; datt (B,NH,T,T) is scratch */
  void (*attention_backward)(kern_ctx *k, kern_x *dqkv, float *datt, const kern_x *dout,
                             const kern_x *qkv, const float *att, int B, int T, int C, int NH);
  /* flash-style causal attention (no T x T buffer): out as attention_forward;
   * lse (B,NH,T) saves each query row's log-sum-exp of the scaled scores. NULL
   * where the backend has none (the model then uses attention_forward/backward). */
  void (*flash_attention_forward)(kern_ctx *k, kern_x *out, float *lse, const kern_x *qkv, int B,
                                  int T, int C, int NH);
  /* dqkv overwrite, from dout, the forward's out and lse */
  void (*flash_attention_backward)(kern_ctx *k, kern_x *dqkv, const kern_x *dout, const kern_x *out,
                                   const kern_x *qkv, const float *lse, int B, int T, int C,
                                   int NH);

  /* ---- the llama family's ops (trainer/model.c) ---- */

  /* RMSNorm over C: out = inp * rstd * w with rstd = 1 / sqrt(mean(inp^2) +
   * 1e-5) per row, saved (N) */
  void (*rmsnorm_forward)(kern_ctx *k, kern_x *out, float *rstd, const kern_x *inp, const kern_x *w,
                          int N, int C);
  /* dinp +=, dw += */
  void (*rmsnorm_backward)(kern_ctx *k, kern_x *dinp, float *dw, const kern_x *dout,
                           const kern_x *inp, const kern_x *w, const float *rstd, int N, int C);
  /* Per-head RMSNorm of q and k (QK-norm): out (N,3C) gets the q and k parts
   * of qkv (N,3C) normalised over each head's hs channels, times the gains
   * wq, wk (hs each), and the v part copied; rstd (N, 2, NH) saved, q's then
   * k's heads. */
  void (*qknorm_forward)(kern_ctx *k, kern_x *out, float *rstd, const kern_x *qkv, const kern_x *wq,
                         const kern_x *wk, int N, int C, int NH);
  /* dqkv (N,3C) overwrite (may alias dout): q and k through the norm, v as
   * is; dwq, dwk += */
  void (*qknorm_backward)(kern_ctx *k, kern_x *dqkv, float *dwq, float *dwk, const kern_x *dout,
                          const kern_x *qkv, const kern_x *wq, const kern_x *wk, const float *rstd,
                          int N, int C, int NH);
  /* Rotary position embedding of q and k in qkv (B,T,3C), in place, then q
   * times qscale. Each head's channel i < hs/2 pairs with i + hs/2 (the
   * "rotate half" layout of GPT-NeoX and Hugging Face's Llama) and turns by
   * t * theta^(-2i/hs) at position t; angles, cosines and sines in fp64.
   * theta 0: no rotation (only the q scale: muP's 1/hs attention in the
   * gpt2 family). */
  void (*rope_forward)(kern_ctx *k, kern_x *qkv, int B, int T, int C, int NH, float theta,
                       float qscale);
  /* the transpose, on dqkv in place: the gradient before the rotation */
  void (*rope_backward)(kern_ctx *k, kern_x *dqkv, int B, int T, int C, int NH, float theta,
                        float qscale);
  /* SwiGLU: out(N,F) = silu(inp[:, :F]) * inp[:, F:], inp (N,2F) gate | up */
  void (*swiglu_forward)(kern_ctx *k, kern_x *out, const kern_x *inp, int N, int F);
  /* dinp(N,2F) overwrite from dout(N,F) */
  void (*swiglu_backward)(kern_ctx *k, kern_x *dinp, const kern_x *inp, const kern_x *dout, int N,
                          int F);
  /* x = x * s, rounded (muP's output multiplier) */
  void (*scale_x)(kern_ctx *k, kern_x *x, float s, size_t n);

  /* GELU, tanh approximation */
  void (*gelu_forward)(kern_ctx *k, kern_x *out, const kern_x *inp, size_t n);
  /* dinp = gelu'(inp) * dout (overwrite; dinp may alias dout) */
  void (*gelu_backward)(kern_ctx *k, kern_x *dinp, const kern_x *inp, const kern_x *dout, size_t n);

  /* out = a + b */
  void (*residual_forward)(kern_ctx *k, kern_x *out, const kern_x *a, const kern_x *b, size_t n);

  /* Fused softmax + cross-entropy over rows of logits (N,V): losses(N) get
   * -log softmax(logits)[target]; when dscale != 0, logits are overwritten
   * in place with dlogits = (softmax - onehot(target)) * dscale, rounded. */
  void (*softmax_xent)(kern_ctx *k, float *losses, kern_x *logits, const int32_t *targets, int N,
                       int V, float dscale);

  /* sum of squares, accumulated in fp64, deterministic */
  double (*sumsq)(kern_ctx *k, const float *x, size_t n);
  /* dst = src * s when init, else dst += src * s; returns sum of squares of
   * src (the micro-batch gradient norm, for the noise scale) */
  double (*accumulate)(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init);
  /* the same without the sum of squares (no host sync on a device) */
  void (*axpy)(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init);
  /* x *= s */
  void (*scale)(kern_ctx *k, float *x, float s, size_t n);

  /* The step's scalars stay in backend memory until the one read of the
   * step (a to_host for the log line): acc points to one double there.
   * mean_into: *acc += (sum of x[0..n)) / n, the sum in fp64 in a fixed
   * order; sumsq_into: *acc += sumsq(x, n), sumsq's order and bits. */
  void (*mean_into)(kern_ctx *k, double *acc, const float *x, size_t n);
  void (*sumsq_into)(kern_ctx *k, double *acc, const float *x, size_t n);
  /* The update's gradient factor, from the gradient's sum of squares
   * *gnorm2 (of the gradient scaled by loss_scale): with gnorm =
   * sqrt(*gnorm2) / loss_scale, *scale = (float)(c / loss_scale) where c =
   * clip / gnorm if clip > 0 and gnorm > clip, else 1; *scale = 0 when
   * *gnorm2 is not finite (fp16 overflow: the update is skipped). In
   * fp64, so that every backend gives the bits of this formula. */
  void (*step_scale)(kern_ctx *k, float *scale, const double *gnorm2, double loss_scale,
                     double clip);
  /* rounds x to the given precision in place */
  void (*round)(kern_ctx *k, float *x, size_t n, kern_prec prec);
  /* dst = src rounded to ctx->prec, as kern_x (the weights' rounded copy) */
  void (*to_x)(kern_ctx *k, kern_x *dst, const float *src, size_t n);

  /* AdamW with decoupled weight decay on one tensor: updates p (fp32 master),
   * m, v and, when plow is not NULL, writes plow = round(p) at ctx->prec */
  void (*adamw)(kern_ctx *k, float *p, kern_x *plow, const float *g, float *m, float *v, size_t n,
                const kern_adamw_args *a);
  /* The same with m, v quantised blockwise to 8 bits: m signed codes with
   * one absmax per KERN_Q8_BLOCK values (qm, sm), v unsigned (qv, sv). */
  void (*adamw8bit)(kern_ctx *k, float *p, kern_x *plow, const float *g, int8_t *qm, uint8_t *qv,
                    float *sm, float *sv, size_t n, const kern_adamw_args *a);
  /* adamw / adamw8bit over every part at once (one launch on a device),
   * each part's result that of the one-tensor op */
  void (*adamw_fused)(kern_ctx *k, float *p, kern_x *plow, const float *g, float *m, float *v,
                      const kern_adamw_parts *parts, const kern_adamw_args *a);
  void (*adamw8bit_fused)(kern_ctx *k, float *p, kern_x *plow, const float *g, int8_t *qm,
                          uint8_t *qv, float *sm, float *sv, const kern_adamw_parts *parts,
                          const kern_adamw_args *a);
};

/* Collectives between the ranks of a data-parallel run on backend memory
 * (trainer/dist.h's operations, its arguments): the CPU twin over host
 * memory (trainer/dp.c), NCCL over device memory (the CUDA module). Each
 * returns 0, or nonzero with error(ctx) saying why. */
typedef struct kern_coll_ops {
  const char *(*error)(void *ctx);
  int (*allreduce_f32)(void *ctx, float *buf, size_t n);
  int (*reduce_scatter_f32)(void *ctx, float *buf, const size_t *off);
  int (*all_gather)(void *ctx, void *buf, const size_t *off);
  int (*broadcast)(void *ctx, void *buf, size_t bytes);
  int (*gather)(void *ctx, const void *mine, void *full, const size_t *off);
  int (*scatter)(void *ctx, const void *full, void *mine, const size_t *off);
  void (*close)(void *ctx); /* NULL: nothing of its own to close */
  /* Gradient buckets overlapped with the backward pass: reduce_start sums
   * the n ranges [r[i][0], r[i][1]) of buf over the ranks, once the work
   * queued so far on the backend is done, and returns at once: an
   * all-reduce, or with off (world + 1 shard bounds, as reduce_scatter_f32)
   * a reduce-scatter of each range's part of every shard. The sums are those
   * of allreduce_f32 / reduce_scatter_f32 over the whole buffer, element for
   * element. reduce_wait returns once every range started is summed (the
   * backend's later work sees the sums); 0, or nonzero with error(ctx). */
  int (*reduce_start)(void *ctx, float *buf, const size_t (*r)[2], int n, const size_t *off);
  int (*reduce_wait)(void *ctx);
} kern_coll_ops;

/* The CPU backend (reference). Sets OpenMP's and OpenBLAS's thread count to
 * threads (<= 0: all cores) and returns 0. */
int kern_cpu_init(kern_ctx *k, kern_prec prec, int threads);
void kern_cpu_close(kern_ctx *k);
/* The CPU kernels' instruction-set level this process runs (kernels/cpu/
 * cpu.c): "v1" (any x86-64), "v3" (AVX2), "v4" (AVX-512), or "native" in
 * a -march=native build; the highest the CPU runs unless
 * SCALESWEEP_CPU_KERNELS names a lower one. Every level computes the same
 * bits. */
const char *kern_cpu_level(void);
/* OpenBLAS's kernels for this CPU ("Haswell", "SkylakeX", ...: its
 * OPENBLAS_CORETYPE when set, else its own choice). */
const char *kern_cpu_blas_core(void);
/* The OpenBLAS kernel set that "reproducible": "portable" runs pin
 * (runcfg.h): "Haswell" (AVX2 and FMA: every x86-64-v3 CPU, Intel's since
 * 2013 and AMD's since 2015), or NULL on a CPU without them. */
const char *kern_cpu_blas_portable_core(void);
/* The CPU twin of the flash ops (the reference for the CUDA kernels; the CPU
 * table keeps flash_attention_* NULL so CPU runs keep attention_forward's bits). */
void kern_cpu_flash_attention_forward(kern_ctx *k, kern_x *out, float *lse, const kern_x *qkv,
                                      int B, int T, int C, int NH);
void kern_cpu_flash_attention_backward(kern_ctx *k, kern_x *dqkv, const kern_x *dout,
                                       const kern_x *out, const kern_x *qkv, const float *lse,
                                       int B, int T, int C, int NH);

/* 8-bit code books used by adamw8bit: value of code q relative to the
 * block's absmax. Signed: q in -127..127; unsigned: q in 0..255. */
float kern_q8_signed_value(int q);
float kern_q8_unsigned_value(int q);

/* Scalar rounding, the reference for the precision emulation. */
float kern_round_bf16(float x);
float kern_round_fp16(float x);

#ifdef __cplusplus
}
#endif

#endif

/* AdamW (decoupled weight decay), fp32 moments or 8-bit blockwise moments.
 * CPU twin: kernels/cpu/adamw.c; the 8-bit code books are the CPU's
 * (kern_q8_signed_value / kern_q8_unsigned_value), copied to constant memory. */
#include <string.h>

#include "kernels/cuda/internal.cuh"

__constant__ float code_m[128]; /* |value| of signed code q, relative to absmax */
__constant__ float code_v[256]; /* value of unsigned code q */

/* The step's constants, one per launch (the parts' weight decays and
 * learning-rate scales aside). */
typedef struct adamw_consts {
  float lr, b1, b2, eps, gs, bc1, bc2; /* bc1, bc2: 1 - beta^step, on the host as on the CPU */
  const float *gsd;                    /* step_scale's factor, or NULL: gs */
} adamw_consts;

/* The part (of parts->n) holding item i of the concatenation of the parts'
 * sizes (elements, or 8-bit blocks when blocks): a scan of at most
 * KERN_ADAMW_MAX_PARTS. */
__device__ __forceinline__ int part_of(const kern_adamw_parts &parts, size_t i, int blocks,
                                       size_t *rel) {
  int j = 0;
  for (;;) {
    size_t n = parts.part[j].n;
    if (blocks)
      n = (n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
    if (i < n || j == parts.n - 1) {
      *rel = i;
      return j;
    }
    i -= n;
    j++;
  }
}

/* One thread per parameter of all the parts; plow (kern_x, X), when given,
 * gets the new parameter rounded. A part's rate is lr * lr_scale, the float
 * product the CPU's adamw_fused forms (the same bits). */
template <typename X>
__global__ void adamw_kernel(float *p, X *plow, const float *g, float *m, float *v,
                             kern_adamw_parts parts, size_t total, adamw_consts c) {
  size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  float gs = c.gs;
  if (c.gsd && (gs = *c.gsd) == 0.0f) /* step_scale skipped this update */
    return;
  if (t >= total)
    return;
  size_t rel;
  int j = part_of(parts, t, 0, &rel);
  size_t i = parts.part[j].off + rel, s = parts.part[j].state + rel;
  float wd = parts.part[j].weight_decay, lr = c.lr * parts.part[j].lr_scale;
  float gi = g[i] * gs;
  float mi = c.b1 * m[s] + (1.0f - c.b1) * gi;
  float vi = c.b2 * v[s] + (1.0f - c.b2) * gi * gi;
  m[s] = mi;
  v[s] = vi;
  float upd = (mi / c.bc1) / (sqrtf(vi / c.bc2) + c.eps);
  float pi = p[i] - lr * (upd + wd * p[i]);
  p[i] = pi;
  if (plow)
    plow[i] = kern__cu_to<X>(pi);
}

/* One block of KERN_Q8_BLOCK threads per quantisation block of all the
 * parts, one element per thread: dequantise, update, then requantise against
 * the block's new absmax (a max: the same whatever the reduction order). */
template <typename X>
__global__ void adamw8bit_kernel(float *p, X *plow, const float *g, int8_t *qm, uint8_t *qv,
                                 float *sm, float *sv, kern_adamw_parts parts, adamw_consts c) {
  __shared__ float sh[32];
  float gs = c.gs;
  if (c.gsd && (gs = *c.gsd) == 0.0f) /* the whole block leaves: step_scale skipped it */
    return;
  /* the code books into shared memory: the threads' look-ups go to
   * different codes, which constant memory would serialise */
  __shared__ float cm[128], cv[256];
  for (int q = threadIdx.x; q < 256; q += blockDim.x) {
    cv[q] = code_v[q];
    if (q < 128)
      cm[q] = code_m[q];
  }
  __syncthreads();
  size_t rel;
  int j = part_of(parts, blockIdx.x, 1, &rel);
  size_t blk = parts.part[j].block + rel, e = rel * KERN_Q8_BLOCK + threadIdx.x;
  size_t i = parts.part[j].off + e, s = parts.part[j].state + e;
  float wd = parts.part[j].weight_decay, lr = c.lr * parts.part[j].lr_scale;
  int live = e < parts.part[j].n;
  float mi = 0.0f, vi = 0.0f;
  if (live) {
    float gi = g[i] * gs;
    int q = qm[s];
    mi = (q < 0 ? -cm[-q] : cm[q]) * sm[blk];
    vi = cv[qv[s]] * sv[blk];
    mi = c.b1 * mi + (1.0f - c.b1) * gi;
    vi = c.b2 * vi + (1.0f - c.b2) * gi * gi;
    float upd = (mi / c.bc1) / (sqrtf(vi / c.bc2) + c.eps);
    float pi = p[i] - lr * (upd + wd * p[i]);
    p[i] = pi;
    if (plow)
      plow[i] = kern__cu_to<X>(pi);
  }
  /* every thread has read sm[blk], sv[blk] before the barriers inside */
  float am = kern__cu_block_reduce(fabsf(mi), sh, 1);
  float av = kern__cu_block_reduce(vi, sh, 1);
  if (live) {
    float im = am > 0.0f ? 1.0f / am : 0.0f, iv = av > 0.0f ? 1.0f / av : 0.0f;
    int q = kern__nearest(cm, 128, fabsf(mi) * im);
    qm[s] = (int8_t)(mi < 0.0f ? -q : q);
    qv[s] = (uint8_t)kern__nearest(cv, 256, vi * iv);
  }
  if (threadIdx.x == 0) {
    sm[blk] = am;
    sv[blk] = av;
  }
}

/* ---- launchers ---- */

static adamw_consts consts_of(const kern_adamw_args *a) {
  adamw_consts c;
  c.lr = a->lr;
  c.b1 = a->beta1;
  c.b2 = a->beta2;
  c.eps = a->eps;
  c.gs = a->grad_scale;
  c.gsd = a->grad_scale_dev;
  c.bc1 = (float)(1.0 - pow(a->beta1, a->step));
  c.bc2 = (float)(1.0 - pow(a->beta2, a->step));
  return c;
}

/* plow is only written (and must only be given) at bf16 and fp16 */
static void adamw_fused(kern_ctx *k, float *p, kern_x *plow, const float *g, float *m, float *v,
                        const kern_adamw_parts *parts, const kern_adamw_args *a) {
  size_t total = 0;
  for (int j = 0; j < parts->n; j++)
    total += parts->part[j].n;
  if (total == 0)
    return;
  KERN__CU_WITH_X(k->prec,
                  adamw_kernel<X><<<kern__cu_grid(total, 256), 256, 0, kern__cu_stream(k)>>>(
                      p, (X *)plow, g, m, v, *parts, total, consts_of(a)));
  KERN__CU_LAUNCHED();
}

static void adamw8bit_fused(kern_ctx *k, float *p, kern_x *plow, const float *g, int8_t *qm,
                            uint8_t *qv, float *sm, float *sv, const kern_adamw_parts *parts,
                            const kern_adamw_args *a) {
  size_t blocks = 0;
  for (int j = 0; j < parts->n; j++)
    blocks += (parts->part[j].n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
  if (blocks == 0)
    return;
  KERN__CU_WITH_X(k->prec,
                  adamw8bit_kernel<X><<<(unsigned)blocks, KERN_Q8_BLOCK, 0, kern__cu_stream(k)>>>(
                      p, (X *)plow, g, qm, qv, sm, sv, *parts, consts_of(a)));
  KERN__CU_LAUNCHED();
}

/* one tensor: one part */
static kern_adamw_parts one_part(size_t n, float weight_decay) {
  kern_adamw_parts parts;
  memset(&parts, 0, sizeof parts);
  parts.n = 1;
  parts.part[0].n = n;
  parts.part[0].weight_decay = weight_decay;
  parts.part[0].lr_scale = 1.0f; /* lr * 1 is lr: the one-tensor op's rate */
  return parts;
}

static void adamw(kern_ctx *k, float *p, kern_x *plow, const float *g, float *m, float *v, size_t n,
                  const kern_adamw_args *a) {
  kern_adamw_parts parts = one_part(n, a->weight_decay);
  adamw_fused(k, p, plow, g, m, v, &parts, a);
}

static void adamw8bit(kern_ctx *k, float *p, kern_x *plow, const float *g, int8_t *qm, uint8_t *qv,
                      float *sm, float *sv, size_t n, const kern_adamw_args *a) {
  kern_adamw_parts parts = one_part(n, a->weight_decay);
  adamw8bit_fused(k, p, plow, g, qm, qv, sm, sv, &parts, a);
}

void kern__cuda_adamw(kern_ops *o) {
  o->adamw = adamw;
  o->adamw8bit = adamw8bit;
  o->adamw_fused = adamw_fused;
  o->adamw8bit_fused = adamw8bit_fused;
}

void kern__cu_adamw_codes(void) {
  float m[128], v[256];
  for (int i = 0; i < 128; i++)
    m[i] = kern_q8_signed_value(i);
  for (int i = 0; i < 256; i++)
    v[i] = kern_q8_unsigned_value(i);
  CUDA_CHECK(cudaMemcpyToSymbol(code_m, m, sizeof m));
  CUDA_CHECK(cudaMemcpyToSymbol(code_v, v, sizeof v));
}

/* AdamW (decoupled weight decay), fp32 moments or 8-bit blockwise moments.
 * CPU twin: kernels/cpu/adamw.c; the 8-bit code books are the CPU's
 * (kern_q8_signed_value / kern_q8_unsigned_value), copied to constant memory. */
#include "kernels/cuda/internal.cuh"

__constant__ float code_m[128]; /* |value| of signed code q, relative to absmax */
__constant__ float code_v[256]; /* value of unsigned code q */

/* bc1, bc2: bias corrections 1 - beta^step, computed on the host as on the CPU */
__global__ void adamw_kernel(float *p, float *plow, const float *g, float *m, float *v, size_t n,
                             float lr, float b1, float b2, float eps, float wd, float gs, float bc1,
                             float bc2, int prec) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float gi = g[i] * gs;
  float mi = b1 * m[i] + (1.0f - b1) * gi;
  float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps);
  float pi = p[i] - lr * (upd + wd * p[i]);
  p[i] = pi;
  if (prec != KERN_FP32)
    plow[i] = kern__cu_rnd(pi, prec);
}

/* the CPU's nearest(): index of the code nearest to x, codes ascending */
__device__ int nearest(const float *code, int ncode, float x) {
  int lo = 0, hi = ncode - 1;
  if (x <= code[0])
    return 0;
  if (x >= code[hi])
    return hi;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (code[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return x - code[lo] <= code[hi] - x ? lo : hi;
}

/* One block of KERN_Q8_BLOCK threads per quantisation block, one element per
 * thread: dequantise, update, then requantise against the block's new
 * absmax (a max: the same whatever the reduction order). */
__global__ void adamw8bit_kernel(float *p, float *plow, const float *g, int8_t *qm, uint8_t *qv,
                                 float *sm, float *sv, size_t n, float lr, float b1, float b2,
                                 float eps, float wd, float gs, float bc1, float bc2, int prec) {
  __shared__ float sh[32];
  size_t blk = blockIdx.x;
  size_t i = blk * KERN_Q8_BLOCK + threadIdx.x;
  int live = i < n;
  float mi = 0.0f, vi = 0.0f;
  if (live) {
    float gi = g[i] * gs;
    int q = qm[i];
    mi = (q < 0 ? -code_m[-q] : code_m[q]) * sm[blk];
    vi = code_v[qv[i]] * sv[blk];
    mi = b1 * mi + (1.0f - b1) * gi;
    vi = b2 * vi + (1.0f - b2) * gi * gi;
    float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    float pi = p[i] - lr * (upd + wd * p[i]);
    p[i] = pi;
    if (plow)
      plow[i] = kern__cu_rnd(pi, prec);
  }
  /* every thread has read sm[blk], sv[blk] before the barriers inside */
  float am = kern__cu_block_reduce(fabsf(mi), sh, 1);
  float av = kern__cu_block_reduce(vi, sh, 1);
  if (live) {
    float im = am > 0.0f ? 1.0f / am : 0.0f, iv = av > 0.0f ? 1.0f / av : 0.0f;
    int q = nearest(code_m, 128, fabsf(mi) * im);
    qm[i] = (int8_t)(mi < 0.0f ? -q : q);
    qv[i] = (uint8_t)nearest(code_v, 256, vi * iv);
  }
  if (threadIdx.x == 0) {
    sm[blk] = am;
    sv[blk] = av;
  }
}

/* ---- launchers ---- */

static void bias_corrections(const kern_adamw_args *a, float *bc1, float *bc2) {
  *bc1 = (float)(1.0 - pow(a->beta1, a->step));
  *bc2 = (float)(1.0 - pow(a->beta2, a->step));
}

/* plow is only written (and must only be given) at bf16 and fp16 */
static void adamw(kern_ctx *k, float *p, float *plow, const float *g, float *m, float *v, size_t n,
                  const kern_adamw_args *a) {
  if (n == 0)
    return;
  float bc1, bc2;
  bias_corrections(a, &bc1, &bc2);
  kern_prec prec = plow ? k->prec : KERN_FP32;
  adamw_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(
      p, plow, g, m, v, n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_scale, bc1,
      bc2, prec);
  KERN__CU_LAUNCHED();
}

static void adamw8bit(kern_ctx *k, float *p, float *plow, const float *g, int8_t *qm, uint8_t *qv,
                      float *sm, float *sv, size_t n, const kern_adamw_args *a) {
  if (n == 0)
    return;
  float bc1, bc2;
  bias_corrections(a, &bc1, &bc2);
  unsigned nblocks = (unsigned)((n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK);
  adamw8bit_kernel<<<nblocks, KERN_Q8_BLOCK, 0, kern__cu_stream(k)>>>(
      p, plow, g, qm, qv, sm, sv, n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
      a->grad_scale, bc1, bc2, k->prec);
  KERN__CU_LAUNCHED();
}

void kern__cuda_adamw(kern_ops *o) {
  o->adamw = adamw;
  o->adamw8bit = adamw8bit;
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

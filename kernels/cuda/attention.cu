/* Causal multi-head self-attention, llm.c's way: q, k, v are permuted into
 * (B, NH, T, hs) in scratch, the products are strided-batched GEMMs over the
 * B*NH heads (full T x T score matrices; the masked part is then zeroed), the
 * masked softmax is a kernel with one warp per row. CPU twin:
 * kernels/cpu/attention.c (same layout, same rounding points).
 *
 * Layout: qkv row (b, t) is [q | k | v], each C = NH * hs wide; head h of q
 * starts at column h*hs, of k at C + h*hs, of v at 2C + h*hs. */
#include "kernels/cuda/internal.cuh"

#define WARPS 8 /* rows per block of the softmax kernels */

/* Where element i of a (B, NH, T, hs) array stands in a (B, T, ld) one:
 * i = ((b*NH + h)*T + t)*hs + e is column off + h*hs + e of row b*T + t. */
__device__ __forceinline__ size_t bt_index(size_t i, int T, int NH, int hs, int ld, int off) {
  int e = (int)(i % hs);
  int t = (int)((i / hs) % T);
  int h = (int)((i / ((size_t)hs * T)) % NH);
  int b = (int)(i / ((size_t)hs * T * NH));
  return ((size_t)b * T + t) * ld + off + h * hs + e;
}

/* dst[bh, t, i] = src[(b*T + t)*ld + off + h*hs + i], one thread per element
 * of dst (B, NH, T, hs); both kern_x (X, the GEMM type) */
template <typename X>
__global__ void permute_kernel(X *dst, const X *src, int B, int T, int NH, int hs, int ld,
                               int off) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)B * NH * T * hs)
    dst[i] = src[bt_index(i, T, NH, hs, ld, off)];
}

/* the inverse, from an fp32 product, rounded to X:
 * dst[(b*T + t)*ld + off + h*hs + i] = round(src[bh, t, i]) */
template <typename X>
__global__ void unpermute_kernel(X *dst, const float *src, int B, int T, int NH, int hs, int ld,
                                 int off) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)B * NH * T * hs)
    dst[bt_index(i, T, NH, hs, ld, off)] = kern__cu_to<X>(src[i]);
}

/* Row (bh, t) of the scaled scores in place -> round(softmax over keys
 * 0..t), zeros above the diagonal. One warp per row; lane l owns columns
 * l, l + 32, ... (it reads back only what it wrote). */
__global__ void softmax_forward_kernel(float *att, int rows, int T, int p) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  int t = row % T;
  float *x = att + (size_t)row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32)
    mx = fmaxf(mx, x[j]);
  mx = kern__cu_warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    float e = kern__expf(x[j] - mx);
    x[j] = e;
    sum += e;
  }
  float inv = 1.0f / kern__cu_warp_sum(sum);
  for (int j = lane; j < T; j += 32)
    x[j] = j <= t ? kern__cu_rnd(x[j] * inv, p) : 0.0f;
}

/* softmax backward on the causal part, in place on datt (holding dA):
 * dS = round(A * (dA - sum_j A dA) * sc); the masked part has no gradient */
__global__ void softmax_backward_kernel(float *datt, const float *att, int rows, int T, float sc,
                                        int p) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  int t = row % T;
  const float *a = att + (size_t)row * T;
  float *d = datt + (size_t)row * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32)
    dot += a[j] * d[j];
  dot = kern__cu_warp_sum(dot);
  for (int j = lane; j < T; j += 32)
    d[j] = j <= t ? kern__cu_rnd(a[j] * (d[j] - dot) * sc, p) : 0.0f;
}

/* ---- launchers ---- */

static void permute(kern_ctx *k, void *dst, const kern_x *src, int B, int T, int NH, int hs, int ld,
                    int off) {
  size_t n = (size_t)B * NH * T * hs;
  unsigned g = kern__cu_grid(n, 256);
  cudaStream_t st = kern__cu_stream(k);
  KERN__CU_WITH_X(k->prec, permute_kernel<X>
                  <<<g, 256, 0, st>>>((X *)dst, (const X *)src, B, T, NH, hs, ld, off));
  KERN__CU_LAUNCHED();
}

static void unpermute(kern_ctx *k, kern_x *dst, const float *src, int B, int T, int NH, int hs,
                      int ld, int off) {
  size_t n = (size_t)B * NH * T * hs;
  KERN__CU_WITH_X(k->prec, unpermute_kernel<X>
                  <<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>((X *)dst, src, B, T, NH,
                                                                          hs, ld, off));
  KERN__CU_LAUNCHED();
}

/* One attention call's sizes and its scratch (kern__cu_scratch), laid out
 * the same way by the forward and the backward: nx matrices (BH, T, hs) at
 * the GEMM type (Q, K, V, and dY for the backward), then a copy of one
 * (BH, T, T) matrix at the GEMM type (none at fp32, where the GEMMs read the
 * fp32 one), then nf fp32 matrices (BH, T, hs) for the outputs. */
typedef struct {
  int hs, BH;        /* head size, heads over the batch */
  float sc;          /* the score scale 1/sqrt(hs) */
  cudaDataType_t ty; /* the GEMM type */
  size_t TT;         /* elements of the (BH, T, T) matrices */
  long long sX, sT;  /* a head's stride in (BH, T, hs) and (BH, T, T) */
  void *x[4];        /* (BH, T, hs) at the GEMM type: q, k, v, dy */
  char *alow;        /* (BH, T, T) at the GEMM type */
  float *f[3];       /* (BH, T, hs) fp32 */
} att_scratch;

/* Carves the scratch for nx GEMM-type and nf fp32 (BH, T, hs) matrices and
 * permutes Q, K and V out of qkv (B, T, 3C) into x[0..2]. */
static att_scratch att_setup(kern_ctx *k, const kern_x *qkv, int B, int T, int C, int NH, int nx,
                             int nf) {
  kern_prec p = k->prec;
  att_scratch a = {.hs = C / NH, .BH = B * NH, .ty = kern__cu_gemm_type(p)};
  a.sc = 1.0f / sqrtf((float)a.hs);
  size_t X = (size_t)a.BH * T * a.hs, e = kern__cu_gemm_elt(p);
  a.TT = (size_t)a.BH * T * T;
  a.sX = (long long)T * a.hs;
  a.sT = (long long)T * T;
  size_t x_b = kern__cu_al(X * e), a_b = p == KERN_FP32 ? 0 : kern__cu_al(a.TT * e);
  size_t f_b = kern__cu_al(X * sizeof(float));
  char *s = (char *)kern__cu_scratch(k, nx * x_b + a_b + nf * f_b);
  for (int i = 0; i < nx; i++)
    a.x[i] = s + i * x_b;
  a.alow = s + nx * x_b;
  for (int i = 0; i < nf; i++)
    a.f[i] = (float *)(a.alow + a_b + i * f_b);
  for (int i = 0; i < 3; i++) /* q at column 0, k at C, v at 2C */
    permute(k, a.x[i], qkv, B, T, NH, a.hs, 3 * C, i * C);
  return a;
}

static void attention_forward(kern_ctx *k, kern_x *out, float *att, const kern_x *qkv, int B, int T,
                              int C, int NH) {
  if (B == 0 || T == 0)
    return;
  kern_prec p = k->prec;
  att_scratch a = att_setup(k, qkv, B, T, C, NH, 3, 1);
  int hs = a.hs, BH = a.BH;
  void *q = a.x[0], *kk = a.x[1], *v = a.x[2];
  float *y = a.f[0];
  /* scores (T,T) = sc * Q (T,hs) K^T, per head */
  kern__cu_gemm(k, 0, 1, T, T, hs, a.sc, q, hs, a.sX, kk, hs, a.sX, 0.0f, att, T, a.sT, BH, a.ty,
                CUDA_R_32F);
  softmax_forward_kernel<<<kern__cu_grid((size_t)BH * T, WARPS), WARPS * 32, 0,
                           kern__cu_stream(k)>>>(att, BH * T, T, p);
  KERN__CU_LAUNCHED();
  /* y (T,hs) = A (T,T) V (T,hs), per head */
  const void *A = kern__cu_lowp(k, att, a.TT, a.alow, p);
  kern__cu_gemm(k, 0, 0, T, hs, T, 1.0f, A, T, a.sT, v, hs, a.sX, 0.0f, y, hs, a.sX, BH, a.ty,
                CUDA_R_32F);
  unpermute(k, out, y, B, T, NH, hs, C, 0);
}

static void attention_backward(kern_ctx *k, kern_x *dqkv, float *datt, const kern_x *dout,
                               const kern_x *qkv, const float *att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0)
    return;
  kern_prec p = k->prec;
  /* alow holds A, then dS, at the GEMM type */
  att_scratch a = att_setup(k, qkv, B, T, C, NH, 4, 3);
  int hs = a.hs, BH = a.BH;
  long long sX = a.sX, sT = a.sT;
  void *q = a.x[0], *kk = a.x[1], *v = a.x[2], *dy = a.x[3];
  float *dq = a.f[0], *dk = a.f[1], *dv = a.f[2];
  permute(k, dy, dout, B, T, NH, hs, C, 0);
  /* dA (T,T) = dY V^T */
  kern__cu_gemm(k, 0, 1, T, T, hs, 1.0f, dy, hs, sX, v, hs, sX, 0.0f, datt, T, sT, BH, a.ty,
                CUDA_R_32F);
  /* dV (T,hs) = A^T dY */
  const void *A = kern__cu_lowp(k, att, a.TT, a.alow, p);
  kern__cu_gemm(k, 1, 0, T, hs, T, 1.0f, A, T, sT, dy, hs, sX, 0.0f, dv, hs, sX, BH, a.ty,
                CUDA_R_32F);
  softmax_backward_kernel<<<kern__cu_grid((size_t)BH * T, WARPS), WARPS * 32, 0,
                            kern__cu_stream(k)>>>(datt, att, BH * T, T, a.sc, p);
  KERN__CU_LAUNCHED();
  /* dQ (T,hs) = dS K; dK (T,hs) = dS^T Q (dS overwrites A's low copy: the
   * dV product before it on the stream has read it) */
  const void *dS = kern__cu_lowp(k, datt, a.TT, a.alow, p);
  kern__cu_gemm(k, 0, 0, T, hs, T, 1.0f, dS, T, sT, kk, hs, sX, 0.0f, dq, hs, sX, BH, a.ty,
                CUDA_R_32F);
  kern__cu_gemm(k, 1, 0, T, hs, T, 1.0f, dS, T, sT, q, hs, sX, 0.0f, dk, hs, sX, BH, a.ty,
                CUDA_R_32F);
  for (int i = 0; i < 3; i++) /* dq, dk, dv to columns 0, C, 2C */
    unpermute(k, dqkv, a.f[i], B, T, NH, hs, 3 * C, i * C);
}

void kern__cuda_attention(kern_ops *o) {
  o->attention_forward = attention_forward;
  o->attention_backward = attention_backward;
}

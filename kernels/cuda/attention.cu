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

template <typename E> __device__ __forceinline__ E from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

/* dst[bh, t, i] = src[(b*T + t)*ld + off + h*hs + i], one thread per element
 * of dst (B, NH, T, hs); converted to E (exact: the values are already
 * rounded to the run's precision) */
template <typename E>
__global__ void permute_kernel(E *dst, const float *src, int B, int T, int NH, int hs, int ld,
                               int off) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * NH * T * hs)
    return;
  int e = (int)(i % hs);
  int t = (int)((i / hs) % T);
  int h = (int)((i / ((size_t)hs * T)) % NH);
  int b = (int)(i / ((size_t)hs * T * NH));
  dst[i] = from_float<E>(src[((size_t)b * T + t) * ld + off + h * hs + e]);
}

/* the inverse, with rounding: dst[(b*T + t)*ld + off + h*hs + i] =
 * round(src[bh, t, i]) */
__global__ void unpermute_kernel(float *dst, const float *src, int B, int T, int NH, int hs, int ld,
                                 int off, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * NH * T * hs)
    return;
  int e = (int)(i % hs);
  int t = (int)((i / hs) % T);
  int h = (int)((i / ((size_t)hs * T)) % NH);
  int b = (int)(i / ((size_t)hs * T * NH));
  dst[((size_t)b * T + t) * ld + off + h * hs + e] = kern__cu_rnd(src[i], p);
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
    float e = kern__cu_expf(x[j] - mx);
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

static void permute(kern_ctx *k, void *dst, const float *src, int B, int T, int NH, int hs, int ld,
                    int off) {
  size_t n = (size_t)B * NH * T * hs;
  unsigned g = kern__cu_grid(n, 256);
  cudaStream_t st = kern__cu_stream(k);
  if (k->prec == KERN_BF16)
    permute_kernel<__nv_bfloat16>
        <<<g, 256, 0, st>>>((__nv_bfloat16 *)dst, src, B, T, NH, hs, ld, off);
  else if (k->prec == KERN_FP16)
    permute_kernel<__half><<<g, 256, 0, st>>>((__half *)dst, src, B, T, NH, hs, ld, off);
  else
    permute_kernel<float><<<g, 256, 0, st>>>((float *)dst, src, B, T, NH, hs, ld, off);
  KERN__CU_LAUNCHED();
}

static void unpermute(kern_ctx *k, float *dst, const float *src, int B, int T, int NH, int hs,
                      int ld, int off) {
  size_t n = (size_t)B * NH * T * hs;
  unpermute_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(dst, src, B, T, NH, hs,
                                                                          ld, off, k->prec);
  KERN__CU_LAUNCHED();
}

static void attention_forward(kern_ctx *k, float *out, float *att, const float *qkv, int B, int T,
                              int C, int NH) {
  if (B == 0 || T == 0)
    return;
  kern_prec p = k->prec;
  cudaDataType_t ty = kern__cu_gemm_type(p);
  int hs = C / NH, BH = B * NH;
  float sc = 1.0f / sqrtf((float)hs);
  size_t e = kern__cu_gemm_elt(p);
  size_t X = (size_t)BH * T * hs, TT = (size_t)BH * T * T;
  size_t x_b = kern__cu_al(X * e), a_b = p == KERN_FP32 ? 0 : kern__cu_al(TT * e);
  char *s = (char *)kern__cu_scratch(k, 3 * x_b + a_b + kern__cu_al(X * sizeof(float)));
  void *q = s, *kk = s + x_b, *v = s + 2 * x_b;
  char *alow = s + 3 * x_b;
  float *y = (float *)(alow + a_b);
  permute(k, q, qkv, B, T, NH, hs, 3 * C, 0);
  permute(k, kk, qkv, B, T, NH, hs, 3 * C, C);
  permute(k, v, qkv, B, T, NH, hs, 3 * C, 2 * C);
  long long sX = (long long)T * hs, sT = (long long)T * T;
  /* scores (T,T) = sc * Q (T,hs) K^T, per head */
  kern__cu_gemm(k, 0, 1, T, T, hs, sc, q, hs, sX, kk, hs, sX, 0.0f, att, T, sT, BH, ty);
  softmax_forward_kernel<<<kern__cu_grid((size_t)BH * T, WARPS), WARPS * 32, 0,
                           kern__cu_stream(k)>>>(att, BH * T, T, p);
  KERN__CU_LAUNCHED();
  /* y (T,hs) = A (T,T) V (T,hs), per head */
  const void *A = kern__cu_lowp(k, att, TT, alow, p);
  kern__cu_gemm(k, 0, 0, T, hs, T, 1.0f, A, T, sT, v, hs, sX, 0.0f, y, hs, sX, BH, ty);
  unpermute(k, out, y, B, T, NH, hs, C, 0);
}

static void attention_backward(kern_ctx *k, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0)
    return;
  kern_prec p = k->prec;
  cudaDataType_t ty = kern__cu_gemm_type(p);
  int hs = C / NH, BH = B * NH;
  float sc = 1.0f / sqrtf((float)hs);
  size_t e = kern__cu_gemm_elt(p);
  size_t X = (size_t)BH * T * hs, TT = (size_t)BH * T * T;
  size_t x_b = kern__cu_al(X * e), a_b = p == KERN_FP32 ? 0 : kern__cu_al(TT * e);
  size_t f_b = kern__cu_al(X * sizeof(float));
  char *s = (char *)kern__cu_scratch(k, 4 * x_b + a_b + 3 * f_b);
  void *q = s, *kk = s + x_b, *v = s + 2 * x_b, *dy = s + 3 * x_b;
  char *alow = s + 4 * x_b; /* A, then dS, at the GEMM type */
  float *dq = (float *)(alow + a_b), *dk = (float *)(alow + a_b + f_b);
  float *dv = (float *)(alow + a_b + 2 * f_b);
  permute(k, q, qkv, B, T, NH, hs, 3 * C, 0);
  permute(k, kk, qkv, B, T, NH, hs, 3 * C, C);
  permute(k, v, qkv, B, T, NH, hs, 3 * C, 2 * C);
  permute(k, dy, dout, B, T, NH, hs, C, 0);
  long long sX = (long long)T * hs, sT = (long long)T * T;
  /* dA (T,T) = dY V^T */
  kern__cu_gemm(k, 0, 1, T, T, hs, 1.0f, dy, hs, sX, v, hs, sX, 0.0f, datt, T, sT, BH, ty);
  /* dV (T,hs) = A^T dY */
  const void *A = kern__cu_lowp(k, att, TT, alow, p);
  kern__cu_gemm(k, 1, 0, T, hs, T, 1.0f, A, T, sT, dy, hs, sX, 0.0f, dv, hs, sX, BH, ty);
  softmax_backward_kernel<<<kern__cu_grid((size_t)BH * T, WARPS), WARPS * 32, 0,
                            kern__cu_stream(k)>>>(datt, att, BH * T, T, sc, p);
  KERN__CU_LAUNCHED();
  /* dQ (T,hs) = dS K; dK (T,hs) = dS^T Q (dS overwrites A's low copy: the
   * dV product before it on the stream has read it) */
  const void *dS = kern__cu_lowp(k, datt, TT, alow, p);
  kern__cu_gemm(k, 0, 0, T, hs, T, 1.0f, dS, T, sT, kk, hs, sX, 0.0f, dq, hs, sX, BH, ty);
  kern__cu_gemm(k, 1, 0, T, hs, T, 1.0f, dS, T, sT, q, hs, sX, 0.0f, dk, hs, sX, BH, ty);
  unpermute(k, dqkv, dq, B, T, NH, hs, 3 * C, 0);
  unpermute(k, dqkv, dk, B, T, NH, hs, 3 * C, C);
  unpermute(k, dqkv, dv, B, T, NH, hs, 3 * C, 2 * C);
}

void kern__cuda_attention(kern_ops *o) {
  o->attention_forward = attention_forward;
  o->attention_backward = attention_backward;
}

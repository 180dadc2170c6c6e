/* Fused softmax + cross-entropy (+ its gradient, in place). CPU twin:
 * kernels/cpu/xent.c. */
#include "kernels/cuda/internal.cuh"

#define THREADS 512

/* A running (max, sum of exp(z - max)) pair: the online softmax's state. */
struct maxsum {
  float m, s;
};

__device__ __forceinline__ maxsum add_one(maxsum a, float z) {
  if (z == -INFINITY) /* exp(-inf) = 0 adds nothing (and -inf - -inf is NaN) */
    return a;
  if (z > a.m) {
    a.s = a.s * kern__expf(a.m - z) + 1.0f;
    a.m = z;
  } else {
    a.s += kern__expf(z - a.m);
  }
  return a;
}

__device__ __forceinline__ maxsum combine(maxsum a, maxsum b) {
  if (a.m == -INFINITY)
    return b;
  if (b.m == -INFINITY)
    return a;
  float m = fmaxf(a.m, b.m);
  return maxsum{m, a.s * kern__expf(a.m - m) + b.s * kern__expf(b.m - m)};
}

/* the pairs of all threads by a fixed tree (warp butterfly, then warp 0
 * over the warps): every thread gets the result */
__device__ maxsum block_maxsum(maxsum v, maxsum *sh) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v,
                maxsum{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  if (lane == 0)
    sh[warp] = v;
  __syncthreads();
  maxsum r = lane < nwarps ? sh[lane] : maxsum{-INFINITY, 0.0f};
  for (int o = 16; o > 0; o >>= 1)
    r = combine(r,
                maxsum{__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o)});
  __syncthreads();
  return r;
}

/* One block per row of logits (kern_x, X), two passes over the row: the
 * online softmax (max and sum in one read; 128-bit loads when the row
 * allows), then the gradient written in place, rounded to X. The sums are
 * the CPU's up to summation order and the rescaling of the online form
 * (fp32 rounding). z[target] is read by every thread before any thread
 * overwrites the row. */
template <typename X>
__global__ void softmax_xent_kernel(float *losses, X *logits, const int32_t *targets, int V,
                                    float dscale) {
  __shared__ maxsum sh[32];
  int r = blockIdx.x;
  X *z = logits + (size_t)r * V;
  int tgt = targets[r];
  float zt = kern__cu_f(z[tgt]);
  maxsum acc = {-INFINITY, 0.0f};
  constexpr int W = KERN__CU_VEC(X);
  if (V % W == 0 && ((uintptr_t)z % 16) == 0) {
    for (int v = threadIdx.x; v < V / W; v += THREADS) {
      float q[W];
      kern__cu_load<W>(q, z + W * (size_t)v);
#pragma unroll
      for (int j = 0; j < W; j++)
        acc = add_one(acc, q[j]);
    }
  } else {
    for (int v = threadIdx.x; v < V; v += THREADS)
      acc = add_one(acc, kern__cu_f(z[v]));
  }
  maxsum t = block_maxsum(acc, sh); /* ends with a barrier: all reads done */
  float mx = t.m, sum = t.s;
  if (threadIdx.x == 0)
    losses[r] = logf(sum) - (zt - mx); /* -log p_t = log(sum) - (z_t - max) */
  if (dscale != 0.0f) {
    float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < V; v += THREADS)
      z[v] = kern__cu_to<X>(
          (kern__expf(kern__cu_f(z[v]) - mx) * inv - (v == tgt ? 1.0f : 0.0f)) * dscale);
  }
}

static void softmax_xent(kern_ctx *k, float *losses, kern_x *logits, const int32_t *targets, int N,
                         int V, float dscale) {
  if (N == 0)
    return;
  KERN__CU_WITH_X(k->prec, softmax_xent_kernel<X><<<(unsigned)N, THREADS, 0, kern__cu_stream(k)>>>(
                               losses, (X *)logits, targets, V, dscale));
  KERN__CU_LAUNCHED();
}

void kern__cuda_xent(kern_ops *o) { o->softmax_xent = softmax_xent; }

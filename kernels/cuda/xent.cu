/* Fused softmax + cross-entropy (+ its gradient, in place). CPU twin:
 * kernels/cpu/xent.c. */
#include "kernels/cuda/internal.cuh"

#define THREADS 512

/* One block per row of logits. Thread i owns columns i, i + THREADS, ...;
 * max and sum are block reductions with a fixed tree. z[target] is read by
 * every thread before any thread overwrites the row. */
__global__ void softmax_xent_kernel(float *losses, float *logits, const int32_t *targets, int V,
                                    float dscale, int p) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  float *z = logits + (size_t)r * V;
  int tgt = targets[r];
  float zt = z[tgt];
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += THREADS)
    mx = fmaxf(mx, z[v]);
  mx = kern__cu_block_reduce(mx, sh, 1);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += THREADS)
    sum += kern__cu_expf(z[v] - mx);
  sum = kern__cu_block_reduce(sum, sh, 0); /* ends with a barrier: all reads done */
  if (threadIdx.x == 0)
    losses[r] = logf(sum) - (zt - mx); /* -log p_t = log(sum) - (z_t - max) */
  if (dscale != 0.0f) {
    float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < V; v += THREADS)
      z[v] = kern__cu_rnd((kern__cu_expf(z[v] - mx) * inv - (v == tgt ? 1.0f : 0.0f)) * dscale, p);
  }
}

static void softmax_xent(kern_ctx *k, float *losses, float *logits, const int32_t *targets, int N,
                         int V, float dscale) {
  if (N == 0)
    return;
  softmax_xent_kernel<<<(unsigned)N, THREADS, 0, kern__cu_stream(k)>>>(losses, logits, targets, V,
                                                                       dscale, k->prec);
  KERN__CU_LAUNCHED();
}

void kern__cuda_xent(kern_ops *o) { o->softmax_xent = softmax_xent; }

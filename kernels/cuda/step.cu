/* The step's scalars on the device: the loss and the gradient's sums of
 * squares accumulate into doubles in device memory and the update's factor
 * (clip and loss scale, or skip) is decided there, so a training step reads
 * the device once (kern.h: mean_into, sumsq_into, step_scale). CPU twins:
 * kernels/cpu/elementwise.c. Also sumsq and accumulate, which return the
 * sum to the host (a synchronising read), on the same sums. */
#include "kernels/cuda/internal.cuh"
#include "kernels/layer_ops.h"
#include "kernels/step_scale.h"

#define THREADS 256

__device__ __forceinline__ double block_sum_f64(double *sh, double v) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int h = THREADS / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h)
      sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  return sh[0];
}

/* Sums in fp64 over a fixed grid of KERN__CU_SUMSQ_BLOCKS blocks of 256
 * threads whatever n (so the summation order is fixed): thread (blk, t)
 * sums elements blk*256 + t + j*grid*256 in order of j, the block adds its
 * 256 sums by a fixed tree into part[blk]; one block then adds the parts.
 * part[block] = the block's share of sum x (square = 0) or of sum x^2 */
__global__ void sum_part_kernel(double *part, const float *x, size_t n, int square) {
  __shared__ double sh[THREADS];
  size_t stride = (size_t)gridDim.x * THREADS;
  double s = 0.0;
  for (size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride)
    s += square ? (double)x[i] * (double)x[i] : (double)x[i];
  s = block_sum_f64(sh, s);
  if (threadIdx.x == 0)
    part[blockIdx.x] = s;
}

/* one block: *acc += (the parts' sum) / div */
__global__ void sum_into_kernel(double *acc, const double *part, int nparts, double div) {
  __shared__ double sh[THREADS];
  double s = 0.0;
  for (int i = threadIdx.x; i < nparts; i += THREADS)
    s += part[i];
  s = block_sum_f64(sh, s);
  if (threadIdx.x == 0)
    *acc += s / div;
}

__global__ void step_scale_kernel(float *scale, const double *gnorm2, double loss_scale,
                                  double clip) {
  *scale = kern__step_scale(*gnorm2, loss_scale, clip);
}

static void sum_into(kern_ctx *k, double *acc, const float *x, size_t n, int square, double div) {
  kern__cu *c = kern__cu_of(k);
  if (n == 0)
    return;
  sum_part_kernel<<<KERN__CU_SUMSQ_BLOCKS, THREADS, 0, c->stream>>>(c->sumsq_part, x, n, square);
  KERN__CU_LAUNCHED();
  sum_into_kernel<<<1, THREADS, 0, c->stream>>>(acc, c->sumsq_part, KERN__CU_SUMSQ_BLOCKS, div);
  KERN__CU_LAUNCHED();
}

static void mean_into(kern_ctx *k, double *acc, const float *x, size_t n) {
  sum_into(k, acc, x, n, 0, (double)n);
}

static void sumsq_into(kern_ctx *k, double *acc, const float *x, size_t n) {
  sum_into(k, acc, x, n, 1, 1.0);
}

/* waits for the stream: the sum is returned to the host */
static double sumsq(kern_ctx *k, const float *x, size_t n) {
  kern__cu *c = kern__cu_of(k);
  if (n == 0)
    return 0.0;
  CUDA_CHECK(cudaMemsetAsync(c->sumsq_part + KERN__CU_SUMSQ_BLOCKS, 0, sizeof(double), c->stream));
  sumsq_into(k, c->sumsq_part + KERN__CU_SUMSQ_BLOCKS, x, n);
  CUDA_CHECK(cudaMemcpyAsync(c->sumsq_host, c->sumsq_part + KERN__CU_SUMSQ_BLOCKS, sizeof(double),
                             cudaMemcpyDeviceToHost, c->stream));
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return *c->sumsq_host;
}

static double accumulate(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return 0.0;
  k->ops->axpy(k, dst, src, s, n, init);
  return sumsq(k, src, n);
}

static void step_scale(kern_ctx *k, float *scale, const double *gnorm2, double loss_scale,
                       double clip) {
  step_scale_kernel<<<1, 1, 0, kern__cu_stream(k)>>>(scale, gnorm2, loss_scale, clip);
  KERN__CU_LAUNCHED();
}

void kern__cuda_step(kern_ops *o) { KERN__OPS_STEP(KERN__FILL) }

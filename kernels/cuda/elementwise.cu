/* Element-wise kernels: GELU, scaling, rounding, accumulation, sums of
 * squares. CPU twins: kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = inp[i];
  float u = GELU_S * (x + GELU_C * x * x * x);
  out[i] = kern__cu_rnd(0.5f * x * (1.0f + kern__cu_tanhf(u)), p);
}

/* dinp may alias dout: each thread reads its element before writing it */
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n,
                                     int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = inp[i];
  float u = GELU_S * (x + GELU_C * x * x * x);
  float th = kern__cu_tanhf(u);
  float du = GELU_S * (1.0f + 3.0f * GELU_C * x * x);
  float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
  dinp[i] = kern__cu_rnd(grad * dout[i], p);
}

__global__ void round_kernel(float *x, size_t n, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = kern__cu_rnd(x[i], p);
}

__global__ void scale_kernel(float *x, float s, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= s;
}

__global__ void accumulate_kernel(float *dst, const float *src, float s, size_t n, int init) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  dst[i] = init ? src[i] * s : dst[i] + src[i] * s;
}

/* Sum of squares in fp64 over a fixed grid of KERN__CU_SUMSQ_BLOCKS blocks
 * of 256 threads whatever n (so the summation order is fixed): thread
 * (blk, t) sums elements blk*256 + t + j*grid*256 in order of j, the block
 * adds its 256 sums by a fixed tree into part[blk]. */
#define SUMSQ_THREADS 256

/* The sum of the SUMSQ_THREADS threads' s by a fixed tree in shared memory
 * (sh, SUMSQ_THREADS wide); meaningful in thread 0 only. */
__device__ double block_sum(double *sh, double s) {
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int h = SUMSQ_THREADS / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h)
      sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  return sh[0];
}

__global__ void sumsq_part_kernel(double *part, const float *x, size_t n) {
  __shared__ double sh[SUMSQ_THREADS];
  size_t stride = (size_t)gridDim.x * SUMSQ_THREADS;
  double s = 0.0;
  for (size_t i = (size_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n; i += stride)
    s += (double)x[i] * (double)x[i];
  s = block_sum(sh, s);
  if (threadIdx.x == 0)
    part[blockIdx.x] = s;
}

/* one block: thread t adds parts t, t + 256, ... in order, then the tree;
 * the total goes to part[nparts] */
__global__ void sumsq_final_kernel(double *part, int nparts) {
  __shared__ double sh[SUMSQ_THREADS];
  double s = 0.0;
  for (int i = threadIdx.x; i < nparts; i += SUMSQ_THREADS)
    s += part[i];
  s = block_sum(sh, s);
  if (threadIdx.x == 0)
    part[nparts] = s;
}

/* ---- launchers ---- */

static void gelu_forward(kern_ctx *k, float *out, const float *inp, size_t n) {
  if (n == 0)
    return;
  gelu_forward_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(out, inp, n, k->prec);
  KERN__CU_LAUNCHED();
}

static void gelu_backward(kern_ctx *k, float *dinp, const float *inp, const float *dout, size_t n) {
  if (n == 0)
    return;
  gelu_backward_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(dinp, inp, dout, n,
                                                                              k->prec);
  KERN__CU_LAUNCHED();
}

void kern__cu_round(kern_ctx *k, float *x, size_t n, kern_prec p) {
  if (p == KERN_FP32 || n == 0)
    return;
  round_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(x, n, p);
  KERN__CU_LAUNCHED();
}

static void round_(kern_ctx *k, float *x, size_t n, kern_prec p) { kern__cu_round(k, x, n, p); }

static void scale(kern_ctx *k, float *x, float s, size_t n) {
  if (n == 0)
    return;
  scale_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(x, s, n);
  KERN__CU_LAUNCHED();
}

/* waits for the stream: the sum is returned to the host */
static double sumsq(kern_ctx *k, const float *x, size_t n) {
  kern__cu *c = kern__cu_of(k);
  if (n == 0)
    return 0.0;
  sumsq_part_kernel<<<KERN__CU_SUMSQ_BLOCKS, SUMSQ_THREADS, 0, c->stream>>>(c->sumsq_part, x, n);
  KERN__CU_LAUNCHED();
  sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, c->stream>>>(c->sumsq_part, KERN__CU_SUMSQ_BLOCKS);
  KERN__CU_LAUNCHED();
  CUDA_CHECK(cudaMemcpyAsync(c->sumsq_host, c->sumsq_part + KERN__CU_SUMSQ_BLOCKS, sizeof(double),
                             cudaMemcpyDeviceToHost, c->stream));
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return *c->sumsq_host;
}

static void axpy(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return;
  accumulate_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(dst, src, s, n, init);
  KERN__CU_LAUNCHED();
}

static double accumulate(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return 0.0;
  axpy(k, dst, src, s, n, init);
  return sumsq(k, src, n);
}

void kern__cuda_elementwise(kern_ops *o) {
  o->gelu_forward = gelu_forward;
  o->gelu_backward = gelu_backward;
  o->sumsq = sumsq;
  o->accumulate = accumulate;
  o->axpy = axpy;
  o->scale = scale;
  o->round = round_;
}

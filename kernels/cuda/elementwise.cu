/* Element-wise kernels: GELU, scaling, rounding, accumulation (the sums
 * of squares are in step.cu). CPU twins: kernels/cpu/elementwise.c. */
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

static void axpy(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return;
  accumulate_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(dst, src, s, n, init);
  KERN__CU_LAUNCHED();
}

void kern__cuda_elementwise(kern_ops *o) {
  o->gelu_forward = gelu_forward;
  o->gelu_backward = gelu_backward;
  o->axpy = axpy;
  o->scale = scale;
  o->round = round_;
}

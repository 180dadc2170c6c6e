/* Element-wise kernels: GELU, scaling, rounding, accumulation (the sums
 * of squares are in step.cu). CPU twins: kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* The element-wise kernels take VEC consecutive elements per thread: VEC 4
 * with one 128-bit access per array (the launcher checks that every
 * pointer is 16-byte aligned and n % 4 == 0), VEC 1 otherwise
 * (kern__cu_load / kern__cu_store). Each element's arithmetic is the same
 * either way, so are the bits. */

/* first element of this thread's VEC */
template <int VEC> __device__ __forceinline__ size_t first(void) {
  return ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
}

template <int VEC>
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n, int p) {
  size_t i = first<VEC>();
  if (i >= n)
    return;
  float x[VEC], y[VEC];
  kern__cu_load<VEC>(x, inp + i);
  for (int j = 0; j < VEC; j++) {
    float u = GELU_S * (x[j] + GELU_C * x[j] * x[j] * x[j]);
    y[j] = kern__cu_rnd(0.5f * x[j] * (1.0f + kern__cu_tanhf(u)), p);
  }
  kern__cu_store<VEC>(out + i, y);
}

/* dinp may alias dout: each thread reads its elements before writing them */
template <int VEC>
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n,
                                     int p) {
  size_t i = first<VEC>();
  if (i >= n)
    return;
  float x[VEC], dy[VEC], dx[VEC];
  kern__cu_load<VEC>(x, inp + i);
  kern__cu_load<VEC>(dy, dout + i);
  for (int j = 0; j < VEC; j++) {
    float u = GELU_S * (x[j] + GELU_C * x[j] * x[j] * x[j]);
    float th = kern__cu_tanhf(u);
    float du = GELU_S * (1.0f + 3.0f * GELU_C * x[j] * x[j]);
    float grad = 0.5f * (1.0f + th) + 0.5f * x[j] * (1.0f - th * th) * du;
    dx[j] = kern__cu_rnd(grad * dy[j], p);
  }
  kern__cu_store<VEC>(dinp + i, dx);
}

template <int VEC> __global__ void round_kernel(float *x, size_t n, int p) {
  size_t i = first<VEC>();
  if (i >= n)
    return;
  float v[VEC];
  kern__cu_load<VEC>(v, x + i);
  for (int j = 0; j < VEC; j++)
    v[j] = kern__cu_rnd(v[j], p);
  kern__cu_store<VEC>(x + i, v);
}

template <int VEC> __global__ void scale_kernel(float *x, float s, size_t n) {
  size_t i = first<VEC>();
  if (i >= n)
    return;
  float v[VEC];
  kern__cu_load<VEC>(v, x + i);
  for (int j = 0; j < VEC; j++)
    v[j] *= s;
  kern__cu_store<VEC>(x + i, v);
}

template <int VEC>
__global__ void accumulate_kernel(float *dst, const float *src, float s, size_t n, int init) {
  size_t i = first<VEC>();
  if (i >= n)
    return;
  float d[VEC], v[VEC];
  kern__cu_load<VEC>(v, src + i);
  if (init) {
    for (int j = 0; j < VEC; j++)
      d[j] = v[j] * s;
  } else {
    kern__cu_load<VEC>(d, dst + i);
    for (int j = 0; j < VEC; j++)
      d[j] = d[j] + v[j] * s;
  }
  kern__cu_store<VEC>(dst + i, d);
}

/* ---- launchers ---- */

/* 128-bit accesses possible: n % 4 == 0, both pointers 16-byte aligned */
static int vec4(size_t n, const void *p, const void *q) {
  return n % 4 == 0 && ((uintptr_t)p | (uintptr_t)q) % 16 == 0;
}

/* KERNEL<4> over n / 4 threads where vec4 allows, else KERNEL<1> over n */
#define LAUNCH_VEC(KERNEL, wide, n, stream, ...)                               \
  do {                                                                         \
    if (wide)                                                                  \
      KERNEL<4><<<kern__cu_grid((n) / 4, 256), 256, 0, stream>>>(__VA_ARGS__); \
    else                                                                       \
      KERNEL<1><<<kern__cu_grid(n, 256), 256, 0, stream>>>(__VA_ARGS__);       \
    KERN__CU_LAUNCHED();                                                       \
  } while (0)

static void gelu_forward(kern_ctx *k, float *out, const float *inp, size_t n) {
  if (n == 0)
    return;
  LAUNCH_VEC(gelu_forward_kernel, vec4(n, out, inp), n, kern__cu_stream(k), out, inp, n, k->prec);
}

static void gelu_backward(kern_ctx *k, float *dinp, const float *inp, const float *dout, size_t n) {
  if (n == 0)
    return;
  LAUNCH_VEC(gelu_backward_kernel, vec4(n, dinp, inp) && vec4(n, dout, dout), n, kern__cu_stream(k),
             dinp, inp, dout, n, k->prec);
}

void kern__cu_round(kern_ctx *k, float *x, size_t n, kern_prec p) {
  if (p == KERN_FP32 || n == 0)
    return;
  LAUNCH_VEC(round_kernel, vec4(n, x, x), n, kern__cu_stream(k), x, n, p);
}

static void round_(kern_ctx *k, float *x, size_t n, kern_prec p) { kern__cu_round(k, x, n, p); }

static void scale(kern_ctx *k, float *x, float s, size_t n) {
  if (n == 0)
    return;
  LAUNCH_VEC(scale_kernel, vec4(n, x, x), n, kern__cu_stream(k), x, s, n);
}

static void axpy(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return;
  LAUNCH_VEC(accumulate_kernel, vec4(n, dst, src), n, kern__cu_stream(k), dst, src, s, n, init);
}

void kern__cuda_elementwise(kern_ops *o) {
  o->gelu_forward = gelu_forward;
  o->gelu_backward = gelu_backward;
  o->axpy = axpy;
  o->scale = scale;
  o->round = round_;
}

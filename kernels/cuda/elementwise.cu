/* Element-wise kernels: GELU, scaling, rounding, accumulation (the sums
 * of squares are in step.cu). CPU twins: kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"
#include "kernels/layer_ops.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* The element-wise kernels take VEC consecutive elements per thread: VEC
 * = KERN__CU_VEC(type), 16 bytes, with one 128-bit access per array (4
 * floats, or 8 bf16 / fp16 values; the launcher checks every pointer's
 * alignment and n % VEC == 0), VEC 1 otherwise (kern__cu_load /
 * kern__cu_store). Each element's arithmetic is the same either way, so are
 * the bits. GELU reads and writes kern_x (X); to_x writes it from fp32; the
 * rest work on fp32 parameter gradients. */

template <int VEC, typename X> __global__ void gelu_forward_kernel(X *out, const X *inp, size_t n) {
  size_t i = kern__cu_first<VEC>();
  if (i >= n)
    return;
  float x[VEC], y[VEC];
  kern__cu_load<VEC>(x, inp + i);
  for (int j = 0; j < VEC; j++) {
    float u = GELU_S * (x[j] + GELU_C * x[j] * x[j] * x[j]);
    y[j] = 0.5f * x[j] * (1.0f + kern__tanhf(u));
  }
  kern__cu_store<VEC>(out + i, y);
}

/* dinp may alias dout: each thread reads its elements before writing them */
template <int VEC, typename X>
__global__ void gelu_backward_kernel(X *dinp, const X *inp, const X *dout, size_t n) {
  size_t i = kern__cu_first<VEC>();
  if (i >= n)
    return;
  float x[VEC], dy[VEC], dx[VEC];
  kern__cu_load<VEC>(x, inp + i);
  kern__cu_load<VEC>(dy, dout + i);
  for (int j = 0; j < VEC; j++) {
    float u = GELU_S * (x[j] + GELU_C * x[j] * x[j] * x[j]);
    float th = kern__tanhf(u);
    float du = GELU_S * (1.0f + 3.0f * GELU_C * x[j] * x[j]);
    float grad = 0.5f * (1.0f + th) + 0.5f * x[j] * (1.0f - th * th) * du;
    dx[j] = grad * dy[j];
  }
  kern__cu_store<VEC>(dinp + i, dx);
}

template <int VEC> __global__ void round_kernel(float *x, size_t n, int p) {
  kern__cu_map<VEC>(x, n, [p](float v) { return kern__cu_rnd(v, p); });
}

/* dst = src rounded to X (the weights' rounded copy from the fp32 master) */
template <int VEC, typename X> __global__ void to_x_kernel(X *dst, const float *src, size_t n) {
  size_t i = kern__cu_first<VEC>();
  if (i >= n)
    return;
  float v[VEC];
  kern__cu_load<VEC>(v, src + i);
  kern__cu_store<VEC>(dst + i, v);
}

template <int VEC>
__global__ void accumulate_kernel(float *dst, const float *src, float s, size_t n, int init) {
  size_t i = kern__cu_first<VEC>();
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

/* fp32 arrays: 128-bit accesses where n % 4 == 0 and both are 16-byte aligned */
static int vec4(size_t n, const void *p, const void *q) {
  return kern__cu_vec_ok(n, 4, sizeof(float), p, q);
}

/* KERNEL(W) over n / W threads where wide, else KERNEL(1) over n; KERNEL
 * names the kernel with its template arguments for a vector width */
#define LAUNCH_VEC(KERNEL, W, wide, n, stream, ...)                              \
  do {                                                                           \
    if (wide)                                                                    \
      KERNEL(W)<<<kern__cu_grid((n) / (W), 256), 256, 0, stream>>>(__VA_ARGS__); \
    else                                                                         \
      KERNEL(1)<<<kern__cu_grid(n, 256), 256, 0, stream>>>(__VA_ARGS__);         \
    KERN__CU_LAUNCHED();                                                         \
  } while (0)
#define GELU_FWD(V) gelu_forward_kernel<V, X>
#define GELU_BWD(V) gelu_backward_kernel<V, X>
#define TO_X(V) to_x_kernel<V, X>
#define ROUND(V) round_kernel<V>
#define SCALE(V) kern__cu_scale_kernel<V, float>
#define ACCUMULATE(V) accumulate_kernel<V>

static void gelu_forward(kern_ctx *k, kern_x *out, const kern_x *inp, size_t n) {
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec, {
    int wide = kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), out, inp);
    LAUNCH_VEC(GELU_FWD, KERN__CU_VEC(X), wide, n, kern__cu_stream(k), (X *)out, (const X *)inp, n);
  });
}

static void gelu_backward(kern_ctx *k, kern_x *dinp, const kern_x *inp, const kern_x *dout,
                          size_t n) {
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec, {
    int wide = kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), dinp, inp) &&
               kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), dout, dout);
    LAUNCH_VEC(GELU_BWD, KERN__CU_VEC(X), wide, n, kern__cu_stream(k), (X *)dinp, (const X *)inp,
               (const X *)dout, n);
  });
}

static void round_(kern_ctx *k, float *x, size_t n, kern_prec p) {
  if (p == KERN_FP32 || n == 0)
    return;
  LAUNCH_VEC(ROUND, 4, vec4(n, x, x), n, kern__cu_stream(k), x, n, p);
}

static void to_x(kern_ctx *k, kern_x *dst, const float *src, size_t n) {
  if (n == 0 || dst == src) /* fp32: kern_x is float, already itself */
    return;
  KERN__CU_WITH_X(
      k->prec, { /* the destination's width: 8 values (two float4 loads) at bf16 */
                 int wide = kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(float), src, src) &&
                            kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), dst, dst);
                 LAUNCH_VEC(TO_X, KERN__CU_VEC(X), wide, n, kern__cu_stream(k), (X *)dst, src, n);
      });
}

static void scale(kern_ctx *k, float *x, float s, size_t n) {
  if (n == 0)
    return;
  LAUNCH_VEC(SCALE, 4, vec4(n, x, x), n, kern__cu_stream(k), x, s, n);
}

static void axpy(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  if (n == 0)
    return;
  LAUNCH_VEC(ACCUMULATE, 4, vec4(n, dst, src), n, kern__cu_stream(k), dst, src, s, n, init);
}

void kern__cuda_elementwise(kern_ops *o) {
  o->round = round_;
  KERN__OPS_ELEMENTWISE(KERN__FILL)
}

/* Element-wise kernels: residual, GELU, scaling, rounding, accumulation,
 * sums of squares. */
#include <omp.h>

#include "internal.h"
#include "kernels/layer_ops.h"

/* Chunk size of the fixed-order reductions: the partial sums are over fixed
 * ranges, added in order, so the result does not depend on threads. */
#define SUMSQ_CHUNK 16384

/* Runs CALL over this thread's share [lo, hi) of n items in an OpenMP
 * parallel region, with the run's precision a compile-time constant P
 * (KERN__WITH_PREC): CALL(P) is a call of a range kernel on lo, hi and P. */
#define FOR_SHARES(k, n, CALL)        \
  _Pragma("omp parallel") {           \
    size_t lo, hi;                    \
    kern__split((n), &lo, &hi);       \
    KERN__WITH_PREC((k)->prec, CALL); \
  }

KERN__INLINE void residual_range(float *out, const float *a, const float *b, size_t lo, size_t hi,
                                 const kern_prec p) {
  for (size_t i = lo; i < hi; i++)
    out[i] = kern__rnd(a[i] + b[i], p);
}

static void residual_forward(kern_ctx *k, kern_x *out_x, const kern_x *a_x, const kern_x *b_x,
                             size_t n) {
  float *out = out_x;
  const float *a = a_x, *b = b_x;
#define CALL(P) residual_range(out, a, b, lo, hi, P)
  FOR_SHARES(k, n, CALL);
#undef CALL
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

KERN__INLINE void gelu_fwd_range(float *out, const float *inp, size_t lo, size_t hi,
                                 const kern_prec p) {
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_C * x * x * x);
    out[i] = kern__rnd(0.5f * x * (1.0f + kern__tanhf(u)), p);
  }
}

static void gelu_forward(kern_ctx *k, kern_x *out_x, const kern_x *inp_x, size_t n) {
  float *out = out_x;
  const float *inp = inp_x;
#define CALL(P) gelu_fwd_range(out, inp, lo, hi, P)
  FOR_SHARES(k, n, CALL);
#undef CALL
}

KERN__INLINE void gelu_bwd_range(float *dinp, const float *inp, const float *dout, size_t lo,
                                 size_t hi, const kern_prec p) {
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_C * x * x * x);
    float th = kern__tanhf(u);
    float du = GELU_S * (1.0f + 3.0f * GELU_C * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] = kern__rnd(grad * dout[i], p);
  }
}

static void gelu_backward(kern_ctx *k, kern_x *dinp_x, const kern_x *inp_x, const kern_x *dout_x,
                          size_t n) {
  float *dinp = dinp_x;
  const float *inp = inp_x, *dout = dout_x;
#define CALL(P) gelu_bwd_range(dinp, inp, dout, lo, hi, P)
  FOR_SHARES(k, n, CALL);
#undef CALL
}

static double sumsq(kern_ctx *k, const float *x, size_t n) {
  size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  double total = 0.0;
  double part[64];
  /* blocks of 64 chunks so the stack buffer stays small */
  for (size_t c0 = 0; c0 < nchunks; c0 += 64) {
    size_t c1 = c0 + 64 < nchunks ? c0 + 64 : nchunks;
#pragma omp parallel for schedule(static)
    for (size_t c = c0; c < c1; c++) {
      size_t lo = c * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
      double s = 0.0;
      for (size_t i = lo; i < hi; i++)
        s += (double)x[i] * (double)x[i];
      part[c - c0] = s;
    }
    for (size_t c = c0; c < c1; c++)
      total += part[c - c0];
  }
  return total;
}

static void axpy(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  (void)k;
  if (init) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
      dst[i] = src[i] * s;
  } else {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
      dst[i] += src[i] * s;
  }
}

static double accumulate(kern_ctx *k, float *dst, const float *src, float s, size_t n, int init) {
  axpy(k, dst, src, s, n, init);
  return sumsq(k, src, n);
}

/* sequential, as the trainer's host loop summed the losses before */
static void mean_into(kern_ctx *k, double *acc, const float *x, size_t n) {
  (void)k;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += x[i];
  *acc += sum / (double)n;
}

static void sumsq_into(kern_ctx *k, double *acc, const float *x, size_t n) {
  *acc += sumsq(k, x, n);
}

static void step_scale(kern_ctx *k, float *scale, const double *gnorm2, double loss_scale,
                       double clip) {
  (void)k;
  *scale = kern__step_scale(*gnorm2, loss_scale, clip);
}

static void scale(kern_ctx *k, float *x, float s, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    x[i] *= s;
}

KERN__INLINE void round_range(float *x, size_t lo, size_t hi, const kern_prec p) {
  for (size_t i = lo; i < hi; i++)
    x[i] = kern__rnd(x[i], p);
}

static void round_(kern_ctx *k, float *x, size_t n, kern_prec p) {
  if (p == KERN_FP32)
    return;
#pragma omp parallel
  {
    size_t lo, hi;
    kern__split(n, &lo, &hi);
#define CALL(P) round_range(x, lo, hi, P)
    KERN__WITH_PREC(p, CALL);
#undef CALL
  }
}

/* kern_x is float here: a copy, then rounded in place */
static void to_x(kern_ctx *k, kern_x *dst, const float *src, size_t n) {
  if (dst != src)
    memcpy(dst, src, n * sizeof(float));
  round_(k, dst, n, k->prec);
}

float kern_round_bf16(float x) { return kern__bf16(x); }
float kern_round_fp16(float x) { return kern__fp16(x); }

void kern__split(size_t n, size_t *lo, size_t *hi) {
  size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
  size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
  *lo = t * per < n ? t * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

void kern__colsum_add(float *dst, const float *src, int N, int C) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int per = ((C + nt - 1) / nt + 15) / 16 * 16;
    int lo = t * per, hi = lo + per < C ? lo + per : C;
    for (int r = 0; r < N; r++) {
      const float *row = src + (size_t)r * C;
      for (int c = lo; c < hi; c++)
        dst[c] += row[c];
    }
  }
}

void kern__cpu_elementwise(kern_ops *o) {
  o->residual_forward = residual_forward;
  o->round = round_;
  KERN__OPS_ELEMENTWISE(KERN__FILL)
  KERN__OPS_STEP(KERN__FILL)
}

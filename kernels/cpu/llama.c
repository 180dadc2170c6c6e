/* The llama family's ops (kern.h): RMSNorm, per-head QK-norm, rotary
 * embeddings, SwiGLU, and the scale muP's output multiplier needs. Sums in
 * a fixed order, so the bits do not depend on the thread count. */
#include <omp.h>
#include <stdlib.h>

#include "internal.h"
#include "kernels/layer_ops.h"

#define RMS_EPS 1e-5f

/* ---- RMSNorm ---------------------------------------------------------------- */

KERN__INLINE float rms_rstd(const float *x, int C) {
  float ss = 0.0f;
  for (int c = 0; c < C; c++)
    ss += x[c] * x[c];
  return 1.0f / sqrtf(ss / C + RMS_EPS);
}

KERN__INLINE void rms_fwd_row(float *y, float *rstd, const float *x, const float *w, int C,
                              const kern_prec p) {
  float s = rms_rstd(x, C);
  for (int c = 0; c < C; c++)
    y[c] = kern__rnd(x[c] * s * w[c], p);
  *rstd = s;
}

static void rmsnorm_forward(kern_ctx *k, kern_x *out_x, float *rstd, const kern_x *inp_x,
                            const kern_x *w, int N, int C) {
  float *out = out_x;
  const float *inp = inp_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    size_t o = (size_t)r * C;
#define CALL(P) rms_fwd_row(out + o, rstd + r, inp + o, w, C, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

/* With n = x * s: dx = s * (dn - n * mean(dn * n)), dn = dy * w. The row's
 * result is written (+= into dx when add) or overwritten. */
KERN__INLINE void rms_bwd_row(float *dx, const float *dy, const float *x, const float *w, float s,
                              int C, int add, const kern_prec p) {
  float sum_dn_n = 0.0f;
  for (int c = 0; c < C; c++)
    sum_dn_n += dy[c] * w[c] * (x[c] * s);
  sum_dn_n /= C;
  for (int c = 0; c < C; c++) {
    float n = x[c] * s;
    float g = s * (dy[c] * w[c] - n * sum_dn_n);
    dx[c] = kern__rnd(add ? dx[c] + g : g, p);
  }
}

static void rmsnorm_backward(kern_ctx *k, kern_x *dinp_x, float *dw, const kern_x *dout_x,
                             const kern_x *inp_x, const kern_x *w, const float *rstd, int N,
                             int C) {
  float *dinp = dinp_x;
  const float *dout = dout_x, *inp = inp_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    size_t o = (size_t)r * C;
#define CALL(P) rms_bwd_row(dinp + o, dout + o, inp + o, w, rstd[r], C, 1, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
  /* dw += sum_r dout * n, each column by one thread in row order */
#pragma omp parallel
  {
    size_t lo, hi;
    kern__split((size_t)C, &lo, &hi);
    for (int r = 0; r < N; r++) {
      const float *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
      float s = rstd[r];
      for (size_t c = lo; c < hi; c++)
        dw[c] += dy[c] * (x[c] * s);
    }
  }
}

/* ---- QK-norm: RMSNorm of each head of q and k --------------------------------- */

static void qknorm_forward(kern_ctx *k, kern_x *out_x, float *rstd, const kern_x *qkv_x,
                           const kern_x *wq, const kern_x *wk, int N, int C, int NH) {
  float *out = out_x;
  const float *qkv = qkv_x;
  int hs = C / NH;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    const float *x = qkv + (size_t)r * 3 * C;
    float *y = out + (size_t)r * 3 * C;
    for (int part = 0; part < 2; part++)
      for (int h = 0; h < NH; h++) {
        size_t o = (size_t)part * C + (size_t)h * hs;
        float *rs = rstd + ((size_t)r * 2 + part) * NH + h;
#define CALL(P) rms_fwd_row(y + o, rs, x + o, part ? wk : wq, hs, P)
        KERN__WITH_PREC(k->prec, CALL);
#undef CALL
      }
    for (int c = 2 * C; c < 3 * C; c++)
      y[c] = x[c]; /* v: already at the run's precision */
  }
}

static void qknorm_backward(kern_ctx *k, kern_x *dqkv_x, float *dwq, float *dwk,
                            const kern_x *dout_x, const kern_x *qkv_x, const kern_x *wq,
                            const kern_x *wk, const float *rstd, int N, int C, int NH) {
  float *dqkv = dqkv_x;
  const float *dout = dout_x, *qkv = qkv_x;
  int hs = C / NH;
  /* the gains' gradient first: dout may be dqkv, which the rows overwrite */
  for (int part = 0; part < 2; part++) {
    float *dw = part ? dwk : dwq;
    for (int r = 0; r < N; r++)
      for (int h = 0; h < NH; h++) {
        size_t o = (size_t)r * 3 * C + (size_t)part * C + (size_t)h * hs;
        float s = rstd[((size_t)r * 2 + part) * NH + h];
        for (int c = 0; c < hs; c++)
          dw[c] += dout[o + c] * (qkv[o + c] * s);
      }
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    for (int part = 0; part < 2; part++)
      for (int h = 0; h < NH; h++) {
        size_t o = (size_t)r * 3 * C + (size_t)part * C + (size_t)h * hs;
        float s = rstd[((size_t)r * 2 + part) * NH + h];
        /* rms_bwd_row reads all of dy before it writes dx, so dx may be dy */
#define CALL(P) rms_bwd_row(dqkv + o, dout + o, qkv + o, part ? wk : wq, s, hs, 0, P)
        KERN__WITH_PREC(k->prec, CALL);
#undef CALL
      }
    if (dqkv != dout)
      memcpy(dqkv + (size_t)r * 3 * C + 2 * C, dout + (size_t)r * 3 * C + 2 * C,
             (size_t)C * sizeof(float));
  }
}

/* ---- rotary embeddings ---------------------------------------------------------- */

/* Rotates (dir +1) or rotates back (dir -1) each head of q and k in one
 * row by the angles whose cosines and sines are cs[i], sn[i] (i < hs/2;
 * NULL: no rotation) and scales q by qscale. */
KERN__INLINE void rope_row(float *x, const float *cs, const float *sn, int C, int NH, float qscale,
                           int dir, const kern_prec p) {
  int hs = C / NH, half = hs / 2;
  for (int part = 0; cs && part < 2; part++)
    for (int h = 0; h < NH; h++) {
      float *a = x + (size_t)part * C + (size_t)h * hs;
      for (int i = 0; i < half; i++) {
        float x1 = a[i], x2 = a[i + half], s = dir > 0 ? sn[i] : -sn[i];
        a[i] = x1 * cs[i] - x2 * s;
        a[i + half] = x2 * cs[i] + x1 * s;
      }
    }
  for (int c = 0; c < C; c++)
    x[c] = kern__rnd(x[c] * qscale, p);
  if (cs)
    for (int c = C; c < 2 * C; c++)
      x[c] = kern__rnd(x[c], p);
}

static void rope(kern_ctx *k, kern_x *qkv_x, int B, int T, int C, int NH, float theta, float qscale,
                 int dir) {
  float *qkv = qkv_x;
  int half = C / NH / 2;
  /* the angles' cosines and sines, (T, hs/2) each, in fp64 then rounded */
  float *tab = theta > 0.0f ? malloc((size_t)T * half * 2 * sizeof(float)) : NULL;
  if (theta > 0.0f && !tab)
    abort();
  for (int t = 0; tab && t < T; t++)
    for (int i = 0; i < half; i++) {
      double ang = (double)t * pow((double)theta, -2.0 * i / (2.0 * half));
      tab[(size_t)t * half + i] = (float)cos(ang);
      tab[(size_t)(T + t) * half + i] = (float)sin(ang);
    }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < B * T; r++) {
    const float *cs = tab ? tab + (size_t)(r % T) * half : NULL;
    const float *sn = tab ? tab + (size_t)(T + r % T) * half : NULL;
#define CALL(P) rope_row(qkv + (size_t)r * 3 * C, cs, sn, C, NH, qscale, dir, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
  free(tab);
}

static void rope_forward(kern_ctx *k, kern_x *qkv, int B, int T, int C, int NH, float theta,
                         float qscale) {
  rope(k, qkv, B, T, C, NH, theta, qscale, 1);
}

/* the transpose of the forward's (rotation, then q scale): the q scale, then
 * the rotation back; scaling first or last gives the same product here, as
 * one rounding ends the row */
static void rope_backward(kern_ctx *k, kern_x *dqkv, int B, int T, int C, int NH, float theta,
                          float qscale) {
  rope(k, dqkv, B, T, C, NH, theta, qscale, -1);
}

/* ---- SwiGLU ---------------------------------------------------------------------- */

KERN__INLINE float silu_sig(float g) { return 1.0f / (1.0f + kern__expf(-g)); }

KERN__INLINE void swiglu_fwd_row(float *y, const float *x, int F, const kern_prec p) {
  for (int c = 0; c < F; c++) {
    float g = x[c];
    y[c] = kern__rnd(g * silu_sig(g) * x[F + c], p);
  }
}

static void swiglu_forward(kern_ctx *k, kern_x *out_x, const kern_x *inp_x, int N, int F) {
  float *out = out_x;
  const float *inp = inp_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
#define CALL(P) swiglu_fwd_row(out + (size_t)r * F, inp + (size_t)r * 2 * F, F, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

/* silu'(g) = sig(g) (1 + g (1 - sig(g))) */
KERN__INLINE void swiglu_bwd_row(float *dx, const float *x, const float *dy, int F,
                                 const kern_prec p) {
  for (int c = 0; c < F; c++) {
    float g = x[c], u = x[F + c], sg = silu_sig(g);
    float dg = dy[c] * u * (sg * (1.0f + g * (1.0f - sg)));
    float du = dy[c] * g * sg;
    dx[c] = kern__rnd(dg, p);
    dx[F + c] = kern__rnd(du, p);
  }
}

static void swiglu_backward(kern_ctx *k, kern_x *dinp_x, const kern_x *inp_x, const kern_x *dout_x,
                            int N, int F) {
  float *dinp = dinp_x;
  const float *inp = inp_x, *dout = dout_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
#define CALL(P) \
  swiglu_bwd_row(dinp + (size_t)r * 2 * F, inp + (size_t)r * 2 * F, dout + (size_t)r * F, F, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

/* ---- scale ----------------------------------------------------------------------- */

KERN__INLINE void scale_range(float *x, float s, size_t lo, size_t hi, const kern_prec p) {
  for (size_t i = lo; i < hi; i++)
    x[i] = kern__rnd(x[i] * s, p);
}

static void scale_x(kern_ctx *k, kern_x *x_x, float s, size_t n) {
  float *x = x_x;
#pragma omp parallel
  {
    size_t lo, hi;
    kern__split(n, &lo, &hi);
#define CALL(P) scale_range(x, s, lo, hi, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

void kern__cpu_llama(kern_ops *o) { KERN__OPS_LLAMA(KERN__FILL) }

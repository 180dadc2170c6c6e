/* LayerNorm over the last dimension, eps 1e-5. */
#include <omp.h>

#include "internal.h"

#define LN_EPS 1e-5f

KERN__INLINE void ln_fwd_row(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int C, const kern_prec p) {
  {
    float m = 0.0f;
    for (int c = 0; c < C; c++)
      m += x[c];
    m /= C;
    float var = 0.0f; /* two-pass variance: no cancellation */
    for (int c = 0; c < C; c++) {
      float d = x[c] - m;
      var += d * d;
    }
    float s = 1.0f / sqrtf(var / C + LN_EPS);
    for (int c = 0; c < C; c++)
      y[c] = kern__rnd((x[c] - m) * s * w[c] + b[c], p);
    *mean = m;
    *rstd = s;
  }
}

static void layernorm_forward(kern_ctx *k, kern_x *out_x, float *mean, float *rstd,
                              const kern_x *inp_x, const kern_x *w, const kern_x *b, int N, int C) {
  float *out = out_x;
  const float *inp = inp_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    size_t o = (size_t)r * C;
#define CALL(P) ln_fwd_row(out + o, mean + r, rstd + r, inp + o, w, b, C, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with
 * dnorm = dout * w and norm = (x - mean) * rstd */
KERN__INLINE void ln_bwd_row(float *dx, const float *dy, const float *x, const float *w, float m,
                             float s, int C, const kern_prec p) {
  {
    float sum_dn = 0.0f, sum_dn_n = 0.0f;
    for (int c = 0; c < C; c++) {
      float n = (x[c] - m) * s;
      float dn = dy[c] * w[c];
      sum_dn += dn;
      sum_dn_n += dn * n;
    }
    sum_dn /= C;
    sum_dn_n /= C;
    for (int c = 0; c < C; c++) {
      float n = (x[c] - m) * s;
      float dn = dy[c] * w[c];
      dx[c] = kern__rnd(dx[c] + s * (dn - sum_dn - n * sum_dn_n), p);
    }
  }
}

static void layernorm_backward(kern_ctx *k, kern_x *dinp_x, float *dw, float *db,
                               const kern_x *dout_x, const kern_x *inp_x, const kern_x *w,
                               const float *mean, const float *rstd, int N, int C) {
  float *dinp = dinp_x;
  const float *dout = dout_x, *inp = inp_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    size_t o = (size_t)r * C;
#define CALL(P) ln_bwd_row(dinp + o, dout + o, inp + o, w, mean[r], rstd[r], C, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
  /* columns: dw += sum_r dout * norm, db += sum_r dout; each column summed
   * over rows in order by one thread, so the bits do not depend on threads */
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int per = ((C + nt - 1) / nt + 15) / 16 * 16;
    int lo = t * per, hi = lo + per < C ? lo + per : C;
    for (int r = 0; r < N; r++) {
      const float *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
      float m = mean[r], s = rstd[r];
      for (int c = lo; c < hi; c++) {
        dw[c] += dy[c] * ((x[c] - m) * s);
        db[c] += dy[c];
      }
    }
  }
}

void kern__cpu_layernorm(kern_ops *o) {
  o->layernorm_forward = layernorm_forward;
  o->layernorm_backward = layernorm_backward;
}

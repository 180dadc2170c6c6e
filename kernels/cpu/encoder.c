/* Token plus position embedding. */
#include <omp.h>

#include "internal.h"

KERN__INLINE void enc_row(float *y, const float *e, const float *q, int C, const kern_prec p) {
  if (!q) { /* no positions: the embedding, already at the run's precision */
    memcpy(y, e, (size_t)C * sizeof(float));
    return;
  }
  for (int c = 0; c < C; c++)
    y[c] = kern__rnd(e[c] + q[c], p);
}

static void encoder_forward(kern_ctx *k, kern_x *out_x, const int32_t *tokens, const kern_x *wte_x,
                            const kern_x *wpe_x, int B, int T, int C) {
  float *out = out_x;
  const float *wte = wte_x, *wpe = wpe_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < B * T; r++) {
    const float *e = wte + (size_t)tokens[r] * C, *q = wpe ? wpe + (size_t)(r % T) * C : NULL;
#define CALL(P) enc_row(out + (size_t)r * C, e, q, C, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

/* Rows are scattered into dwte in row order; threads split the channels,
 * so every element is summed in the same order whatever the thread count. */
static void encoder_backward(kern_ctx *k, float *dwte, float *dwpe, const kern_x *dout_x,
                             const int32_t *tokens, int B, int T, int C) {
  const float *dout = dout_x;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int per = ((C + nt - 1) / nt + 15) / 16 * 16;
    int lo = t * per, hi = lo + per < C ? lo + per : C;
    for (int r = 0; r < B * T; r++) {
      const float *dy = dout + (size_t)r * C;
      float *de = dwte + (size_t)tokens[r] * C;
      for (int c = lo; c < hi; c++)
        de[c] += dy[c];
      if (dwpe) {
        float *dq = dwpe + (size_t)(r % T) * C;
        for (int c = lo; c < hi; c++)
          dq[c] += dy[c];
      }
    }
  }
}

void kern__cpu_encoder(kern_ops *o) {
  o->encoder_forward = encoder_forward;
  o->encoder_backward = encoder_backward;
}

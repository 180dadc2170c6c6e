/* Fused softmax + cross-entropy (+ its gradient, in place). */
#include "internal.h"

KERN__INLINE void xent_row(float *loss, float *z, int tgt, int V, float dscale, const kern_prec p) {
  {
    float mx = z[0];
    for (int v = 1; v < V; v++)
      mx = z[v] > mx ? z[v] : mx;
    float sum = 0.0f;
    for (int v = 0; v < V; v++)
      sum += kern__expf(z[v] - mx);
    /* -log p_t = log(sum) - (z_t - max) */
    *loss = logf(sum) - (z[tgt] - mx);
    if (dscale != 0.0f) {
      float inv = 1.0f / sum;
      for (int v = 0; v < V; v++)
        z[v] = kern__rnd((kern__expf(z[v] - mx) * inv - (v == tgt ? 1.0f : 0.0f)) * dscale, p);
    }
  }
}

static void softmax_xent(kern_ctx *k, float *losses, kern_x *logits_x, const int32_t *targets,
                         int N, int V, float dscale) {
  float *logits = logits_x;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
#define CALL(P) xent_row(losses + r, logits + (size_t)r * V, targets[r], V, dscale, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

void kern__cpu_xent(kern_ops *o) { o->softmax_xent = softmax_xent; }

/* Causal multi-head self-attention: one (batch, head) pair per task, its
 * products through single-threaded sgemm calls (OpenBLAS runs one thread
 * inside an OpenMP parallel region), the masked softmax by hand.
 *
 * Layout: qkv row (b, t) is [q | k | v], each C = NH * hs wide; head h of q
 * starts at column h*hs, of k at C + h*hs, of v at 2C + h*hs, so every head's
 * Q, K and V are (T, hs) matrices with leading dimension 3C.
 *
 * Causality is used to skip work: rows are taken in blocks of ROWS, and a
 * block of query rows [i0, i1) only meets keys [0, i1), so the products
 * touch a little more than the lower triangle instead of the full square. */
#include <cblas.h>

#include "internal.h"

#define ROWS 64

KERN__INLINE void attn_fwd_head(float *y, float *a, const float *q, const float *kk, const float *v,
                                int T, int C, int hs, float sc, const kern_prec p) {
  for (int i0 = 0; i0 < T; i0 += ROWS) {
    int i1 = i0 + ROWS < T ? i0 + ROWS : T;
    float *ab = a + (size_t)i0 * T;
    /* scores of rows [i0, i1) against keys [0, i1): sc * Q_blk K^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, sc,
                q + (size_t)i0 * 3 * C, 3 * C, kk, 3 * C, 0.0f, ab, T);
    for (int t = i0; t < i1; t++) {
      float *row = a + (size_t)t * T;
      float mx = row[0];
      for (int j = 1; j <= t; j++)
        mx = row[j] > mx ? row[j] : mx;
      float sum = 0.0f;
      for (int j = 0; j <= t; j++) {
        row[j] = kern__expf(row[j] - mx);
        sum += row[j];
      }
      float inv = 1.0f / sum;
      for (int j = 0; j <= t; j++)
        row[j] = kern__rnd(row[j] * inv, p);
      for (int j = t + 1; j < T; j++)
        row[j] = 0.0f;
    }
    /* y rows [i0, i1) = A_blk(:, 0:i1) V(0:i1), into head h's columns */
    float *yb = y + (size_t)i0 * C;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, ab, T, v, 3 * C,
                0.0f, yb, C);
    for (int t = i0; t < i1; t++)
      for (int i = 0; i < hs; i++)
        yb[(size_t)(t - i0) * C + i] = kern__rnd(yb[(size_t)(t - i0) * C + i], p);
  }
}

static void attention_forward(kern_ctx *k, kern_x *out_x, float *att, const kern_x *qkv_x, int B,
                              int T, int C, int NH) {
  float *out = out_x;
  const float *qkv = qkv_x;
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * 3 * C + h * hs;
    float *y = out + (size_t)b * T * C + h * hs;
    float *a = att + (size_t)bh * T * T;
#define CALL(P) attn_fwd_head(y, a, q, q + C, q + 2 * C, T, C, hs, sc, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

KERN__INLINE void attn_bwd_head(float *dq, float *dk, float *dv, float *da, const float *q,
                                const float *kk, const float *v, const float *a, const float *dy,
                                int T, int C, int hs, float sc, const kern_prec p) {
  /* dK and dV gather over all later query rows: accumulate block by block */
  for (int t = 0; t < T; t++)
    for (int i = 0; i < hs; i++) {
      dk[(size_t)t * 3 * C + i] = 0.0f;
      dv[(size_t)t * 3 * C + i] = 0.0f;
    }
  for (int i0 = 0; i0 < T; i0 += ROWS) {
    int i1 = i0 + ROWS < T ? i0 + ROWS : T, m = i1 - i0;
    const float *ab = a + (size_t)i0 * T, *dyb = dy + (size_t)i0 * C;
    float *dab = da + (size_t)i0 * T;
    /* dA_blk(m, 0:i1) = dY_blk V(0:i1)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, 1.0f, dyb, C, v, 3 * C, 0.0f,
                dab, T);
    /* dV(0:i1) += A_blk(:, 0:i1)^T dY_blk */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, 1.0f, ab, T, dyb, C, 1.0f, dv,
                3 * C);
    /* softmax backward on the causal part: dS = A * (dA - sum_j A dA), then
     * the 1/sqrt(hs) scale of the scores; the masked part has no gradient */
    for (int t = i0; t < i1; t++) {
      const float *ar = a + (size_t)t * T;
      float *dr = da + (size_t)t * T;
      float dot = 0.0f;
      for (int j = 0; j <= t; j++)
        dot += ar[j] * dr[j];
      for (int j = 0; j <= t; j++)
        dr[j] = kern__rnd(ar[j] * (dr[j] - dot) * sc, p);
      for (int j = t + 1; j < i1; j++)
        dr[j] = 0.0f;
    }
    /* dQ_blk = dS_blk(:, 0:i1) K(0:i1); dK(0:i1) += dS_blk^T Q_blk */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f, dab, T, kk, 3 * C, 0.0f,
                dq + (size_t)i0 * 3 * C, 3 * C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, 1.0f, dab, T,
                q + (size_t)i0 * 3 * C, 3 * C, 1.0f, dk, 3 * C);
  }
  for (int t = 0; t < T; t++)
    for (int i = 0; i < hs; i++) {
      size_t o = (size_t)t * 3 * C + i;
      dq[o] = kern__rnd(dq[o], p);
      dk[o] = kern__rnd(dk[o], p);
      dv[o] = kern__rnd(dv[o], p);
    }
}

static void attention_backward(kern_ctx *k, kern_x *dqkv_x, float *datt, const kern_x *dout_x,
                               const kern_x *qkv_x, const float *att, int B, int T, int C, int NH) {
  float *dqkv = dqkv_x;
  const float *dout = dout_x, *qkv = qkv_x;
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    size_t base = (size_t)b * T * 3 * C + h * hs;
    const float *q = qkv + base;
    float *dq = dqkv + base;
    const float *a = att + (size_t)bh * T * T;
    float *da = datt + (size_t)bh * T * T;
    const float *dy = dout + (size_t)b * T * C + h * hs;
#define CALL(P) \
  attn_bwd_head(dq, dq + C, dq + 2 * C, da, q, q + C, q + 2 * C, a, dy, T, C, hs, sc, P)
    KERN__WITH_PREC(k->prec, CALL);
#undef CALL
  }
}

void kern__cpu_attention(kern_ops *o) {
  o->attention_forward = attention_forward;
  o->attention_backward = attention_backward;
}

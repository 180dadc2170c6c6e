/* Causal multi-head self-attention: one (batch, head) pair per task, its
 * products through single-threaded sgemm calls (OpenBLAS runs one thread
 * inside an OpenMP parallel region), the masked softmax by hand.
 *
 * Layout: qkv row (b, t) is [q | k | v], each C = NH * hs wide; head h of q
 * starts at column h*hs, of k at C + h*hs, of v at 2C + h*hs, so every head's
 * Q, K and V are (T, hs) matrices with leading dimension 3C. */
#include <cblas.h>

#include "internal.h"

static void attention_forward(kern_ctx *k, float *out, float *att, const float *qkv,
                              int B, int T, int C, int NH) {
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
  kern_prec p = k->prec;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * 3 * C + h * hs;
    const float *kk = q + C, *v = q + 2 * C;
    float *a = att + (size_t)bh * T * T; /* (T, T) */
    /* a = sc * Q K^T, the full square (the upper half is masked below) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, sc, q, 3 * C, kk,
                3 * C, 0.0f, a, T);
    for (int t = 0; t < T; t++) {
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
    /* out(T, hs) = a(T, T) @ V(T, hs), written into head h's columns */
    float *y = out + (size_t)b * T * C + h * hs;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, 3 * C,
                0.0f, y, C);
    for (int t = 0; t < T; t++)
      for (int i = 0; i < hs; i++)
        y[(size_t)t * C + i] = kern__rnd(y[(size_t)t * C + i], p);
  }
}

static void attention_backward(kern_ctx *k, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C,
                               int NH) {
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
  kern_prec p = k->prec;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    size_t base = (size_t)b * T * 3 * C + h * hs;
    const float *q = qkv + base, *kk = q + C, *v = q + 2 * C;
    float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
    const float *a = att + (size_t)bh * T * T;
    float *da = datt + (size_t)bh * T * T;
    const float *dy = dout + (size_t)b * T * C + h * hs;
    /* dA(T,T) = dY(T,hs) @ V^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, 3 * C,
                0.0f, da, T);
    /* dV(T,hs) = A^T @ dY */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 0.0f,
                dv, 3 * C);
    /* softmax backward on the causal part: dS = A * (dA - sum_j A dA), then
     * the 1/sqrt(hs) scale of the scores; the masked part has no gradient */
    for (int t = 0; t < T; t++) {
      const float *ar = a + (size_t)t * T;
      float *dr = da + (size_t)t * T;
      float dot = 0.0f;
      for (int j = 0; j <= t; j++)
        dot += ar[j] * dr[j];
      for (int j = 0; j <= t; j++)
        dr[j] = kern__rnd(ar[j] * (dr[j] - dot) * sc, p);
      for (int j = t + 1; j < T; j++)
        dr[j] = 0.0f;
    }
    /* dQ(T,hs) = dS @ K ; dK(T,hs) = dS^T @ Q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, kk,
                3 * C, 0.0f, dq, 3 * C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, q, 3 * C,
                0.0f, dk, 3 * C);
    for (int t = 0; t < T; t++)
      for (int i = 0; i < hs; i++) {
        size_t o = (size_t)t * 3 * C + i;
        dq[o] = kern__rnd(dq[o], p);
        dk[o] = kern__rnd(dk[o], p);
        dv[o] = kern__rnd(dv[o], p);
      }
  }
}

void kern__cpu_attention(kern_ops *o) {
  o->attention_forward = attention_forward;
  o->attention_backward = attention_backward;
}

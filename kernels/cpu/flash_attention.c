/* The CPU twin of the flash attention ops (kernels/cuda/flash_attention.cu):
 * the same mathematics row by row, sums in fp64, the reference the GPU test
 * compares against. Not in the CPU ops table (the CPU model keeps
 * attention_forward/backward and its bits).
 *
 * Layout as kernels/cpu/attention.c: qkv row (b, t) is [q | k | v], head h of
 * q at column h*hs, of k at C + h*hs, of v at 2C + h*hs; out (B, T, C).
 *
 * Rounding points, those of the CUDA kernels: for query row t with scaled
 * scores s_j = sc * q_t . k_j (j <= t), the forward walks the keys in tiles
 * of KEY_TILE with a running max m (the max over the tiles so far); the
 * weights of a tile, p_j = round(exp(s_j - m)), are what the tensor cores
 * multiply V by, and the sums so far are rescaled by exp(m_old - m) when m
 * grows. So out_t = round(acc / l) with acc = sum_j p_j' v_j, l = sum_j p_j'
 * (p_j' the weights rescaled to the final max), and lse_t = m + log l.
 * (Rounding the weights against the final max instead moves outputs by
 * about 2^-9 relative at bf16: more than the GPU test's tolerance.)
 * The backward recomputes P_tj = round(exp(s_tj - lse_t)), takes
 * D_t = sum_e dout_te out_te, dS_tj = round(P_tj (dout_t . v_j - D_t) sc) as
 * attention_backward rounds dS, and rounds dq, dk, dv once at the end. */
#include <stdlib.h>

#include "internal.h"

/* The CUDA forward's key tile at bf16 and fp16 (cfg::FWD_BC in
 * kernels/cuda/flash_attention.cu); at fp32 nothing is rounded and the
 * tiling changes nothing but the order of fp64 sums. */
#define KEY_TILE 64

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes);
  if (!p)
    abort();
  return p;
}

/* s[j] = sc * q . k_j for j <= t (row t of head (b, h), pointers at the head) */
static void scores(double *s, const float *q, const float *kk, int t, int C, int hs, float sc) {
  for (int j = 0; j <= t; j++) {
    double d = 0.0;
    for (int e = 0; e < hs; e++)
      d += (double)q[e] * kk[(size_t)j * 3 * C + e];
    s[j] = d * sc;
  }
}

void kern_cpu_flash_attention_forward(kern_ctx *k, kern_x *out_x, float *lse, const kern_x *qkv_x,
                                      int B, int T, int C, int NH) {
  float *out = out_x;
  const float *qkv = qkv_x;
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
  kern_prec p = k->prec;
#pragma omp parallel
  {
    double *s = xmalloc((size_t)(T > 0 ? T : 1) * sizeof *s);
    double *acc = xmalloc((size_t)hs * sizeof *acc);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
      int b = bh / NH, h = bh % NH;
      const float *q = qkv + (size_t)b * T * 3 * C + h * hs, *kk = q + C, *v = q + 2 * C;
      for (int t = 0; t < T; t++) {
        scores(s, q + (size_t)t * 3 * C, kk, t, C, hs, sc);
        double m = -INFINITY, l = 0.0;
        for (int e = 0; e < hs; e++)
          acc[e] = 0.0;
        for (int j0 = 0; j0 <= t; j0 += KEY_TILE) {
          int j1 = j0 + KEY_TILE <= t ? j0 + KEY_TILE : t + 1; /* keys [j0, j1) */
          double mt = m;
          for (int j = j0; j < j1; j++)
            mt = s[j] > mt ? s[j] : mt;
          double a = m == -INFINITY ? 0.0 : exp(m - mt);
          l *= a;
          for (int e = 0; e < hs; e++)
            acc[e] *= a;
          for (int j = j0; j < j1; j++) {
            double pj = kern__rnd((float)exp(s[j] - mt), p);
            l += pj;
            for (int e = 0; e < hs; e++)
              acc[e] += pj * v[(size_t)j * 3 * C + e];
          }
          m = mt;
        }
        float *y = out + ((size_t)b * T + t) * C + h * hs;
        for (int e = 0; e < hs; e++)
          y[e] = kern__rnd((float)(acc[e] / l), p);
        lse[(size_t)bh * T + t] = (float)(m + log(l));
      }
    }
    free(s);
    free(acc);
  }
}

void kern_cpu_flash_attention_backward(kern_ctx *k, kern_x *dqkv_x, const kern_x *dout_x,
                                       const kern_x *out_x, const kern_x *qkv_x, const float *lse,
                                       int B, int T, int C, int NH) {
  float *dqkv = dqkv_x;
  const float *dout = dout_x, *out = out_x, *qkv = qkv_x;
  int hs = C / NH;
  float sc = 1.0f / sqrtf((float)hs);
  kern_prec p = k->prec;
#pragma omp parallel
  {
    double *s = xmalloc((size_t)(T > 0 ? T : 1) * sizeof *s);
    double *dq = xmalloc((size_t)hs * sizeof *dq);
    /* dK, dV (T, hs) of one head, gathered over the query rows */
    double *dk = xmalloc(((size_t)T * hs + 1) * sizeof *dk);
    double *dv = xmalloc(((size_t)T * hs + 1) * sizeof *dv);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
      int b = bh / NH, h = bh % NH;
      size_t base = (size_t)b * T * 3 * C + h * hs;
      const float *q = qkv + base, *kk = q + C, *v = q + 2 * C;
      for (size_t i = 0; i < (size_t)T * hs; i++)
        dk[i] = dv[i] = 0.0;
      for (int t = 0; t < T; t++) {
        const float *dy = dout + ((size_t)b * T + t) * C + h * hs;
        const float *y = out + ((size_t)b * T + t) * C + h * hs;
        const float *qt = q + (size_t)t * 3 * C;
        double D = 0.0;
        for (int e = 0; e < hs; e++)
          D += (double)dy[e] * y[e];
        scores(s, qt, kk, t, C, hs, sc);
        for (int e = 0; e < hs; e++)
          dq[e] = 0.0;
        for (int j = 0; j <= t; j++) {
          const float *kj = kk + (size_t)j * 3 * C, *vj = v + (size_t)j * 3 * C;
          double P = kern__rnd((float)exp(s[j] - lse[(size_t)bh * T + t]), p);
          double dP = 0.0;
          for (int e = 0; e < hs; e++)
            dP += (double)dy[e] * vj[e];
          double dS = kern__rnd((float)(P * (dP - D) * sc), p);
          for (int e = 0; e < hs; e++) {
            dq[e] += dS * kj[e];
            dk[(size_t)j * hs + e] += dS * qt[e];
            dv[(size_t)j * hs + e] += P * dy[e];
          }
        }
        float *dqt = dqkv + base + (size_t)t * 3 * C;
        for (int e = 0; e < hs; e++)
          dqt[e] = kern__rnd((float)dq[e], p);
      }
      for (int t = 0; t < T; t++) {
        float *row = dqkv + base + (size_t)t * 3 * C;
        for (int e = 0; e < hs; e++) {
          row[C + e] = kern__rnd((float)dk[(size_t)t * hs + e], p);
          row[2 * C + e] = kern__rnd((float)dv[(size_t)t * hs + e], p);
        }
      }
    }
    free(s);
    free(dq);
    free(dk);
    free(dv);
  }
}

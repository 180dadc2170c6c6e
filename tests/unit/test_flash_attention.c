/* The flash attention ops' CPU twin (kernels/cpu/flash_attention.c) against
 * the CPU attention_forward / attention_backward it replaces on a device:
 * out, lse and dqkv, at fp32 and bf16, over shapes with T = 1, T not a
 * multiple of any tile (64 on the CPU, 32 or 64 on the GPU), and head sizes
 * 32, 64 and 128.
 *
 * Tolerances:
 *   fp32: per element within 1e-5 * (|ref| + rms(ref)), as tests/gpu's
 *     compare(): the two compute the same sums in another order (fp64 here,
 *     fp32 sgemm there) and D = rowsum(dout * out) instead of sum_j A dA: a
 *     few fp32 ulps (6e-8) times the sqrt of the terms summed;
 *   bf16: rms(flash - ref) within 1e-2 * rms(ref), and per element within
 *     5e-2 * (|ref| + rms(ref)). The twin rounds the unnormalised weights
 *     exp(s - m) where attention_forward rounds the probabilities: each of
 *     the up to T weights that feed a product is rounded (2^-9 relative)
 *     independently on the two sides, so the difference is a sum of T
 *     random terms of the summands' scale (|v| ~ 1, while a mean over many
 *     keys is ~0.2): 3e-3 of rms here, a few elements near 3e-2.
 * lse is checked against log(sum_j exp(s_j)) in fp64: within eps * (1 + |ref|)
 * (at bf16 the sum of rounded weights is off by 2^-9 relative at most). */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kernels/kern.h"
#include "trainer/rng.h"

static uint64_t rng[4];

static float *randn(size_t n, kern_prec p) {
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    double u1 = 1.0 - trn_rng_uniform(rng), u2 = trn_rng_uniform(rng);
    float v = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    x[i] = p == KERN_BF16 ? kern_round_bf16(v) : v;
  }
  return x;
}

/* every element within eps * (|ref| + rms(ref)); prints the worst ratio */
static void compare(const char *what, const float *got, const float *ref, size_t n, double eps,
                    double rms_eps) {
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    ss += (double)ref[i] * ref[i];
  double rms = n ? sqrt(ss / n) : 0.0, worst = 0.0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]), lim = eps * (fabs(ref[i]) + rms);
    if (!(d <= lim) && bad++ < 5)
      fprintf(stderr, "  %s [%zu]: flash %.9g reference %.9g (limit %.3g)\n", what, i, got[i],
              ref[i], lim);
    if (lim > 0 && d / lim > worst)
      worst = d / lim;
  }
  double sd = 0.0;
  for (size_t i = 0; i < n; i++)
    sd += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
  double rel = rms > 0 ? sqrt(sd / n) / rms : sqrt(sd / (n ? n : 1));
  printf("  %-8s n %-8zu worst error / limit %.3f, rms(diff) / rms(ref) %.3g%s\n", what, n, worst,
         rel, bad || !(rel <= rms_eps) ? "  FAILED" : "");
  CHECK(bad == 0);
  CHECK(rel <= rms_eps);
}

static void check_shape(kern_prec p, int B, int T, int C, int NH) {
  kern_ctx k;
  kern_cpu_init(&k, p, 2);
  double eps = p == KERN_BF16 ? 5e-2 : 1e-5, rms_eps = p == KERN_BF16 ? 1e-2 : 1e-5;
  double lse_eps = p == KERN_BF16 ? 1e-2 : 1e-5;
  int hs = C / NH;
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  printf("%s B %d T %d C %d NH %d (hs %d)\n", p == KERN_BF16 ? "bf16" : "fp32", B, T, C, NH, hs);
  float *qkv = randn(nq, p), *dy = randn(ny, p);
  float *out = calloc(ny, sizeof(float)), *att = calloc(na, sizeof(float));
  float *fout = calloc(ny, sizeof(float)), *lse = calloc((size_t)B * NH * T, sizeof(float));
  k.ops->attention_forward(&k, out, att, qkv, B, T, C, NH);
  kern_cpu_flash_attention_forward(&k, fout, lse, qkv, B, T, C, NH);
  compare("out", fout, out, ny, eps, rms_eps);

  /* lse against fp64 log-sum-exp of the scaled scores */
  float *rl = malloc((size_t)B * NH * T * sizeof(float));
  double sc = 1.0 / sqrt((double)hs);
  int lbad = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double m = -INFINITY, sum = 0.0, *s = malloc((size_t)(t + 1) * sizeof(double));
        for (int j = 0; j <= t; j++) {
          const float *kj = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
          double d = 0.0;
          for (int e = 0; e < hs; e++)
            d += (double)q[e] * kj[e];
          s[j] = d * sc;
          m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j <= t; j++)
          sum += exp(s[j] - m);
        free(s);
        size_t i = ((size_t)b * NH + h) * T + t;
        rl[i] = (float)(m + log(sum));
        lbad += !(fabs(lse[i] - rl[i]) <= lse_eps * (1.0 + fabs(rl[i])));
      }
  printf("  %-8s n %-8d %s\n", "lse", B * NH * T, lbad ? "FAILED" : "ok");
  CHECK(lbad == 0);

  float *dqkv = calloc(nq, sizeof(float)), *datt = calloc(na, sizeof(float));
  float *fd = malloc(nq * sizeof(float)), *fd2 = malloc(nq * sizeof(float));
  for (size_t i = 0; i < nq; i++)
    fd[i] = fd2[i] = NAN; /* overwritten everywhere */
  k.ops->attention_backward(&k, dqkv, datt, dy, qkv, att, B, T, C, NH);
  kern_cpu_flash_attention_backward(&k, fd, dy, fout, qkv, lse, B, T, C, NH);
  compare("dqkv", fd, dqkv, nq, eps, rms_eps);
  kern_cpu_flash_attention_backward(&k, fd2, dy, fout, qkv, lse, B, T, C, NH);
  CHECK(memcmp(fd, fd2, nq * sizeof(float)) == 0);

  free(qkv), free(dy), free(out), free(att), free(fout), free(lse), free(rl);
  free(dqkv), free(datt), free(fd), free(fd2);
  kern_cpu_close(&k);
}

int main(void) {
  trn_rng_seed(rng, 16);
  static const int shapes[][4] = {
      /* B, T, C, NH */
      {1, 1, 64, 2},    /* T = 1, hs 32 */
      {2, 1, 128, 1},   /* T = 1, hs 128 */
      {2, 37, 64, 2},   /* hs 32, T under one tile */
      {2, 130, 128, 2}, /* hs 64, T past two CPU blocks of 64, not a tile multiple */
      {1, 97, 256, 2},  /* hs 128 */
      {1, 200, 768, 12} /* GPT-2's heads (hs 64) */
  };
  for (int pi = 0; pi < 2; pi++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      check_shape(pi ? KERN_BF16 : KERN_FP32, shapes[i][0], shapes[i][1], shapes[i][2],
                  shapes[i][3]);
  CHECK_DONE();
}

/* Optimizers: AdamW against an fp64 reference of the update rule; the
 * 8-bit code books; adamw8bit tracking AdamW on a noisy quadratic with a
 * quarter of the state. */
#include <string.h>

#include "check.h"
#include "kernels/kern.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/rng.h"

static void test_adamw_reference(void) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 2);
  enum { N = 37 };
  float p[N], g[N], m[N] = {0}, v[N] = {0};
  double rp[N], rm[N] = {0}, rv[N] = {0};
  uint64_t r[4];
  trn_rng_seed(r, 1);
  for (int i = 0; i < N; i++)
    rp[i] = p[i] = (float)(trn_rng_uniform(r) - 0.5);
  for (int step = 1; step <= 5; step++) {
    for (int i = 0; i < N; i++)
      g[i] = (float)(trn_rng_uniform(r) - 0.5);
    kern_adamw_args a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step, NULL};
    k.ops->adamw(&k, p, NULL, g, m, v, N, &a);
    for (int i = 0; i < N; i++) {
      double gi = g[i] * 0.5;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      double mh = rm[i] / (1 - pow(0.9, step)), vh = rv[i] / (1 - pow(0.95, step));
      rp[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * rp[i]);
    }
  }
  /* fp32 arithmetic against fp64: a few ulps of the update per step */
  for (int i = 0; i < N; i++)
    CHECK_NEAR(p[i], rp[i], 1e-6, 1e-5);
}

static void test_codes(void) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 1);
  CHECK(kern_q8_signed_value(0) == 0.0f);
  CHECK(kern_q8_signed_value(127) == 1.0f);
  CHECK(kern_q8_signed_value(-127) == -1.0f);
  CHECK(kern_q8_unsigned_value(0) == 0.0f);
  CHECK(kern_q8_unsigned_value(255) == 1.0f);
  for (int q = -126; q <= 127; q++)
    CHECK(kern_q8_signed_value(q) > kern_q8_signed_value(q - 1));
  for (int q = 1; q <= 255; q++)
    CHECK(kern_q8_unsigned_value(q) > kern_q8_unsigned_value(q - 1));
  /* resolution near zero: the smallest nonzero magnitudes are tiny */
  CHECK(kern_q8_signed_value(1) < 1e-6f);
  CHECK(kern_q8_unsigned_value(1) < 1e-9f);
}

/* Minimise sum (p - t)^2 / 2 from noisy gradients with both optimizers
 * and the same noise: 8-bit moments must reach nearly the same loss. */
static void test_8bit_tracks_32bit(void) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 2);
  enum { N = 4096 };
  float *p32 = malloc(N * 4), *p8 = malloc(N * 4), *g = malloc(N * 4), *t = malloc(N * 4);
  float *m = calloc(N, 4), *v = calloc(N, 4), *sm = calloc(N / KERN_Q8_BLOCK, 4),
        *sv = calloc(N / KERN_Q8_BLOCK, 4);
  int8_t *qm = calloc(N, 1);
  uint8_t *qv = calloc(N, 1);
  uint64_t r[4];
  trn_rng_seed(r, 3);
  for (int i = 0; i < N; i++) {
    t[i] = (float)(2 * trn_rng_uniform(r) - 1) * (1 + i % 7); /* mixed scales */
    p32[i] = p8[i] = 0;
  }
  double loss0 = 0;
  for (int i = 0; i < N; i++)
    loss0 += 0.5 * t[i] * t[i];
  uint64_t noise[4];
  for (int step = 1; step <= 400; step++) {
    kern_adamw_args a = {0.05f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, step, NULL};
    trn_rng_seed(noise, (uint64_t)step);
    for (int i = 0; i < N; i++)
      g[i] = p32[i] - t[i] + (float)(0.3 * (trn_rng_uniform(noise) - 0.5));
    k.ops->adamw(&k, p32, NULL, g, m, v, N, &a);
    trn_rng_seed(noise, (uint64_t)step);
    for (int i = 0; i < N; i++)
      g[i] = p8[i] - t[i] + (float)(0.3 * (trn_rng_uniform(noise) - 0.5));
    k.ops->adamw8bit(&k, p8, NULL, g, qm, qv, sm, sv, N, &a);
  }
  double l32 = 0, l8 = 0;
  for (int i = 0; i < N; i++) {
    l32 += 0.5 * (p32[i] - t[i]) * (p32[i] - t[i]);
    l8 += 0.5 * (p8[i] - t[i]) * (p8[i] - t[i]);
  }
  printf("quadratic: loss %.4g -> adamw %.4g, adamw8bit %.4g\n", loss0, l32, l8);
  CHECK(l32 < 0.01 * loss0);
  /* both converge to the noise floor; 8-bit within 2x of 32-bit there */
  CHECK(l8 < 0.01 * loss0);
  CHECK(l8 < 2.0 * l32 + 1e-3 * loss0);
  free(p32), free(p8), free(g), free(t), free(m), free(v), free(sm), free(sv), free(qm), free(qv);
}

static void test_state_bytes(void) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 1);
  rcfg_shape s = {.n_layer = 2, .d_model = 64, .n_head = 4, .seq_len = 32, .vocab_size = 50};
  trn_model m;
  CHECK_INT_EQ(trn_model_init(&m, &k, &s, 1, 0, 0), 0);
  trn_optim a, b;
  CHECK_INT_EQ(trn_optim_init(&a, &m, 0), 0);
  CHECK_INT_EQ(trn_optim_init(&b, &m, 1), 0);
  CHECK_INT_EQ((long long)a.state_bytes, (long long)(8 * m.nparams));
  /* 2 bytes per parameter plus two fp32 absmax per 256-value block */
  CHECK(b.state_bytes >= 2 * m.nparams);
  CHECK(b.state_bytes < 2 * m.nparams + 2 * 4 * (m.nparams / KERN_Q8_BLOCK + TRN_NTENSORS));
  printf("state bytes: adamw %zu, adamw8bit %zu (%.2fx smaller)\n", a.state_bytes, b.state_bytes,
         (double)a.state_bytes / b.state_bytes);
  trn_optim_free(&a);
  trn_optim_free(&b);
  trn_model_free(&m);
}

int main(void) {
  test_adamw_reference();
  test_codes();
  test_8bit_tracks_32bit();
  test_state_bytes();
  CHECK_DONE();
}

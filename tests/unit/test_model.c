/* The whole GPT: finite-difference gradient check in fp32, recomputation
 * bitwise equal to stored activations, micro-batch accumulation equal to
 * the whole batch, parameter counts equal to the closed forms. */
#include <string.h>

#include "check.h"
#include "runcfg/flops.h"
#include "trainer/model.h"
#include "trainer/rng.h"

static const rcfg_shape S = {2, 16, 2, 8, 11}; /* L, d, heads, T, V */

static void random_tokens(int32_t *t, int n, uint64_t seed) {
  uint64_t r[4];
  trn_rng_seed(r, seed);
  for (int i = 0; i < n; i++)
    t[i] = (int32_t)(trn_rng_next(r) % (uint64_t)S.vocab_size);
}

static void test_counts(void) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 2);
  trn_model m;
  CHECK_INT_EQ(trn_model_init(&m, &k, &S, 2, 0, 0), 0);
  CHECK_INT_EQ((long long)m.nparams, rcfg_params(&S));
  int64_t L = S.n_layer, d = S.d_model;
  CHECK_INT_EQ(rcfg_nonembedding_params(&S), L * (12 * d * d + 13 * d) + 2 * d);
  CHECK_NEAR(rcfg_flops_per_token(&S), 6.0 * (12.0 * 2 * 16 * 16 + 16.0 * 11) + 6.0 * 2 * 8 * 16, 0,
             1e-15);
  trn_model_free(&m);
}

/* m on k (the CPU kernels at prec, 2 threads): batch rows of the test
 * shape S, weights initialised from seed. */
static void model_at(kern_ctx *k, kern_prec prec, trn_model *m, int batch, uint64_t seed) {
  kern_cpu_init(k, prec, 2);
  CHECK_INT_EQ(trn_model_init(m, k, &S, batch, 0, 0), 0);
  trn_model_init_weights(m, seed);
}

/* Whole-model gradient: central differences of the mean loss on a sample
 * of every tensor's entries. Tolerance as in test_kernels (fp32 forward,
 * h = 1e-2): 3% of the tensor's gradient scale; a wrong backward is off by
 * O(1) of it. */
static void test_gradients(void) {
  kern_ctx k;
  trn_model m;
  model_at(&k, KERN_FP32, &m, 3, 7);
  /* larger weights than the init so every path carries gradient */
  uint64_t r[4];
  trn_rng_seed(r, 99);
  for (size_t i = 0; i < m.nparams; i++)
    m.params[i] += (float)(0.3 * (trn_rng_uniform(r) - 0.5));
  int n = 3 * S.seq_len;
  int32_t tok[3 * 8 + 1];
  random_tokens(tok, n + 1, 5);
  trn_model_forward(&m, 3, tok, tok + 1);
  trn_model_backward(&m, 1.0f);
  float *g = malloc(m.nparams * sizeof(float));
  memcpy(g, m.grads, m.nparams * sizeof(float));
  int bad = 0;
  for (int t = 0; t < TRN_NTENSORS; t++) {
    const trn_tensor_info *ti = &m.tensors[t];
    double scale = 0;
    for (size_t i = 0; i < ti->size; i++)
      scale = fabs(g[ti->offset + i]) > scale ? fabs(g[ti->offset + i]) : scale;
    for (int p = 0; p < 12; p++) {
      size_t i = ti->offset + (size_t)(trn_rng_uniform(r) * ti->size);
      float orig = m.params[i];
      const float h = 1e-2f;
      m.params[i] = orig + h;
      double fp = trn_model_forward(&m, 3, tok, tok + 1);
      m.params[i] = orig - h;
      double fm = trn_model_forward(&m, 3, tok, tok + 1);
      m.params[i] = orig;
      double num = (fp - fm) / (2 * h);
      if (fabs(num - g[i]) > 3e-2 * scale + 1e-6) {
        if (bad++ < 8)
          fprintf(stderr, "%s[%zu]: numeric %.6g analytic %.6g (scale %.3g)\n", ti->name,
                  i - ti->offset, num, g[i], scale);
      }
    }
    CHECK(scale > 0);
  }
  CHECK_INT_EQ(bad, 0);
  free(g);
  trn_model_free(&m);
}

/* a and b on k (the CPU kernels at prec, 2 threads), both with weights
 * from seed: a takes the batch of 4 at once and stores its activations;
 * b takes b_batch rows, recomputing (b_recompute) and accumulating
 * micro-batches (b_accum) as asked, so the two differ only there. */
static void model_pair(kern_ctx *k, kern_prec prec, trn_model *a, trn_model *b, int b_batch,
                       int b_recompute, int b_accum, uint64_t seed) {
  kern_cpu_init(k, prec, 2);
  CHECK_INT_EQ(trn_model_init(a, k, &S, 4, 0, 0), 0);
  CHECK_INT_EQ(trn_model_init(b, k, &S, b_batch, b_recompute, b_accum), 0);
  trn_model_init_weights(a, seed);
  trn_model_init_weights(b, seed);
}

/* Recomputing each block's activations in the backward pass gives the
 * same bits as storing them, with less activation memory. */
static void test_recompute(kern_prec prec) {
  kern_ctx k;
  trn_model a, b;
  model_pair(&k, prec, &a, &b, 4, 1, 0, 3);
  int32_t tok[4 * 8 + 1];
  random_tokens(tok, 4 * 8 + 1, 11);
  double la = trn_model_forward(&a, 4, tok, tok + 1);
  double lb = trn_model_forward(&b, 4, tok, tok + 1);
  trn_model_backward(&a, 1.0f);
  trn_model_backward(&b, 1.0f);
  CHECK(la == lb);
  CHECK(memcmp(a.grads, b.grads, a.nparams * sizeof(float)) == 0);
  CHECK(trn_model_activation_bytes(&b) < trn_model_activation_bytes(&a));
  trn_model_free(&a);
  trn_model_free(&b);
}

/* The mean of the gradients of two micro-batches of 2 equals the gradient
 * of the batch of 4, up to fp32 summation order (1e-5 relative to scale). */
static void test_accumulation(void) {
  kern_ctx k;
  trn_model whole, micro;
  model_pair(&k, KERN_FP32, &whole, &micro, 2, 0, 1, 5);
  int32_t tok[4 * 8 + 1];
  random_tokens(tok, 4 * 8 + 1, 13);
  /* the whole batch's windows are tok[s*T .. s*T+T] for s = 0..3 */
  trn_model_forward(&whole, 4, tok, tok + 1);
  trn_model_backward(&whole, 1.0f);
  for (int i = 0; i < 2; i++) {
    trn_model_forward(&micro, 2, tok + i * 16, tok + i * 16 + 1);
    trn_model_backward(&micro, 1.0f);
    k.ops->accumulate(&k, micro.grads, micro.mgrads, 0.5f, micro.nparams, i == 0);
  }
  double scale = sqrt(k.ops->sumsq(&k, whole.grads, whole.nparams) / whole.nparams);
  double maxdiff = 0;
  for (size_t i = 0; i < whole.nparams; i++) {
    double d = fabs(whole.grads[i] - micro.grads[i]);
    maxdiff = d > maxdiff ? d : maxdiff;
  }
  CHECK(maxdiff <= 1e-5 * scale * 10);
  trn_model_free(&whole);
  trn_model_free(&micro);
}

/* In bf16 the kernels see weights rounded to bf16; the master stays fp32. */
static void test_low_precision_weights(void) {
  kern_ctx k;
  trn_model m;
  model_at(&k, KERN_BF16, &m, 2, 9);
  CHECK(m.params_low != (kern_x *)m.params);
  const float *low = m.params_low; /* kern_x is float on the CPU */
  int differ = 0;
  for (size_t i = 0; i < m.nparams; i++) {
    CHECK(low[i] == kern_round_bf16(m.params[i]));
    differ += low[i] != m.params[i];
  }
  CHECK(differ > 0);
  trn_model_free(&m);
}

int main(void) {
  test_counts();
  test_gradients();
  test_recompute(KERN_FP32);
  test_recompute(KERN_BF16);
  test_accumulation();
  test_low_precision_weights();
  CHECK_DONE();
}

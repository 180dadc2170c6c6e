/* The whole model, in each family and parametrisation: finite-difference
 * gradient check in fp32, recomputation bitwise equal to stored
 * activations, micro-batch accumulation equal to the whole batch, parameter
 * counts equal to the closed forms, muP's factors against a table worked
 * by hand. */
#include <string.h>

#include "check.h"
#include "runcfg/flops.h"
#include "trainer/model.h"
#include "trainer/mup.h"
#include "trainer/rng.h"

/* the shape under test: each of SHAPES in turn */
static rcfg_shape S;

/* L 2, d 16, 2 heads (hs 8), T 8, V 11; llama's F = 32 ceil(8/3 x 16 / 32) = 64 */
#define BASE .n_layer = 2, .d_model = 16, .n_head = 2, .seq_len = 8, .vocab_size = 11
#define LLAMA \
  .family = RCFG_LLAMA, .mlp_ratio = 8.0 / 3.0, .mlp_multiple_of = 32, .rope_theta = 10000.0
static const rcfg_shape SHAPES[] = {
    {BASE},
    {BASE, .parametrization = RCFG_MUP, .base_width = 8},
    {BASE, LLAMA, .untied = 1},
    {BASE, LLAMA, .untied = 0, .qk_norm = 1},
    {BASE, LLAMA, .untied = 1, .qk_norm = 1, .parametrization = RCFG_MUP, .base_width = 4},
};
#define NSHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

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
  int64_t L = S.n_layer, d = S.d_model, V = S.vocab_size;
  if (S.family == RCFG_GPT2) {
    CHECK_INT_EQ(rcfg_nonembedding_params(&S), L * (12 * d * d + 13 * d) + 2 * d);
    CHECK_NEAR(rcfg_flops_per_token(&S), 6.0 * (12.0 * 2 * 16 * 16 + 16.0 * 11) + 6.0 * 2 * 8 * 16,
               0, 1e-15);
  } else { /* F = 64, hs = 8 */
    CHECK_INT_EQ(rcfg_ffn_hidden(&S), 64);
    int64_t ne = L * (4 * d * d + 3 * 64 * d + 2 * d + (S.qk_norm ? 2 * 8 : 0)) + d;
    CHECK_INT_EQ(rcfg_nonembedding_params(&S), ne);
    CHECK_INT_EQ(rcfg_params(&S), ne + V * d * (S.untied ? 2 : 1));
    CHECK_NEAR(rcfg_flops_per_token(&S),
               6.0 * ((4.0 * 16 * 16 + 3.0 * 64 * 16) * 2 + 16.0 * 11) + 6.0 * 2 * 8 * 16 +
                   12.0 * 2 * 16,
               0, 1e-15);
    CHECK(m.tensors[TRN_WPE].size == 0 && m.tensors[TRN_QKVB].size == 0);
    CHECK_INT_EQ((long long)m.tensors[TRN_HEAD].size, S.untied ? V * d : 0);
    CHECK_INT_EQ((long long)m.tensors[TRN_FCW].size, L * 2 * 64 * d);
  }
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
    if (!ti->size) /* a tensor this family lacks */
      continue;
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

/* muP's factors at width_mult 2 and 4, against the table in trainer/mup.h
 * worked by hand: hidden matrices' rates / m and init / sqrt(m), logits x
 * 1/m, q scaled by 1/sqrt(hs) (scores q.k / hs); all 1 in sp. */
static void test_mup_table(void) {
  static const struct {
    int d, base;
    float lr_hidden, out_mult, qscale;
    double init_hidden;
  } rows[] = {
      {16, 8, 0.5f, 0.5f, 0.35355339f, 0.70710678}, /* m = 2, hs = 8 */
      {64, 16, 0.25f, 0.25f, 0.17677670f, 0.5},     /* m = 4, hs = 32 */
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    rcfg_shape s = {BASE, LLAMA, .untied = 1, .parametrization = RCFG_MUP};
    s.d_model = rows[r].d;
    s.base_width = rows[r].base;
    kern_ctx k;
    kern_cpu_init(&k, KERN_FP32, 2);
    trn_model m;
    CHECK_INT_EQ(trn_model_init(&m, &k, &s, 1, 0, 0), 0);
    for (int t = 0; t < TRN_NTENSORS; t++) {
      int hidden = t == TRN_QKVW || t == TRN_ATTPROJW || t == TRN_FCW || t == TRN_FCPROJW;
      CHECK_NEAR(m.tensors[t].lr_scale, hidden ? rows[r].lr_hidden : 1.0f, 0, 1e-7);
      CHECK_NEAR(trn_mup_init_scale(&s, t), hidden ? rows[r].init_hidden : 1.0, 0, 1e-7);
    }
    CHECK_NEAR(m.out_mult, rows[r].out_mult, 0, 1e-7);
    CHECK_NEAR(m.attn_qscale, rows[r].qscale, 0, 1e-6);
    trn_model_free(&m);
    /* sp: every factor 1 */
    s.parametrization = RCFG_SP;
    CHECK_INT_EQ(trn_model_init(&m, &k, &s, 1, 0, 0), 0);
    for (int t = 0; t < TRN_NTENSORS; t++)
      CHECK(m.tensors[t].lr_scale == 1.0f && trn_mup_init_scale(&s, t) == 1.0);
    CHECK(m.out_mult == 1.0f && m.attn_qscale == 1.0f);
    trn_model_free(&m);
  }
}

/* Under muP the initial hidden weights' spread is sigma / sqrt(m): measured
 * on the drawn weights at m = 4 (d 64, base 16) against sp. */
static void test_mup_init(void) {
  rcfg_shape s = {BASE, LLAMA, .untied = 1};
  s.d_model = 64;
  double sd[2];
  for (int mup = 0; mup < 2; mup++) {
    s.parametrization = mup ? RCFG_MUP : RCFG_SP;
    s.base_width = mup ? 16 : 0;
    kern_ctx k;
    kern_cpu_init(&k, KERN_FP32, 2);
    trn_model m;
    CHECK_INT_EQ(trn_model_init(&m, &k, &s, 1, 0, 0), 0);
    trn_model_init_weights(&m, 3);
    const trn_tensor_info *t = &m.tensors[TRN_QKVW];
    double ss = 0;
    for (size_t i = 0; i < t->size; i++)
      ss += (double)m.params[t->offset + i] * m.params[t->offset + i];
    sd[mup] = sqrt(ss / t->size);
    trn_model_free(&m);
  }
  CHECK_NEAR(sd[0], 0.02, 0, 0.03);        /* 12288 draws: the spread of a spread is 0.6% */
  CHECK_NEAR(sd[1] / sd[0], 0.5, 0, 1e-6); /* the same draws, scaled */
}

int main(void) {
  for (int i = 0; i < NSHAPES; i++) {
    S = SHAPES[i];
    test_counts();
    test_gradients();
    test_recompute(KERN_FP32);
    test_recompute(KERN_BF16);
    test_accumulation();
    test_low_precision_weights();
  }
  test_mup_table();
  test_mup_init();
  CHECK_DONE();
}

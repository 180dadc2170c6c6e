/* CPU kernels: finite-difference gradient checks of every layer in fp32,
 * forward results against fp64 references, and the precision emulation
 * (bf16 and fp16 rounding) against independent references. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kernels/kern.h"
#include "trainer/rng.h"

static kern_ctx K;
static uint64_t rng[4];

static float *randn(size_t n, float scale) {
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    double u1 = 1.0 - trn_rng_uniform(rng), u2 = trn_rng_uniform(rng);
    x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2) * scale);
  }
  return x;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

/* The scalar loss f = sum(r * out) of a layer as a function of its inputs;
 * a closure the finite-difference check calls after perturbing an input. */
typedef double (*loss_fn)(void *ctx);

/* Central differences on up to `probes` entries of x (chosen at random)
 * against the analytic gradient g. fp32 forward passes limit the accuracy
 * of a difference quotient to about eps32 * |f| / h, so with h = 1e-2 and
 * the O(h^2) truncation error the agreement expected is ~1e-3 relative to
 * the gradient's scale; 2e-2 leaves margin without hiding a wrong formula
 * (those are off by O(1)). */
static void fd_check(const char *name, float *x, const float *g, size_t n, loss_fn f, void *ctx,
                     int probes) {
  double gscale = 0;
  for (size_t i = 0; i < n; i++)
    gscale = fabs(g[i]) > gscale ? fabs(g[i]) : gscale;
  int bad = 0;
  for (int p = 0; p < probes; p++) {
    size_t i = probes >= (int)n ? (size_t)p : (size_t)(trn_rng_uniform(rng) * n);
    if (i >= n)
      break;
    float orig = x[i];
    const float h = 1e-2f;
    x[i] = orig + h;
    double fp = f(ctx);
    x[i] = orig - h;
    double fm = f(ctx);
    x[i] = orig;
    double num = (fp - fm) / (2.0 * h);
    if (fabs(num - g[i]) > 2e-2 * gscale + 1e-5) {
      if (bad++ < 5)
        fprintf(stderr, "%s[%zu]: numeric %.6g analytic %.6g (scale %.3g)\n", name, i, num, g[i],
                gscale);
    }
  }
  CHECK(bad == 0);
  CHECK(gscale > 0);
}

/* ---- matmul ---- */
typedef struct {
  int N, C, OC;
  float *inp, *w, *b, *out, *r;
} mm_t;

static double mm_loss(void *v) {
  mm_t *t = v;
  K.ops->matmul_forward(&K, t->out, t->inp, t->w, t->b, t->N, t->C, t->OC);
  return dot(t->out, t->r, (size_t)t->N * t->OC);
}

static void test_matmul(void) {
  mm_t t = {6, 5, 7, NULL, NULL, NULL, NULL, NULL};
  t.inp = randn(30, 1);
  t.w = randn(35, 1);
  t.b = randn(7, 1);
  t.out = zeros(42);
  t.r = randn(42, 1);
  /* forward against a direct fp64 product */
  K.ops->matmul_forward(&K, t.out, t.inp, t.w, t.b, t.N, t.C, t.OC);
  for (int i = 0; i < t.N; i++)
    for (int o = 0; o < t.OC; o++) {
      double s = t.b[o];
      for (int c = 0; c < t.C; c++)
        s += (double)t.inp[i * t.C + c] * t.w[o * t.C + c];
      CHECK_NEAR(t.out[i * t.OC + o], s, 1e-5, 1e-5);
    }
  float *dinp = zeros(30), *dw = zeros(35), *db = zeros(7);
  K.ops->matmul_backward(&K, dinp, dw, db, t.r, t.inp, t.w, t.N, t.C, t.OC);
  fd_check("matmul.dinp", t.inp, dinp, 30, mm_loss, &t, 30);
  fd_check("matmul.dw", t.w, dw, 35, mm_loss, &t, 35);
  fd_check("matmul.db", t.b, db, 7, mm_loss, &t, 7);
  /* dw and db accumulate: a second backward doubles them */
  float dw0 = dw[3], db0 = db[2];
  K.ops->matmul_backward(&K, dinp, dw, db, t.r, t.inp, t.w, t.N, t.C, t.OC);
  CHECK_NEAR(dw[3], 2 * dw0, 1e-6, 1e-6);
  CHECK_NEAR(db[2], 2 * db0, 1e-6, 1e-6);
  free(t.inp), free(t.w), free(t.b), free(t.out), free(t.r), free(dinp), free(dw), free(db);
}

/* ---- layernorm ---- */
typedef struct {
  int N, C;
  float *inp, *w, *b, *out, *mean, *rstd, *r;
} ln_t;

static double ln_loss(void *v) {
  ln_t *t = v;
  K.ops->layernorm_forward(&K, t->out, t->mean, t->rstd, t->inp, t->w, t->b, t->N, t->C);
  return dot(t->out, t->r, (size_t)t->N * t->C);
}

static void test_layernorm(void) {
  ln_t t = {4, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  t.inp = randn(64, 2);
  t.w = randn(16, 1);
  t.b = randn(16, 1);
  t.out = zeros(64);
  t.mean = zeros(4);
  t.rstd = zeros(4);
  t.r = randn(64, 1);
  ln_loss(&t);
  /* forward: each normalised row has mean 0 and variance 1 before w, b */
  for (int i = 0; i < t.N; i++) {
    double m = 0, v = 0;
    for (int c = 0; c < t.C; c++)
      m += t.inp[i * t.C + c];
    m /= t.C;
    for (int c = 0; c < t.C; c++)
      v += (t.inp[i * t.C + c] - m) * (t.inp[i * t.C + c] - m);
    v /= t.C;
    CHECK_NEAR(t.mean[i], m, 1e-6, 1e-5);
    CHECK_NEAR(t.rstd[i], 1.0 / sqrt(v + 1e-5), 0, 1e-5);
  }
  float *dinp = zeros(64), *dw = zeros(16), *db = zeros(16);
  K.ops->layernorm_backward(&K, dinp, dw, db, t.r, t.inp, t.w, t.mean, t.rstd, t.N, t.C);
  fd_check("layernorm.dinp", t.inp, dinp, 64, ln_loss, &t, 64);
  fd_check("layernorm.dw", t.w, dw, 16, ln_loss, &t, 16);
  fd_check("layernorm.db", t.b, db, 16, ln_loss, &t, 16);
  free(t.inp), free(t.w), free(t.b), free(t.out), free(t.mean), free(t.rstd), free(t.r);
  free(dinp), free(dw), free(db);
}

/* ---- attention ---- */
typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *att, *r;
} at_t;

static double at_loss(void *v) {
  at_t *t = v;
  K.ops->attention_forward(&K, t->out, t->att, t->qkv, t->B, t->T, t->C, t->NH);
  return dot(t->out, t->r, (size_t)t->B * t->T * t->C);
}

/* T above the kernel's 64-row blocks exercises the causal blocking. */
static void test_attention(int B, int T, int probes) {
  const int C = 8, NH = 2, hs = 4;
  at_t t = {B, T, C, NH, NULL, NULL, NULL, NULL};
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  t.qkv = randn(nq, 1);
  t.out = zeros(no);
  t.att = zeros(na);
  t.r = randn(no, 1);
  at_loss(&t);
  /* forward against a direct fp64 computation of softmax(QK^T/sqrt(hs)) V */
  double *w = malloc(sizeof(double) * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        double mx = -1e30, sum = 0;
        for (int j = 0; j <= i; j++) {
          double s = 0;
          for (int c = 0; c < hs; c++)
            s += (double)t.qkv[(size_t)(b * T + i) * 3 * C + h * hs + c] *
                 t.qkv[(size_t)(b * T + j) * 3 * C + C + h * hs + c];
          w[j] = s / 2.0;
          mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j <= i; j++)
          sum += (w[j] = exp(w[j] - mx));
        for (int c = 0; c < hs; c++) {
          double y = 0;
          for (int j = 0; j <= i; j++)
            y += w[j] / sum * t.qkv[(size_t)(b * T + j) * 3 * C + 2 * C + h * hs + c];
          CHECK_NEAR(t.out[(size_t)(b * T + i) * C + h * hs + c], y, 1e-6, 1e-5);
        }
        /* causal: no weight on the future */
        for (int j = i + 1; j < T; j++)
          CHECK(t.att[((size_t)(b * NH + h) * T + i) * T + j] == 0.0f);
      }
  free(w);
  float *dqkv = zeros(nq), *datt = zeros(na);
  K.ops->attention_backward(&K, dqkv, datt, t.r, t.qkv, t.att, t.B, t.T, t.C, t.NH);
  fd_check("attention.dqkv", t.qkv, dqkv, nq, at_loss, &t, probes);
  free(t.qkv), free(t.out), free(t.att), free(t.r), free(dqkv), free(datt);
}

/* ---- gelu ---- */
typedef struct {
  size_t n;
  float *inp, *out, *r;
} ge_t;

static double ge_loss(void *v) {
  ge_t *t = v;
  K.ops->gelu_forward(&K, t->out, t->inp, t->n);
  return dot(t->out, t->r, t->n);
}

static void test_gelu(void) {
  ge_t t = {64, randn(64, 2), zeros(64), randn(64, 1)};
  ge_loss(&t);
  for (size_t i = 0; i < t.n; i++) {
    double x = t.inp[i];
    double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    /* the vectorised tanh is accurate to a few float ulps */
    CHECK_NEAR(t.out[i], ref, 1e-6, 1e-5);
  }
  float *dinp = zeros(64);
  K.ops->gelu_backward(&K, dinp, t.inp, t.r, t.n);
  fd_check("gelu.dinp", t.inp, dinp, 64, ge_loss, &t, 64);
  free(t.inp), free(t.out), free(t.r), free(dinp);
}

/* ---- encoder ---- */
typedef struct {
  int B, T, C;
  int32_t *tok;
  float *wte, *wpe, *out, *r;
} en_t;

static double en_loss(void *v) {
  en_t *t = v;
  K.ops->encoder_forward(&K, t->out, t->tok, t->wte, t->wpe, t->B, t->T, t->C);
  return dot(t->out, t->r, (size_t)t->B * t->T * t->C);
}

static void test_encoder(void) {
  int32_t tok[8] = {3, 1, 3, 0, 2, 2, 3, 1}; /* repeated ids: dwte must sum them */
  en_t t = {2, 4, 5, tok, randn(20, 1), randn(20, 1), zeros(40), randn(40, 1)};
  float *dwte = zeros(20), *dwpe = zeros(20);
  en_loss(&t);
  K.ops->encoder_backward(&K, dwte, dwpe, t.r, tok, 2, 4, 5);
  fd_check("encoder.dwte", t.wte, dwte, 20, en_loss, &t, 20);
  fd_check("encoder.dwpe", t.wpe, dwpe, 20, en_loss, &t, 20);
  free(t.wte), free(t.wpe), free(t.out), free(t.r), free(dwte), free(dwpe);
}

/* ---- softmax + cross-entropy ---- */
typedef struct {
  int N, V;
  float *logits, *work, *losses;
  int32_t *tgt;
} xe_t;

static double xe_loss(void *v) {
  xe_t *t = v;
  memcpy(t->work, t->logits, (size_t)t->N * t->V * sizeof(float));
  K.ops->softmax_xent(&K, t->losses, t->work, t->tgt, t->N, t->V, 0.0f);
  double s = 0;
  for (int i = 0; i < t->N; i++)
    s += t->losses[i];
  return s;
}

static void test_xent(void) {
  int32_t tgt[6] = {0, 4, 9, 2, 2, 7};
  xe_t t = {6, 10, randn(60, 3), zeros(60), zeros(6), tgt};
  xe_loss(&t);
  for (int i = 0; i < 6; i++) {
    double mx = -1e30, s = 0;
    for (int v = 0; v < 10; v++)
      mx = t.logits[i * 10 + v] > mx ? t.logits[i * 10 + v] : mx;
    for (int v = 0; v < 10; v++)
      s += exp(t.logits[i * 10 + v] - mx);
    CHECK_NEAR(t.losses[i], log(s) - (t.logits[i * 10 + tgt[i]] - mx), 1e-6, 1e-5);
  }
  float *g = zeros(60);
  memcpy(g, t.logits, sizeof(float) * 60);
  K.ops->softmax_xent(&K, t.losses, g, tgt, 6, 10, 1.0f);
  fd_check("xent.dlogits", t.logits, g, 60, xe_loss, &t, 60);
  free(t.logits), free(t.work), free(t.losses), free(g);
}

/* ---- precision emulation ---- */

/* bf16 reference through fp64: keep 8 significant bits, ties to even
 * (rint rounds half to even in the default mode); below FLT_MIN bf16 is
 * subnormal like fp32, on the fixed grid 2^-133 */
static float ref_bf16(float x) {
  if (isnan(x) || isinf(x) || x == 0)
    return x;
  if (fabsf(x) < FLT_MIN)
    return (float)ldexp(rint(ldexp((double)x, 133)), -133);
  int e;
  double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
  double r = ldexp(rint(ldexp(m, 8)), e - 8);
  return (float)r; /* beyond FLT_MAX this is +-inf, as in bf16 */
}

static void test_precision(void) {
  /* bf16 */
  CHECK(kern_round_bf16(1.0f) == 1.0f);
  CHECK(kern_round_bf16(1.0f + 0x1p-8f) == 1.0f);               /* tie to even */
  CHECK(kern_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); /* tie to even, up */
  CHECK(isinf(kern_round_bf16(FLT_MAX)));
  CHECK(isnan(kern_round_bf16(NAN)));
  /* fp16 */
  CHECK(kern_round_fp16(65504.0f) == 65504.0f);
  CHECK(kern_round_fp16(65519.0f) == 65504.0f);
  CHECK(isinf(kern_round_fp16(65520.0f)));
  CHECK(kern_round_fp16(0x1p-24f) == 0x1p-24f);
  CHECK(kern_round_fp16(0x1p-25f) == 0.0f);         /* tie to even: 0 */
  CHECK(kern_round_fp16(3 * 0x1p-25f) == 0x1p-23f); /* tie to even: 2 */
  CHECK(kern_round_fp16(1.0f + 0x1p-11f) == 1.0f);
  CHECK(kern_round_fp16(-(1.0f + 3 * 0x1p-11f)) == -(1.0f + 0x1p-9f));
  int bad16 = 0, badbf = 0;
  for (int i = 0; i < 2000000; i++) {
    uint32_t u = (uint32_t)trn_rng_next(rng);
    float x;
    memcpy(&x, &u, 4);
    if (isnan(x))
      continue;
    /* the compiler's own conversion is an independent RNE reference */
    float r16 = (float)(_Float16)x;
    float got = kern_round_fp16(x);
    if (memcmp(&r16, &got, 4) != 0 && bad16++ < 3)
      fprintf(stderr, "fp16(%a): %a, expected %a\n", x, got, r16);
    float rb = ref_bf16(x), gb = kern_round_bf16(x);
    if (memcmp(&rb, &gb, 4) != 0 && !(rb == 0 && gb == 0) && badbf++ < 3)
      fprintf(stderr, "bf16(%a): %a, expected %a\n", x, gb, rb);
  }
  CHECK_INT_EQ(bad16, 0);
  CHECK_INT_EQ(badbf, 0);

  /* kernels store their outputs at the context's precision */
  kern_ctx kb;
  kern_cpu_init(&kb, KERN_BF16, 2);
  float a[3] = {1.0f, 1e-3f, 3.14159f}, b[3] = {1e-3f, 2.0f, 1.0f}, o[3];
  kb.ops->residual_forward(&kb, o, a, b, 3);
  for (int i = 0; i < 3; i++)
    CHECK(o[i] == kern_round_bf16(a[i] + b[i]));
}

/* ---- reductions: sums of squares and accumulation ---- */
static void test_reductions(void) {
  size_t n = 100003;
  float *x = randn(n, 1), *y = zeros(n);
  double ref = 0;
  for (size_t i = 0; i < n; i++)
    ref += (double)x[i] * x[i];
  CHECK_NEAR(K.ops->sumsq(&K, x, n), ref, 0, 1e-12);
  double s1 = K.ops->accumulate(&K, y, x, 0.5f, n, 1);
  double s2 = K.ops->accumulate(&K, y, x, 0.5f, n, 0);
  CHECK_NEAR(s1, ref, 0, 1e-12);
  CHECK_NEAR(s2, ref, 0, 1e-12);
  CHECK(y[17] == x[17]);
  /* the same bits with one thread as with two */
  kern_ctx k1;
  kern_cpu_init(&k1, KERN_FP32, 1);
  double one = k1.ops->sumsq(&k1, x, n);
  kern_cpu_init(&K, KERN_FP32, 2);
  CHECK(one == K.ops->sumsq(&K, x, n));
  free(x), free(y);
}

int main(void) {
  trn_rng_seed(rng, 12345);
  kern_cpu_init(&K, KERN_FP32, 2);
  test_matmul();
  test_layernorm();
  test_attention(2, 5, 240);
  test_attention(1, 150, 400);
  test_gelu();
  test_encoder();
  test_xent();
  test_precision();
  test_reductions();
  CHECK_DONE();
}

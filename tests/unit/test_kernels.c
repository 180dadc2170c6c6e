/* CPU kernels: finite-difference gradient checks of every layer in fp32,
 * forward results against fp64 references, and the precision emulation
 * (bf16 and fp16 rounding) against independent references. The llama
 * family's ops (RMSNorm, QK-norm, rotary embeddings, SwiGLU, scale_x, the
 * encoder without positions) get the same checks, plus: QK-norm in place,
 * rotary's backward as its forward's transpose, their outputs at bf16 and
 * fp16 the fp32 results rounded once, and the gains' gradients the same
 * bits at 1 and 2 threads. */
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
 * (those are off by O(1)). fd_check_rows checks a strided part of x and g:
 * entries [off, off + len) of each of `rows` rows of `stride` entries (the
 * q, k or v part of a (N, 3C) qkv), the gradient's scale taken over that
 * part alone; fd_check all n entries. */
static void fd_check_rows(const char *name, float *x, const float *g, size_t rows, size_t stride,
                          size_t off, size_t len, loss_fn f, void *ctx, int probes) {
  size_t n = rows * len;
  double gscale = 0;
  for (size_t j = 0; j < n; j++) {
    size_t i = j / len * stride + off + j % len;
    gscale = fabs(g[i]) > gscale ? fabs(g[i]) : gscale;
  }
  int bad = 0;
  for (int p = 0; p < probes; p++) {
    size_t j = probes >= (int)n ? (size_t)p : (size_t)(trn_rng_uniform(rng) * n);
    if (j >= n)
      break;
    size_t i = j / len * stride + off + j % len;
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

static void fd_check(const char *name, float *x, const float *g, size_t n, loss_fn f, void *ctx,
                     int probes) {
  fd_check_rows(name, x, g, 1, n, 0, n, f, ctx, probes);
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

/* ---- the llama family's ops ---- */

static float *copy(const float *x, size_t n) {
  float *y = malloc(n * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}

/* RMSNorm */
typedef struct {
  int N, C;
  float *inp, *w, *out, *rstd, *r;
} rn_t;

static double rn_loss(void *v) {
  rn_t *t = v;
  K.ops->rmsnorm_forward(&K, t->out, t->rstd, t->inp, t->w, t->N, t->C);
  return dot(t->out, t->r, (size_t)t->N * t->C);
}

static void test_rmsnorm(void) {
  rn_t t = {4, 16, randn(64, 2), randn(16, 1), zeros(64), zeros(4), randn(64, 1)};
  rn_loss(&t);
  /* forward against fp64: out = inp / sqrt(mean(inp^2) + 1e-5) * w */
  for (int i = 0; i < t.N; i++) {
    double ss = 0;
    for (int c = 0; c < t.C; c++)
      ss += (double)t.inp[i * t.C + c] * t.inp[i * t.C + c];
    double rs = 1.0 / sqrt(ss / t.C + 1e-5);
    CHECK_NEAR(t.rstd[i], rs, 0, 1e-5);
    for (int c = 0; c < t.C; c++)
      CHECK_NEAR(t.out[i * t.C + c], t.inp[i * t.C + c] * rs * t.w[c], 1e-6, 1e-5);
  }
  float *dinp = zeros(64), *dw = zeros(16);
  K.ops->rmsnorm_backward(&K, dinp, dw, t.r, t.inp, t.w, t.rstd, t.N, t.C);
  float *dinp1 = copy(dinp, 64), *dw1 = copy(dw, 16);
  fd_check("rmsnorm.dinp", t.inp, dinp, 64, rn_loss, &t, 64);
  fd_check("rmsnorm.dw", t.w, dw, 16, rn_loss, &t, 16);
  /* dinp and dw accumulate: a second backward (from the unperturbed
   * forward's rstd) doubles them, dinp exactly */
  rn_loss(&t);
  K.ops->rmsnorm_backward(&K, dinp, dw, t.r, t.inp, t.w, t.rstd, t.N, t.C);
  for (int i = 0; i < 64; i++)
    CHECK(dinp[i] == 2 * dinp1[i]);
  for (int c = 0; c < 16; c++)
    CHECK_NEAR(dw[c], 2 * dw1[c], 1e-6, 1e-5);
  free(t.inp), free(t.w), free(t.out), free(t.rstd), free(t.r);
  free(dinp), free(dw), free(dinp1), free(dw1);
}

/* QK-norm */
typedef struct {
  int N, C, NH;
  float *qkv, *wq, *wk, *out, *rstd, *r;
} qn_t;

static double qn_loss(void *v) {
  qn_t *t = v;
  K.ops->qknorm_forward(&K, t->out, t->rstd, t->qkv, t->wq, t->wk, t->N, t->C, t->NH);
  return dot(t->out, t->r, (size_t)t->N * 3 * t->C);
}

static void test_qknorm(void) {
  enum { N = 3, C = 16, NH = 2, hs = 8 };
  size_t n = (size_t)N * 3 * C;
  qn_t t = {N,          C, NH, randn(n, 2), randn(hs, 1), randn(hs, 1), zeros(n), zeros(N * 2 * NH),
            randn(n, 1)};
  qn_loss(&t);
  /* forward against fp64: each head of q and k normalised over its hs
   * channels times wq or wk, rstd (N, 2, NH); v copied bit for bit */
  for (int r = 0; r < N; r++) {
    for (int part = 0; part < 2; part++)
      for (int h = 0; h < NH; h++) {
        const float *x = t.qkv + (size_t)r * 3 * C + part * C + h * hs;
        const float *w = part ? t.wk : t.wq;
        double ss = 0;
        for (int c = 0; c < hs; c++)
          ss += (double)x[c] * x[c];
        double rs = 1.0 / sqrt(ss / hs + 1e-5);
        CHECK_NEAR(t.rstd[(r * 2 + part) * NH + h], rs, 0, 1e-5);
        for (int c = 0; c < hs; c++)
          CHECK_NEAR(t.out[(size_t)r * 3 * C + part * C + h * hs + c], x[c] * rs * w[c], 1e-6,
                     1e-5);
      }
    CHECK(memcmp(t.out + (size_t)r * 3 * C + 2 * C, t.qkv + (size_t)r * 3 * C + 2 * C,
                 C * sizeof(float)) == 0);
  }
  /* dqkv is overwritten: start it with garbage */
  float *dqkv = randn(n, 5), *dwq = zeros(hs), *dwk = zeros(hs);
  K.ops->qknorm_backward(&K, dqkv, dwq, dwk, t.r, t.qkv, t.wq, t.wk, t.rstd, N, C, NH);
  /* in place (dqkv == dout), as the model calls it: the same bits */
  float *d2 = copy(t.r, n), *dwq2 = zeros(hs), *dwk2 = zeros(hs);
  K.ops->qknorm_backward(&K, d2, dwq2, dwk2, d2, t.qkv, t.wq, t.wk, t.rstd, N, C, NH);
  CHECK(memcmp(d2, dqkv, n * sizeof(float)) == 0);
  CHECK(memcmp(dwq2, dwq, hs * sizeof(float)) == 0);
  CHECK(memcmp(dwk2, dwk, hs * sizeof(float)) == 0);
  float *dwq1 = copy(dwq, hs), *dwk1 = copy(dwk, hs);
  fd_check_rows("qknorm.dq", t.qkv, dqkv, N, 3 * C, 0, C, qn_loss, &t, N * C);
  fd_check_rows("qknorm.dk", t.qkv, dqkv, N, 3 * C, C, C, qn_loss, &t, N * C);
  fd_check_rows("qknorm.dv", t.qkv, dqkv, N, 3 * C, 2 * C, C, qn_loss, &t, N * C);
  fd_check("qknorm.dwq", t.wq, dwq, hs, qn_loss, &t, hs);
  fd_check("qknorm.dwk", t.wk, dwk, hs, qn_loss, &t, hs);
  /* dwq and dwk accumulate */
  qn_loss(&t);
  K.ops->qknorm_backward(&K, dqkv, dwq, dwk, t.r, t.qkv, t.wq, t.wk, t.rstd, N, C, NH);
  for (int c = 0; c < hs; c++) {
    CHECK_NEAR(dwq[c], 2 * dwq1[c], 1e-6, 1e-5);
    CHECK_NEAR(dwk[c], 2 * dwk1[c], 1e-6, 1e-5);
  }
  free(t.qkv), free(t.wq), free(t.wk), free(t.out), free(t.rstd), free(t.r);
  free(dqkv), free(dwq), free(dwk), free(d2), free(dwq2), free(dwk2), free(dwq1), free(dwk1);
}

/* rotary embeddings: linear in qkv, so the gradient of f = sum(r * rope(qkv))
 * is rope_backward(r), the forward's transpose */
typedef struct {
  int B, T, C, NH;
  float theta, qscale;
  float *qkv, *work, *r;
} rp_t;

static double rp_loss(void *v) {
  rp_t *t = v;
  size_t n = (size_t)t->B * t->T * 3 * t->C;
  memcpy(t->work, t->qkv, n * sizeof(float));
  K.ops->rope_forward(&K, t->work, t->B, t->T, t->C, t->NH, t->theta, t->qscale);
  return dot(t->work, t->r, n);
}

static void test_rope(float theta, float qscale) {
  enum { B = 2, T = 9, C = 16, NH = 2, hs = 8, half = 4 };
  size_t n = (size_t)B * T * 3 * C;
  rp_t t = {B, T, C, NH, theta, qscale, randn(n, 1), zeros(n), randn(n, 1)};
  rp_loss(&t);
  /* forward against fp64: channel i < hs/2 of each head pairs with i + hs/2
   * and turns by t * theta^(-2i/hs); q then times qscale; v untouched */
  for (int b = 0; b < B; b++)
    for (int p = 0; p < T; p++) {
      size_t row = (size_t)(b * T + p) * 3 * C;
      for (int part = 0; part < 2; part++)
        for (int h = 0; h < NH; h++)
          for (int i = 0; i < half; i++) {
            size_t o = row + part * C + h * hs + i;
            double ang = theta > 0 ? p * pow(theta, -2.0 * i / hs) : 0.0;
            double x1 = t.qkv[o], x2 = t.qkv[o + half], s = part ? 1.0 : qscale;
            CHECK_NEAR(t.work[o], (x1 * cos(ang) - x2 * sin(ang)) * s, 1e-6, 1e-5);
            CHECK_NEAR(t.work[o + half], (x2 * cos(ang) + x1 * sin(ang)) * s, 1e-6, 1e-5);
          }
      CHECK(memcmp(t.work + row + 2 * C, t.qkv + row + 2 * C, C * sizeof(float)) == 0);
    }
  float *g = copy(t.r, n);
  K.ops->rope_backward(&K, g, B, T, C, NH, theta, qscale);
  for (int r = 0; r < B * T; r++) /* v's gradient passes as it is */
    CHECK(memcmp(g + (size_t)r * 3 * C + 2 * C, t.r + (size_t)r * 3 * C + 2 * C,
                 C * sizeof(float)) == 0);
  char name[64];
  snprintf(name, sizeof name, "rope(theta %g, qscale %g).dqkv", theta, qscale);
  fd_check(name, t.qkv, g, n, rp_loss, &t, 160);
  /* with qscale 1 the rotation back undoes the rotation */
  float *x = copy(t.qkv, n);
  K.ops->rope_forward(&K, x, B, T, C, NH, theta, 1.0f);
  K.ops->rope_backward(&K, x, B, T, C, NH, theta, 1.0f);
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = fabs(x[i] - t.qkv[i]) > worst ? fabs(x[i] - t.qkv[i]) : worst;
  CHECK(worst <= 1e-6);
  free(t.qkv), free(t.work), free(t.r), free(g), free(x);
}

/* SwiGLU */
typedef struct {
  int N, F;
  float *inp, *out, *r;
} sw_t;

static double sw_loss(void *v) {
  sw_t *t = v;
  K.ops->swiglu_forward(&K, t->out, t->inp, t->N, t->F);
  return dot(t->out, t->r, (size_t)t->N * t->F);
}

static void test_swiglu(void) {
  enum { N = 4, F = 12 };
  sw_t t = {N, F, randn(N * 2 * F, 2), zeros(N * F), randn(N * F, 1)};
  sw_loss(&t);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < F; c++) {
      double g = t.inp[r * 2 * F + c], u = t.inp[r * 2 * F + F + c];
      CHECK_NEAR(t.out[r * F + c], g / (1.0 + exp(-g)) * u, 1e-6, 1e-5);
    }
  float *dinp = randn(N * 2 * F, 5); /* overwritten: start with garbage */
  K.ops->swiglu_backward(&K, dinp, t.inp, t.r, N, F);
  fd_check("swiglu.dinp", t.inp, dinp, N * 2 * F, sw_loss, &t, N * 2 * F);
  free(t.inp), free(t.out), free(t.r), free(dinp);
}

/* scale_x: x * s, over lengths that split unevenly between threads */
static void test_scale_x(void) {
  size_t n = 1031;
  float *x = randn(n, 3), *y = copy(x, n);
  K.ops->scale_x(&K, y, 0.3f, n);
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += y[i] != x[i] * 0.3f;
  CHECK_INT_EQ(bad, 0);
  free(x), free(y);
}

/* the encoder without learned positions (wpe NULL, dwpe NULL) */
static void test_encoder_nopos(void) {
  int32_t tok[8] = {3, 1, 3, 0, 2, 2, 3, 1};
  en_t t = {2, 4, 5, tok, randn(20, 1), NULL, zeros(40), randn(40, 1)};
  en_loss(&t);
  for (int r = 0; r < 8; r++) /* wte's rows, bit for bit */
    CHECK(memcmp(t.out + r * 5, t.wte + tok[r] * 5, 5 * sizeof(float)) == 0);
  float *dwte = zeros(20), *dwte2 = zeros(20), *dwpe = zeros(20);
  K.ops->encoder_backward(&K, dwte, NULL, t.r, tok, 2, 4, 5);
  fd_check("encoder(no wpe).dwte", t.wte, dwte, 20, en_loss, &t, 20);
  /* dwte as with positions */
  K.ops->encoder_backward(&K, dwte2, dwpe, t.r, tok, 2, 4, 5);
  CHECK(memcmp(dwte, dwte2, 20 * sizeof(float)) == 0);
  free(t.wte), free(t.out), free(t.r), free(dwte), free(dwte2), free(dwpe);
}

/* The llama ops at bf16 and fp16: from inputs already at the precision,
 * every kern_x output is the fp32 kernel's result rounded once, and the
 * fp32 values (rstd, the gains' gradients) are the fp32 kernel's bits. */
static float *rounded(size_t n, float scale, float (*rnd)(float)) {
  float *x = randn(n, scale);
  for (size_t i = 0; i < n; i++)
    x[i] = rnd(x[i]);
  return x;
}

static void check_rounded(const char *what, const char *prec, const float *lo, const float *hi,
                          size_t n, float (*rnd)(float)) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = rnd(hi[i]);
    if (memcmp(&lo[i], &want, 4) != 0 && bad++ < 3)
      fprintf(stderr, "%s at %s [%zu]: %a, expected %a (fp32 %a)\n", what, prec, i, lo[i], want,
              hi[i]);
  }
  if (bad)
    fprintf(stderr, "%s at %s: %d of %zu values not the fp32 result rounded\n", what, prec, bad, n);
  CHECK_INT_EQ(bad, 0);
}

static void check_bits(const char *what, const char *prec, const float *a, const float *b,
                       size_t n) {
  if (memcmp(a, b, n * sizeof(float)) != 0) {
    fprintf(stderr, "%s at %s: not the fp32 kernel's bits\n", what, prec);
    CHECK(0);
  }
}

static void test_llama_precision(void) {
  enum { N = 6, C = 32, NH = 4, B = 2, T = 3, F = 24 };
  const kern_prec precs[2] = {KERN_BF16, KERN_FP16};
  const char *names[2] = {"bf16", "fp16"};
  float (*const rnds[2])(float) = {kern_round_bf16, kern_round_fp16};
  size_t nq = (size_t)N * 3 * C;
  for (int p = 0; p < 2; p++) {
    kern_ctx kl, kf;
    kern_cpu_init(&kf, KERN_FP32, 2);
    kern_cpu_init(&kl, precs[p], 2);
    const char *pn = names[p];
    float (*rnd)(float) = rnds[p];
    /* RMSNorm */
    float *x = rounded(N * C, 2, rnd), *w = rounded(C, 1, rnd), *dy = rounded(N * C, 1, rnd);
    float *ol = zeros(N * C), *of = zeros(N * C), *rl = zeros(N), *rf = zeros(N);
    kl.ops->rmsnorm_forward(&kl, ol, rl, x, w, N, C);
    kf.ops->rmsnorm_forward(&kf, of, rf, x, w, N, C);
    check_rounded("rmsnorm_forward out", pn, ol, of, N * C, rnd);
    check_bits("rmsnorm_forward rstd", pn, rl, rf, N);
    float *dl = zeros(N * C), *df = zeros(N * C), *dwl = zeros(C), *dwf = zeros(C);
    kl.ops->rmsnorm_backward(&kl, dl, dwl, dy, x, w, rf, N, C);
    kf.ops->rmsnorm_backward(&kf, df, dwf, dy, x, w, rf, N, C);
    check_rounded("rmsnorm_backward dinp", pn, dl, df, N * C, rnd);
    check_bits("rmsnorm_backward dw", pn, dwl, dwf, C);
    free(x), free(w), free(dy), free(ol), free(of), free(rl), free(rf);
    free(dl), free(df), free(dwl), free(dwf);
    /* QK-norm */
    int hs = C / NH;
    float *qkv = rounded(nq, 2, rnd), *wq = rounded(hs, 1, rnd), *wk = rounded(hs, 1, rnd);
    float *dq = rounded(nq, 1, rnd);
    float *ql = zeros(nq), *qf = zeros(nq), *sl = zeros(N * 2 * NH), *sf = zeros(N * 2 * NH);
    kl.ops->qknorm_forward(&kl, ql, sl, qkv, wq, wk, N, C, NH);
    kf.ops->qknorm_forward(&kf, qf, sf, qkv, wq, wk, N, C, NH);
    check_rounded("qknorm_forward out", pn, ql, qf, nq, rnd);
    check_bits("qknorm_forward rstd", pn, sl, sf, N * 2 * NH);
    float *gl = zeros(nq), *gf = zeros(nq);
    float *wql = zeros(hs), *wqf = zeros(hs), *wkl = zeros(hs), *wkf = zeros(hs);
    kl.ops->qknorm_backward(&kl, gl, wql, wkl, dq, qkv, wq, wk, sf, N, C, NH);
    kf.ops->qknorm_backward(&kf, gf, wqf, wkf, dq, qkv, wq, wk, sf, N, C, NH);
    check_rounded("qknorm_backward dqkv", pn, gl, gf, nq, rnd);
    check_bits("qknorm_backward dwq", pn, wql, wqf, hs);
    check_bits("qknorm_backward dwk", pn, wkl, wkf, hs);
    free(ql), free(qf), free(sl), free(sf), free(gl), free(gf);
    free(wq), free(wk), free(wql), free(wqf), free(wkl), free(wkf);
    /* rotary embeddings (B * T = N rows), both ways */
    float *rl2 = copy(qkv, nq), *rf2 = copy(qkv, nq);
    kl.ops->rope_forward(&kl, rl2, B, T, C, NH, 10000.0f, 0.5f);
    kf.ops->rope_forward(&kf, rf2, B, T, C, NH, 10000.0f, 0.5f);
    check_rounded("rope_forward", pn, rl2, rf2, nq, rnd);
    memcpy(rl2, dq, nq * sizeof(float)), memcpy(rf2, dq, nq * sizeof(float));
    kl.ops->rope_backward(&kl, rl2, B, T, C, NH, 10000.0f, 0.5f);
    kf.ops->rope_backward(&kf, rf2, B, T, C, NH, 10000.0f, 0.5f);
    check_rounded("rope_backward", pn, rl2, rf2, nq, rnd);
    free(qkv), free(dq), free(rl2), free(rf2);
    /* SwiGLU and scale_x */
    float *si = rounded(N * 2 * F, 2, rnd), *sd = rounded(N * F, 1, rnd);
    float *yl = zeros(N * F), *yf = zeros(N * F), *el = zeros(N * 2 * F), *ef = zeros(N * 2 * F);
    kl.ops->swiglu_forward(&kl, yl, si, N, F);
    kf.ops->swiglu_forward(&kf, yf, si, N, F);
    check_rounded("swiglu_forward", pn, yl, yf, N * F, rnd);
    kl.ops->swiglu_backward(&kl, el, si, sd, N, F);
    kf.ops->swiglu_backward(&kf, ef, si, sd, N, F);
    check_rounded("swiglu_backward", pn, el, ef, N * 2 * F, rnd);
    memcpy(yl, sd, N * F * sizeof(float)), memcpy(yf, sd, N * F * sizeof(float));
    kl.ops->scale_x(&kl, yl, 0.3f, N * F);
    kf.ops->scale_x(&kf, yf, 0.3f, N * F);
    check_rounded("scale_x", pn, yl, yf, N * F, rnd);
    free(si), free(sd), free(yl), free(yf), free(el), free(ef);
  }
  kern_cpu_init(&K, KERN_FP32, 2);
}

/* The gains' gradients (sums over rows) have the same bits at 1 and 2
 * threads, at fp32 and bf16. C is no multiple of 16, so the threads'
 * shares of the columns end unevenly. */
static void test_llama_threads(void) {
  enum { N = 64, C = 200, NH = 5, hs = 40 };
  size_t nq = (size_t)N * 3 * C;
  const kern_prec precs[2] = {KERN_FP32, KERN_BF16};
  float (*rnd)(float) = kern_round_bf16; /* inputs at bf16 for both */
  for (int p = 0; p < 2; p++) {
    float *x = rounded(N * C, 2, rnd), *w = rounded(C, 1, rnd), *dy = rounded(N * C, 1, rnd);
    float *qkv = rounded(nq, 2, rnd), *wq = rounded(hs, 1, rnd), *wk = rounded(hs, 1, rnd);
    float *dq = rounded(nq, 1, rnd);
    float *out = zeros(nq), *rstd = zeros(N * 2 * NH);
    float *dinp[2], *dw[2], *dqkv[2], *dwq[2], *dwk[2];
    for (int th = 0; th < 2; th++) {
      kern_ctx k;
      kern_cpu_init(&k, precs[p], th + 1);
      dinp[th] = zeros(N * C), dw[th] = zeros(C);
      k.ops->rmsnorm_forward(&k, out, rstd, x, w, N, C);
      k.ops->rmsnorm_backward(&k, dinp[th], dw[th], dy, x, w, rstd, N, C);
      dqkv[th] = zeros(nq), dwq[th] = zeros(hs), dwk[th] = zeros(hs);
      k.ops->qknorm_forward(&k, out, rstd, qkv, wq, wk, N, C, NH);
      k.ops->qknorm_backward(&k, dqkv[th], dwq[th], dwk[th], dq, qkv, wq, wk, rstd, N, C, NH);
    }
    CHECK(memcmp(dw[0], dw[1], C * sizeof(float)) == 0);
    CHECK(memcmp(dinp[0], dinp[1], N * C * sizeof(float)) == 0);
    CHECK(memcmp(dwq[0], dwq[1], hs * sizeof(float)) == 0);
    CHECK(memcmp(dwk[0], dwk[1], hs * sizeof(float)) == 0);
    CHECK(memcmp(dqkv[0], dqkv[1], nq * sizeof(float)) == 0);
    free(x), free(w), free(dy), free(qkv), free(wq), free(wk), free(dq), free(out), free(rstd);
    for (int th = 0; th < 2; th++)
      free(dinp[th]), free(dw[th]), free(dqkv[th]), free(dwq[th]), free(dwk[th]);
  }
  kern_cpu_init(&K, KERN_FP32, 2);
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
  test_rmsnorm();
  test_qknorm();
  test_rope(10000.0f, 0.5f);
  test_rope(0.0f, 0.25f);
  test_swiglu();
  test_scale_x();
  test_encoder_nopos();
  test_llama_precision();
  test_llama_threads();
  CHECK_DONE();
}

/* SCALESWEEP_PROFILE_OPS=1: the time of each backend op (opprof.h). */
#include "trainer/opprof.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROWS 128

typedef struct row {
  char label[96];
  long long calls;
  double s;
} row;

static kern_ops real, wrapped;
static int installed, paused, depth;
static row rows[MAX_ROWS];
static int nrows;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the work queued before the op is done: the op's time starts here */
static double start(kern_ctx *k) {
  real.sync(k);
  return now();
}

static void stop(kern_ctx *k, const char *label, double t0) {
  real.sync(k);
  double dt = now() - t0;
  int i = 0;
  while (i < nrows && strcmp(rows[i].label, label) != 0)
    i++;
  if (i == nrows) {
    if (nrows == MAX_ROWS) /* more shapes than rows: the rest share the last */
      i = MAX_ROWS - 1;
    else
      snprintf(rows[nrows++].label, sizeof rows[0].label, "%s", label);
  }
  rows[i].calls++;
  rows[i].s += dt;
}

/* A wrapper of op NAME with parameters PARAMS (k first) called with ARGS;
 * LABEL is an expression over them (buf: 96 bytes to print a shape into).
 * An op that calls another through the table (the CUDA matmul_gelu_forward
 * falling back to gelu_forward) is one row: the inner call is not timed. */
#define WRAP(NAME, PARAMS, ARGS, LABEL) \
  static void p_##NAME PARAMS {         \
    if (paused || depth) {              \
      real.NAME ARGS;                   \
      return;                           \
    }                                   \
    char buf[96];                       \
    (void)buf;                          \
    depth++;                            \
    double t0 = start(k);               \
    real.NAME ARGS;                     \
    stop(k, LABEL, t0);                 \
    depth--;                            \
  }

static const char *shape(char *buf, const char *op, int a, int b, int c) {
  snprintf(buf, 96, "%s %dx%dx%d", op, a, b, c);
  return buf;
}

WRAP(zero, (kern_ctx * k, void *p, size_t bytes), (k, p, bytes), "zero")
WRAP(from_host, (kern_ctx * k, void *dst, const void *src, size_t bytes), (k, dst, src, bytes),
     "from_host")
WRAP(encoder_forward,
     (kern_ctx * k, kern_x *out, const int32_t *tok, const kern_x *wte, const kern_x *wpe, int B,
      int T, int C),
     (k, out, tok, wte, wpe, B, T, C), "encoder_forward")
WRAP(encoder_backward,
     (kern_ctx * k, float *dwte, float *dwpe, const kern_x *dout, const int32_t *tok, int B, int T,
      int C),
     (k, dwte, dwpe, dout, tok, B, T, C), "encoder_backward")
WRAP(layernorm_forward,
     (kern_ctx * k, kern_x *out, float *mean, float *rstd, const kern_x *inp, const kern_x *w,
      const kern_x *b, int N, int C),
     (k, out, mean, rstd, inp, w, b, N, C), "layernorm_forward")
WRAP(layernorm_backward,
     (kern_ctx * k, kern_x *dinp, float *dw, float *db, const kern_x *dout, const kern_x *inp,
      const kern_x *w, const float *mean, const float *rstd, int N, int C),
     (k, dinp, dw, db, dout, inp, w, mean, rstd, N, C), "layernorm_backward")
WRAP(residual_layernorm_forward,
     (kern_ctx * k, kern_x *resid, kern_x *out, float *mean, float *rstd, const kern_x *a,
      const kern_x *b, const kern_x *w, const kern_x *bias, int N, int C),
     (k, resid, out, mean, rstd, a, b, w, bias, N, C), "residual_layernorm_forward")
WRAP(matmul_forward,
     (kern_ctx * k, kern_x *out, const kern_x *inp, const kern_x *w, const kern_x *b, int N, int C,
      int OC),
     (k, out, inp, w, b, N, C, OC), shape(buf, "matmul_forward", N, C, OC))
WRAP(matmul_backward,
     (kern_ctx * k, kern_x *dinp, float *dw, float *db, const kern_x *dout, const kern_x *inp,
      const kern_x *w, int N, int C, int OC),
     (k, dinp, dw, db, dout, inp, w, N, C, OC), shape(buf, "matmul_backward", N, C, OC))
WRAP(matmul_gelu_forward,
     (kern_ctx * k, kern_x *out, kern_x *pre, const kern_x *inp, const kern_x *w, const kern_x *b,
      int N, int C, int OC),
     (k, out, pre, inp, w, b, N, C, OC), shape(buf, "matmul_gelu_forward", N, C, OC))
WRAP(attention_forward,
     (kern_ctx * k, kern_x *out, float *att, const kern_x *qkv, int B, int T, int C, int NH),
     (k, out, att, qkv, B, T, C, NH), shape(buf, "attention_forward B T C", B, T, C))
WRAP(attention_backward,
     (kern_ctx * k, kern_x *dqkv, float *datt, const kern_x *dout, const kern_x *qkv,
      const float *att, int B, int T, int C, int NH),
     (k, dqkv, datt, dout, qkv, att, B, T, C, NH), shape(buf, "attention_backward B T C", B, T, C))
WRAP(flash_attention_forward,
     (kern_ctx * k, kern_x *out, float *lse, const kern_x *qkv, int B, int T, int C, int NH),
     (k, out, lse, qkv, B, T, C, NH), shape(buf, "flash_attention_forward B T C", B, T, C))
WRAP(flash_attention_backward,
     (kern_ctx * k, kern_x *dqkv, const kern_x *dout, const kern_x *out, const kern_x *qkv,
      const float *lse, int B, int T, int C, int NH),
     (k, dqkv, dout, out, qkv, lse, B, T, C, NH),
     shape(buf, "flash_attention_backward B T C", B, T, C))
WRAP(rmsnorm_forward,
     (kern_ctx * k, kern_x *out, float *rstd, const kern_x *inp, const kern_x *w, int N, int C),
     (k, out, rstd, inp, w, N, C), "rmsnorm_forward")
WRAP(rmsnorm_backward,
     (kern_ctx * k, kern_x *dinp, float *dw, const kern_x *dout, const kern_x *inp, const kern_x *w,
      const float *rstd, int N, int C),
     (k, dinp, dw, dout, inp, w, rstd, N, C), "rmsnorm_backward")
WRAP(qknorm_forward,
     (kern_ctx * k, kern_x *out, float *rstd, const kern_x *qkv, const kern_x *wq, const kern_x *wk,
      int N, int C, int NH),
     (k, out, rstd, qkv, wq, wk, N, C, NH), "qknorm_forward")
WRAP(qknorm_backward,
     (kern_ctx * k, kern_x *dqkv, float *dwq, float *dwk, const kern_x *dout, const kern_x *qkv,
      const kern_x *wq, const kern_x *wk, const float *rstd, int N, int C, int NH),
     (k, dqkv, dwq, dwk, dout, qkv, wq, wk, rstd, N, C, NH), "qknorm_backward")
WRAP(rope_forward,
     (kern_ctx * k, kern_x *qkv, int B, int T, int C, int NH, float theta, float qscale),
     (k, qkv, B, T, C, NH, theta, qscale), "rope_forward")
WRAP(rope_backward,
     (kern_ctx * k, kern_x *dqkv, int B, int T, int C, int NH, float theta, float qscale),
     (k, dqkv, B, T, C, NH, theta, qscale), "rope_backward")
WRAP(swiglu_forward, (kern_ctx * k, kern_x *out, const kern_x *inp, int N, int F),
     (k, out, inp, N, F), "swiglu_forward")
WRAP(swiglu_backward,
     (kern_ctx * k, kern_x *dinp, const kern_x *inp, const kern_x *dout, int N, int F),
     (k, dinp, inp, dout, N, F), "swiglu_backward")
WRAP(scale_x, (kern_ctx * k, kern_x *x, float s, size_t n), (k, x, s, n), "scale_x")
WRAP(gelu_forward, (kern_ctx * k, kern_x *out, const kern_x *inp, size_t n), (k, out, inp, n),
     "gelu_forward")
WRAP(gelu_backward, (kern_ctx * k, kern_x *dinp, const kern_x *inp, const kern_x *dout, size_t n),
     (k, dinp, inp, dout, n), "gelu_backward")
WRAP(residual_forward, (kern_ctx * k, kern_x *out, const kern_x *a, const kern_x *b, size_t n),
     (k, out, a, b, n), "residual_forward")
WRAP(softmax_xent,
     (kern_ctx * k, float *losses, kern_x *logits, const int32_t *targets, int N, int V,
      float dscale),
     (k, losses, logits, targets, N, V, dscale), "softmax_xent")
WRAP(axpy, (kern_ctx * k, float *dst, const float *src, float s, size_t n, int init),
     (k, dst, src, s, n, init), "axpy")
WRAP(scale, (kern_ctx * k, float *x, float s, size_t n), (k, x, s, n), "scale")
WRAP(mean_into, (kern_ctx * k, double *acc, const float *x, size_t n), (k, acc, x, n), "mean_into")
WRAP(sumsq_into, (kern_ctx * k, double *acc, const float *x, size_t n), (k, acc, x, n),
     "sumsq_into")
WRAP(step_scale, (kern_ctx * k, float *s, const double *gnorm2, double loss_scale, double clip),
     (k, s, gnorm2, loss_scale, clip), "step_scale")
WRAP(to_x, (kern_ctx * k, kern_x *dst, const float *src, size_t n), (k, dst, src, n), "to_x")
WRAP(adamw_fused,
     (kern_ctx * k, float *p, kern_x *plow, const float *g, float *m, float *v,
      const kern_adamw_parts *parts, const kern_adamw_args *a),
     (k, p, plow, g, m, v, parts, a), "adamw_fused")
WRAP(adamw8bit_fused,
     (kern_ctx * k, float *p, kern_x *plow, const float *g, int8_t *qm, uint8_t *qv, float *sm,
      float *sv, const kern_adamw_parts *parts, const kern_adamw_args *a),
     (k, p, plow, g, qm, qv, sm, sv, parts, a), "adamw8bit_fused")

int trn_opprof_install(kern_ctx *k) {
  const char *e = getenv("SCALESWEEP_PROFILE_OPS");
  if (!e || strcmp(e, "1") != 0)
    return 0;
  real = wrapped = *k->ops;
#define SET(NAME) \
  if (real.NAME)  \
    wrapped.NAME = p_##NAME;
  SET(zero)
  SET(from_host)
  SET(encoder_forward)
  SET(encoder_backward) SET(layernorm_forward) SET(layernorm_backward)
      SET(residual_layernorm_forward) SET(matmul_forward) SET(matmul_backward)
          SET(matmul_gelu_forward) SET(attention_forward) SET(attention_backward)
              SET(flash_attention_forward) SET(flash_attention_backward) SET(gelu_forward)
                  SET(gelu_backward) SET(residual_forward) SET(softmax_xent) SET(axpy) SET(scale)
                      SET(mean_into) SET(sumsq_into) SET(step_scale) SET(to_x) SET(adamw_fused)
                          SET(adamw8bit_fused) SET(rmsnorm_forward) SET(rmsnorm_backward)
                              SET(qknorm_forward) SET(qknorm_backward) SET(rope_forward)
                                  SET(rope_backward) SET(swiglu_forward) SET(swiglu_backward)
                                      SET(scale_x)
#undef SET
                                          k->ops = &wrapped;
  installed = 1;
  paused = 1; /* until the training loop starts: not the set-up's uploads */
  return 1;
}

void trn_opprof_pause(int p) { paused = p; }

static int by_time(const void *a, const void *b) {
  double x = ((const row *)a)->s, y = ((const row *)b)->s;
  return x < y ? 1 : x > y ? -1 : strcmp(((const row *)a)->label, ((const row *)b)->label);
}

void trn_opprof_report(FILE *f, long long steps, double step_s) {
  if (!installed)
    return;
  double total = 0.0;
  for (int i = 0; i < nrows; i++)
    total += rows[i].s;
  qsort(rows, (size_t)nrows, sizeof rows[0], by_time);
  long long per = steps > 0 ? steps : 1;
  fprintf(f,
          "op times over %lld training steps (each op timed alone, the backend synchronised "
          "before and after it; evaluation left out):\n"
          "  %-46s %8s %11s %10s %7s\n",
          steps, "op", "calls", "total ms", "ms/step", "share");
  for (int i = 0; i < nrows; i++)
    fprintf(f, "  %-46s %8lld %11.3f %10.4f %6.2f%%\n", rows[i].label, rows[i].calls,
            1e3 * rows[i].s, 1e3 * rows[i].s / (double)per,
            total > 0 ? 100.0 * rows[i].s / total : 0.0);
  fprintf(f, "  %-46s %8s %11.3f %10.4f %6.2f%% of the steps' %.3f ms\n", "all ops", "",
          1e3 * total, 1e3 * total / (double)per, step_s > 0 ? 100.0 * total / step_s : 0.0,
          1e3 * step_s);
  fflush(f);
}

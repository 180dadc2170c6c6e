/* Every CUDA kernel of kern_ops against its CPU twin (the reference), at
 * fp32, bf16 and fp16: the same inputs to both backends, the GPU result
 * within eps * (|ref| + rms(ref)) of the CPU's; determinism (two calls give
 * identical bits); and one whole training step of a tiny GPT and of a tiny
 * llama (QK-norm, untied head, muP), CUDA vs CPU.
 * At the trainer's shapes (B*T = 4096..16384 rows, C = 768, V = 50304 and
 * odd sizes): the fused residual + LayerNorm and the 128-bit element-wise
 * paths bit for bit against the kernels they replace, the device-bucketed
 * encoder backward bit for bit against the CPU, each timed against the old
 * path ("time WHAT: X us", median of 20 calls; for the encoder, the host
 * round trip the device bucketing removed).
 *
 * Tolerances (llm.c's validate_result: tol + |ref| * eps, with tol taken
 * as eps * rms(ref) because cancellation errors scale with the summands, not
 * with a result near zero):
 *   fp32 1e-5: the backends differ only in summation order (cuBLAS's tiles,
 *     warp trees against the CPU's sequential sums): a few ulps (6e-8 each)
 *     times the sqrt of the terms summed, well under 1e-5 for these sizes;
 *   bf16 1e-2: outputs are rounded to bf16 (8 significant bits); an fp32
 *     difference of one ulp can move a value across a rounding boundary,
 *     one bf16 ulp is at most 2^-7 = 7.8e-3 relative;
 *   fp16 1e-3: likewise with 11 significant bits, one ulp at most 2^-10 =
 *     9.8e-4 relative.
 * The whole-step comparison chains about 20 rounded kernels and allows 10x
 * that. Rounding itself (kern_ops.round) is exact arithmetic: bits must agree.
 *
 * Activations, their gradients and the weights' rounded copy are kern_x
 * (kernels/kern.h): the GPU holds them in its precision's type (bf16, fp16,
 * fp32), the CPU in fp32 containers; upx / downx convert the test's
 * (already rounded) host values, exactly.
 *
 * NOTE: written without a GPU at hand; it compiles in CI (sm_80, sm_90) and
 * has not yet run on a GPU (tests/gpu/run.sh runs it where there is one). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "kernels/cuda/internal.cuh" /* the backend's stream, for the timings */
#include "kernels/cuda/kern_cuda.h"
#include "kernels/kern.h"
#include "kernels/step_scale.h"
extern "C" {
#include "trainer/model.h"
#include "trainer/optim.h"
}
#include "trainer/rng.h"

typedef std::vector<float> vec;

static int failures;
static kern_ctx CPU, GPU;
static uint64_t rng[4];

static const char *prec_name(kern_prec p) {
  return p == KERN_BF16 ? "bf16" : p == KERN_FP16 ? "fp16" : "fp32";
}
static double eps_of(kern_prec p) { return p == KERN_BF16 ? 1e-2 : p == KERN_FP16 ? 1e-3 : 1e-5; }
static float rnd(float x, kern_prec p) {
  return p == KERN_BF16 ? kern_round_bf16(x) : p == KERN_FP16 ? kern_round_fp16(x) : x;
}

/* n normal values times scale, rounded to p (kernel inputs in the trainer
 * are rounded activations or the rounded weight copy) */
static vec randn(size_t n, float scale, kern_prec p) {
  vec x(n);
  for (size_t i = 0; i < n; i++) {
    double u1 = 1.0 - trn_rng_uniform(rng), u2 = trn_rng_uniform(rng);
    x[i] = rnd((float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2) * scale), p);
  }
  return x;
}

static std::vector<int32_t> randtok(size_t n, int V) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; i++)
    t[i] = (int32_t)(trn_rng_uniform(rng) * V);
  return t;
}

/* device copy of a host array (freed by the caller with GPU.ops->free) */
template <typename E> static E *up(const std::vector<E> &h) {
  E *d = (E *)GPU.ops->alloc(&GPU, h.size() * sizeof(E) + 1);
  GPU.ops->from_host(&GPU, d, h.data(), h.size() * sizeof(E));
  return d;
}
template <typename E> static std::vector<E> down(const E *d, size_t n) {
  std::vector<E> h(n);
  GPU.ops->to_host(&GPU, h.data(), d, n * sizeof(E));
  return h;
}
static void gfree(void *d) { GPU.ops->free(&GPU, d); }

/* kern_x buffers (kernels/kern.h): the GPU stores activations, their
 * gradients and the weights' rounded copy in its precision's type (bf16,
 * fp16 or fp32; GPU.xbytes each). The host values are already rounded to
 * it, so these conversions are exact both ways. */
static std::vector<unsigned char> xbytes_of(const vec &h) {
  size_t es = (size_t)GPU.xbytes;
  std::vector<unsigned char> b(h.size() * es);
  for (size_t i = 0; i < h.size(); i++) {
    if (GPU.prec == KERN_BF16) {
      __nv_bfloat16 v = __float2bfloat16_rn(h[i]);
      memcpy(&b[i * es], &v, es);
    } else if (GPU.prec == KERN_FP16) {
      __half v = __float2half_rn(h[i]);
      memcpy(&b[i * es], &v, es);
    } else {
      memcpy(&b[i * es], &h[i], es);
    }
  }
  return b;
}
static void putx(kern_x *d, const vec &h) {
  std::vector<unsigned char> b = xbytes_of(h);
  GPU.ops->from_host(&GPU, d, b.data(), b.size());
}
static kern_x *upx(const vec &h) {
  kern_x *d = GPU.ops->alloc(&GPU, h.size() * GPU.xbytes + 1);
  putx(d, h);
  return d;
}
static vec downx(const kern_x *d, size_t n) {
  size_t es = (size_t)GPU.xbytes;
  std::vector<unsigned char> b(n * es);
  GPU.ops->to_host(&GPU, b.data(), d, b.size());
  vec h(n);
  for (size_t i = 0; i < n; i++) {
    if (GPU.prec == KERN_BF16) {
      __nv_bfloat16 v;
      memcpy(&v, &b[i * es], es);
      h[i] = __bfloat162float(v);
    } else if (GPU.prec == KERN_FP16) {
      __half v;
      memcpy(&v, &b[i * es], es);
      h[i] = __half2float(v);
    } else {
      memcpy(&h[i], &b[i * es], es);
    }
  }
  return h;
}
/* element i of the GPU's kern_x buffer d */
static kern_x *xat(kern_x *d, size_t i) { return kern_x_at(&GPU, d, i); }

static void compare(const char *what, kern_prec p, const vec &gpu, const vec &ref, double eps) {
  double ss = 0.0;
  for (float r : ref)
    ss += (double)r * r;
  double rms = ref.empty() ? 0.0 : sqrt(ss / ref.size());
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); i++) {
    double d = fabs((double)gpu[i] - ref[i]), lim = eps * (fabs(ref[i]) + rms);
    int nan_ok = isnan(gpu[i]) && isnan(ref[i]);
    int inf_ok = isinf(gpu[i]) && gpu[i] == ref[i];
    if (!(d <= lim) && !nan_ok && !inf_ok) {
      if (bad++ < 5)
        fprintf(stderr, "  %s %s [%zu]: gpu %.9g cpu %.9g (limit %.3g)\n", what, prec_name(p), i,
                gpu[i], ref[i], lim);
    }
    if (lim > 0 && d / lim > worst)
      worst = d / lim;
  }
  printf("%-28s %s  n %-8zu worst error / limit %.3f%s\n", what, prec_name(p), ref.size(), worst,
         bad ? "  FAILED" : "");
  failures += bad != 0;
}

static void same_bits(const char *what, kern_prec p, const vec &a, const vec &b) {
  if (a.size() != b.size() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
    fprintf(stderr, "  %s %s: two calls differ (not deterministic)\n", what, prec_name(p));
    failures++;
  }
}

/* Median time in us of 20 calls of f (after one warm-up call), each
 * between two events on the backend's stream; time_us also prints it as
 * "time WHAT: X us". */
template <typename F> static double median_us(F f) {
  cudaStream_t st = kern__cu_stream(&GPU);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  f();
  std::vector<float> ms(20);
  for (float &t : ms) {
    cudaEventRecord(e0, st);
    f();
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&t, e0, e1);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return 1e3 * (ms[9] + ms[10]) / 2;
}

template <typename F> static double time_us(const char *what, F f) {
  double us = median_us(f);
  printf("time %s: %.1f us\n", what, us);
  return us;
}

/* ---- per-layer checks ---- */

static void check_encoder(kern_prec p) {
  const int B = 3, T = 17, C = 72, V = 11; /* few tokens: many repeats per bucket */
  auto tok = randtok((size_t)B * T, V);
  vec wte = randn((size_t)V * C, 1, p), wpe = randn((size_t)T * C, 1, p);
  vec out((size_t)B * T * C);
  CPU.ops->encoder_forward(&CPU, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  int32_t *dtok = up(tok);
  kern_x *dwte_w = upx(wte), *dwpe_w = upx(wpe), *dout = upx(out);
  GPU.ops->encoder_forward(&GPU, dout, dtok, dwte_w, dwpe_w, B, T, C);
  vec g1 = downx(dout, out.size());
  compare("encoder_forward", p, g1, out, eps_of(p));
  GPU.ops->encoder_forward(&GPU, dout, dtok, dwte_w, dwpe_w, B, T, C);
  same_bits("encoder_forward", p, g1, downx(dout, out.size()));

  vec dy = randn(out.size(), 1, p), dwte = randn(wte.size(), 1, KERN_FP32),
      dwpe = randn(wpe.size(), 1, KERN_FP32);
  vec cte = dwte, cpe = dwpe;
  CPU.ops->encoder_backward(&CPU, cte.data(), cpe.data(), dy.data(), tok.data(), B, T, C);
  kern_x *ddy = upx(dy);
  vec r1, r2;
  for (int rep = 0; rep < 2; rep++) {
    float *gte = up(dwte), *gpe = up(dwpe);
    GPU.ops->encoder_backward(&GPU, gte, gpe, ddy, dtok, B, T, C);
    vec a = down(gte, wte.size()), b = down(gpe, wpe.size());
    if (rep == 0) {
      compare("encoder_backward dwte", p, a, cte, eps_of(KERN_FP32));
      compare("encoder_backward dwpe", p, b, cpe, eps_of(KERN_FP32));
      r1 = a;
      r2 = b;
    } else {
      same_bits("encoder_backward dwte", p, r1, a);
      same_bits("encoder_backward dwpe", p, r2, b);
    }
    gfree(gte);
    gfree(gpe);
  }

  /* no learned positions (the llama family): wpe NULL gives wte[tokens], a
   * copy on both sides (exact); dwpe NULL leaves the position gradient out */
  vec out0(out.size()), cte0 = dwte;
  CPU.ops->encoder_forward(&CPU, out0.data(), tok.data(), wte.data(), NULL, B, T, C);
  GPU.ops->encoder_forward(&GPU, dout, dtok, dwte_w, NULL, B, T, C);
  compare("encoder_forward (no wpe)", p, downx(dout, out.size()), out0, 0.0);
  CPU.ops->encoder_backward(&CPU, cte0.data(), NULL, dy.data(), tok.data(), B, T, C);
  float *gte0 = up(dwte);
  GPU.ops->encoder_backward(&GPU, gte0, NULL, ddy, dtok, B, T, C);
  compare("encoder_backward (no dwpe)", p, down(gte0, wte.size()), cte0, eps_of(KERN_FP32));
  gfree(gte0);
  gfree(dtok), gfree(dwte_w), gfree(dwpe_w), gfree(dout), gfree(ddy);
}

static void check_layernorm(kern_prec p) {
  const int N = 70, C = 80; /* C not a multiple of 32, N more than one chunk */
  vec x = randn((size_t)N * C, 2, p), w = randn(C, 1, p), b = randn(C, 1, p);
  vec out(x.size()), mean(N), rstd(N);
  CPU.ops->layernorm_forward(&CPU, out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                             b.data(), N, C);
  kern_x *dx = upx(x), *dw = upx(w), *db = upx(b), *dout = upx(out);
  float *dm = up(mean), *dr = up(rstd);
  GPU.ops->layernorm_forward(&GPU, dout, dm, dr, dx, dw, db, N, C);
  vec g = downx(dout, out.size());
  compare("layernorm_forward out", p, g, out, eps_of(p));
  compare("layernorm_forward mean", p, down(dm, N), mean, eps_of(KERN_FP32));
  compare("layernorm_forward rstd", p, down(dr, N), rstd, eps_of(KERN_FP32));
  GPU.ops->layernorm_forward(&GPU, dout, dm, dr, dx, dw, db, N, C);
  same_bits("layernorm_forward", p, g, downx(dout, out.size()));

  /* backward from the CPU's mean and rstd (the same inputs on both sides) */
  GPU.ops->from_host(&GPU, dm, mean.data(), N * sizeof(float));
  GPU.ops->from_host(&GPU, dr, rstd.data(), N * sizeof(float));
  vec dy = randn(x.size(), 1, p), dinp0 = randn(x.size(), 1, p);
  vec gw0 = randn(C, 1, KERN_FP32), gb0 = randn(C, 1, KERN_FP32);
  vec cdinp = dinp0, cgw = gw0, cgb = gb0;
  CPU.ops->layernorm_backward(&CPU, cdinp.data(), cgw.data(), cgb.data(), dy.data(), x.data(),
                              w.data(), mean.data(), rstd.data(), N, C);
  kern_x *ddy = upx(dy);
  vec first[3];
  for (int rep = 0; rep < 2; rep++) {
    kern_x *gi = upx(dinp0);
    float *gw = up(gw0), *gb = up(gb0);
    GPU.ops->layernorm_backward(&GPU, gi, gw, gb, ddy, dx, dw, dm, dr, N, C);
    vec r[3] = {downx(gi, x.size()), down(gw, C), down(gb, C)};
    if (rep == 0) {
      compare("layernorm_backward dinp", p, r[0], cdinp, eps_of(p));
      compare("layernorm_backward dw", p, r[1], cgw, eps_of(KERN_FP32));
      compare("layernorm_backward db", p, r[2], cgb, eps_of(KERN_FP32));
      for (int i = 0; i < 3; i++)
        first[i] = r[i];
    } else {
      for (int i = 0; i < 3; i++)
        same_bits("layernorm_backward", p, first[i], r[i]);
    }
    gfree(gi), gfree(gw), gfree(gb);
  }
  gfree(dx), gfree(dw), gfree(db), gfree(dout), gfree(dm), gfree(dr), gfree(ddy);
}

static void check_matmul(kern_prec p, int N, int C, int OC, int bias) {
  char name[64];
  vec x = randn((size_t)N * C, 1, p), w = randn((size_t)OC * C, 0.1f, p), b = randn(OC, 1, p);
  vec out((size_t)N * OC);
  CPU.ops->matmul_forward(&CPU, out.data(), x.data(), w.data(), bias ? b.data() : NULL, N, C, OC);
  kern_x *dx = upx(x), *dw = upx(w), *db = upx(b), *dout = upx(out);
  GPU.ops->matmul_forward(&GPU, dout, dx, dw, bias ? db : NULL, N, C, OC);
  vec g = downx(dout, out.size());
  snprintf(name, sizeof name, "matmul_forward %dx%dx%d%s", N, C, OC, bias ? "+b" : "");
  compare(name, p, g, out, eps_of(p));
  GPU.ops->matmul_forward(&GPU, dout, dx, dw, bias ? db : NULL, N, C, OC);
  same_bits(name, p, g, downx(dout, out.size()));

  vec dy = randn(out.size(), 1, p), gw0 = randn(w.size(), 1, KERN_FP32),
      gb0 = randn(OC, 1, KERN_FP32);
  vec cdx(x.size()), cgw = gw0, cgb = gb0;
  CPU.ops->matmul_backward(&CPU, cdx.data(), cgw.data(), bias ? cgb.data() : NULL, dy.data(),
                           x.data(), w.data(), N, C, OC);
  kern_x *ddy = upx(dy);
  snprintf(name, sizeof name, "matmul_backward %dx%dx%d%s", N, C, OC, bias ? "+b" : "");
  vec first[3];
  for (int rep = 0; rep < 2; rep++) {
    kern_x *gx = upx(vec(x.size()));
    float *gw = up(gw0), *gb = up(gb0);
    GPU.ops->matmul_backward(&GPU, gx, gw, bias ? gb : NULL, ddy, dx, dw, N, C, OC);
    vec r[3] = {downx(gx, x.size()), down(gw, w.size()), down(gb, OC)};
    if (rep == 0) {
      compare(name, p, r[0], cdx, eps_of(p));
      compare(name, p, r[1], cgw, eps_of(KERN_FP32));
      compare(name, p, r[2], cgb, eps_of(KERN_FP32));
      for (int i = 0; i < 3; i++)
        first[i] = r[i];
    } else {
      for (int i = 0; i < 3; i++)
        same_bits(name, p, first[i], r[i]);
    }
    gfree(gx), gfree(gw), gfree(gb);
  }
  if ((size_t)N * OC >= ((size_t)1 << 20)) {
    kern_x *gx = upx(vec(x.size()));
    float *gw = up(gw0), *gb = up(gb0);
    const kern_x *bb = bias ? db : NULL;
    double f = median_us([&] { GPU.ops->matmul_forward(&GPU, dout, dx, dw, bb, N, C, OC); });
    double bw = median_us(
        [&] { GPU.ops->matmul_backward(&GPU, gx, gw, bias ? gb : NULL, ddy, dx, dw, N, C, OC); });
    printf("time matmul_forward %s %dx%dx%d%s: %.1f us\n", prec_name(p), N, C, OC, bias ? "+b" : "",
           f);
    printf("time matmul_backward %s %dx%dx%d%s: %.1f us\n", prec_name(p), N, C, OC,
           bias ? "+b" : "", bw);
    gfree(gx), gfree(gw), gfree(gb);
  }
  gfree(dx), gfree(dw), gfree(db), gfree(dout), gfree(ddy);
}

/* fp16 outputs past the format's range: the CPU rounds them to infinity
 * (kern_round_fp16: 65520 and up), which a loss-scaled run's overflow check
 * relies on; the GEMM's own conversion to fp16 must give the same. */
static void check_matmul_overflow(void) {
  const int N = 4, C = 8, OC = 8;
  vec x((size_t)N * C), w((size_t)OC * C), out((size_t)N * OC);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = i % 2 ? 256.0f : -256.0f * (float)(i % 3); /* sums to +-1e6 and small ones */
  for (size_t i = 0; i < w.size(); i++)
    w[i] = (float)(i % 5) * 64.0f - 128.0f;
  CPU.ops->matmul_forward(&CPU, out.data(), x.data(), w.data(), NULL, N, C, OC);
  kern_x *dx = upx(x), *dw = upx(w), *dout = upx(out);
  GPU.ops->matmul_forward(&GPU, dout, dx, dw, NULL, N, C, OC);
  vec g = downx(dout, out.size());
  int inf = 0, bad = 0;
  for (size_t i = 0; i < out.size(); i++) {
    inf += isinf(out[i]);
    bad += isinf(out[i]) != isinf(g[i]) || (isinf(out[i]) && out[i] != g[i]);
  }
  printf("%-28s fp16  %d of %zu outputs infinite on the CPU, %d differing on the GPU%s\n",
         "matmul_forward overflow", inf, out.size(), bad, bad || !inf ? "  FAILED" : "");
  failures += bad != 0 || inf == 0;
  gfree(dx), gfree(dw), gfree(dout);
}

/* matmul_gelu_forward against the CPU's composition, matmul_forward then
 * gelu_forward (the CPU backend has no fused op, so CPU runs keep their
 * bits). pre is the same GEMM and bias: eps_of(p). out: at bf16/fp16 the CUDA
 * op takes cuBLASLt's GELU_AUX_BIAS epilogue where it can, whose GELU (the
 * tanh approximation) reads the unrounded pre: |gelu'| <= 1.13 times pre's
 * rounding (2^-9 relative at bf16, 2^-12 at fp16) plus out's own rounding
 * (one ulp, 2^-8 / 2^-11) stays under eps_of(p) relative; cuBLASLt's tanh is
 * not ours and its accuracy is not documented (a hardware tanh.approx would
 * be 2^-11 relative, at most 0.5 |x| 2^-11 in gelu), hence 1e-3 more there.
 * fp32 takes the separate sequence: eps_of(fp32). Unwritten outputs show as
 * NaN. With N >= 1024, times the separate sequence against the op. */
static void check_matmul_gelu(kern_prec p, int N, int C, int OC) {
  char name[80];
  vec x = randn((size_t)N * C, 1, p), w = randn((size_t)OC * C, 1.0f / sqrtf((float)C), p),
      b = randn(OC, 0.5f, p);
  size_t n = (size_t)N * OC;
  vec pre(n), out(n);
  CPU.ops->matmul_forward(&CPU, pre.data(), x.data(), w.data(), b.data(), N, C, OC);
  CPU.ops->gelu_forward(&CPU, out.data(), pre.data(), n);
  kern_x *dx = upx(x), *dw = upx(w), *db = upx(b), *dpre = upx(vec(n, NAN)),
         *dout = upx(vec(n, NAN));
  GPU.ops->matmul_gelu_forward(&GPU, dout, dpre, dx, dw, db, N, C, OC);
  vec gp = downx(dpre, n), go = downx(dout, n);
  snprintf(name, sizeof name, "matmul_gelu_forward pre %dx%dx%d", N, C, OC);
  compare(name, p, gp, pre, eps_of(p));
  snprintf(name, sizeof name, "matmul_gelu_forward out %dx%dx%d", N, C, OC);
  compare(name, p, go, out, eps_of(p) + (p == KERN_FP32 ? 0.0 : 1e-3));
  GPU.ops->matmul_gelu_forward(&GPU, dout, dpre, dx, dw, db, N, C, OC);
  same_bits(name, p, gp, downx(dpre, n));
  same_bits(name, p, go, downx(dout, n));
  if (N >= 1024) {
    double sep = median_us([&] {
      GPU.ops->matmul_forward(&GPU, dpre, dx, dw, db, N, C, OC);
      GPU.ops->gelu_forward(&GPU, dout, dpre, n);
    });
    double fused =
        median_us([&] { GPU.ops->matmul_gelu_forward(&GPU, dout, dpre, dx, dw, db, N, C, OC); });
    printf("time matmul_forward+gelu_forward %s %dx%dx%d+b: %.1f us\n", prec_name(p), N, C, OC,
           sep);
    printf("time matmul_gelu_forward %s %dx%dx%d+b: %.1f us\n", prec_name(p), N, C, OC, fused);
  }
  gfree(dx), gfree(dw), gfree(db), gfree(dpre), gfree(dout);
}

/* Host time of enqueueing matmul_forward at a shape not yet seen (the plan's
 * descriptors, layouts and heuristic query, and any lazy load of the chosen
 * kernel) against the median of later calls (the cached plan). */
static void time_gemm_setup(kern_prec p) {
  const int N = 4096, C = 768, OC = 2304; /* qkv: no earlier check used it */
  kern_x *dx = upx(randn((size_t)N * C, 1, p)), *dw = upx(randn((size_t)OC * C, 0.03f, p)),
         *db = upx(randn(OC, 1, p)), *dout = upx(vec((size_t)N * OC));
  std::vector<double> t;
  for (int i = 0; i < 21; i++) {
    GPU.ops->sync(&GPU);
    auto a = std::chrono::steady_clock::now();
    GPU.ops->matmul_forward(&GPU, dout, dx, dw, db, N, C, OC);
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  GPU.ops->sync(&GPU);
  double first = t[0];
  t.erase(t.begin());
  std::sort(t.begin(), t.end());
  printf("time matmul_forward enqueue %s %dx%dx%d+b: first (plan set-up) %.1f us, cached %.1f us\n",
         prec_name(p), N, C, OC, first, t[t.size() / 2]);
  gfree(dx), gfree(dw), gfree(db), gfree(dout);
}

static void check_attention(kern_prec p) {
  const int B = 2, T = 40, C = 64, NH = 4; /* T not a multiple of 32 */
  vec qkv = randn((size_t)B * T * 3 * C, 1, p);
  vec out((size_t)B * T * C), att((size_t)B * NH * T * T);
  CPU.ops->attention_forward(&CPU, out.data(), att.data(), qkv.data(), B, T, C, NH);
  kern_x *dq = upx(qkv), *dout = upx(out);
  float *datt = up(att);
  GPU.ops->attention_forward(&GPU, dout, datt, dq, B, T, C, NH);
  vec g = downx(dout, out.size()), ga = down(datt, att.size());
  compare("attention_forward out", p, g, out, eps_of(p));
  compare("attention_forward att", p, ga, att, eps_of(p));
  GPU.ops->attention_forward(&GPU, dout, datt, dq, B, T, C, NH);
  same_bits("attention_forward", p, g, downx(dout, out.size()));

  /* backward from the CPU's probabilities */
  GPU.ops->from_host(&GPU, datt, att.data(), att.size() * sizeof(float));
  vec dy = randn(out.size(), 1, p), cdqkv(qkv.size()), scratch(att.size());
  CPU.ops->attention_backward(&CPU, cdqkv.data(), scratch.data(), dy.data(), qkv.data(), att.data(),
                              B, T, C, NH);
  kern_x *ddy = upx(dy), *gd = upx(vec(qkv.size()));
  float *gs = up(vec(att.size()));
  GPU.ops->attention_backward(&GPU, gd, gs, ddy, dq, datt, B, T, C, NH);
  vec r = downx(gd, qkv.size());
  compare("attention_backward dqkv", p, r, cdqkv, eps_of(p));
  GPU.ops->attention_backward(&GPU, gd, gs, ddy, dq, datt, B, T, C, NH);
  same_bits("attention_backward", p, r, downx(gd, qkv.size()));
  gfree(dq), gfree(dout), gfree(datt), gfree(ddy), gfree(gd), gfree(gs);
}

static void check_elementwise(kern_prec p) {
  const size_t n = 5000;
  vec x = randn(n, 3, p), y = randn(n, 1, p), out(n);
  kern_x *dx = upx(x), *dy = upx(y), *dout = upx(out);
  float *fx = up(x); /* the fp32 ops' input */

  CPU.ops->gelu_forward(&CPU, out.data(), x.data(), n);
  GPU.ops->gelu_forward(&GPU, dout, dx, n);
  compare("gelu_forward", p, downx(dout, n), out, eps_of(p));
  /* dinp aliases dout, as the trainer calls it */
  vec cd = y;
  CPU.ops->gelu_backward(&CPU, cd.data(), x.data(), cd.data(), n);
  kern_x *gd = upx(y);
  GPU.ops->gelu_backward(&GPU, gd, dx, gd, n);
  compare("gelu_backward (aliased)", p, downx(gd, n), cd, eps_of(p));

  CPU.ops->residual_forward(&CPU, out.data(), x.data(), y.data(), n);
  GPU.ops->residual_forward(&GPU, dout, dx, dy, n);
  compare("residual_forward", p, downx(dout, n), out, eps_of(p));

  vec s = x;
  CPU.ops->scale(&CPU, s.data(), 0.37f, n);
  float *gs = up(x);
  GPU.ops->scale(&GPU, gs, 0.37f, n);
  compare("scale", p, down(gs, n), s, eps_of(KERN_FP32));

  for (int init = 1; init >= 0; init--) {
    vec dst = y;
    double cs = CPU.ops->accumulate(&CPU, dst.data(), x.data(), 0.25f, n, init);
    float *gdst = up(y);
    double gsum = GPU.ops->accumulate(&GPU, gdst, fx, 0.25f, n, init);
    compare(init ? "accumulate (init)" : "accumulate (+=)", p, down(gdst, n), dst,
            eps_of(KERN_FP32));
    if (!(fabs(gsum - cs) <= 1e-12 * cs)) {
      fprintf(stderr, "  accumulate sumsq: gpu %.17g cpu %.17g\n", gsum, cs);
      failures++;
    }
    gfree(gdst);
  }
  gfree(dx), gfree(dy), gfree(dout), gfree(gd), gfree(gs), gfree(fx);
}

/* Values for the rounding checks: subnormal halves, overflow, the ties and
 * boundaries between representable values; 20016 of them, a multiple of 8,
 * so the full array takes the kernels' vector path and n - 1 the scalar one. */
static vec rounding_cases(void) {
  vec x = randn(20000, 1, KERN_FP32);
  for (size_t i = 0; i < x.size(); i += 4)
    x[i] = ldexpf(x[i], (int)(i % 80) - 40); /* 2^-40 .. 2^39: subnormal halves, overflow */
  x.push_back(65519.0f), x.push_back(65520.0f), x.push_back(-65520.0f);
  x.push_back(INFINITY), x.push_back(-INFINITY), x.push_back(NAN);
  x.push_back(1.0f + 1.0f / 256.0f), x.push_back(1.0f + 3.0f / 256.0f); /* bf16 ties */
  x.push_back(5.9604645e-8f), x.push_back(2.9802322e-8f);               /* fp16 2^-24, 2^-25 */
  x.push_back(-5.9604645e-8f), x.push_back(8.940697e-8f);               /* fp16 1.5 * 2^-24 */
  x.push_back(3.3895314e38f), x.push_back(-3.3895314e38f);              /* the largest bf16 */
  x.push_back(3.3961776e38f), x.push_back(1.0f + 1.0f / 2048.0f);       /* past it; fp16 tie */
  return x;
}

/* Rounding is exact: every value must give the CPU's bits (NaN as NaN:
 * its payload is the storage type's where the result is stored as one). */
static int same_rounding(const vec &r, const vec &c, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += !(isnan(r[i]) && isnan(c[i])) && memcmp(&r[i], &c[i], sizeof(float)) != 0;
  return bad;
}

/* round, in place on fp32, at bf16 and fp16: vector and scalar paths */
static void check_round(void) {
  vec x = rounding_cases();
  for (int pi = 1; pi <= 2; pi++) {
    kern_prec p = (kern_prec)pi;
    vec c = x;
    CPU.ops->round(&CPU, c.data(), c.size(), p);
    for (size_t n : {x.size(), x.size() - 1}) {
      float *g = up(x);
      GPU.ops->round(&GPU, g, n, p);
      int bad = same_rounding(down(g, n), c, n);
      printf("%-28s %s  n %-8zu %s\n", "round (bits)", prec_name(p), n,
             bad ? "FAILED" : "identical");
      failures += bad != 0;
      gfree(g);
    }
  }
}

/* to_x (the weights' rounded copy, fp32 master -> kern_x) is rounding too,
 * at the context's precision: vector and scalar paths */
static void check_to_x(kern_prec p) {
  vec x = rounding_cases(), c = x;
  CPU.ops->round(&CPU, c.data(), c.size(), p);
  float *src = up(x);
  for (size_t n : {x.size(), x.size() - 1}) {
    kern_x *dst = upx(vec(x.size()));
    GPU.ops->to_x(&GPU, dst, src, n);
    int bad = same_rounding(downx(dst, n), c, n);
    printf("%-28s %s  n %-8zu %s\n", "to_x (bits)", prec_name(p), n, bad ? "FAILED" : "identical");
    failures += bad != 0;
    gfree(dst);
  }
  gfree(src);
}

static void check_sumsq(void) {
  vec x = randn(1000003, 1, KERN_FP32);
  double c = CPU.ops->sumsq(&CPU, x.data(), x.size());
  float *d = up(x);
  double g1 = GPU.ops->sumsq(&GPU, d, x.size()), g2 = GPU.ops->sumsq(&GPU, d, x.size());
  /* fp64 sums of 1e6 positive terms in two orders: ~1e-16 * sqrt(n) apart */
  int bad = !(fabs(g1 - c) <= 1e-12 * c) || memcmp(&g1, &g2, sizeof g1) != 0;
  printf("%-28s fp64  gpu %.17g cpu %.17g%s\n", "sumsq", g1, c, bad ? "  FAILED" : "");
  failures += bad;
  gfree(d);
}

/* V a multiple of 4 (the 128-bit path) and odd (the scalar one) */
static void check_xent(kern_prec p, int N, int V) {
  vec z = randn((size_t)N * V, 2, p);
  auto tgt = randtok(N, V);
  vec loss(N), cz = z;
  kern_x *dz = upx(z);
  float *dl = up(loss);
  int32_t *dt = up(tgt);
  CPU.ops->softmax_xent(&CPU, loss.data(), cz.data(), tgt.data(), N, V, 0.0f);
  GPU.ops->softmax_xent(&GPU, dl, dz, dt, N, V, 0.0f);
  compare("softmax_xent losses", p, down(dl, N), loss, eps_of(KERN_FP32) * 10);
  compare("softmax_xent logits kept", p, downx(dz, z.size()), z, 0.0);
  float ds = 1.0f / N;
  CPU.ops->softmax_xent(&CPU, loss.data(), cz.data(), tgt.data(), N, V, ds);
  GPU.ops->softmax_xent(&GPU, dl, dz, dt, N, V, ds);
  vec g = downx(dz, z.size());
  compare("softmax_xent dlogits", p, g, cz, eps_of(p));
  putx(dz, z);
  GPU.ops->softmax_xent(&GPU, dl, dz, dt, N, V, ds);
  same_bits("softmax_xent", p, g, downx(dz, z.size()));
  gfree(dz), gfree(dl), gfree(dt);
}

static void check_adamw(kern_prec p) {
  const size_t n = 1000; /* 4 quantisation blocks, the last one partial */
  kern_adamw_args a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1, NULL};
  vec w = randn(n, 1, KERN_FP32), g1 = randn(n, 1, KERN_FP32), g2 = randn(n, 1, KERN_FP32);
  int low = p != KERN_FP32;
  /* fp32 moments: two steps */
  {
    vec cp = w, cm(n), cv(n), cl(n);
    float *gp = up(w), *gm = up(vec(n)), *gv = up(vec(n));
    kern_x *gl = upx(vec(n));
    float *dg1 = up(g1), *dg2 = up(g2);
    for (int s = 1; s <= 2; s++) {
      a.step = s;
      CPU.ops->adamw(&CPU, cp.data(), low ? cl.data() : NULL, s == 1 ? g1.data() : g2.data(),
                     cm.data(), cv.data(), n, &a);
      GPU.ops->adamw(&GPU, gp, low ? gl : NULL, s == 1 ? dg1 : dg2, gm, gv, n, &a);
    }
    compare("adamw p", p, down(gp, n), cp, eps_of(KERN_FP32));
    compare("adamw m", p, down(gm, n), cm, eps_of(KERN_FP32));
    compare("adamw v", p, down(gv, n), cv, eps_of(KERN_FP32));
    if (low)
      compare("adamw plow", p, downx(gl, n), cl, eps_of(p));
    gfree(gp), gfree(gm), gfree(gv), gfree(gl), gfree(dg1), gfree(dg2);
  }
  /* 8-bit moments: two steps from zero state */
  {
    size_t nb = (n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
    vec cp = w, cl(n), csm(nb), csv(nb);
    std::vector<int8_t> cqm(n);
    std::vector<uint8_t> cqv(n);
    float *gp = up(w), *gsm = up(vec(nb)), *gsv = up(vec(nb));
    kern_x *gl = upx(vec(n));
    int8_t *gqm = up(cqm);
    uint8_t *gqv = up(cqv);
    float *dg1 = up(g1), *dg2 = up(g2);
    for (int s = 1; s <= 2; s++) {
      a.step = s;
      CPU.ops->adamw8bit(&CPU, cp.data(), low ? cl.data() : NULL, s == 1 ? g1.data() : g2.data(),
                         cqm.data(), cqv.data(), csm.data(), csv.data(), n, &a);
      GPU.ops->adamw8bit(&GPU, gp, low ? gl : NULL, s == 1 ? dg1 : dg2, gqm, gqv, gsm, gsv, n, &a);
    }
    compare("adamw8bit p", p, down(gp, n), cp, eps_of(KERN_FP32));
    compare("adamw8bit absmax m", p, down(gsm, nb), csm, eps_of(KERN_FP32));
    compare("adamw8bit absmax v", p, down(gsv, nb), csv, eps_of(KERN_FP32));
    if (low)
      compare("adamw8bit plow", p, downx(gl, n), cl, eps_of(p));
    /* the same arithmetic on both sides (no FMA contraction): a code may
     * differ only where a value sits on a boundary between two codes, by one */
    auto qm = down(gqm, n);
    auto qv = down(gqv, n);
    int off = 0, far = 0;
    for (size_t i = 0; i < n; i++) {
      int dm = abs(qm[i] - cqm[i]), dv = abs((int)qv[i] - (int)cqv[i]);
      off += dm != 0 || dv != 0;
      far += dm > 1 || dv > 1;
    }
    printf("%-28s %s  codes differing %d of %zu, by more than one %d\n", "adamw8bit codes",
           prec_name(p), off, 2 * n, far);
    failures += far > 0 || off > (int)n / 100;
    gfree(gp), gfree(gl), gfree(gsm), gfree(gsv), gfree(gqm), gfree(gqv), gfree(dg1), gfree(dg2);
  }
}

/* ---- the llama family's ops (kernels/cuda/llama.cu) against their CPU twins
 * (kernels/cpu/llama.c). Tolerances as above: outputs rounded to p within
 * eps_of(p); fp32 statistics and gain gradients, whose sums differ from the
 * CPU's only in order (warp trees, chunked column sums), within
 * eps_of(fp32); ops that are one multiply and rounding on both sides, or a
 * copy, exactly. Outputs start as NaN, so an element left unwritten fails. */

/* the v third (columns [2C, 3C)) of each (N, 3C) row of x */
static vec v_part(const vec &x, int N, int C) {
  vec v((size_t)N * C);
  for (int r = 0; r < N; r++)
    memcpy(&v[(size_t)r * C], &x[(size_t)r * 3 * C + 2 * C], (size_t)C * sizeof(float));
  return v;
}

/* RMSNorm as LayerNorm's check: N more than one 64-row chunk of dw; the
 * backward from the CPU's rstd, dinp and dw accumulating into random values */
static void check_rmsnorm(kern_prec p, int N, int C) {
  char name[80];
  vec x = randn((size_t)N * C, 2, p), w = randn(C, 1, p);
  vec out(x.size()), rstd(N);
  CPU.ops->rmsnorm_forward(&CPU, out.data(), rstd.data(), x.data(), w.data(), N, C);
  kern_x *dx = upx(x), *dw = upx(w), *dout = upx(vec(x.size(), NAN));
  float *dr = up(vec(N, NAN));
  GPU.ops->rmsnorm_forward(&GPU, dout, dr, dx, dw, N, C);
  vec g = downx(dout, x.size()), gr = down(dr, N);
  snprintf(name, sizeof name, "rmsnorm_forward C=%d out", C);
  compare(name, p, g, out, eps_of(p));
  snprintf(name, sizeof name, "rmsnorm_forward C=%d rstd", C);
  compare(name, p, gr, rstd, eps_of(KERN_FP32));
  GPU.ops->rmsnorm_forward(&GPU, dout, dr, dx, dw, N, C);
  same_bits("rmsnorm_forward out", p, g, downx(dout, x.size()));
  same_bits("rmsnorm_forward rstd", p, gr, down(dr, N));

  GPU.ops->from_host(&GPU, dr, rstd.data(), N * sizeof(float));
  vec dy = randn(x.size(), 1, p), dinp0 = randn(x.size(), 1, p), gw0 = randn(C, 1, KERN_FP32);
  vec cdinp = dinp0, cgw = gw0;
  CPU.ops->rmsnorm_backward(&CPU, cdinp.data(), cgw.data(), dy.data(), x.data(), w.data(),
                            rstd.data(), N, C);
  kern_x *ddy = upx(dy);
  vec first[2];
  for (int rep = 0; rep < 2; rep++) {
    kern_x *gi = upx(dinp0);
    float *gw = up(gw0);
    GPU.ops->rmsnorm_backward(&GPU, gi, gw, ddy, dx, dw, dr, N, C);
    vec r[2] = {downx(gi, x.size()), down(gw, C)};
    if (rep == 0) {
      snprintf(name, sizeof name, "rmsnorm_backward C=%d dinp", C);
      compare(name, p, r[0], cdinp, eps_of(p));
      snprintf(name, sizeof name, "rmsnorm_backward C=%d dw", C);
      compare(name, p, r[1], cgw, eps_of(KERN_FP32));
      first[0] = r[0], first[1] = r[1];
    } else {
      same_bits("rmsnorm_backward dinp", p, first[0], r[0]);
      same_bits("rmsnorm_backward dw", p, first[1], r[1]);
    }
    gfree(gi), gfree(gw);
  }
  gfree(dx), gfree(dw), gfree(dout), gfree(dr), gfree(ddy);
}

/* QK-norm on (N, 3C) rows: q and k per head within eps_of(p), v copied
 * (exactly), rstd (N, 2, NH). The backward from the CPU's rstd twice: into
 * a NaN buffer, then in place over dout (dqkv aliasing dout, as the trainer
 * may call it), which must give the same bits; dwq, dwk accumulate. */
static void check_qknorm(kern_prec p, int N, int C, int NH) {
  char name[96];
  int hs = C / NH;
  size_t n = (size_t)N * 3 * C, nr = (size_t)N * 2 * NH;
  vec x = randn(n, 2, p), wq = randn(hs, 1, p), wk = randn(hs, 1, p);
  vec out(n), rstd(nr);
  CPU.ops->qknorm_forward(&CPU, out.data(), rstd.data(), x.data(), wq.data(), wk.data(), N, C, NH);
  kern_x *dx = upx(x), *dwq = upx(wq), *dwk = upx(wk), *dout = upx(vec(n, NAN));
  float *dr = up(vec(nr, NAN));
  GPU.ops->qknorm_forward(&GPU, dout, dr, dx, dwq, dwk, N, C, NH);
  vec g = downx(dout, n), gr = down(dr, nr);
  snprintf(name, sizeof name, "qknorm_forward hs=%d out", hs);
  compare(name, p, g, out, eps_of(p));
  snprintf(name, sizeof name, "qknorm_forward hs=%d v copied", hs);
  compare(name, p, v_part(g, N, C), v_part(x, N, C), 0.0);
  snprintf(name, sizeof name, "qknorm_forward hs=%d rstd", hs);
  compare(name, p, gr, rstd, eps_of(KERN_FP32));
  GPU.ops->qknorm_forward(&GPU, dout, dr, dx, dwq, dwk, N, C, NH);
  same_bits("qknorm_forward out", p, g, downx(dout, n));
  same_bits("qknorm_forward rstd", p, gr, down(dr, nr));

  GPU.ops->from_host(&GPU, dr, rstd.data(), nr * sizeof(float));
  vec dy = randn(n, 1, p), gq0 = randn(hs, 1, KERN_FP32), gk0 = randn(hs, 1, KERN_FP32);
  vec cd(n), cgq = gq0, cgk = gk0;
  CPU.ops->qknorm_backward(&CPU, cd.data(), cgq.data(), cgk.data(), dy.data(), x.data(), wq.data(),
                           wk.data(), rstd.data(), N, C, NH);
  kern_x *ddy = upx(dy);
  vec first[3];
  for (int rep = 0; rep < 2; rep++) {
    kern_x *gd = rep == 0 ? upx(vec(n, NAN)) : upx(dy); /* rep 1: dqkv is dout */
    float *gq = up(gq0), *gk = up(gk0);
    GPU.ops->qknorm_backward(&GPU, gd, gq, gk, rep == 0 ? ddy : gd, dx, dwq, dwk, dr, N, C, NH);
    vec r[3] = {downx(gd, n), down(gq, hs), down(gk, hs)};
    if (rep == 0) {
      snprintf(name, sizeof name, "qknorm_backward hs=%d dqkv", hs);
      compare(name, p, r[0], cd, eps_of(p));
      snprintf(name, sizeof name, "qknorm_backward hs=%d dwq", hs);
      compare(name, p, r[1], cgq, eps_of(KERN_FP32));
      snprintf(name, sizeof name, "qknorm_backward hs=%d dwk", hs);
      compare(name, p, r[2], cgk, eps_of(KERN_FP32));
      for (int i = 0; i < 3; i++)
        first[i] = r[i];
    } else {
      for (int i = 0; i < 3; i++)
        same_bits("qknorm_backward (dqkv aliasing dout)", p, first[i], r[i]);
    }
    gfree(gd), gfree(gq), gfree(gk);
  }
  gfree(dx), gfree(dwq), gfree(dwk), gfree(dout), gfree(dr), gfree(ddy);
}

/* Rotary embedding, in place on (B, T, 3C): forward and backward within
 * eps_of(p) where theta > 0 (each output one rounding of an fp32 expression
 * in the CPU's order, with the CPU's cosines and sines but at a rare fp64
 * tie: at most one ulp of p); theta 0 is q * qscale alone, one multiply and
 * rounding on both sides: exact. v untouched (exactly). At fp32 with
 * theta > 0, the backward undoes the forward (the rotation is orthogonal):
 * x back, q times qscale^2, within eps_of(fp32) (a few fp32 roundings). */
static void check_rope(kern_prec p, int B, int T, int C, int NH, float theta, float qscale) {
  char name[128], shape[80];
  snprintf(shape, sizeof shape, "T=%d hs=%d theta=%g qs=%g", T, C / NH, theta, qscale);
  int N = B * T;
  size_t n = (size_t)N * 3 * C;
  double e = theta > 0.0f ? eps_of(p) : 0.0;
  vec x = randn(n, 1, p), dy = randn(n, 1, p), cx = x, cdy = dy;
  CPU.ops->rope_forward(&CPU, cx.data(), B, T, C, NH, theta, qscale);
  CPU.ops->rope_backward(&CPU, cdy.data(), B, T, C, NH, theta, qscale);
  kern_x *d = upx(x), *dd = upx(dy);
  GPU.ops->rope_forward(&GPU, d, B, T, C, NH, theta, qscale);
  GPU.ops->rope_backward(&GPU, dd, B, T, C, NH, theta, qscale);
  vec g = downx(d, n), gd = downx(dd, n);
  snprintf(name, sizeof name, "rope_forward %s", shape);
  compare(name, p, g, cx, e);
  snprintf(name, sizeof name, "rope_forward %s v kept", shape);
  compare(name, p, v_part(g, N, C), v_part(x, N, C), 0.0);
  snprintf(name, sizeof name, "rope_backward %s", shape);
  compare(name, p, gd, cdy, e);
  snprintf(name, sizeof name, "rope_backward %s v kept", shape);
  compare(name, p, v_part(gd, N, C), v_part(dy, N, C), 0.0);
  putx(d, x);
  putx(dd, dy);
  GPU.ops->rope_forward(&GPU, d, B, T, C, NH, theta, qscale);
  GPU.ops->rope_backward(&GPU, dd, B, T, C, NH, theta, qscale);
  same_bits("rope_forward", p, g, downx(d, n));
  same_bits("rope_backward", p, gd, downx(dd, n));
  if (p == KERN_FP32 && theta > 0.0f) {
    GPU.ops->rope_backward(&GPU, d, B, T, C, NH, theta, qscale); /* d holds the forward's result */
    vec back = x;
    for (int r = 0; r < N; r++)
      for (int c = 0; c < C; c++)
        back[(size_t)r * 3 * C + c] *= qscale * qscale;
    snprintf(name, sizeof name, "rope_backward(forward) %s", shape);
    compare(name, p, downx(d, n), back, eps_of(KERN_FP32));
  }
  gfree(d), gfree(dd);
}

/* SwiGLU on (N, 2F) inputs: F a multiple of 8 takes the 128-bit path, odd F
 * the scalar one. Gates up to +-90 (kern__expf's clamp at 88) on a few. */
static void check_swiglu(kern_prec p, int N, int F) {
  char name[80];
  size_t n = (size_t)N * F;
  vec x = randn(2 * n, 2, p), out(n), dy = randn(n, 1, p), cd(2 * n);
  x[0] = rnd(-90.0f, p), x[1] = rnd(90.0f, p), x[2] = rnd(-20.0f, p), x[3] = rnd(20.0f, p);
  CPU.ops->swiglu_forward(&CPU, out.data(), x.data(), N, F);
  CPU.ops->swiglu_backward(&CPU, cd.data(), x.data(), dy.data(), N, F);
  kern_x *dx = upx(x), *ddy = upx(dy), *dout = upx(vec(n, NAN)), *gd = upx(vec(2 * n, NAN));
  GPU.ops->swiglu_forward(&GPU, dout, dx, N, F);
  GPU.ops->swiglu_backward(&GPU, gd, dx, ddy, N, F);
  vec g = downx(dout, n), r = downx(gd, 2 * n);
  snprintf(name, sizeof name, "swiglu_forward F=%d", F);
  compare(name, p, g, out, eps_of(p));
  snprintf(name, sizeof name, "swiglu_backward F=%d", F);
  compare(name, p, r, cd, eps_of(p));
  GPU.ops->swiglu_forward(&GPU, dout, dx, N, F);
  GPU.ops->swiglu_backward(&GPU, gd, dx, ddy, N, F);
  same_bits("swiglu_forward", p, g, downx(dout, n));
  same_bits("swiglu_backward", p, r, downx(gd, 2 * n));
  gfree(dx), gfree(ddy), gfree(dout), gfree(gd);
}

/* scale_x: one multiply and rounding on both sides, exact; n a multiple of 8
 * (the 128-bit path) and not (the scalar one) */
static void check_scale_x(kern_prec p) {
  for (size_t n : {(size_t)4104, (size_t)4103}) {
    vec x = randn(n, 3, p), c = x;
    CPU.ops->scale_x(&CPU, c.data(), 0.37f, n);
    kern_x *d = upx(x);
    GPU.ops->scale_x(&GPU, d, 0.37f, n);
    compare(n % 8 ? "scale_x (scalar path)" : "scale_x (vector path)", p, downx(d, n), c, 0.0);
    gfree(d);
  }
}

/* ---- the step's scalars on the device, the fused AdamW, staged uploads ---- */

/* mean_into / sumsq_into against the CPU's sums (fp64, two orders), the
 * same bits twice; step_scale bit for bit kern__step_scale's (one formula,
 * fp64 on both sides) including the fp16 skip (not finite -> 0) */
static void check_step_scalars(void) {
  vec x = randn(1000003, 1, KERN_FP32);
  double cacc[2] = {0.25, 0.5};
  CPU.ops->mean_into(&CPU, &cacc[0], x.data(), x.size());
  CPU.ops->sumsq_into(&CPU, &cacc[1], x.data(), x.size());
  float *d = up(x);
  double *acc = (double *)GPU.ops->alloc(&GPU, 2 * sizeof(double));
  double g[2][2], init[2] = {0.25, 0.5};
  for (int t = 0; t < 2; t++) {
    GPU.ops->from_host(&GPU, acc, init, sizeof init);
    GPU.ops->mean_into(&GPU, &acc[0], d, x.size());
    GPU.ops->sumsq_into(&GPU, &acc[1], d, x.size());
    GPU.ops->to_host(&GPU, g[t], acc, sizeof g[t]);
  }
  /* the mean of 1e6 normals is ~1e-3: compare it to the sum of |x| scale */
  int bad = !(fabs(g[0][0] - cacc[0]) <= 1e-12) || !(fabs(g[0][1] - cacc[1]) <= 1e-12 * cacc[1]) ||
            memcmp(g[0], g[1], sizeof g[0]) != 0;
  printf("%-28s fp64  mean %.17g / %.17g, sumsq %.17g / %.17g (gpu / cpu)%s\n",
         "mean_into, sumsq_into", g[0][0], cacc[0], g[0][1], cacc[1], bad ? "  FAILED" : "");
  failures += bad;
  const double cases[][3] = {{4.0, 1.0, 1.0},      {4.0, 1.0, 0.0},   {1e10, 65536.0, 1.0},
                             {2.5e9, 1024.0, 0.5}, {0.01, 1.0, 1.0},  {INFINITY, 65536.0, 1.0},
                             {NAN, 1.0, 1.0},      {1e-30, 8.0, 1e-3}};
  int n = (int)(sizeof cases / sizeof cases[0]), off = 0;
  float *sc = (float *)GPU.ops->alloc(&GPU, sizeof(float));
  for (int i = 0; i < n; i++) {
    double g2 = cases[i][0];
    GPU.ops->from_host(&GPU, acc, &g2, sizeof g2);
    GPU.ops->step_scale(&GPU, sc, acc, cases[i][1], cases[i][2]);
    float got, want = kern__step_scale(g2, cases[i][1], cases[i][2]);
    GPU.ops->to_host(&GPU, &got, sc, sizeof got);
    if (memcmp(&got, &want, sizeof got) != 0) {
      fprintf(stderr, "  step_scale(%g, %g, %g): gpu %.9g, formula %.9g\n", cases[i][0],
              cases[i][1], cases[i][2], got, want);
      off++;
    }
  }
  printf("%-28s %d cases, %d differing from the formula's bits%s\n", "step_scale", n, off,
         off ? "  FAILED" : "");
  failures += off != 0;
  gfree(d), gfree(acc), gfree(sc);
}

/* The fused AdamW over KERN_ADAMW_MAX_PARTS parts of uneven sizes (several
 * 8-bit blocks, a partial last block, a 1-element part, then small ones),
 * two of them at a quarter of the learning rate (muP's lr_scale), against
 * the CPU's (within fp32 rounding) and against the GPU's one-tensor calls
 * at the part's rate lr * lr_scale (the same kernel and product: bits); a
 * device factor of 0 leaves everything as it was. */
static void check_adamw_fused(kern_prec p) {
  size_t sizes[KERN_ADAMW_MAX_PARTS] = {700, 1, 256, 513, 90};
  for (int i = 5; i < KERN_ADAMW_MAX_PARTS; i++)
    sizes[i] = 3 + (size_t)(37 * i % 300);
  kern_adamw_parts parts;
  memset(&parts, 0, sizeof parts);
  size_t n = 0, nb = 0;
  for (int i = 0; i < KERN_ADAMW_MAX_PARTS; i++) {
    parts.part[i].off = n;
    parts.part[i].n = sizes[i];
    parts.part[i].state = n;
    parts.part[i].block = nb;
    parts.part[i].weight_decay = i % 2 ? 0.0f : 0.1f;
    parts.part[i].lr_scale = i == 3 || i == 12 ? 0.25f : 1.0f;
    n += sizes[i];
    nb += (sizes[i] + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
    parts.n++;
  }
  int low = p != KERN_FP32;
  vec w = randn(n, 1, KERN_FP32), gr = randn(n, 1, KERN_FP32);
  float half = 0.5f, zero = 0.0f;
  float *factor = up(vec{half}), *skip = up(vec{zero});
  kern_adamw_args a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 7.0f, 3, factor};
  for (int q8 = 0; q8 < 2; q8++) {
    vec cp = w, cl(n), cm(n), cv(n), csm(nb), csv(nb);
    std::vector<int8_t> cqm(n);
    std::vector<uint8_t> cqv(n);
    float *gp = up(w), *gm = up(vec(n)), *gv = up(vec(n));
    kern_x *gl = upx(vec(n)), *hl = upx(vec(n));
    float *gsm = up(vec(nb)), *gsv = up(vec(nb));
    float *hp = up(w), *hm = up(vec(n)), *hv = up(vec(n));
    float *hsm = up(vec(nb)), *hsv = up(vec(nb));
    int8_t *gqm = up(cqm), *hqm = up(cqm);
    uint8_t *gqv = up(cqv), *hqv = up(cqv);
    float *dg = up(gr);
    float *hf = up(vec{half});
    /* CPU's factor lives in host memory */
    kern_adamw_args ca = a;
    ca.grad_scale_dev = &half;
    if (q8) {
      CPU.ops->adamw8bit_fused(&CPU, cp.data(), low ? cl.data() : NULL, gr.data(), cqm.data(),
                               cqv.data(), csm.data(), csv.data(), &parts, &ca);
      GPU.ops->adamw8bit_fused(&GPU, gp, low ? gl : NULL, dg, gqm, gqv, gsm, gsv, &parts, &a);
    } else {
      CPU.ops->adamw_fused(&CPU, cp.data(), low ? cl.data() : NULL, gr.data(), cm.data(), cv.data(),
                           &parts, &ca);
      GPU.ops->adamw_fused(&GPU, gp, low ? gl : NULL, dg, gm, gv, &parts, &a);
    }
    for (int i = 0; i < parts.n; i++) { /* the one-tensor calls, part by part */
      kern_adamw_args pa = a;
      pa.grad_scale_dev = hf;
      pa.weight_decay = parts.part[i].weight_decay;
      pa.lr = a.lr * parts.part[i].lr_scale;
      size_t o = parts.part[i].off, b = parts.part[i].block, m = parts.part[i].n;
      if (q8)
        GPU.ops->adamw8bit(&GPU, hp + o, low ? xat(hl, o) : NULL, dg + o, hqm + o, hqv + o, hsm + b,
                           hsv + b, m, &pa);
      else
        GPU.ops->adamw(&GPU, hp + o, low ? xat(hl, o) : NULL, dg + o, hm + o, hv + o, m, &pa);
    }
    const char *what = q8 ? "adamw8bit_fused p" : "adamw_fused p";
    vec fused = down(gp, n);
    compare(what, p, fused, cp, eps_of(KERN_FP32));
    same_bits(q8 ? "adamw8bit_fused vs per tensor" : "adamw_fused vs per tensor", p, fused,
              down(hp, n));
    if (low)
      same_bits(q8 ? "adamw8bit_fused plow vs per tensor" : "adamw_fused plow vs per tensor", p,
                downx(gl, n), downx(hl, n));
    /* skipped: a factor of 0 on the device */
    kern_adamw_args sa = a;
    sa.grad_scale_dev = skip;
    if (q8)
      GPU.ops->adamw8bit_fused(&GPU, gp, low ? gl : NULL, dg, gqm, gqv, gsm, gsv, &parts, &sa);
    else
      GPU.ops->adamw_fused(&GPU, gp, low ? gl : NULL, dg, gm, gv, &parts, &sa);
    same_bits(q8 ? "adamw8bit_fused skipped" : "adamw_fused skipped", p, fused, down(gp, n));
    gfree(gp), gfree(gl), gfree(gm), gfree(gv), gfree(gsm), gfree(gsv), gfree(hp), gfree(hl);
    gfree(hm), gfree(hv), gfree(hsm), gfree(hsv), gfree(gqm), gfree(hqm), gfree(gqv), gfree(hqv);
    gfree(dg), gfree(hf);
  }
  gfree(factor), gfree(skip);
}

/* from_host returns before the copy is done (pinned slots): twenty uploads
 * from one host buffer rewritten at once after each must all land intact,
 * small ones (staged) and one larger than a slot (a waiting copy) */
static void check_uploads(void) {
  const size_t n = 50000, big = 600000; /* 200 kB each; 2.4 MB */
  std::vector<float *> d;
  vec h(big);
  int bad = 0;
  for (int i = 0; i < 20; i++) {
    size_t m = i == 10 ? big : n;
    for (size_t j = 0; j < m; j++)
      h[j] = (float)(i * 1000003 + j);
    d.push_back((float *)GPU.ops->alloc(&GPU, m * sizeof(float)));
    GPU.ops->from_host(&GPU, d.back(), h.data(), m * sizeof(float));
  }
  for (int i = 0; i < 20; i++) {
    size_t m = i == 10 ? big : n;
    vec got = down(d[i], m);
    for (size_t j = 0; j < m; j++)
      if (got[j] != (float)(i * 1000003 + j)) {
        bad++;
        break;
      }
    gfree(d[i]);
  }
  printf("%-28s 20 uploads from one reused buffer, %d corrupted%s\n", "from_host (staged)", bad,
         bad ? "  FAILED" : "");
  failures += bad != 0;
}

/* ---- flash attention (no T x T buffer) against its CPU twin ---- */

/* The CUDA flash ops against kern_cpu_flash_attention_* (same rounding
 * points: the twin walks the keys in the GPU forward's tiles), the backward
 * from the CPU's out and lse; determinism; with timed, the time of both ops
 * and of the attention_forward/backward they replace at the same shape. */
static void check_flash_attention(kern_prec p, int B, int T, int C, int NH, int timed) {
  char shape[64], what[128];
  snprintf(shape, sizeof shape, "B%d T%d C%d NH%d", B, T, C, NH);
  size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
  vec qkv = randn(nq, 1, p), dy = randn(ny, 1, p);
  vec out(ny), lse(nl), dqkv(nq);
  kern_cpu_flash_attention_forward(&CPU, out.data(), lse.data(), qkv.data(), B, T, C, NH);
  kern_cpu_flash_attention_backward(&CPU, dqkv.data(), dy.data(), out.data(), qkv.data(),
                                    lse.data(), B, T, C, NH);
  kern_x *dq = upx(qkv), *ddy = upx(dy), *gout = upx(vec(ny)), *cout = upx(out);
  kern_x *gd = upx(vec(nq));
  float *glse = up(vec(nl)), *clse = up(lse);
  GPU.ops->flash_attention_forward(&GPU, gout, glse, dq, B, T, C, NH);
  vec g = downx(gout, ny), gl = down(glse, nl);
  snprintf(what, sizeof what, "flash_fwd out %s", shape);
  compare(what, p, g, out, eps_of(p));
  snprintf(what, sizeof what, "flash_fwd lse %s", shape);
  compare(what, p, gl, lse, eps_of(p));
  GPU.ops->flash_attention_forward(&GPU, gout, glse, dq, B, T, C, NH);
  same_bits("flash_attention_forward out", p, g, downx(gout, ny));
  same_bits("flash_attention_forward lse", p, gl, down(glse, nl));

  GPU.ops->flash_attention_backward(&GPU, gd, ddy, cout, dq, clse, B, T, C, NH);
  vec r = downx(gd, nq);
  snprintf(what, sizeof what, "flash_bwd dqkv %s", shape);
  compare(what, p, r, dqkv, eps_of(p));
  GPU.ops->flash_attention_backward(&GPU, gd, ddy, cout, dq, clse, B, T, C, NH);
  same_bits("flash_attention_backward", p, r, downx(gd, nq));

  if (timed) {
    size_t na = (size_t)B * NH * T * T;
    float *att = (float *)GPU.ops->alloc(&GPU, na * sizeof(float));
    float *datt = (float *)GPU.ops->alloc(&GPU, na * sizeof(float));
    if (!att || !datt) {
      fprintf(stderr, "  flash timing: out of memory for the (B, NH, T, T) buffers\n");
      exit(1);
    }
    double ff =
        median_us([&] { GPU.ops->flash_attention_forward(&GPU, gout, glse, dq, B, T, C, NH); });
    double fb = median_us(
        [&] { GPU.ops->flash_attention_backward(&GPU, gd, ddy, cout, dq, clse, B, T, C, NH); });
    double af = median_us([&] { GPU.ops->attention_forward(&GPU, gout, att, dq, B, T, C, NH); });
    double ab =
        median_us([&] { GPU.ops->attention_backward(&GPU, gd, datt, ddy, dq, att, B, T, C, NH); });
    printf("time flash_attention_forward %s %s: %.1f us\n", shape, prec_name(p), ff);
    printf("time flash_attention_backward %s %s: %.1f us\n", shape, prec_name(p), fb);
    printf("time attention_forward %s %s: %.1f us\n", shape, prec_name(p), af);
    printf("time attention_backward %s %s: %.1f us\n", shape, prec_name(p), ab);
    printf("time flash vs attention forward+backward %s %s: %.1f us vs %.1f us (%.2fx)\n", shape,
           prec_name(p), ff + fb, af + ab, (af + ab) / (ff + fb));
    gfree(att), gfree(datt);
  }
  gfree(dq), gfree(ddy), gfree(gout), gfree(glse), gfree(cout), gfree(clse), gfree(gd);
}

/* ---- fused and vectorised kernels, at the trainer's shapes, with timings ---- */

/* exact agreement with the reference (kernels whose arithmetic is the
 * reference's operation for operation, in the same order) */
static void identical(const char *what, kern_prec p, const vec &gpu, const vec &ref) {
  int bad = gpu.size() != ref.size() || memcmp(gpu.data(), ref.data(), ref.size() * 4) != 0;
  printf("%-28s %s  n %-8zu %s\n", what, prec_name(p), ref.size(),
         bad ? "FAILED (bits differ)" : "identical");
  failures += bad;
}

/* residual_layernorm_forward: against the CPU's residual_forward then
 * layernorm_forward (within the LayerNorm tolerances), and bit for bit
 * against the two CUDA kernels it replaces (same arithmetic, same reduction
 * order) and against itself. Large C takes the kernel's path without the
 * row in shared memory; odd C its scalar path. */
static void check_residual_layernorm(kern_prec p, int B, int T, int C, int timed) {
  int N = B * T;
  size_t n = (size_t)N * C;
  char name[160], shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d C=%d %s", B, T, C, prec_name(p));
  vec a = randn(n, 1, p), b = randn(n, 0.5f, p), w = randn(C, 1, p), bias = randn(C, 1, p);
  vec resid(n), out(n), mean(N), rstd(N);
  CPU.ops->residual_forward(&CPU, resid.data(), a.data(), b.data(), n);
  CPU.ops->layernorm_forward(&CPU, out.data(), mean.data(), rstd.data(), resid.data(), w.data(),
                             bias.data(), N, C);
  kern_x *da = upx(a), *db = upx(b), *dw = upx(w), *dbias = upx(bias);
  kern_x *r1 = upx(vec(n)), *o1 = upx(vec(n)), *r2 = upx(vec(n)), *o2 = upx(vec(n));
  float *m1 = up(vec(N)), *s1 = up(vec(N)), *m2 = up(vec(N)), *s2 = up(vec(N));
  auto fused = [&]() {
    GPU.ops->residual_layernorm_forward(&GPU, r1, o1, m1, s1, da, db, dw, dbias, N, C);
  };
  auto two = [&]() {
    GPU.ops->residual_forward(&GPU, r2, da, db, n);
    GPU.ops->layernorm_forward(&GPU, o2, m2, s2, r2, dw, dbias, N, C);
  };
  void *g1[4] = {r1, o1, m1, s1}, *g2[4] = {r2, o2, m2, s2};
  size_t len[4] = {n, n, (size_t)N, (size_t)N};
  const char *part[4] = {"resid", "out", "mean", "rstd"};
  /* resid and out are kern_x, mean and rstd fp32 */
  auto get = [&](void *d, int i) { return i < 2 ? downx(d, len[i]) : down((float *)d, len[i]); };
  fused();
  two();
  vec f[4], t[4];
  for (int i = 0; i < 4; i++)
    f[i] = get(g1[i], i), t[i] = get(g2[i], i);
  snprintf(name, sizeof name, "resid+layernorm C=%d resid", C);
  identical(name, p, f[0], resid); /* a rounded sum: exact on both backends */
  snprintf(name, sizeof name, "resid+layernorm C=%d out", C);
  compare(name, p, f[1], out, eps_of(p));
  snprintf(name, sizeof name, "resid+layernorm C=%d mean", C);
  compare(name, p, f[2], mean, eps_of(KERN_FP32));
  snprintf(name, sizeof name, "resid+layernorm C=%d rstd", C);
  compare(name, p, f[3], rstd, eps_of(KERN_FP32));
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "fused = two kernels C=%d %s", C, part[i]);
    identical(name, p, f[i], t[i]);
  }
  fused();
  for (int i = 0; i < 4; i++)
    same_bits("residual_layernorm_forward", p, f[i], get(g1[i], i));
  if (timed) {
    snprintf(name, sizeof name, "residual_forward+layernorm_forward (old) %s", shape);
    double old_us = time_us(name, two);
    snprintf(name, sizeof name, "residual_layernorm_forward (new) %s", shape);
    double new_us = time_us(name, fused);
    printf("residual+layernorm %s: fused %.2fx the speed of the two kernels\n", shape,
           old_us / new_us);
  }
  gfree(da), gfree(db), gfree(dw), gfree(dbias);
  gfree(r1), gfree(o1), gfree(m1), gfree(s1), gfree(r2), gfree(o2), gfree(m2), gfree(s2);
}

/* n values spread over a few hundred distinct ones, cheaply (the big
 * gradient buffers need no normal draws) */
static vec spread(size_t n, float scale) {
  vec x(n);
  for (size_t i = 0; i < n; i++)
    x[i] = scale * (float)((int)((i * 2654435761u) % 601u) - 300) / 300.0f;
  return x;
}

/* The old encoder_backward's host round trip (the tokens down, a sort by
 * (token, row), row lists and bucket starts up, each copy waited for), for
 * the old-against-new timing: the part the device bucketing replaces. */
static void host_bucketing(const int32_t *dtok, int N, int32_t *dev) {
  cudaStream_t st = kern__cu_stream(&GPU);
  std::vector<int32_t> tok(N), rows(N), start;
  std::vector<uint64_t> keys(N);
  cudaMemcpyAsync(tok.data(), dtok, (size_t)N * 4, cudaMemcpyDeviceToHost, st);
  cudaStreamSynchronize(st);
  for (int r = 0; r < N; r++)
    keys[r] = (uint64_t)(uint32_t)tok[r] << 32 | (uint32_t)r;
  std::sort(keys.begin(), keys.end());
  for (int i = 0; i < N; i++) {
    if (i == 0 || keys[i] >> 32 != keys[i - 1] >> 32)
      start.push_back(i);
    rows[i] = (int32_t)(keys[i] & 0xffffffffu);
  }
  start.push_back(N);
  cudaMemcpyAsync(dev, rows.data(), (size_t)N * 4, cudaMemcpyHostToDevice, st);
  cudaMemcpyAsync(dev + N, start.data(), start.size() * 4, cudaMemcpyHostToDevice, st);
  cudaStreamSynchronize(st);
}

/* encoder_backward at a training shape: tokens skewed towards small ids
 * (u^3 * V: a few thousand distinct tokens, the frequent ones in buckets of
 * hundreds of rows, as in text). Every dwte / dwpe element is the CPU's sum
 * in the CPU's (row) order, so the bits must agree with the CPU twin's. */
static void check_encoder_backward_large(kern_prec p, int B, int T, int C, int V, int timed) {
  int N = B * T;
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; i++) {
    double u = trn_rng_uniform(rng);
    tok[i] = (int32_t)(u * u * u * V);
  }
  vec dy = randn((size_t)N * C, 1, p), dwte = spread((size_t)V * C, 0.01f),
      dwpe = spread((size_t)T * C, 0.02f);
  vec cte = dwte, cpe = dwpe;
  CPU.ops->encoder_backward(&CPU, cte.data(), cpe.data(), dy.data(), tok.data(), B, T, C);
  int32_t *dtok = up(tok);
  kern_x *ddy = upx(dy);
  float *gte = up(dwte), *gpe = up(dwpe);
  char name[160], shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d C=%d V=%d %s", B, T, C, V, prec_name(p));
  GPU.ops->encoder_backward(&GPU, gte, gpe, ddy, dtok, B, T, C);
  vec a = down(gte, dwte.size()), b = down(gpe, dwpe.size());
  snprintf(name, sizeof name, "encoder_backward V=%d dwte", V);
  compare(name, p, a, cte, eps_of(KERN_FP32));
  identical(name, p, a, cte);
  snprintf(name, sizeof name, "encoder_backward V=%d dwpe", V);
  identical(name, p, b, cpe);
  GPU.ops->from_host(&GPU, gte, dwte.data(), dwte.size() * 4);
  GPU.ops->from_host(&GPU, gpe, dwpe.data(), dwpe.size() * 4);
  GPU.ops->encoder_backward(&GPU, gte, gpe, ddy, dtok, B, T, C);
  same_bits("encoder_backward dwte", p, a, down(gte, dwte.size()));
  same_bits("encoder_backward dwpe", p, b, down(gpe, dwpe.size()));
  if (timed) {
    /* accumulating into dwte again each call: the same work every call */
    snprintf(name, sizeof name, "encoder_backward (new, device bucketing) %s", shape);
    time_us(name, [&]() { GPU.ops->encoder_backward(&GPU, gte, gpe, ddy, dtok, B, T, C); });
    int32_t *lists = (int32_t *)GPU.ops->alloc(&GPU, (2 * (size_t)N + 1) * 4);
    snprintf(name, sizeof name, "encoder_backward old host bucketing round trip alone %s", shape);
    time_us(name, [&]() { host_bucketing(dtok, N, lists); });
    gfree(lists);
  }
  gfree(dtok), gfree(ddy), gfree(gte), gfree(gpe);
}

/* The element-wise kernels' vector path (one 128-bit access per array:
 * aligned pointers, n a multiple of the access's elements) against their
 * scalar path (the same data in other buffers, viewed from their second
 * element: every pointer off the vector alignment), bit for bit,
 * and timed: scalar (old) against vector (new). GELU and the residual work
 * on kern_x (8 bf16/fp16 or 4 fp32 values per 128-bit access), the rest on
 * fp32 (4 per access). n: elements, a multiple of 8 for the vector path. */
static void check_vec4(kern_prec p, size_t n, int timed) {
  vec x = randn(n, 3, p), y = randn(n, 1, p);
  char name[160];
  struct op {
    const char *name;
    int isx;                                       /* kern_x buffers, else fp32 */
    std::function<void(void *, void *, void *)> f; /* (out, x, y) */
  };
  std::vector<op> ops = {
      {"gelu_forward", 1,
       [&](void *o, void *xi, void *) { GPU.ops->gelu_forward(&GPU, o, xi, n); }},
      {"gelu_backward (aliased)", 1,
       [&](void *, void *xi, void *yi) { GPU.ops->gelu_backward(&GPU, yi, xi, yi, n); }},
      {"residual_forward", 1,
       [&](void *o, void *xi, void *yi) { GPU.ops->residual_forward(&GPU, o, xi, yi, n); }},
      {"scale", 0, [&](void *, void *xi, void *) { GPU.ops->scale(&GPU, (float *)xi, 0.37f, n); }},
      {"axpy (init)", 0,
       [&](void *o, void *xi, void *) {
         GPU.ops->axpy(&GPU, (float *)o, (const float *)xi, 0.25f, n, 1);
       }},
      {"axpy (+=)", 0,
       [&](void *, void *xi, void *yi) {
         GPU.ops->axpy(&GPU, (float *)yi, (const float *)xi, 0.25f, n, 0);
       }},
      {"round", 0,
       [&](void *, void *xi, void *) { GPU.ops->round(&GPU, (float *)xi, n, KERN_BF16); }},
  };
  for (const op &o : ops) {
    size_t es = o.isx ? (size_t)GPU.xbytes : sizeof(float);
    /* "a": buffers of n elements, aligned; "u": other buffers, viewed from
     * their second element (off the vector alignment) */
    void *bx = GPU.ops->alloc(&GPU, (n + 4) * es), *by = GPU.ops->alloc(&GPU, (n + 4) * es);
    void *bo = GPU.ops->alloc(&GPU, (n + 4) * es), *cx = GPU.ops->alloc(&GPU, (n + 4) * es);
    void *cy = GPU.ops->alloc(&GPU, (n + 4) * es), *co = GPU.ops->alloc(&GPU, (n + 4) * es);
    char *ax = (char *)bx, *ay = (char *)by, *ao = (char *)bo;
    char *ux = (char *)cx + es, *uy = (char *)cy + es, *uo = (char *)co + es;
    std::vector<unsigned char> hx = o.isx ? xbytes_of(x) : std::vector<unsigned char>(n * 4);
    std::vector<unsigned char> hy = o.isx ? xbytes_of(y) : std::vector<unsigned char>(n * 4);
    if (!o.isx)
      memcpy(hx.data(), x.data(), n * 4), memcpy(hy.data(), y.data(), n * 4);
    auto load = [&]() {
      GPU.ops->from_host(&GPU, ax, hx.data(), n * es);
      GPU.ops->from_host(&GPU, ay, hy.data(), n * es);
      GPU.ops->from_host(&GPU, ux, hx.data(), n * es);
      GPU.ops->from_host(&GPU, uy, hy.data(), n * es);
    };
    auto get = [&](void *d) { return o.isx ? downx(d, n) : down((float *)d, n); };
    /* the op's result is in out, x or y, whichever it writes: compare all three */
    load();
    GPU.ops->zero(&GPU, bo, (n + 4) * es);
    GPU.ops->zero(&GPU, co, (n + 4) * es);
    o.f(ao, ax, ay);
    vec r[3] = {get(ao), get(ax), get(ay)};
    o.f(uo, ux, uy);
    vec s[3] = {get(uo), get(ux), get(uy)};
    int bad = 0;
    for (int i = 0; i < 3; i++)
      bad += memcmp(r[i].data(), s[i].data(), n * 4) != 0;
    snprintf(name, sizeof name, "%s vector = scalar", o.name);
    printf("%-28s %s  n %-8zu %s\n", name, prec_name(p), n,
           bad ? "FAILED (bits differ)" : "identical");
    failures += bad != 0;
    if (timed) {
      /* in-place ops change their data each call; the timing does not care */
      snprintf(name, sizeof name, "%s (old, scalar) n=%zu %s", o.name, n, prec_name(p));
      time_us(name, [&]() { o.f(uo, ux, uy); });
      snprintf(name, sizeof name, "%s (new, vector) n=%zu %s", o.name, n, prec_name(p));
      time_us(name, [&]() { o.f(ao, ax, ay); });
    }
    gfree(bx), gfree(by), gfree(bo), gfree(cx), gfree(cy), gfree(co);
  }
}

/* ---- one whole training step, CUDA against CPU ---- */

typedef struct step_out {
  double loss1, gnorm, loss2;
  vec grads;
} step_out;

static step_out train_step(kern_ctx *k, const rcfg_shape *s, int B, const std::vector<int32_t> &tok,
                           float S) {
  trn_model m;
  trn_optim o;
  step_out r;
  if (trn_model_init(&m, k, s, B, 0, 0) != 0 || trn_optim_init(&o, &m, 0) != 0) {
    fprintf(stderr, "  train step: out of memory\n");
    exit(1);
  }
  trn_model_init_weights(&m, 7);
  r.loss1 = trn_model_forward(&m, B, tok.data(), tok.data() + 1);
  trn_model_backward(&m, S);
  r.gnorm = sqrt(k->ops->sumsq(k, m.grads, m.nparams)) / S;
  r.grads.resize(m.nparams);
  k->ops->to_host(k, r.grads.data(), m.grads, m.nparams * sizeof(float));
  for (float &g : r.grads)
    g /= S;
  trn_optim_step(&o, &m, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0f / S, NULL, 1);
  r.loss2 = trn_model_forward(&m, B, tok.data(), tok.data() + 1);
  trn_optim_free(&o);
  trn_model_free(&m);
  return r;
}

/* A tiny model of the given shape, one step on each backend: gpt2, and
 * llama with QK-norm, an untied head and muP (every llama op, scale_x and
 * the AdamW parts' lr_scale in one step). */
static void check_train_step(kern_prec p, const rcfg_shape &s, const char *family) {
  char name[80];
  const int B = 4;
  auto tok = randtok((size_t)B * s.seq_len + 1, s.vocab_size);
  float S = p == KERN_FP16 ? 1024.0f : 1.0f; /* a loss scale, as fp16 runs use */
  step_out c = train_step(&CPU, &s, B, tok, S);
  step_out g = train_step(&GPU, &s, B, tok, S);
  step_out g2 = train_step(&GPU, &s, B, tok, S);
  double e = 10 * eps_of(p);
  int bad = !(fabs(g.loss1 - c.loss1) <= e * c.loss1) ||
            !(fabs(g.loss2 - c.loss2) <= e * c.loss2) || !(fabs(g.gnorm - c.gnorm) <= e * c.gnorm);
  snprintf(name, sizeof name, "train step %s", family);
  printf("%-28s %s  loss %.9g / %.9g, grad norm %.9g / %.9g, loss after step %.9g / %.9g "
         "(gpu / cpu)%s\n",
         name, prec_name(p), g.loss1, c.loss1, g.gnorm, c.gnorm, g.loss2, c.loss2,
         bad ? "  FAILED" : "");
  failures += bad;
  snprintf(name, sizeof name, "train step %s gradients", family);
  compare(name, p, g.grads, c.grads, e);
  if (memcmp(&g.loss1, &g2.loss1, sizeof(double)) || memcmp(&g.loss2, &g2.loss2, sizeof(double)))
    failures++, fprintf(stderr, "  %s %s: two GPU runs differ\n", name, prec_name(p));
  same_bits(name, p, g.grads, g2.grads);
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("skipped: no GPU (cudaGetDeviceCount: %d devices, %s)\n", ndev, cudaGetErrorString(e));
    return 77;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("device 0: %s\n", prop.name);
  trn_rng_seed(rng, 2024);
  rcfg_shape gpt2 = {}, llama; /* gpt2, standard parametrisation: the zeros */
  gpt2.n_layer = 2, gpt2.d_model = 64, gpt2.n_head = 4, gpt2.seq_len = 32, gpt2.vocab_size = 97;
  llama = gpt2; /* F = 32 ceil(8/3 x 64 / 32) = 192 */
  llama.family = RCFG_LLAMA, llama.mlp_ratio = 8.0 / 3.0, llama.mlp_multiple_of = 32;
  llama.rope_theta = 10000.0, llama.untied = 1, llama.qk_norm = 1;
  llama.parametrization = RCFG_MUP, llama.base_width = 32;
  for (int pi = 0; pi < 3; pi++) {
    kern_prec p = (kern_prec)pi;
    char err[1024];
    kern_cpu_init(&CPU, p, 0);
    if (kern_cuda_init(&GPU, p, 0, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    check_encoder(p);
    check_layernorm(p);
    check_rmsnorm(p, 70, 80); /* C not a multiple of 32, N over one dw chunk */
    check_rmsnorm(p, 37, 768);
    check_qknorm(p, 37, 64, 4);  /* hs 16: lanes past hs idle; a partial dw chunk */
    check_qknorm(p, 37, 96, 2);  /* hs 48 */
    check_qknorm(p, 20, 256, 2); /* hs 128 */
    check_rope(p, 2, 40, 64, 4, 10000.0f, 0.3f);
    check_rope(p, 1, 1024, 128, 2, 500000.0f, 0.125f); /* positions to 1023, hs 64 */
    check_rope(p, 2, 40, 64, 4, 0.0f, 0.0625f);        /* gpt2 muP: 1/hs alone */
    check_rope(p, 2, 40, 64, 4, 0.0f, 0.3f);
    check_rope(p, 2, 40, 64, 4, 0.0f, 1.0f); /* nothing to do */
    check_swiglu(p, 37, 72);
    check_swiglu(p, 37, 75);
    check_scale_x(p);
    check_matmul(p, 64, 96, 128, 1);
    check_matmul(p, 37, 72, 40, 0); /* odd sizes: unaligned rows for cuBLASLt */
    check_matmul(p, 37, 72, 40, 1);
    check_matmul_gelu(p, 37, 72, 40);
    if (p == KERN_FP16)
      check_matmul_overflow();
    check_matmul_gelu(p, 37, 72, 44);    /* OC not a multiple of 8: no GELU epilogue */
    check_matmul(p, 4096, 768, 3072, 1); /* B=4, T=1024, C=768: the MLP's fc */
    check_matmul(p, 4096, 768, 768, 1);
    check_matmul_gelu(p, 4096, 768, 3072);
    if (p == KERN_BF16) { /* the head, without bias (the CPU reference takes seconds) */
      check_matmul(p, 4096, 768, 50304, 0);
      check_matmul(p, 4096, 768, 50257, 0);
      time_gemm_setup(p);
    }
    check_attention(p);
    check_flash_attention(p, 2, 40, 64, 4, 0);     /* hs 16, as the train step below */
    check_flash_attention(p, 3, 100, 64, 2, 0);    /* hs 32 */
    check_flash_attention(p, 2, 333, 256, 2, 0);   /* hs 128, T off every tile */
    check_flash_attention(p, 4, 1024, 768, 12, 1); /* GPT-2's heads (hs 64), timed */
    check_elementwise(p);
    check_xent(p, 24, 1000);
    check_xent(p, 16, 50257);
    check_xent(p, 16, 50304);
    check_adamw(p);
    check_adamw_fused(p);
    if (p != KERN_FP32)
      check_to_x(p);
    check_train_step(p, gpt2, "gpt2");
    check_train_step(p, llama, "llama");
    /* the trainer's shapes; timings at bf16, the usual training precision */
    int timed = p == KERN_BF16;
    check_residual_layernorm(p, 4, 1024, 768, timed);
    check_residual_layernorm(p, 16, 1024, 768, timed);
    check_residual_layernorm(p, 4, 1024, 771, timed); /* odd C: the scalar path */
    check_residual_layernorm(p, 1, 37, 12800, 0);     /* rows too long for shared memory */
    check_residual_layernorm(p, 1, 37, 12289, 0);     /* ... and odd */
    check_encoder_backward_large(p, 16, 1024, 768, 50304, timed);
    check_encoder_backward_large(p, 4, 1024, 771, 50257, 0); /* odd C and V: the scalar path */
    check_vec4(p, 4104, 0); /* a multiple of 8 and 4, a partial last block */
    if (timed)
      check_vec4(p, (size_t)16 * 1024 * 4 * 768, 1); /* the MLP's (B, T, 4C) at B=16 */
    if (pi == 0) {
      check_round();
      check_sumsq();
      check_step_scalars();
      check_uploads();
    }
    kern_cuda_close(&GPU);
    kern_cpu_close(&CPU);
  }
  printf(failures ? "%d checks FAILED\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}

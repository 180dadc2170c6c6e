/* The llama family's layers: RMSNorm, per-head QK-norm, rotary position
 * embedding, SwiGLU, and scale_x (muP's output multiplier). CPU twin:
 * kernels/cpu/llama.c. Activations, their gradients and the gains are
 * kern_x (X: the run's precision's type), read into fp32 and written back
 * rounded; rstd and the gains' gradients are fp32. */
#include "kernels/cuda/internal.cuh"
#include "kernels/layer_ops.h"

#define RMS_EPS 1e-5f
#define WARPS 8          /* warps per block of the row kernels: one warp per row (or head) */
#define CHUNK_ROWS 64    /* rows per partial sum of RMSNorm's dw */
#define QK_CHUNK_ROWS 16 /* rows per partial sum of QK-norm's dwq, dwk (NH heads each) */

/* rstd = 1 / sqrt(mean(x^2) + eps) of the n values x[0], x[1], ... by one
 * warp, every lane getting it: lane l sums the squares of l, l + 32, ... in
 * order, the warp adds the 32 sums by butterfly. */
template <typename X> __device__ __forceinline__ float rms_rstd(const X *x, int n, int lane) {
  float s = 0.0f;
  for (int c = lane; c < n; c += 32) {
    float v = kern__cu_f(x[c]);
    s += v * v;
  }
  return 1.0f / sqrtf(kern__cu_warp_sum(s) / (float)n + RMS_EPS);
}

/* y = x * rstd * w over the n values at x by one warp, rounded to X;
 * returns rstd (every lane) */
template <typename X>
__device__ __forceinline__ float rms_out(X *y, const X *x, const X *w, int n, int lane) {
  float rs = rms_rstd(x, n, lane);
  for (int c = lane; c < n; c += 32)
    y[c] = kern__cu_to<X>(kern__cu_f(x[c]) * rs * kern__cu_f(w[c]));
  return rs;
}

/* RMSNorm's backward of the n values at x by one warp, rstd s:
 * dx = s * (dn - norm * mean(dn * norm)) with dn = dy * w, norm = x * s,
 * added to dx (ACC) or written over it, rounded to X. Each lane reads its
 * channels of dy (both passes) before it writes them: dx may alias dy. */
template <bool ACC, typename X>
__device__ __forceinline__ void rms_dinp(X *dx, const X *dy, const X *x, const X *w, float s, int n,
                                         int lane) {
  float sum = 0.0f;
  for (int c = lane; c < n; c += 32)
    sum += kern__cu_f(dy[c]) * kern__cu_f(w[c]) * (kern__cu_f(x[c]) * s);
  sum = kern__cu_warp_sum(sum) / (float)n;
  for (int c = lane; c < n; c += 32) {
    float nc = kern__cu_f(x[c]) * s;
    float dn = kern__cu_f(dy[c]) * kern__cu_f(w[c]);
    float d = s * (dn - nc * sum);
    dx[c] = kern__cu_to<X>(ACC ? kern__cu_f(dx[c]) + d : d);
  }
}

/* ---- RMSNorm ---- */

/* out = inp * rstd * w, one warp per row: lane l takes channels l, l + 32, ... */
template <typename X>
__global__ void rmsnorm_forward_kernel(X *out, float *rstd, const X *inp, const X *w, int N,
                                       int C) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return; /* whole warps leave together: the shuffles see 32 lanes */
  float rs = rms_out(out + (size_t)row * C, inp + (size_t)row * C, w, C, lane);
  if (lane == 0)
    rstd[row] = rs;
}

/* dinp += rstd * (dnorm - norm * mean(dnorm * norm)), one warp per row,
 * dnorm = dout * w, norm = x * rstd (LayerNorm's backward without the mean
 * terms); dinp rounded to X */
template <typename X>
__global__ void rmsnorm_backward_dinp_kernel(X *dinp, const X *dout, const X *inp, const X *w,
                                             const float *rstd, int N, int C) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  size_t o = (size_t)row * C;
  rms_dinp<true>(dinp + o, dout + o, inp + o, w, rstd[row], C, lane);
}

/* part[chunk][c] = sum over the chunk's CHUNK_ROWS rows, in order, of
 * dout * norm. Block (x, chunk), one thread per channel (consecutive
 * threads read consecutive channels of a row). */
template <typename X>
__global__ void rmsnorm_dw_part_kernel(float *part, const X *dout, const X *inp, const float *rstd,
                                       int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, nchunks = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
  if (c >= C)
    return;
  /* grid-stride in y: gridDim.y is at most 65,535 chunks, N may need more */
  for (int chunk = blockIdx.y; chunk < nchunks; chunk += gridDim.y) {
    int r0 = chunk * CHUNK_ROWS, r1 = r0 + CHUNK_ROWS < N ? r0 + CHUNK_ROWS : N;
    float dw = 0.0f;
    for (int r = r0; r < r1; r++) {
      size_t o = (size_t)r * C + c;
      dw += kern__cu_f(dout[o]) * (kern__cu_f(inp[o]) * rstd[r]);
    }
    part[(size_t)chunk * C + c] = dw;
  }
}

/* dst[c] += the sum of the nchunks partials part[j * C + c] in chunk order
 * (C columns; RMSNorm's dw, QK-norm's dwq | dwk with dst2 the second half) */
__global__ void colsum_final_kernel(float *dst, float *dst2, const float *part, int nchunks, int C,
                                    int half) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  float s = kern__cu_chunk_sum(part, nchunks, C, c);
  if (dst2 && c >= half)
    dst2[c - half] += s;
  else
    dst[c] += s;
}

/* ---- QK-norm: per-head RMSNorm of the q and k thirds of a (N, 3C) row ---- */

/* Warp g of N * 3 * NH takes one head of one third of one row:
 *   row = g / (3 NH), part = (g / NH) % 3 (0 q, 1 k, 2 v), head h = g % NH;
 * its hs channels start at row * 3C + part * C + h * hs. q and k heads are
 * normalised (rstd at (row, part, h) of the (N, 2, NH) rstd) times their
 * gain wq or wk (hs values); v heads are copied. Lane l takes channels l,
 * l + 32, ... of the head (hs < 32: lanes past hs idle). */

/* This warp's q or k head: o, the offset of its channels in the (N, 3C)
 * rows; part, 0 q or 1 k; r, its index in the (N, 2, NH) rstd. */
struct qk_head {
  size_t o, r;
  int part;
};

/* Finds this warp's head; false for a warp past the end (whole warps leave
 * together) and for a v head, which it copies from src to dst (the same
 * channels; each lane reads a channel before it writes it). */
template <typename X>
__device__ __forceinline__ bool qk_head_of(qk_head *hd, X *dst, const X *src, int N, int C,
                                           int NH) {
  size_t g = (size_t)blockIdx.x * WARPS + threadIdx.x / 32;
  int lane = threadIdx.x % 32, hs = C / NH;
  if (g >= (size_t)N * 3 * NH)
    return false;
  size_t row = g / (3 * (size_t)NH);
  int part = (int)(g / NH % 3), h = (int)(g % NH);
  size_t o = row * 3 * C + (size_t)part * C + (size_t)h * hs;
  if (part == 2) {
    for (int c = lane; c < hs; c += 32)
      dst[o + c] = src[o + c];
    return false;
  }
  *hd = {o, (row * 2 + part) * NH + h, part};
  return true;
}

template <typename X>
__global__ void qknorm_forward_kernel(X *out, float *rstd, const X *qkv, const X *wq, const X *wk,
                                      int N, int C, int NH) {
  qk_head hd;
  if (!qk_head_of(&hd, out, qkv, N, C, NH))
    return;
  int lane = threadIdx.x % 32;
  float rs = rms_out(out + hd.o, qkv + hd.o, hd.part == 0 ? wq : wk, C / NH, lane);
  if (lane == 0)
    rstd[hd.r] = rs;
}

/* dqkv = RMSNorm's backward per q and k head (overwrite), dout copied for v
 * heads; the warps as in the forward. dqkv may alias dout: each lane reads
 * its channels of dout (both passes) before it writes them, and the warp's
 * sum completes before any lane writes. */
template <typename X>
__global__ void qknorm_backward_dinp_kernel(X *dqkv, const X *dout, const X *qkv, const X *wq,
                                            const X *wk, const float *rstd, int N, int C, int NH) {
  qk_head hd;
  if (!qk_head_of(&hd, dqkv, dout, N, C, NH))
    return;
  rms_dinp<false>(dqkv + hd.o, dout + hd.o, qkv + hd.o, hd.part == 0 ? wq : wk, rstd[hd.r], C / NH,
                  threadIdx.x % 32);
}

/* Partial sums of the gains' gradients over a chunk of QK_CHUNK_ROWS rows:
 * part[chunk][j] for j < 2 hs, j = p * hs + c (p 0: dwq, 1: dwk; channel c
 * of a head), the sum of dout * norm over the chunk's rows in order and,
 * within a row, the NH heads in order. Block (x, chunk), one thread per j. */
template <typename X>
__global__ void qknorm_dw_part_kernel(float *part, const X *dout, const X *qkv, const float *rstd,
                                      int N, int C, int NH) {
  int hs = C / NH, j = blockIdx.x * blockDim.x + threadIdx.x;
  int nchunks = (N + QK_CHUNK_ROWS - 1) / QK_CHUNK_ROWS;
  if (j >= 2 * hs)
    return;
  int p = j / hs, c = j % hs;
  /* grid-stride in y: gridDim.y is at most 65,535 chunks, N may need more */
  for (int chunk = blockIdx.y; chunk < nchunks; chunk += gridDim.y) {
    int r0 = chunk * QK_CHUNK_ROWS, r1 = r0 + QK_CHUNK_ROWS < N ? r0 + QK_CHUNK_ROWS : N;
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
      const float *rs = rstd + ((size_t)r * 2 + p) * NH; /* this row's heads of q or k */
      size_t o = (size_t)r * 3 * C + (size_t)p * C + c;  /* channel c of head 0 */
      for (int h = 0; h < NH; h++, o += hs)
        acc += kern__cu_f(dout[o]) * (kern__cu_f(qkv[o]) * rs[h]);
    }
    part[(size_t)chunk * 2 * hs + j] = acc;
  }
}

/* ---- rotary position embedding ---- */

/* The angles' cosines and sines for every position t < T and pair i < hs/2:
 * cs[t * half + i] = cos(t * theta^(-2i/hs)), sn[...] the sine, in fp64 and
 * then rounded to fp32, as the CPU's table. CUDA's fp64 pow, cos and sin are
 * within 2 ulp (fp64) of glibc's, so the floats are the CPU's but where an
 * fp64 value falls within a few fp64 ulp of a tie between two floats. */
__global__ void rope_table_kernel(float *cs, float *sn, int T, int hs, double theta) {
  int half = hs / 2;
  size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * half)
    return;
  int t = (int)(idx / half), i = (int)(idx % half);
  double ang = (double)t * pow(theta, -2.0 * i / hs);
  cs[idx] = (float)cos(ang);
  sn[idx] = (float)sin(ang);
}

/* One thread per rotated pair: N rows times C pairs (q's C/2 then k's C/2).
 * Pair id within a row: part = id / (C/2) (0 q, 1 k), then head h and
 * channel i < hs/2 of that third; the pair is (i, i + hs/2) of the head at
 * row * 3C + part * C + h * hs, and turns by the angle of position row % T:
 *   forward   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin
 *   backward  (the transpose) d1 = g1 cos + g2 sin,  d2 = g2 cos - g1 sin
 * q's two results are then multiplied by qscale (before the one rounding). */
template <int BWD, typename X>
__global__ void rope_kernel(X *qkv, const float *cs, const float *sn, int N, int T, int C, int NH,
                            float qscale) {
  size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= (size_t)N * C)
    return;
  int hs = C / NH, half = hs / 2, halfC = C / 2;
  size_t row = id / C;
  int rem = (int)(id % C), part = rem / halfC, h = rem % halfC / half, i = rem % half;
  X *x = qkv + row * 3 * C + (size_t)part * C + (size_t)h * hs + i;
  size_t a = (size_t)(row % T) * half + i;
  float c = cs[a], s = sn[a];
  float x1 = kern__cu_f(x[0]), x2 = kern__cu_f(x[half]), y1, y2;
  if (BWD) {
    y1 = x1 * c + x2 * s;
    y2 = x2 * c - x1 * s;
  } else {
    y1 = x1 * c - x2 * s;
    y2 = x2 * c + x1 * s;
  }
  if (part == 0) {
    y1 *= qscale;
    y2 *= qscale;
  }
  x[0] = kern__cu_to<X>(y1);
  x[half] = kern__cu_to<X>(y2);
}

/* theta 0: q = round(q * qscale) alone, one thread per element of q
 * (row * 3C + c, c < C) */
template <typename X> __global__ void q_scale_kernel(X *qkv, int N, int C, float qscale) {
  size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= (size_t)N * C)
    return;
  X *q = qkv + id / C * 3 * C + id % C;
  *q = kern__cu_to<X>(kern__cu_f(*q) * qscale);
}

/* ---- SwiGLU and scale_x: element-wise ----
 *
 * VEC consecutive values of a row per thread (VEC = KERN__CU_VEC(X), one
 * 128-bit access per array, where F % VEC == 0 and the buffers are 16-byte
 * aligned, so every row's gate and up parts are too), else VEC 1; each
 * element's arithmetic is the same either way. Element e of out (N, F) is
 * row r = e / F, column f = e % F; its gate is inp[r * 2F + f], its up
 * inp[r * 2F + F + f]. silu(g) = g / (1 + exp(-g)), computed as the CPU
 * does, g * sig(g) with sig(g) = 1 / (1 + exp(-g)) and the CPU's exp
 * (kern__expf of kernels/twins.h). */

template <int VEC, typename X>
__global__ void swiglu_forward_kernel(X *out, const X *inp, size_t n, int F) {
  size_t e = kern__cu_first<VEC>();
  if (e >= n)
    return;
  size_t r = e / F, f = e % F;
  float g[VEC], u[VEC], y[VEC];
  kern__cu_load<VEC>(g, inp + r * 2 * F + f);
  kern__cu_load<VEC>(u, inp + r * 2 * F + F + f);
  for (int j = 0; j < VEC; j++)
    y[j] = g[j] * (1.0f / (1.0f + kern__expf(-g[j]))) * u[j];
  kern__cu_store<VEC>(out + e, y);
}

/* dgate = dout * u * silu'(g), dup = dout * g * sig, with sig = 1 / (1 +
 * exp(-g)) and silu'(g) = sig * (1 + g * (1 - sig)); each thread reads its
 * gate and up values before writing their gradients (dinp may alias inp) */
template <int VEC, typename X>
__global__ void swiglu_backward_kernel(X *dinp, const X *inp, const X *dout, size_t n, int F) {
  size_t e = kern__cu_first<VEC>();
  if (e >= n)
    return;
  size_t r = e / F, f = e % F;
  float g[VEC], u[VEC], dy[VEC], dg[VEC], du[VEC];
  kern__cu_load<VEC>(g, inp + r * 2 * F + f);
  kern__cu_load<VEC>(u, inp + r * 2 * F + F + f);
  kern__cu_load<VEC>(dy, dout + e);
  for (int j = 0; j < VEC; j++) {
    float sig = 1.0f / (1.0f + kern__expf(-g[j]));
    dg[j] = dy[j] * u[j] * (sig * (1.0f + g[j] * (1.0f - sig)));
    du[j] = dy[j] * g[j] * sig;
  }
  kern__cu_store<VEC>(dinp + r * 2 * F + f, dg);
  kern__cu_store<VEC>(dinp + r * 2 * F + F + f, du);
}

/* ---- launchers ---- */

/* Stops with file, line and a hint unless C splits into NH heads (of an
 * even size, for the rotary pairs, when even). */
static void check_heads(const char *op, int C, int NH, int even) {
  if (NH > 0 && C % NH == 0 && (!even || (C / NH) % 2 == 0))
    return;
  fprintf(stderr,
          "%s:%d: %s: C %d NH %d: the head size C / NH must be a whole%s number\nHINT: "
          "$.model.d_model must be a multiple of $.model.n_head%s\n",
          __FILE__, __LINE__, op, C, NH, even ? ", even" : "",
          even ? " with an even quotient" : "");
  exit(1);
}

static void rmsnorm_forward(kern_ctx *k, kern_x *out, float *rstd, const kern_x *inp,
                            const kern_x *w, int N, int C) {
  if (N == 0)
    return;
  KERN__CU_WITH_X(k->prec, rmsnorm_forward_kernel<X>
                  <<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, kern__cu_stream(k)>>>(
                      (X *)out, rstd, (const X *)inp, (const X *)w, N, C));
  KERN__CU_LAUNCHED();
}

/* dw without atomics: CHUNK_ROWS-row partial sums into scratch, then their
 * sum in chunk order (LayerNorm's scheme: the same bits every call) */
static void rmsnorm_backward(kern_ctx *k, kern_x *dinp, float *dw, const kern_x *dout,
                             const kern_x *inp, const kern_x *w, const float *rstd, int N, int C) {
  if (N == 0 || C == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  int nchunks = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
  float *part = (float *)kern__cu_scratch(k, (size_t)nchunks * C * sizeof(float));
  dim3 grid(kern__cu_grid((size_t)C, 256), (unsigned)(nchunks < 65535 ? nchunks : 65535));
  KERN__CU_WITH_X(k->prec, {
    rmsnorm_backward_dinp_kernel<X><<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, st>>>(
        (X *)dinp, (const X *)dout, (const X *)inp, (const X *)w, rstd, N, C);
    KERN__CU_LAUNCHED();
    rmsnorm_dw_part_kernel<X>
        <<<grid, 256, 0, st>>>(part, (const X *)dout, (const X *)inp, rstd, N, C);
  });
  KERN__CU_LAUNCHED();
  colsum_final_kernel<<<kern__cu_grid((size_t)C, 256), 256, 0, st>>>(dw, NULL, part, nchunks, C, C);
  KERN__CU_LAUNCHED();
}

static void qknorm_forward(kern_ctx *k, kern_x *out, float *rstd, const kern_x *qkv,
                           const kern_x *wq, const kern_x *wk, int N, int C, int NH) {
  if (N == 0 || C == 0)
    return;
  check_heads("qknorm_forward", C, NH, 0);
  size_t warps = (size_t)N * 3 * NH;
  KERN__CU_WITH_X(k->prec, qknorm_forward_kernel<X>
                  <<<kern__cu_grid(warps, WARPS), WARPS * 32, 0, kern__cu_stream(k)>>>(
                      (X *)out, rstd, (const X *)qkv, (const X *)wq, (const X *)wk, N, C, NH));
  KERN__CU_LAUNCHED();
}

/* dwq | dwk as one (2 hs) column sum: QK_CHUNK_ROWS-row partials (each over
 * the row's NH heads), then their sum in chunk order */
static void qknorm_backward(kern_ctx *k, kern_x *dqkv, float *dwq, float *dwk, const kern_x *dout,
                            const kern_x *qkv, const kern_x *wq, const kern_x *wk,
                            const float *rstd, int N, int C, int NH) {
  if (N == 0 || C == 0)
    return;
  check_heads("qknorm_backward", C, NH, 0);
  cudaStream_t st = kern__cu_stream(k);
  int hs = C / NH, nchunks = (N + QK_CHUNK_ROWS - 1) / QK_CHUNK_ROWS;
  float *part = (float *)kern__cu_scratch(k, (size_t)nchunks * 2 * hs * sizeof(float));
  dim3 grid(kern__cu_grid((size_t)2 * hs, 128), (unsigned)(nchunks < 65535 ? nchunks : 65535));
  size_t warps = (size_t)N * 3 * NH;
  KERN__CU_WITH_X(k->prec, {
    /* the partials first: they read dout, which dqkv may overwrite */
    qknorm_dw_part_kernel<X>
        <<<grid, 128, 0, st>>>(part, (const X *)dout, (const X *)qkv, rstd, N, C, NH);
    KERN__CU_LAUNCHED();
    qknorm_backward_dinp_kernel<X><<<kern__cu_grid(warps, WARPS), WARPS * 32, 0, st>>>(
        (X *)dqkv, (const X *)dout, (const X *)qkv, (const X *)wq, (const X *)wk, rstd, N, C, NH);
  });
  KERN__CU_LAUNCHED();
  colsum_final_kernel<<<kern__cu_grid((size_t)2 * hs, 128), 128, 0, st>>>(dwq, dwk, part, nchunks,
                                                                          2 * hs, hs);
  KERN__CU_LAUNCHED();
}

/* The table of cosines and sines (T x hs/2 of each, in scratch), then the
 * pairs turned in place; theta 0 (or below: no rotation, as on the CPU):
 * q's scale alone (none at all for 1). */
static void rope(kern_ctx *k, kern_x *qkv, int B, int T, int C, int NH, float theta, float qscale,
                 int bwd) {
  int N = B * T;
  if (N == 0 || C == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  size_t n = (size_t)N * C;
  if (!(theta > 0.0f)) {
    if (qscale == 1.0f)
      return; /* x * 1 is x: nothing changes */
    KERN__CU_WITH_X(k->prec, q_scale_kernel<X>
                    <<<kern__cu_grid(n, 256), 256, 0, st>>>((X *)qkv, N, C, qscale));
    KERN__CU_LAUNCHED();
    return;
  }
  check_heads(bwd ? "rope_backward" : "rope_forward", C, NH, 1);
  int hs = C / NH;
  size_t nt = (size_t)T * (hs / 2), tab = kern__cu_al(nt * sizeof(float));
  char *s = (char *)kern__cu_scratch(k, 2 * tab);
  float *cs = (float *)s, *sn = (float *)(s + tab);
  rope_table_kernel<<<kern__cu_grid(nt, 256), 256, 0, st>>>(cs, sn, T, hs, (double)theta);
  KERN__CU_LAUNCHED();
  KERN__CU_WITH_X(k->prec, {
    if (bwd)
      rope_kernel<1, X>
          <<<kern__cu_grid(n, 256), 256, 0, st>>>((X *)qkv, cs, sn, N, T, C, NH, qscale);
    else
      rope_kernel<0, X>
          <<<kern__cu_grid(n, 256), 256, 0, st>>>((X *)qkv, cs, sn, N, T, C, NH, qscale);
  });
  KERN__CU_LAUNCHED();
}

static void rope_forward(kern_ctx *k, kern_x *qkv, int B, int T, int C, int NH, float theta,
                         float qscale) {
  rope(k, qkv, B, T, C, NH, theta, qscale, 0);
}

static void rope_backward(kern_ctx *k, kern_x *dqkv, int B, int T, int C, int NH, float theta,
                          float qscale) {
  rope(k, dqkv, B, T, C, NH, theta, qscale, 1);
}

/* KERNEL<W or 1, X> over n / W or n threads */
#define LAUNCH_VEC(KERNEL, wide, n, st, ...)                                  \
  do {                                                                        \
    constexpr int W = KERN__CU_VEC(X);                                        \
    if (wide)                                                                 \
      KERNEL<W, X><<<kern__cu_grid((n) / W, 256), 256, 0, st>>>(__VA_ARGS__); \
    else                                                                      \
      KERNEL<1, X><<<kern__cu_grid(n, 256), 256, 0, st>>>(__VA_ARGS__);       \
  } while (0)

static void swiglu_forward(kern_ctx *k, kern_x *out, const kern_x *inp, int N, int F) {
  size_t n = (size_t)N * F;
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec, {
    int wide = F % KERN__CU_VEC(X) == 0 && kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), out, inp);
    LAUNCH_VEC(swiglu_forward_kernel, wide, n, kern__cu_stream(k), (X *)out, (const X *)inp, n, F);
  });
  KERN__CU_LAUNCHED();
}

static void swiglu_backward(kern_ctx *k, kern_x *dinp, const kern_x *inp, const kern_x *dout, int N,
                            int F) {
  size_t n = (size_t)N * F;
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec, {
    int wide = F % KERN__CU_VEC(X) == 0 &&
               kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), dinp, inp) &&
               kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), dout, dout);
    LAUNCH_VEC(swiglu_backward_kernel, wide, n, kern__cu_stream(k), (X *)dinp, (const X *)inp,
               (const X *)dout, n, F);
  });
  KERN__CU_LAUNCHED();
}

static void scale_x(kern_ctx *k, kern_x *x, float s, size_t n) {
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec, {
    int wide = kern__cu_vec_ok(n, KERN__CU_VEC(X), sizeof(X), x, x);
    LAUNCH_VEC(kern__cu_scale_kernel, wide, n, kern__cu_stream(k), (X *)x, s, n);
  });
  KERN__CU_LAUNCHED();
}

void kern__cuda_llama(kern_ops *o) { KERN__OPS_LLAMA(KERN__FILL) }

/* LayerNorm over the last dimension, eps 1e-5. CPU twin: kernels/cpu/layernorm.c.
 * Inputs, outputs, gains and biases are kern_x (X: the run's precision's
 * type), read into fp32; mean, rstd and the parameter gradients are fp32. */
#include "kernels/cuda/internal.cuh"

#define LN_EPS 1e-5f
#define WARPS 8       /* rows per block of the row kernels: one warp per row */
#define CHUNK_ROWS 64 /* rows per partial sum of dw, db */

/* Mean and rstd of the row x (C values, float or X: the same numbers) by
 * one warp, every lane getting both: lane l sums channels l, l + 32, ... in
 * order, the warp adds the 32 sums by butterfly; two-pass variance as on the
 * CPU. The forward kernels below all take their statistics from here, so
 * they share the order. */
template <typename T>
__device__ __forceinline__ void ln_row_stats(const T *x, int C, int lane, float *mean,
                                             float *rstd) {
  float s = 0.0f;
  for (int c = lane; c < C; c += 32)
    s += kern__cu_f(x[c]);
  float m = kern__cu_warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = kern__cu_f(x[c]) - m;
    v += d * d;
  }
  *mean = m;
  *rstd = 1.0f / sqrtf(kern__cu_warp_sum(v) / (float)C + LN_EPS);
}

/* One warp per row: lane l takes channels l, l + 32, ... */
template <typename X>
__global__ void layernorm_forward_kernel(X *out, float *mean, float *rstd, const X *inp, const X *w,
                                         const X *b, int N, int C) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return; /* whole warps leave together: the shuffles below see 32 lanes */
  const X *x = inp + (size_t)row * C;
  float m, rs;
  ln_row_stats(x, C, lane, &m, &rs);
  X *y = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32)
    y[c] = kern__cu_to<X>((kern__cu_f(x[c]) - m) * rs * kern__cu_f(w[c]) + kern__cu_f(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

/* resid = round(a + b), then out = layernorm(resid): residual_forward_kernel
 * and layernorm_forward_kernel in one pass over memory, with their bits.
 * One warp per row; blockDim.x / 32 rows per block. The warp reads a and b
 * once and writes resid, keeping its copy of the row in shared memory (C
 * floats per warp) for the statistics and the output, read there in
 * layernorm_forward_kernel's order; SHARED 0 (a row too long for shared
 * memory): the copy read back is resid itself, the warp's own writes.
 * VEC = KERN__CU_VEC(X): 128-bit loads and stores of X (C % VEC == 0,
 * every pointer 16-byte aligned, so every row is; the copy takes VEC
 * floats, one or two 128-bit accesses); each element's arithmetic does not depend
 * on which lane does it, only the statistics' order does, and that comes
 * from the copy (fp32, the rounded values: the same numbers as resid). */
template <int VEC, int SHARED, typename X>
__global__ void residual_layernorm_forward_kernel(X *resid, X *out, float *mean, float *rstd,
                                                  const X *a, const X *b, const X *w, const X *bias,
                                                  int N, int C) {
  extern __shared__ float4 sh4[]; /* float4: 16-byte aligned for the 128-bit stores */
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= N)
    return; /* whole warps leave together */
  size_t o = (size_t)row * C;
  float *x = (float *)sh4 + (size_t)warp * C; /* SHARED: the row's copy */
  for (int c = lane * VEC; c < C; c += 32 * VEC) {
    float u[VEC], v[VEC];
    kern__cu_load<VEC>(u, a + o + c);
    kern__cu_load<VEC>(v, b + o + c);
    for (int j = 0; j < VEC; j++)
      u[j] = kern__cu_f(kern__cu_to<X>(u[j] + v[j])); /* resid's value */
    kern__cu_store<VEC>(resid + o + c, u);
    if (SHARED)
      kern__cu_store<VEC>(x + c, u);
  }
  __syncwarp(); /* the row's copy, written by all lanes, is complete and visible */
  float m, rs;
  if (SHARED)
    ln_row_stats(x, C, lane, &m, &rs);
  else
    ln_row_stats(resid + o, C, lane, &m, &rs);
  X *y = out + o;
  for (int c = lane * VEC; c < C; c += 32 * VEC) {
    float xv[VEC], wv[VEC], bv[VEC], yv[VEC];
    if (SHARED)
      kern__cu_load<VEC>(xv, x + c);
    else
      kern__cu_load<VEC>(xv, resid + o + c);
    kern__cu_load<VEC>(wv, w + c);
    kern__cu_load<VEC>(bv, bias + c);
    for (int j = 0; j < VEC; j++)
      yv[j] = (xv[j] - m) * rs * wv[j] + bv[j];
    kern__cu_store<VEC>(y + c, yv);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), one warp
 * per row, dnorm = dout * w, norm = (x - mean) * rstd; dinp rounded to X */
template <typename X>
__global__ void layernorm_backward_dinp_kernel(X *dinp, const X *dout, const X *inp, const X *w,
                                               const float *mean, const float *rstd, int N, int C) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  size_t o = (size_t)row * C;
  const X *x = inp + o, *dy = dout + o;
  X *dx = dinp + o;
  float m = mean[row], s = rstd[row];
  float sum_dn = 0.0f, sum_dn_n = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float n = (kern__cu_f(x[c]) - m) * s;
    float dn = kern__cu_f(dy[c]) * kern__cu_f(w[c]);
    sum_dn += dn;
    sum_dn_n += dn * n;
  }
  sum_dn = kern__cu_warp_sum(sum_dn) / (float)C;
  sum_dn_n = kern__cu_warp_sum(sum_dn_n) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float n = (kern__cu_f(x[c]) - m) * s;
    float dn = kern__cu_f(dy[c]) * kern__cu_f(w[c]);
    dx[c] = kern__cu_to<X>(kern__cu_f(dx[c]) + s * (dn - sum_dn - n * sum_dn_n));
  }
}

/* Partial column sums over a chunk of CHUNK_ROWS rows, rows in order:
 * part[chunk][0][c] = sum dout * norm, part[chunk][1][c] = sum dout. Block
 * (x, chunk), one thread per channel (consecutive threads read consecutive
 * channels of a row). */
template <typename X>
__global__ void layernorm_dwdb_part_kernel(float *part, const X *dout, const X *inp,
                                           const float *mean, const float *rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= C)
    return;
  int r0 = chunk * CHUNK_ROWS, r1 = r0 + CHUNK_ROWS < N ? r0 + CHUNK_ROWS : N;
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; r++) {
    size_t o = (size_t)r * C + c;
    float dy = kern__cu_f(dout[o]);
    dw += dy * ((kern__cu_f(inp[o]) - mean[r]) * rstd[r]);
    db += dy;
  }
  part[(size_t)chunk * 2 * C + c] = dw;
  part[((size_t)chunk * 2 + 1) * C + c] = db;
}

/* dw[c] += sum of the chunks' partials in chunk order; likewise db */
__global__ void layernorm_dwdb_final_kernel(float *dw, float *db, const float *part, int nchunks,
                                            int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  float sw = 0.0f, sb = 0.0f;
  for (int j = 0; j < nchunks; j++) {
    sw += part[(size_t)j * 2 * C + c];
    sb += part[((size_t)j * 2 + 1) * C + c];
  }
  dw[c] += sw;
  db[c] += sb;
}

/* ---- launchers ---- */

static void layernorm_forward(kern_ctx *k, kern_x *out, float *mean, float *rstd, const kern_x *inp,
                              const kern_x *w, const kern_x *b, int N, int C) {
  if (N == 0)
    return;
  KERN__CU_WITH_X(k->prec, layernorm_forward_kernel<X>
                  <<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, kern__cu_stream(k)>>>(
                      (X *)out, mean, rstd, (const X *)inp, (const X *)w, (const X *)b, N, C));
  KERN__CU_LAUNCHED();
}

#define FUSED_SHARED_BYTES (48 << 10) /* shared memory a block gets without opting in */

static void residual_layernorm_forward(kern_ctx *k, kern_x *resid, kern_x *out, float *mean,
                                       float *rstd, const kern_x *a, const kern_x *b,
                                       const kern_x *w, const kern_x *bias, int N, int C) {
  if (N == 0)
    return;
  size_t row_bytes = (size_t)C * sizeof(float);
  /* WARPS rows per block where their copies fit in shared memory, fewer for
   * long rows, one without a copy beyond */
  int warps = WARPS, use_shared = row_bytes <= FUSED_SHARED_BYTES;
  if (use_shared && (size_t)warps * row_bytes > FUSED_SHARED_BYTES)
    warps = (int)(FUSED_SHARED_BYTES / row_bytes);
  size_t shared = use_shared ? (size_t)warps * row_bytes : 0;
  uintptr_t all = (uintptr_t)resid | (uintptr_t)out | (uintptr_t)a | (uintptr_t)b | (uintptr_t)w |
                  (uintptr_t)bias;
  unsigned grid = kern__cu_grid((size_t)N, warps);
  cudaStream_t st = kern__cu_stream(k);
#define LAUNCH(VEC, SHARED)                                                              \
  residual_layernorm_forward_kernel<VEC, SHARED, X>                                      \
      <<<grid, warps * 32, shared, st>>>((X *)resid, (X *)out, mean, rstd, (const X *)a, \
                                         (const X *)b, (const X *)w, (const X *)bias, N, C)
  KERN__CU_WITH_X(k->prec, {
    constexpr int W = KERN__CU_VEC(X);
    if (C % W == 0 && all % 16 == 0) {
      if (use_shared)
        LAUNCH(W, 1);
      else
        LAUNCH(W, 0);
    } else {
      if (use_shared)
        LAUNCH(1, 1);
      else
        LAUNCH(1, 0);
    }
  });
#undef LAUNCH
  KERN__CU_LAUNCHED();
}

static void layernorm_backward(kern_ctx *k, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                               const kern_x *inp, const kern_x *w, const float *mean,
                               const float *rstd, int N, int C) {
  if (N == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  int nchunks = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
  float *part = (float *)kern__cu_scratch(k, (size_t)nchunks * 2 * C * sizeof(float));
  dim3 grid(kern__cu_grid((size_t)C, 256), (unsigned)nchunks);
  KERN__CU_WITH_X(k->prec, {
    layernorm_backward_dinp_kernel<X><<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, st>>>(
        (X *)dinp, (const X *)dout, (const X *)inp, (const X *)w, mean, rstd, N, C);
    KERN__CU_LAUNCHED();
    layernorm_dwdb_part_kernel<X>
        <<<grid, 256, 0, st>>>(part, (const X *)dout, (const X *)inp, mean, rstd, N, C);
  });
  KERN__CU_LAUNCHED();
  layernorm_dwdb_final_kernel<<<kern__cu_grid((size_t)C, 256), 256, 0, st>>>(dw, db, part, nchunks,
                                                                             C);
  KERN__CU_LAUNCHED();
}

void kern__cuda_layernorm(kern_ops *o) {
  o->layernorm_forward = layernorm_forward;
  o->layernorm_backward = layernorm_backward;
  o->residual_layernorm_forward = residual_layernorm_forward;
}

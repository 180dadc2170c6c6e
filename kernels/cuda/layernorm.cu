/* LayerNorm over the last dimension, eps 1e-5. CPU twin: kernels/cpu/layernorm.c. */
#include "kernels/cuda/internal.cuh"

#define LN_EPS 1e-5f
#define WARPS 8       /* rows per block of the row kernels: one warp per row */
#define CHUNK_ROWS 64 /* rows per partial sum of dw, db */

/* One warp per row: lane l takes channels l, l + 32, ...; the warp sums by
 * butterfly. Two-pass variance as on the CPU. */
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int N, int C, int p) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return; /* whole warps leave together: the shuffles below see 32 lanes */
  const float *x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32)
    s += x[c];
  float m = kern__cu_warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = x[c] - m;
    v += d * d;
  }
  float rs = 1.0f / sqrtf(kern__cu_warp_sum(v) / (float)C + LN_EPS);
  float *y = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32)
    y[c] = kern__cu_rnd((x[c] - m) * rs * w[c] + b[c], p);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), one warp
 * per row, dnorm = dout * w, norm = (x - mean) * rstd */
__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *w, const float *mean, const float *rstd,
                                               int N, int C, int p) {
  int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  size_t o = (size_t)row * C;
  const float *x = inp + o, *dy = dout + o;
  float *dx = dinp + o;
  float m = mean[row], s = rstd[row];
  float sum_dn = 0.0f, sum_dn_n = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float n = (x[c] - m) * s;
    float dn = dy[c] * w[c];
    sum_dn += dn;
    sum_dn_n += dn * n;
  }
  sum_dn = kern__cu_warp_sum(sum_dn) / (float)C;
  sum_dn_n = kern__cu_warp_sum(sum_dn_n) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float n = (x[c] - m) * s;
    float dn = dy[c] * w[c];
    dx[c] = kern__cu_rnd(dx[c] + s * (dn - sum_dn - n * sum_dn_n), p);
  }
}

/* Partial column sums over a chunk of CHUNK_ROWS rows, rows in order:
 * part[chunk][0][c] = sum dout * norm, part[chunk][1][c] = sum dout. Block
 * (x, chunk), one thread per channel (consecutive threads read consecutive
 * channels of a row). */
__global__ void layernorm_dwdb_part_kernel(float *part, const float *dout, const float *inp,
                                           const float *mean, const float *rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= C)
    return;
  int r0 = chunk * CHUNK_ROWS, r1 = r0 + CHUNK_ROWS < N ? r0 + CHUNK_ROWS : N;
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; r++) {
    size_t o = (size_t)r * C + c;
    float dy = dout[o];
    dw += dy * ((inp[o] - mean[r]) * rstd[r]);
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

static void layernorm_forward(kern_ctx *k, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
  if (N == 0)
    return;
  layernorm_forward_kernel<<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, kern__cu_stream(k)>>>(
      out, mean, rstd, inp, w, b, N, C, k->prec);
  KERN__CU_LAUNCHED();
}

static void layernorm_backward(kern_ctx *k, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
  if (N == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  layernorm_backward_dinp_kernel<<<kern__cu_grid((size_t)N, WARPS), WARPS * 32, 0, st>>>(
      dinp, dout, inp, w, mean, rstd, N, C, k->prec);
  KERN__CU_LAUNCHED();
  int nchunks = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
  float *part = (float *)kern__cu_scratch(k, (size_t)nchunks * 2 * C * sizeof(float));
  dim3 grid(kern__cu_grid((size_t)C, 256), (unsigned)nchunks);
  layernorm_dwdb_part_kernel<<<grid, 256, 0, st>>>(part, dout, inp, mean, rstd, N, C);
  KERN__CU_LAUNCHED();
  layernorm_dwdb_final_kernel<<<kern__cu_grid((size_t)C, 256), 256, 0, st>>>(dw, db, part, nchunks,
                                                                             C);
  KERN__CU_LAUNCHED();
}

void kern__cuda_layernorm(kern_ops *o) {
  o->layernorm_forward = layernorm_forward;
  o->layernorm_backward = layernorm_backward;
}

/* Linear layers through cuBLASLt, fp32 accumulation. CPU twin:
 * kernels/cpu/matmul.c (OpenBLAS sgemm).
 *
 * At bf16 and fp16 the inputs (activations and the rounded weight copy,
 * already representable at ctx->prec) are converted exactly into scratch
 * and multiplied by a bf16/fp16 GEMM with fp32 accumulation and fp32 output:
 * the numerics the CPU backend emulates. */
#include "kernels/cuda/internal.cuh"

/* out[r, :] = b, one thread per element (the GEMM then adds with beta 1, as
 * the CPU twin does) */
__global__ void bias_fill_kernel(float *out, const float *b, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC)
    out[i] = b[i % OC];
}

/* db[c] += sum of dout[r, c] over rows in chunks of COLSUM_ROWS (rows in
 * order within a chunk, then chunks in order): fixed order, no atomics. */
#define COLSUM_ROWS 64
__global__ void colsum_part_kernel(float *part, const float *dout, int N, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= OC)
    return;
  int r0 = chunk * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
  float s = 0.0f;
  for (int r = r0; r < r1; r++)
    s += dout[(size_t)r * OC + c];
  part[(size_t)chunk * OC + c] = s;
}

__global__ void colsum_final_kernel(float *db, const float *part, int nchunks, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC)
    return;
  float s = 0.0f;
  for (int j = 0; j < nchunks; j++)
    s += part[(size_t)j * OC + c];
  db[c] += s;
}

/* ---- launchers ---- */

static void matmul_forward(kern_ctx *k, float *out, const float *inp, const float *w,
                           const float *b, int N, int C, int OC) {
  if (N == 0 || OC == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  kern_prec p = k->prec;
  float beta = 0.0f;
  if (b) {
    bias_fill_kernel<<<kern__cu_grid((size_t)N * OC, 256), 256, 0, st>>>(out, b, N, OC);
    KERN__CU_LAUNCHED();
    beta = 1.0f;
  }
  size_t e = kern__cu_gemm_elt(p);
  size_t in_b = kern__cu_al((size_t)N * C * e), w_b = kern__cu_al((size_t)OC * C * e);
  char *s = p == KERN_FP32 ? NULL : (char *)kern__cu_scratch(k, in_b + w_b);
  const void *A = kern__cu_lowp(k, inp, (size_t)N * C, s, p);
  const void *W = kern__cu_lowp(k, w, (size_t)OC * C, s ? s + in_b : NULL, p);
  /* out(N,OC) = inp(N,C) @ w(OC,C)^T (+ out) */
  kern__cu_gemm(k, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, beta, out, OC, 0, 1,
                kern__cu_gemm_type(p));
  kern__cu_round(k, out, (size_t)N * OC, p);
}

static void matmul_backward(kern_ctx *k, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC) {
  if (N == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  kern_prec p = k->prec;
  cudaDataType_t t = kern__cu_gemm_type(p);
  size_t e = kern__cu_gemm_elt(p);
  size_t do_b = kern__cu_al((size_t)N * OC * e), in_b = kern__cu_al((size_t)N * C * e);
  size_t w_b = kern__cu_al((size_t)OC * C * e);
  int nchunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
  size_t part_b = db ? kern__cu_al((size_t)nchunks * OC * sizeof(float)) : 0;
  char *s = (char *)kern__cu_scratch(k, (p == KERN_FP32 ? 0 : do_b + in_b + w_b) + part_b);
  float *part = (float *)s;
  char *low = s + part_b;
  const void *D = kern__cu_lowp(k, dout, (size_t)N * OC, low, p);
  const void *I = kern__cu_lowp(k, inp, (size_t)N * C, low + do_b, p);
  const void *W = kern__cu_lowp(k, w, (size_t)OC * C, low + do_b + in_b, p);
  /* dinp(N,C) = dout(N,OC) @ w(OC,C) */
  kern__cu_gemm(k, 0, 0, N, C, OC, 1.0f, D, OC, 0, W, C, 0, 0.0f, dinp, C, 0, 1, t);
  kern__cu_round(k, dinp, (size_t)N * C, p);
  /* dw(OC,C) += dout(N,OC)^T @ inp(N,C) */
  kern__cu_gemm(k, 1, 0, OC, C, N, 1.0f, D, OC, 0, I, C, 0, 1.0f, dw, C, 0, 1, t);
  if (db) {
    dim3 grid(kern__cu_grid((size_t)OC, 256), (unsigned)nchunks);
    colsum_part_kernel<<<grid, 256, 0, st>>>(part, dout, N, OC);
    KERN__CU_LAUNCHED();
    colsum_final_kernel<<<kern__cu_grid((size_t)OC, 256), 256, 0, st>>>(db, part, nchunks, OC);
    KERN__CU_LAUNCHED();
  }
}

void kern__cuda_matmul(kern_ops *o) {
  o->matmul_forward = matmul_forward;
  o->matmul_backward = matmul_backward;
}

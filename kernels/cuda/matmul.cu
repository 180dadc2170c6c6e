/* Linear layers through cuBLASLt, fp32 accumulation. CPU twin:
 * kernels/cpu/matmul.c (OpenBLAS sgemm).
 *
 * Activations and the weights' rounded copy are kern_x: at bf16 and fp16 the
 * GEMMs read them as stored and write their outputs (forward activations,
 * dinp) in that type, rounded from the fp32 accumulator to nearest even, as
 * the CPU twin rounds; parameter gradients (dw, db) accumulate in fp32. */
#include "kernels/cuda/internal.cuh"

/* out[r, :] = b, one thread per element (the GEMM then adds with beta 1, as
 * the CPU twin does): the bias where cuBLASLt has no BIAS epilogue */
template <typename X> __global__ void bias_fill_kernel(X *out, const X *b, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC)
    out[i] = b[i % OC];
}

/* db[c] += part[c]: the BGRADB epilogue's bias gradient (written, not
 * added) into the accumulating db */
__global__ void add_kernel(float *db, const float *part, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < OC)
    db[c] += part[c];
}

/* db[c] += sum of dout[r, c] over rows in chunks of COLSUM_ROWS (rows in
 * order within a chunk, then chunks in order): fixed order, no atomics. */
#define COLSUM_ROWS 64
template <typename X>
__global__ void colsum_part_kernel(float *part, const X *dout, int N, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (c >= OC)
    return;
  int r0 = chunk * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
  float s = 0.0f;
  for (int r = r0; r < r1; r++)
    s += kern__cu_f(dout[(size_t)r * OC + c]);
  part[(size_t)chunk * OC + c] = s;
}

__global__ void colsum_final_kernel(float *db, const float *part, int nchunks, int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC)
    return;
  db[c] += kern__cu_chunk_sum(part, nchunks, OC, c);
}

/* ---- launchers ---- */

/* out(N,OC) = inp(N,C) @ w(OC,C)^T + b, rounded to kern_x: the bias by the
 * BIAS epilogue (acc + b in fp32, then rounded), or where no algorithm has
 * it, filled first and added by the GEMM with beta 1 (the same sum) */
static void fwd_gemm(kern_ctx *k, kern_x *out, const kern_x *inp, const kern_x *w, const kern_x *b,
                     int N, int C, int OC) {
  cudaDataType_t t = kern__cu_gemm_type(k->prec);
  if (b) {
    kern__cu_epi ep = {CUBLASLT_EPILOGUE_BIAS, b, t, NULL, 0};
    if (kern__cu_gemm_ep(k, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f, out, OC, 0, 1, t, t,
                         &ep) == 0)
      return;
    KERN__CU_WITH_X(k->prec, bias_fill_kernel<X>
                    <<<kern__cu_grid((size_t)N * OC, 256), 256, 0, kern__cu_stream(k)>>>(
                        (X *)out, (const X *)b, N, OC));
    KERN__CU_LAUNCHED();
  }
  kern__cu_gemm(k, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, b ? 1.0f : 0.0f, out, OC, 0, 1, t, t);
}

static void matmul_forward(kern_ctx *k, kern_x *out, const kern_x *inp, const kern_x *w,
                           const kern_x *b, int N, int C, int OC) {
  if (N == 0 || OC == 0)
    return;
  fwd_gemm(k, out, inp, w, b, N, C, OC);
}

/* The GELU_AUX(_BIAS) epilogue writes pre = acc + b and out = gelu(pre) with
 * cuBLASLt's GELU, the tanh approximation as gelu_forward's (PyTorch fuses
 * only approximate="tanh" GELU into it), but from the unrounded pre and with
 * cuBLASLt's own tanh, each rounded to kern_x: pre has the separate
 * sequence's bits up to GEMM summation order, and out differs from
 * gelu(round(pre)) by at most |gelu'| <= 1.13 times pre's rounding error
 * (2^-9 relative at bf16, 2^-12 at fp16) plus cuBLASLt's tanh error, before
 * its own rounding (tests/gpu/test_cuda_kernels.cu check_matmul_gelu). At
 * fp32, whose runs stay within fp32 rounding of the CPU reference, and where
 * no algorithm has the epilogue (aux needs OC a multiple of 8), the separate
 * sequence: matmul_forward, then gelu_forward. */
static void matmul_gelu_forward(kern_ctx *k, kern_x *out, kern_x *pre, const kern_x *inp,
                                const kern_x *w, const kern_x *b, int N, int C, int OC) {
  if (N == 0 || OC == 0)
    return;
  kern_prec p = k->prec;
  size_t n = (size_t)N * OC;
  if (p != KERN_FP32 && OC % 8 == 0) {
    cudaDataType_t t = kern__cu_gemm_type(p);
    kern__cu_epi ep = {b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, b, t, pre,
                       OC};
    if (kern__cu_gemm_ep(k, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f, out, OC, 0, 1, t, t,
                         &ep) == 0)
      return;
  }
  fwd_gemm(k, pre, inp, w, b, N, C, OC);
  k->ops->gelu_forward(k, out, pre, n);
}

static void matmul_backward(kern_ctx *k, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                            const kern_x *inp, const kern_x *w, int N, int C, int OC) {
  if (N == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  kern_prec p = k->prec;
  cudaDataType_t t = kern__cu_gemm_type(p);
  int nchunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
  float *part = db ? (float *)kern__cu_scratch(k, (size_t)nchunks * OC * sizeof(float)) : NULL;
  /* dinp(N,C) = dout(N,OC) @ w(OC,C), rounded to kern_x */
  kern__cu_gemm(k, 0, 0, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 0.0f, dinp, C, 0, 1, t, t);
  /* dw(OC,C) += dout(N,OC)^T @ inp(N,C) in fp32; with db, the BGRADB
   * epilogue writes colsum(dout) (the values the GEMM reads) into part,
   * added to db after */
  /* not with TF32: the epilogue would sum dout truncated to TF32's 10 bits */
  if (db && !(p == KERN_FP32 && kern__cu_of(k)->tf32)) {
    kern__cu_epi ep = {CUBLASLT_EPILOGUE_BGRADB, part, CUDA_R_32F, NULL, 0};
    if (kern__cu_gemm_ep(k, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1, t,
                         CUDA_R_32F, &ep) == 0) {
      add_kernel<<<kern__cu_grid((size_t)OC, 256), 256, 0, st>>>(db, part, OC);
      KERN__CU_LAUNCHED();
      return;
    }
  }
  kern__cu_gemm(k, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1, t, CUDA_R_32F);
  if (db) {
    dim3 grid(kern__cu_grid((size_t)OC, 256), (unsigned)nchunks);
    KERN__CU_WITH_X(p, colsum_part_kernel<X><<<grid, 256, 0, st>>>(part, (const X *)dout, N, OC));
    KERN__CU_LAUNCHED();
    colsum_final_kernel<<<kern__cu_grid((size_t)OC, 256), 256, 0, st>>>(db, part, nchunks, OC);
    KERN__CU_LAUNCHED();
  }
}

void kern__cuda_matmul(kern_ops *o) {
  o->matmul_forward = matmul_forward;
  o->matmul_gelu_forward = matmul_gelu_forward;
  o->matmul_backward = matmul_backward;
}

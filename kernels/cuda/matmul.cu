/* Linear layers through cuBLASLt, fp32 accumulation. CPU twin:
 * kernels/cpu/matmul.c (OpenBLAS sgemm).
 *
 * At bf16 and fp16 the inputs (activations and the rounded weight copy,
 * already representable at ctx->prec) are converted exactly into scratch
 * and multiplied by a bf16/fp16 GEMM with fp32 accumulation and fp32 output:
 * the numerics the CPU backend emulates. */
#include "kernels/cuda/internal.cuh"

/* out[r, :] = b, one thread per element (the GEMM then adds with beta 1, as
 * the CPU twin does): the bias where cuBLASLt has no BIAS epilogue */
__global__ void bias_fill_kernel(float *out, const float *b, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC)
    out[i] = b[i % OC];
}

/* a = round(a, p) and b = round(b, p): the GELU epilogue's two outputs in
 * one pass */
__global__ void round2_kernel(float *a, float *b, size_t n, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    a[i] = kern__cu_rnd(a[i], p);
    b[i] = kern__cu_rnd(b[i], p);
  }
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

/* The GEMM inputs of inp(N,C) and w(OC,C) at the GEMM type of p (converted
 * into scratch at bf16/fp16; the pointers themselves at fp32). */
typedef struct fwd_inputs {
  const void *A, *W;
} fwd_inputs;

static fwd_inputs fwd_lowp(kern_ctx *k, const float *inp, const float *w, int N, int C, int OC) {
  kern_prec p = k->prec;
  size_t e = kern__cu_gemm_elt(p);
  size_t in_b = kern__cu_al((size_t)N * C * e), w_b = kern__cu_al((size_t)OC * C * e);
  char *s = p == KERN_FP32 ? NULL : (char *)kern__cu_scratch(k, in_b + w_b);
  fwd_inputs f;
  f.A = kern__cu_lowp(k, inp, (size_t)N * C, s, p);
  f.W = kern__cu_lowp(k, w, (size_t)OC * C, s ? s + in_b : NULL, p);
  return f;
}

/* out(N,OC) = inp(N,C) @ w(OC,C)^T + b, unrounded: the bias by the BIAS
 * epilogue (acc + b in fp32), or where no algorithm has it, filled first and
 * added by the GEMM with beta 1 (the same sum) */
static void fwd_gemm(kern_ctx *k, float *out, fwd_inputs f, const float *b, int N, int C, int OC) {
  cudaDataType_t t = kern__cu_gemm_type(k->prec);
  if (b) {
    kern__cu_epi ep = {CUBLASLT_EPILOGUE_BIAS, b, NULL, 0};
    if (kern__cu_gemm_ep(k, 0, 1, N, OC, C, 1.0f, f.A, C, 0, f.W, C, 0, 0.0f, out, OC, 0, 1, t,
                         &ep) == 0)
      return;
    bias_fill_kernel<<<kern__cu_grid((size_t)N * OC, 256), 256, 0, kern__cu_stream(k)>>>(out, b, N,
                                                                                         OC);
    KERN__CU_LAUNCHED();
  }
  kern__cu_gemm(k, 0, 1, N, OC, C, 1.0f, f.A, C, 0, f.W, C, 0, b ? 1.0f : 0.0f, out, OC, 0, 1, t);
}

static void matmul_forward(kern_ctx *k, float *out, const float *inp, const float *w,
                           const float *b, int N, int C, int OC) {
  if (N == 0 || OC == 0)
    return;
  fwd_gemm(k, out, fwd_lowp(k, inp, w, N, C, OC), b, N, C, OC);
  kern__cu_round(k, out, (size_t)N * OC, k->prec);
}

/* The GELU_AUX(_BIAS) epilogue writes pre = acc + b and out = gelu(pre) with
 * cuBLASLt's GELU, the tanh approximation as gelu_forward's (PyTorch fuses
 * only approximate="tanh" GELU into it), but from the unrounded pre and with
 * cuBLASLt's own tanh: pre and out are then rounded to prec, so pre has the
 * separate sequence's bits up to GEMM summation order, and out differs from
 * gelu(round(pre)) by at most |gelu'| <= 1.13 times pre's rounding error
 * (2^-9 relative at bf16, 2^-12 at fp16) plus cuBLASLt's tanh error, before
 * its own rounding (tests/gpu/test_cuda_kernels.cu check_matmul_gelu). At
 * fp32, whose runs stay within fp32 rounding of the CPU reference, and where
 * no algorithm has the epilogue (aux needs OC a multiple of 8), the separate
 * sequence: matmul_forward, then gelu_forward. */
static void matmul_gelu_forward(kern_ctx *k, float *out, float *pre, const float *inp,
                                const float *w, const float *b, int N, int C, int OC) {
  if (N == 0 || OC == 0)
    return;
  kern_prec p = k->prec;
  fwd_inputs f = fwd_lowp(k, inp, w, N, C, OC);
  size_t n = (size_t)N * OC;
  if (p != KERN_FP32 && OC % 8 == 0) {
    kern__cu_epi ep = {b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, b, pre,
                       OC};
    if (kern__cu_gemm_ep(k, 0, 1, N, OC, C, 1.0f, f.A, C, 0, f.W, C, 0, 0.0f, out, OC, 0, 1,
                         kern__cu_gemm_type(p), &ep) == 0) {
      round2_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(out, pre, n, p);
      KERN__CU_LAUNCHED();
      return;
    }
  }
  fwd_gemm(k, pre, f, b, N, C, OC);
  kern__cu_round(k, pre, n, p);
  k->ops->gelu_forward(k, out, pre, n);
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
  /* dw(OC,C) += dout(N,OC)^T @ inp(N,C); with db, the BGRADB epilogue
   * writes colsum(dout) (the same values as the GEMM reads: dout is already
   * representable at prec) into part, added to db after */
  /* not with TF32: the epilogue would sum dout truncated to TF32's 10 bits */
  if (db && !(p == KERN_FP32 && kern__cu_of(k)->tf32)) {
    kern__cu_epi ep = {CUBLASLT_EPILOGUE_BGRADB, part, NULL, 0};
    if (kern__cu_gemm_ep(k, 1, 0, OC, C, N, 1.0f, D, OC, 0, I, C, 0, 1.0f, dw, C, 0, 1, t, &ep) ==
        0) {
      add_kernel<<<kern__cu_grid((size_t)OC, 256), 256, 0, st>>>(db, part, OC);
      KERN__CU_LAUNCHED();
      return;
    }
  }
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
  o->matmul_gelu_forward = matmul_gelu_forward;
  o->matmul_backward = matmul_backward;
}

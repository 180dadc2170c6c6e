/* The CUDA backend: device memory, the stream and the cuBLAS(Lt) handles,
 * scratch, the row-major GEMM, and the ops table. Kernels live one file per
 * layer beside this one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/internal.cuh"

#define LT_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */

static void note_bytes(kern__cu *c) {
  size_t held = c->live_bytes + c->scratch_bytes + c->lt_ws_bytes;
  c->peak_bytes = held > c->peak_bytes ? held : c->peak_bytes;
}

static void report_oom(const char *what, size_t bytes) {
  size_t free_b = 0, total_b = 0;
  cudaGetLastError(); /* clear the failed allocation's error */
  cudaMemGetInfo(&free_b, &total_b);
  fprintf(stderr,
          "cuda: out of device memory allocating %s: asked %zu bytes, %zu free of %zu\n"
          "HINT: lower train.micro_batch_size or turn on memory.recompute\n",
          what, bytes, free_b, total_b);
}

/* ---- memory ---- */

static void *cu_alloc(kern_ctx *k, size_t bytes) {
  kern__cu *c = kern__cu_of(k);
  void *p = NULL;
  size_t rounded = kern__cu_al(bytes ? bytes : 1);
  if (c->nbufs == c->capbufs) {
    size_t cap = c->capbufs ? 2 * c->capbufs : 64;
    kern__cu_buf *nb = (kern__cu_buf *)realloc(c->bufs, cap * sizeof *nb);
    if (!nb)
      return NULL;
    c->bufs = nb;
    c->capbufs = cap;
  }
  cudaError_t e = cudaMalloc(&p, rounded);
  if (e == cudaErrorMemoryAllocation) {
    report_oom("a tensor", rounded);
    return NULL; /* the contract of ops->alloc: the caller reports and stops */
  }
  CUDA_CHECK(e);
  CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, c->stream));
  c->bufs[c->nbufs++] = (kern__cu_buf){p, rounded};
  c->live_bytes += rounded;
  note_bytes(c);
  return p;
}

static void cu_free(kern_ctx *k, void *p) {
  if (!p)
    return;
  kern__cu *c = kern__cu_of(k);
  CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* no kernel still reads p */
  CUDA_CHECK(cudaFree(p));
  for (size_t i = 0; i < c->nbufs; i++)
    if (c->bufs[i].p == p) {
      c->live_bytes -= c->bufs[i].bytes;
      c->bufs[i] = c->bufs[--c->nbufs];
      break;
    }
}

static void cu_zero(kern_ctx *k, void *p, size_t bytes) {
  if (bytes)
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, kern__cu_stream(k)));
}

/* Both copies return when the host buffer may be reused or freed (the
 * trainer frees its staging buffers right after): to_host waits for the
 * copy, from_host stages the bytes in pinned memory (stage.cu). */
static void cu_to_host(kern_ctx *k, void *dst, const void *src, size_t bytes) {
  if (!bytes)
    return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, kern__cu_stream(k)));
  CUDA_CHECK(cudaStreamSynchronize(kern__cu_stream(k)));
}

static void cu_from_host(kern_ctx *k, void *dst, const void *src, size_t bytes) {
  if (bytes)
    kern__cu_upload(k, dst, src, bytes);
}

static void cu_sync(kern_ctx *k) { CUDA_CHECK(cudaStreamSynchronize(kern__cu_stream(k))); }

void *kern__cu_scratch(kern_ctx *k, size_t bytes) {
  kern__cu *c = kern__cu_of(k);
  if (bytes <= c->scratch_bytes)
    return c->scratch;
  size_t want = kern__cu_al(bytes);
  CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* the old scratch is idle */
  if (c->scratch)
    CUDA_CHECK(cudaFree(c->scratch));
  c->scratch = NULL;
  c->scratch_bytes = 0;
  cudaError_t e = cudaMalloc(&c->scratch, want);
  if (e == cudaErrorMemoryAllocation) {
    report_oom("kernel scratch", want);
    exit(1);
  }
  CUDA_CHECK(e);
  c->scratch_bytes = want;
  note_bytes(c);
  return c->scratch;
}

/* ---- GEMM ---- */

cudaDataType_t kern__cu_gemm_type(kern_prec p) {
  return p == KERN_BF16 ? CUDA_R_16BF : p == KERN_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

size_t kern__cu_gemm_elt(kern_prec p) { return p == KERN_FP32 ? 4 : 2; }

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *x, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    dst[i] = __float2bfloat16_rn(x[i]);
}

__global__ void to_fp16_kernel(__half *dst, const float *x, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    dst[i] = __float2half_rn(x[i]);
}

const void *kern__cu_lowp(kern_ctx *k, const float *x, size_t n, void *dst, kern_prec p) {
  if (p == KERN_FP32)
    return x;
  if (n == 0)
    return dst;
  if (p == KERN_BF16)
    to_bf16_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>((__nv_bfloat16 *)dst, x,
                                                                          n);
  else
    to_fp16_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>((__half *)dst, x, n);
  KERN__CU_LAUNCHED();
  return dst;
}

/* largest power of two dividing the address, at most 256 (cuBLASLt picks
 * only kernels whose alignment needs the pointers meet) */
static uint32_t align_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al)
    al /= 2;
  return al;
}

static cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, int ld, int batch,
                                     long long stride) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t b = batch;
    int64_t s = stride;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &s, sizeof s));
  }
  return l;
}

/* Sets up the descriptors and layouts of key's product and runs the
 * heuristic (with the epilogue's pointers already in the descriptor, since
 * it reads their alignment). Row-major C = A B is column-major
 * C^T = B^T A^T: the column-major product takes B first (as P) and A second
 * (as Q), m = N and n = M. */
static void plan_setup(kern__cu *c, kern__cu_gemm_plan *pl, const kern__cu_gemm_key *key,
                       const kern__cu_epi *ep) {
  const kern__cu_gemm_key *q = key;
  cudaDataType_t type = (cudaDataType_t)q->type, ctype = (cudaDataType_t)q->ctype;
  int m = q->N, n = q->M, K = q->K;
  cublasOperation_t opP = q->transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opQ = q->transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  pl->key = *key;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&pl->desc, (cublasComputeType_t)q->compute, CUDA_R_32F));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opP, sizeof opP));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opQ, sizeof opQ));
  if (ep) {
    uint32_t epi = (uint32_t)ep->kind;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    cudaDataType_t bt = ep->bias_type;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                sizeof bt));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &ep->bias, sizeof ep->bias));
    if (ep->aux) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof ep->aux));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &ep->aux_ld, sizeof ep->aux_ld));
    }
  }
  /* stored shapes: P is m x K (K x m transposed), Q is K x n (n x K) */
  pl->lP = q->transB ? layout(type, K, m, q->ldb, q->batch, q->sB)
                     : layout(type, m, K, q->ldb, q->batch, q->sB);
  pl->lQ = q->transA ? layout(type, n, K, q->lda, q->batch, q->sA)
                     : layout(type, K, n, q->lda, q->batch, q->sA);
  pl->lC = layout(ctype, m, n, q->ldc, q->batch, q->sC);

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &c->lt_ws_bytes, sizeof c->lt_ws_bytes));
  uint32_t aP = q->align[1], aQ = q->align[0], aC = q->align[2];
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aP, sizeof aP));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &aQ, sizeof aQ));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &aC, sizeof aC));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &aC, sizeof aC));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(c->lt, pl->desc, pl->lP, pl->lQ, pl->lC,
                                                     pl->lC, pref, 1, &h, &found);
  /* the heuristic is a pure function of shapes, types and alignments, and
   * its answer is kept with the plan, so a given call site runs the same
   * algorithm on every call; cuBLAS gives the same bits for the same
   * algorithm on the same GPU model (cuBLAS docs, "Results reproducibility") */
  pl->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  if (pl->found)
    pl->algo = h.algo;
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
}

static void plan_destroy(kern__cu_gemm_plan *pl) {
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(pl->lC));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(pl->lQ));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(pl->lP));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(pl->desc));
}

int kern__cu_gemm_ep(kern_ctx *k, int transA, int transB, int M, int N, int K, float alpha,
                     const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                     float beta, void *C, int ldc, long long sC, int batch, cudaDataType_t type,
                     cudaDataType_t ctype, const kern__cu_epi *ep) {
  if (M == 0 || N == 0 || batch == 0)
    return 0;
  kern__cu *c = kern__cu_of(k);
  cublasComputeType_t compute =
      type == CUDA_R_32F && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  kern__cu_gemm_key key;
  memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
  key.transA = transA, key.transB = transB, key.M = M, key.N = N, key.K = K;
  key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
  key.type = (int32_t)type, key.ctype = (int32_t)ctype, key.compute = (int32_t)compute;
  key.epilogue = ep ? (int32_t)ep->kind : (int32_t)CUBLASLT_EPILOGUE_DEFAULT;
  key.bias_type = ep ? (int32_t)ep->bias_type : 0;
  key.sA = batch > 1 ? sA : 0, key.sB = batch > 1 ? sB : 0, key.sC = batch > 1 ? sC : 0;
  key.aux_ld = ep && ep->aux ? ep->aux_ld : 0;
  key.align[0] = align_of(A), key.align[1] = align_of(B), key.align[2] = align_of(C);
  key.align[3] = ep ? align_of(ep->bias) : 0, key.align[4] = ep && ep->aux ? align_of(ep->aux) : 0;

  kern__cu_gemm_plan *pl = NULL, once;
  for (int i = 0; i < c->nplans && !pl; i++)
    if (!memcmp(&c->plans[i].key, &key, sizeof key))
      pl = &c->plans[i];
  int cached = pl != NULL;
  if (!pl) {
    pl = c->nplans < KERN__CU_GEMM_PLANS ? &c->plans[c->nplans] : &once;
    plan_setup(c, pl, &key, ep);
    cached = pl != &once;
    c->nplans += cached;
  } else if (ep) { /* the same shape, this call's vectors */
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &ep->bias, sizeof ep->bias));
    if (ep->aux)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof ep->aux));
  }
  int rc = 0;
  if (pl->found) {
    CUBLAS_CHECK(cublasLtMatmul(c->lt, pl->desc, &alpha, B, pl->lP, A, pl->lQ, &beta, C, pl->lC, C,
                                pl->lC, &pl->algo, c->lt_ws, c->lt_ws_bytes, c->stream));
  } else if (!ep || ep->kind == CUBLASLT_EPILOGUE_DEFAULT) {
    /* no cuBLASLt kernel for these alignments or leading dimensions: the
     * classic strided-batched GEMM takes any */
    cublasOperation_t opP = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opQ = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, opP, opQ, N, M, K, &alpha, B, type, ldb, sB, A,
                                            type, lda, sA, &beta, C, ctype, ldc, sC, batch, compute,
                                            CUBLAS_GEMM_DEFAULT));
  } else {
    rc = -1;
  }
  if (!cached)
    plan_destroy(pl);
  return rc;
}

void kern__cu_gemm(kern_ctx *k, int transA, int transB, int M, int N, int K, float alpha,
                   const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                   float beta, void *C, int ldc, long long sC, int batch, cudaDataType_t type,
                   cudaDataType_t ctype) {
  kern__cu_gemm_ep(k, transA, transB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC,
                   batch, type, ctype, NULL);
}

/* ---- the backend ---- */

/* the memory operations here (in kern_ops' order, as C++ wants); the
 * kernels filled in by the first init */
static kern_ops cuda_ops = {.name = "cuda", .alloc = cu_alloc, .free = cu_free, .zero = cu_zero,
                            .to_host = cu_to_host, .from_host = cu_from_host, .sync = cu_sync};
static bool cuda_ops_filled;

static void fill_ops(void) {
  if (cuda_ops_filled)
    return;
  cuda_ops_filled = true;
  kern__cuda_elementwise(&cuda_ops);
  kern__cuda_residual(&cuda_ops);
  kern__cuda_matmul(&cuda_ops);
  kern__cuda_layernorm(&cuda_ops);
  kern__cuda_attention(&cuda_ops);
  kern__cuda_flash_attention(&cuda_ops);
  kern__cuda_encoder(&cuda_ops);
  kern__cuda_llama(&cuda_ops);
  kern__cuda_xent(&cuda_ops);
  kern__cuda_adamw(&cuda_ops);
  kern__cuda_step(&cuda_ops);
}

extern "C" int kern_cuda_init(kern_ctx *k, kern_prec prec, int device, char *err, size_t errlen) {
  memset(k, 0, sizeof *k);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    snprintf(err, errlen,
             "backend \"cuda\": no CUDA device: cudaGetDeviceCount returned %d devices (%s: "
             "%s)\nHINT: check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES, or use "
             "\"backend\": \"cpu\"",
             e == cudaSuccess ? ndev : 0, cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();
    return -1;
  }
  if (device < 0 || device >= ndev) {
    snprintf(err, errlen, "backend \"cuda\": device %d asked, cudaGetDeviceCount found %d", device,
             ndev);
    return -1;
  }
  kern__cu *c = (kern__cu *)calloc(1, sizeof *c);
  if (c) {
    c->plans = (kern__cu_gemm_plan *)calloc(KERN__CU_GEMM_PLANS, sizeof *c->plans);
    if (!c->plans) {
      free(c);
      c = NULL;
    }
  }
  if (!c) {
    snprintf(err, errlen, "backend \"cuda\": out of host memory");
    return -1;
  }
  c->device = device;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&c->blas));
  CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
  CUBLAS_CHECK(cublasLtCreate(&c->lt));
  c->lt_ws_bytes = LT_WORKSPACE_BYTES;
  e = cudaMalloc(&c->lt_ws, c->lt_ws_bytes);
  if (e == cudaErrorMemoryAllocation)
    report_oom("the cuBLASLt workspace", c->lt_ws_bytes);
  CUDA_CHECK(e);
  CUDA_CHECK(cudaMalloc(&c->sumsq_part, (KERN__CU_SUMSQ_BLOCKS + 1) * sizeof(double)));
  CUDA_CHECK(cudaMallocHost(&c->sumsq_host, sizeof(double)));
  kern__cu_stage_init(c);
  fill_ops();
  kern__cu_adamw_codes();
  k->ops = &cuda_ops;
  k->prec = prec;
  k->xbytes = (int)kern__cu_gemm_elt(prec); /* kern_x: bf16/fp16 themselves, or fp32 */
  k->threads = 1;
  k->backend = c;
  note_bytes(c);
  return 0;
}

extern "C" void kern_cuda_close(kern_ctx *k) {
  kern__cu *c = kern__cu_of(k);
  if (!c)
    return;
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  for (size_t i = 0; i < c->nbufs; i++)
    CUDA_CHECK(cudaFree(c->bufs[i].p)); /* buffers the caller did not free */
  free(c->bufs);
  CUDA_CHECK(cudaFree(c->scratch));
  CUDA_CHECK(cudaFree(c->lt_ws));
  CUDA_CHECK(cudaFree(c->sumsq_part));
  CUDA_CHECK(cudaFreeHost(c->sumsq_host));
  kern__cu_stage_free(c);
  for (int i = 0; i < c->nplans; i++)
    plan_destroy(&c->plans[i]);
  free(c->plans);
  CUBLAS_CHECK(cublasLtDestroy(c->lt));
  CUBLAS_CHECK(cublasDestroy(c->blas));
  CUDA_CHECK(cudaStreamDestroy(c->stream));
  free(c);
  k->backend = NULL;
  k->ops = NULL;
}

extern "C" size_t kern_cuda_peak_bytes(const kern_ctx *k) {
  const kern__cu *c = (const kern__cu *)k->backend;
  return c ? c->peak_bytes : 0;
}

extern "C" void kern_cuda_set_tf32(kern_ctx *k, int on) { kern__cu_of(k)->tf32 = on != 0; }

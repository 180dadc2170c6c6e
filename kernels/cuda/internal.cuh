/* Helpers shared by the CUDA kernels (not exported outside kernels/cuda):
 * the backend's state, the device twins of the CPU's scalar helpers
 * (kernels/cpu/internal.h), scratch memory and the row-major GEMM. */
#ifndef SS_KERNELS_CUDA_INTERNAL_CUH
#define SS_KERNELS_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/kern.h"
#include "kernels/twins.h"

/* One ops->alloc allocation, for the byte count of free and the peak. */
typedef struct kern__cu_buf {
  void *p;
  size_t bytes;
} kern__cu_buf;

/* A cuBLASLt matmul set up once per shape (see kern__cu_gemm_ep): the key is
 * every argument the descriptors, layouts and the heuristic's choice depend
 * on; the pointers the descriptor holds (bias, aux) are set again per call. */
typedef struct kern__cu_gemm_key {
  int32_t transA, transB, M, N, K, lda, ldb, ldc, batch;
  int32_t type, ctype, compute, epilogue, bias_type;
  int64_t sA, sB, sC, aux_ld;
  uint32_t align[5]; /* of A, B, C, bias, aux (the heuristic's choice depends on them) */
  uint32_t pad;
} kern__cu_gemm_key;

typedef struct kern__cu_gemm_plan {
  kern__cu_gemm_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t lP, lQ, lC;
  int found; /* the heuristic returned an algorithm (else the fallback) */
  cublasLtMatmulAlgo_t algo;
} kern__cu_gemm_plan;

/* Plans kept per context: a GPT step has a few dozen distinct GEMMs; beyond
 * this many, the rest are set up per call (correct, only slower). */
#define KERN__CU_GEMM_PLANS 128

typedef struct kern__cu {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas; /* the fallback GEMM (see kern__cu_gemm) */
  cublasLtHandle_t lt;
  void *lt_ws; /* cuBLASLt workspace */
  size_t lt_ws_bytes;
  int tf32;      /* fp32 GEMMs in TF32 (kern_cuda_set_tf32) */
  void *scratch; /* grow-only scratch, carved by one op at a time */
  size_t scratch_bytes;
  double *sumsq_part;           /* (KERN__CU_SUMSQ_BLOCKS + 1): partial sums, total */
  double *sumsq_host;           /* pinned: the total, read back */
  struct kern__cu_stage *stage; /* pinned slots of from_host (stage.cu) */
  kern__cu_buf *bufs;           /* live ops->alloc allocations */
  size_t nbufs, capbufs;
  size_t live_bytes, peak_bytes;
  kern__cu_gemm_plan *plans; /* (KERN__CU_GEMM_PLANS): the first nplans set up */
  int nplans;
} kern__cu;

static inline kern__cu *kern__cu_of(kern_ctx *k) { return (kern__cu *)k->backend; }
static inline cudaStream_t kern__cu_stream(kern_ctx *k) { return kern__cu_of(k)->stream; }

/* Blocks of `block` threads covering n items (n > 0). */
static inline unsigned kern__cu_grid(size_t n, int block) {
  return (unsigned)((n + (size_t)block - 1) / (size_t)block);
}

/* Checks the launch just made (a bad configuration fails here; a fault in the
 * kernel shows at the next synchronising call, also checked). */
#define KERN__CU_LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* ---- device twins of kernels/cpu/internal.h: the same integer and float
 * operations, so rounding gives identical bits (compiled with --fmad=false:
 * no multiply-add contraction, as gcc's ISO C mode on the CPU side); the
 * roundings themselves are kernels/twins.h's, one definition for both ---- */

__device__ __forceinline__ float kern__cu_rnd(float x, int p) {
  return p == KERN_BF16 ? kern__bf16(x) : p == KERN_FP16 ? kern__fp16(x) : x;
}

/* Fixed-shape reductions (the tree does not depend on timing, so the bits
 * are the same on every call). Warp: butterfly over 32 lanes. */
__device__ __forceinline__ float kern__cu_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float kern__cu_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Block-wide sum or max of v over all threads (blockDim.x a multiple of 32,
 * at most 1024); every thread gets the result. sh: 32 floats of shared
 * memory; the call begins and ends with a barrier so sh can be reused. */
__device__ __forceinline__ float kern__cu_block_reduce(float v, float *sh, int is_max) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  __syncthreads();
  v = is_max ? kern__cu_warp_max(v) : kern__cu_warp_sum(v);
  if (lane == 0)
    sh[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? sh[lane] : (is_max ? -INFINITY : 0.0f);
  r = is_max ? kern__cu_warp_max(r) : kern__cu_warp_sum(r);
  __syncthreads();
  return r;
}

/* ---- kern_x on the device (kernels/kern.h): the run's precision is its
 * storage type, float at fp32, __nv_bfloat16 at bf16, __half at fp16. A
 * kernel is a template over that type X; its launcher picks X from
 * ctx->prec (KERN__CU_WITH_X). Values are read into fp32 (exact) and
 * written back rounded to nearest even (kern__cu_to), which gives the bits
 * kern__cu_rnd gives at X's precision: the CPU twin's rounding points. ---- */

__device__ __forceinline__ float kern__cu_f(float x) { return x; }
__device__ __forceinline__ float kern__cu_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float kern__cu_f(__half x) { return __half2float(x); }

template <typename X> __device__ __forceinline__ X kern__cu_to(float v);
template <> __device__ __forceinline__ float kern__cu_to<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 kern__cu_to<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half kern__cu_to<__half>(float v) {
  return __float2half_rn(v);
}

/* Runs the statements with X typedef'd to the storage type of p. */
#define KERN__CU_WITH_X(p, ...) \
  do {                          \
    switch (p) {                \
    case KERN_BF16: {           \
      typedef __nv_bfloat16 X;  \
      __VA_ARGS__;              \
    } break;                    \
    case KERN_FP16: {           \
      typedef __half X;         \
      __VA_ARGS__;              \
    } break;                    \
    default: {                  \
      typedef float X;          \
      __VA_ARGS__;              \
    }                           \
    }                           \
  } while (0)

/* v = the VEC values at p as floats, and back, rounded to X. VEC *
 * sizeof(X) bytes a multiple of 16: 128-bit accesses (4 floats, 8 bf16 or
 * fp16 per access; p 16-byte aligned); 8 bytes: one 64-bit access; else one
 * element at a time. The vector width of a kernel over X is KERN__CU_VEC(X),
 * 16 bytes; the launcher checks alignment (kern__cu_vec_ok). */
#define KERN__CU_VEC(X) ((int)(16 / sizeof(X)))

template <int VEC, typename X> __device__ __forceinline__ void kern__cu_load(float *v, const X *p) {
  constexpr int B = VEC * (int)sizeof(X), PER = 16 / (int)sizeof(X);
  if constexpr (B % 16 == 0) {
#pragma unroll
    for (int q = 0; q < B / 16; q++) {
      uint4 t = ((const uint4 *)p)[q];
      const X *e = (const X *)&t;
#pragma unroll
      for (int j = 0; j < PER; j++)
        v[q * PER + j] = kern__cu_f(e[j]);
    }
  } else if constexpr (B == 8) {
    uint2 t = *(const uint2 *)p;
    const X *e = (const X *)&t;
#pragma unroll
    for (int j = 0; j < VEC; j++)
      v[j] = kern__cu_f(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      v[j] = kern__cu_f(p[j]);
  }
}

template <int VEC, typename X>
__device__ __forceinline__ void kern__cu_store(X *p, const float *v) {
  constexpr int B = VEC * (int)sizeof(X), PER = 16 / (int)sizeof(X);
  if constexpr (B % 16 == 0) {
#pragma unroll
    for (int q = 0; q < B / 16; q++) {
      uint4 t;
      X *e = (X *)&t;
#pragma unroll
      for (int j = 0; j < PER; j++)
        e[j] = kern__cu_to<X>(v[q * PER + j]);
      ((uint4 *)p)[q] = t;
    }
  } else if constexpr (B == 8) {
    uint2 t;
    X *e = (X *)&t;
#pragma unroll
    for (int j = 0; j < VEC; j++)
      e[j] = kern__cu_to<X>(v[j]);
    *(uint2 *)p = t;
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      p[j] = kern__cu_to<X>(v[j]);
  }
}

/* first element of this thread's VEC (one thread per VEC elements) */
template <int VEC> __device__ __forceinline__ size_t kern__cu_first(void) {
  return ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
}

/* x[i] = f(x[i]) in place for this thread's VEC of the n elements, read and
 * written back rounded to X as kern__cu_load / kern__cu_store do */
template <int VEC, typename X, typename F>
__device__ __forceinline__ void kern__cu_map(X *x, size_t n, F f) {
  size_t i = kern__cu_first<VEC>();
  if (i >= n)
    return;
  float v[VEC];
  kern__cu_load<VEC>(v, x + i);
  for (int j = 0; j < VEC; j++)
    v[j] = f(v[j]);
  kern__cu_store<VEC>(x + i, v);
}

/* x *= s over n elements of X (fp32 gradients, or kern_x activations) */
template <int VEC, typename X> __global__ void kern__cu_scale_kernel(X *x, float s, size_t n) {
  kern__cu_map<VEC>(x, n, [s](float v) { return v * s; });
}

/* Column c of the (nchunks, C) partial sums part added up in chunk order:
 * the second pass of a two-pass column sum, so its bits do not depend on
 * how the rows were scheduled */
__device__ __forceinline__ float kern__cu_chunk_sum(const float *part, int nchunks, int C, int c) {
  float s = 0.0f;
  for (int j = 0; j < nchunks; j++)
    s += part[(size_t)j * C + c];
  return s;
}

/* VEC-element accesses possible on n elements of es bytes at p and q: n %
 * VEC == 0 and both aligned to the access, min(VEC * es, 16) bytes */
static inline int kern__cu_vec_ok(size_t n, int vec, size_t es, const void *p, const void *q) {
  size_t al = (size_t)vec * es < 16 ? (size_t)vec * es : 16;
  return n % (size_t)vec == 0 && ((uintptr_t)p | (uintptr_t)q) % al == 0;
}

/* ---- host helpers (kernels/cuda/cuda.cu) ---- */

/* At least `bytes` of device scratch, 256-byte aligned. Valid until the next
 * call; one op carves everything it needs from one call. Out of memory is
 * fatal (file, line, bytes asked and free). */
void *kern__cu_scratch(kern_ctx *k, size_t bytes);

/* Rounds a byte count up to 256 (the carving unit of scratch). */
static inline size_t kern__cu_al(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* The element type the GEMMs take at this precision: fp32, bf16 or fp16
 * (kern_x's storage type: the GEMMs read activations and weights as they
 * are stored). */
cudaDataType_t kern__cu_gemm_type(kern_prec p);
size_t kern__cu_gemm_elt(kern_prec p);

/* dst[i] = x[i] (fp32) in the GEMM input type of precision p (a copy-free
 * no-op returning x at fp32), for fp32 values already rounded to p (the
 * reference attention's scores): exact. */
const void *kern__cu_lowp(kern_ctx *k, const float *x, size_t n, void *dst, kern_prec p);

/* C(M,N) = alpha op(A) op(B) + beta C with row-major operands, argument for
 * argument cblas_sgemm(CblasRowMajor, ...) so the CPU twin's calls carry over;
 * `batch` products with element strides sA, sB, sC. A and B of type `type`,
 * C of type ctype (fp32, or the GEMM type: the fp32 result rounded to
 * nearest even); fp32 accumulation (TF32 only when switched on). */
void kern__cu_gemm(kern_ctx *k, int transA, int transB, int M, int N, int K, float alpha,
                   const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                   float beta, void *C, int ldc, long long sC, int batch, cudaDataType_t type,
                   cudaDataType_t ctype);

/* A cuBLASLt epilogue for kern__cu_gemm_ep, in cuBLASLt's (column-major)
 * terms: the row-major C(M,N) is its D with m = N rows and n = M columns.
 *   CUBLASLT_EPILOGUE_BIAS: D += bias (m values of bias_type, one per D row,
 *     i.e. per column of the row-major C), added to alpha op(A) op(B) in fp32
 *     before D's rounding;
 *   CUBLASLT_EPILOGUE_GELU_AUX_BIAS / _GELU_AUX: aux = alpha op(A) op(B) (+
 *     bias), D = gelu(aux) (tanh approximation), aux of D's type with
 *     leading dimension aux_ld (a multiple of 8), each rounded from fp32;
 *   CUBLASLT_EPILOGUE_BGRADB: bias (n = M values of bias_type, overwritten)
 *     = the sums of op(A)'s M rows over K (with dw = dout^T inp, transA: the
 *     column sums of dout, the bias gradient). */
typedef struct kern__cu_epi {
  cublasLtEpilogue_t kind;
  const void *bias;
  cudaDataType_t bias_type;
  void *aux;
  int64_t aux_ld;
} kern__cu_epi;

/* kern__cu_gemm with an epilogue (ep NULL: none). Each distinct call shape
 * (the key of kern__cu_gemm_plan) gets its descriptors, layouts and its
 * heuristic's algorithm once, kept until kern_cuda_close, so every later call
 * of that shape runs the same algorithm (the same bits). Returns 0, or -1 with
 * nothing run when ep asks for an epilogue no cuBLASLt algorithm offers here
 * (the caller then does the same with separate kernels). */
int kern__cu_gemm_ep(kern_ctx *k, int transA, int transB, int M, int N, int K, float alpha,
                     const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                     float beta, void *C, int ldc, long long sC, int batch, cudaDataType_t type,
                     cudaDataType_t ctype, const kern__cu_epi *ep);

/* from_host through pinned slots, not waiting for the stream (stage.cu) */
typedef struct kern__cu_stage kern__cu_stage;
void kern__cu_stage_init(kern__cu *c);
void kern__cu_stage_free(kern__cu *c);
void kern__cu_upload(kern_ctx *k, void *dst, const void *src, size_t bytes);

/* Each layer file fills its part of the ops table. */
void kern__cuda_elementwise(kern_ops *o);
void kern__cuda_residual(kern_ops *o);
void kern__cuda_matmul(kern_ops *o);
void kern__cuda_layernorm(kern_ops *o);
void kern__cuda_attention(kern_ops *o);
void kern__cuda_flash_attention(kern_ops *o);
void kern__cuda_encoder(kern_ops *o);
void kern__cuda_llama(kern_ops *o);
void kern__cuda_xent(kern_ops *o);
void kern__cuda_adamw(kern_ops *o);
void kern__cuda_step(kern_ops *o);

/* Copies the 8-bit code books into the current device's constant memory. */
void kern__cu_adamw_codes(void);

#define KERN__CU_SUMSQ_BLOCKS 1024

#endif

/* Flash-style causal self-attention (FlashAttention-2's schedule): no
 * (B, NH, T, T) buffer. The forward keeps one tile of query rows of one
 * (batch, head) pair in shared memory, walks the key tiles up to the causal
 * diagonal and keeps a running max and sum per row (online softmax, fp32),
 * so the scores never reach global memory; it saves each row's log-sum-exp.
 * The backward recomputes the probabilities from it: a pass over key tiles
 * accumulates dK and dV, a second pass over query tiles dQ, each in one
 * block's shared memory (no atomics: the same bits on every call). CPU twin:
 * kernels/cpu/flash_attention.c (same rounding points, see its header).
 *
 * Products: bf16 and fp16 runs use the tensor cores (nvcuda::wmma, 16x16x16
 * fragments of __nv_bfloat16 / __half, fp32 accumulators); q, k, v, out,
 * dout and dqkv are kern_x of that type E (fp32 at fp32), copied into shared
 * memory as they are, and the weights exp(s - m) and dS are rounded to E
 * before they enter a product. fp32 runs take a SIMT path (fp32 products, each output
 * summed in a fixed order). Head sizes 16, 32, 64 and 128; others stop the
 * trainer with a hint (trainer/model.c uses attention_forward for them).
 *
 * Layout: qkv row (b, t) is [q | k | v], each C = NH * hs wide; head h of q
 * starts at column h*hs, of k at C + h*hs, of v at 2C + h*hs. */
#include <mma.h>

#include <type_traits>

#include "kernels/cuda/internal.cuh"

#define NT 128 /* threads per block: 4 warps */

namespace {

using namespace nvcuda;

/* Shared-memory geometry for element type E and head size HS. Row pitches
 * are padded: 16-bit rows by 8 elements (wmma wants a multiple of 8 and
 * 32-byte aligned 16-row steps), fp32 SIMT rows by one (an odd pitch: a
 * warp reading a column hits 32 banks). */
template <typename E> struct pitch {
  static constexpr bool simt = std::is_same<E, float>::value;
  __host__ __device__ static constexpr int e(int n) { return n + (simt ? 1 : 8); } /* E rows */
  __host__ __device__ static constexpr int f(int n) { return n + 4; } /* fp32 (wmma: 4) */
};

__host__ __device__ constexpr size_t al128(size_t b) { return (b + 127) / 128 * 128; }

/* Carves shared memory in 128-byte aligned pieces; with base NULL it only
 * counts (the launcher's byte count is the kernel's own layout). */
struct bump {
  unsigned char *base;
  size_t used;
  template <typename X> __host__ __device__ X *take(size_t n) {
    X *r = base ? (X *)(base + used) : nullptr;
    used += al128(n * sizeof(X));
    return r;
  }
};

/* C(M,N) (+)= op(A)(M,K) op(B)(K,N) in shared memory, all threads of the
 * block. A is row-major A[m][k] = a[m*lda + k], or with TA its transpose
 * stored (a[k*lda + m]); B likewise (TB: b[n*ldb + k]). C fp32 row-major;
 * acc: add to C, else overwrite. Every output has one owner (a thread, or a
 * warp's 16x16 tile) that sums over k in order: deterministic. */
template <typename E, int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm(float *c, int ldc, const E *a, int lda, const E *b, int ldb,
                                   bool acc) {
  if constexpr (std::is_same<E, float>::value) {
    for (int i = threadIdx.x; i < M * N; i += NT) {
      int m = i / N, n = i % N;
      float s = acc ? c[m * ldc + n] : 0.0f;
      for (int k = 0; k < K; k++)
        s += (TA ? a[k * lda + m] : a[m * lda + k]) * (TB ? b[n * ldb + k] : b[k * ldb + n]);
      c[m * ldc + n] = s;
    }
  } else {
    using LA = typename std::conditional<TA, wmma::col_major, wmma::row_major>::type;
    using LB = typename std::conditional<TB, wmma::col_major, wmma::row_major>::type;
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0, "16x16x16 fragments");
    for (int t = threadIdx.x / 32; t < (M / 16) * (N / 16); t += NT / 32) {
      int m0 = t / (N / 16) * 16, n0 = t % (N / 16) * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> cf;
      if (acc)
        wmma::load_matrix_sync(cf, c + m0 * ldc + n0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(cf, 0.0f);
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, E, LA> af;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, E, LB> bf;
        wmma::load_matrix_sync(af, TA ? a + k0 * lda + m0 : a + m0 * lda + k0, lda);
        wmma::load_matrix_sync(bf, TB ? b + n0 * ldb + k0 : b + k0 * ldb + n0, ldb);
        wmma::mma_sync(cf, af, bf, cf);
      }
      wmma::store_matrix_sync(c + m0 * ldc + n0, cf, ldc, wmma::mem_row_major);
    }
  }
}

/* dst[r][e] (pitch ld) = src[(row0 + r)*lds + e] for r < ROWS, e < HS, one
 * 128-bit load of W = KERN__CU_VEC(E) elements at a time (exact: the same
 * type); rows at or past T are zero (padding must not carry NaN into a
 * product). */
template <typename E, int HS, int ROWS>
__device__ __forceinline__ void load_rows(E *dst, int ld, const E *src, size_t lds, int row0,
                                          int T) {
  constexpr int W = KERN__CU_VEC(E);
  static_assert(HS % W == 0, "whole 128-bit loads per row");
  for (int i = threadIdx.x; i < ROWS * HS / W; i += NT) {
    int r = i / (HS / W), e = i % (HS / W) * W;
    float x[W];
#pragma unroll
    for (int j = 0; j < W; j++)
      x[j] = 0.0f;
    if (row0 + r < T)
      kern__cu_load<W>(x, src + (size_t)(row0 + r) * lds + e);
    E *d = dst + r * ld + e;
#pragma unroll
    for (int j = 0; j < W; j++)
      d[j] = kern__cu_to<E>(x[j]);
  }
}

/* ---- forward ---- */

template <typename E, int HS, int BR, int BC> struct fwd_smem {
  E *q, *k, *v;     /* (BR, HS), (BC, HS), (BC, HS) */
  float *s;         /* (BR, BC) scores of the current key tile */
  E *p;             /* (BR, BC) the weights exp(s - m), rounded */
  float *o;         /* (BR, HS) unnormalised output */
  float *m, *l, *a; /* (BR) running max, running sum, this tile's rescale */
  __host__ __device__ size_t carve(unsigned char *base) {
    bump b{base, 0};
    q = b.take<E>(BR * pitch<E>::e(HS));
    k = b.take<E>(BC * pitch<E>::e(HS));
    v = b.take<E>(BC * pitch<E>::e(HS));
    s = b.take<float>(BR * pitch<E>::f(BC));
    p = b.take<E>(BR * pitch<E>::e(BC));
    o = b.take<float>(BR * pitch<E>::f(HS));
    m = b.take<float>(BR);
    l = b.take<float>(BR);
    a = b.take<float>(BR);
    return b.used;
  }
};

/* One block per (tile of BR query rows, b*NH + h); tiles with the most keys
 * first (blockIdx.x 0 is the last tile) so the long blocks start early. */
template <typename E, int HS, int BR, int BC>
__global__ void __launch_bounds__(NT)
    flash_fwd_kernel(E *out, float *lse, const E *qkv, int T, int C, int NH, float sc, int p) {
  extern __shared__ __align__(128) unsigned char smem[];
  fwd_smem<E, HS, BR, BC> S;
  S.carve(smem);
  constexpr int LE = pitch<E>::e(HS), LS = pitch<E>::f(BC), LP = pitch<E>::e(BC);
  constexpr int LO = pitch<E>::f(HS);
  int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  int t0 = (gridDim.x - 1 - blockIdx.x) * BR;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  size_t ld = 3 * (size_t)C;
  const E *base = qkv + (size_t)b * T * ld + h * HS; /* head h's q of row (b, 0) */

  load_rows<E, HS, BR>(S.q, LE, base, ld, t0, T);
  for (int i = threadIdx.x; i < BR * HS; i += NT)
    S.o[i / HS * LO + i % HS] = 0.0f;
  for (int r = threadIdx.x; r < BR; r += NT)
    S.m[r] = -INFINITY, S.l[r] = 0.0f;
  int kend = min(T, t0 + BR); /* keys [0, kend) meet some row of the tile */
  for (int j0 = 0; j0 < kend; j0 += BC) {
    __syncthreads(); /* the last tile's K, V and P are consumed */
    load_rows<E, HS, BC>(S.k, LE, base + C, ld, j0, T);
    load_rows<E, HS, BC>(S.v, LE, base + 2 * C, ld, j0, T);
    __syncthreads();
    mm<E, BR, BC, HS, false, true>(S.s, LS, S.q, LE, S.k, LE, false); /* Q K^T */
    __syncthreads();
    /* online softmax, one warp per row: lane owns columns lane, lane + 32 */
    for (int r = warp; r < BR; r += NT / 32) {
      int t = t0 + r;
      float x[BC / 32], mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < BC / 32; i++) {
        int c = lane + 32 * i;
        x[i] = S.s[r * LS + c] * sc;
        if (j0 + c <= t)
          mx = fmaxf(mx, x[i]);
      }
      mx = kern__cu_warp_max(mx);
      float mold = S.m[r], mnew = fmaxf(mold, mx), sum = 0.0f;
#pragma unroll
      for (int i = 0; i < BC / 32; i++) {
        int c = lane + 32 * i;
        float e = j0 + c <= t ? kern__cu_rnd(kern__expf(x[i] - mnew), p) : 0.0f;
        S.p[r * LP + c] = kern__cu_to<E>(e);
        sum += e;
      }
      sum = kern__cu_warp_sum(sum);
      if (lane == 0) { /* the first tile always holds key 0 <= t: mnew is finite */
        float a = mold == -INFINITY ? 0.0f : kern__expf(mold - mnew);
        S.a[r] = a;
        S.l[r] = S.l[r] * a + sum;
        S.m[r] = mnew;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < BR * HS; i += NT)
      S.o[i / HS * LO + i % HS] *= S.a[i / HS];
    __syncthreads();
    mm<E, BR, HS, BC, false, false>(S.o, LO, S.p, LP, S.v, LE, true); /* O += P V */
  }
  __syncthreads();
  for (int i = threadIdx.x; i < BR * HS; i += NT) {
    int r = i / HS, e = i % HS, t = t0 + r;
    if (t < T)
      out[((size_t)b * T + t) * C + h * HS + e] = kern__cu_to<E>(S.o[r * LO + e] / S.l[r]);
  }
  for (int r = threadIdx.x; r < BR; r += NT)
    if (t0 + r < T)
      lse[(size_t)bh * T + t0 + r] = S.m[r] + logf(S.l[r]);
}

/* ---- backward ---- */

/* D[bh*T + t] = sum_e dout * out over head h's columns of row (b, t); one
 * warp per row, a fixed butterfly */
template <typename E>
__global__ void flash_rowdot_kernel(float *D, const E *dout, const E *out, int B, int T, int C,
                                    int NH) {
  int row = blockIdx.x * (NT / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= B * NH * T)
    return;
  int hs = C / NH, t = row % T, bh = row / T, b = bh / NH, h = bh % NH;
  size_t o = ((size_t)b * T + t) * C + h * hs;
  float s = 0.0f;
  for (int e = lane; e < hs; e += 32)
    s += kern__cu_f(dout[o + e]) * kern__cu_f(out[o + e]);
  s = kern__cu_warp_sum(s);
  if (lane == 0)
    D[row] = s;
}

template <typename E, int HS, int BR, int BC> struct bwd_smem {
  E *q, *dy;      /* (BR, HS) query rows and their dout */
  E *k, *v;       /* (BC, HS) keys */
  float *s;       /* (BR, BC) scores, then dP */
  E *p, *ds;      /* (BR, BC) P and dS, rounded */
  float *acc[2];  /* (BR or BC, HS) dQ, or dK and dV */
  float *lse, *D; /* (BR) */
  __host__ __device__ size_t carve(unsigned char *base, int nacc, int accrows) {
    bump b{base, 0};
    q = b.take<E>(BR * pitch<E>::e(HS));
    dy = b.take<E>(BR * pitch<E>::e(HS));
    k = b.take<E>(BC * pitch<E>::e(HS));
    v = b.take<E>(BC * pitch<E>::e(HS));
    s = b.take<float>(BR * pitch<E>::f(BC));
    p = b.take<E>(BR * pitch<E>::e(BC));
    ds = b.take<E>(BR * pitch<E>::e(BC));
    for (int i = 0; i < 2; i++)
      acc[i] = i < nacc ? b.take<float>((size_t)accrows * pitch<E>::f(HS)) : nullptr;
    lse = b.take<float>(BR);
    D = b.take<float>(BR);
    return b.used;
  }
};

/* The query tile at t0 (rows [t0, t0 + BR)) against the key tile at j0 with
 * Q, dO, lse, D, K and V in shared memory: leaves P and dS rounded in S.p,
 * S.ds. P = round(exp(sc * q.k - lse)) on the causal part of rows < T, else
 * 0; dS = round(P * (dO.v - D) * sc). Begins after and ends with a barrier. */
template <typename E, int HS, int BR, int BC>
__device__ __forceinline__ void probs_and_ds(bwd_smem<E, HS, BR, BC> &S, int t0, int j0, int T,
                                             float sc, int p) {
  constexpr int LE = pitch<E>::e(HS), LS = pitch<E>::f(BC), LP = pitch<E>::e(BC);
  mm<E, BR, BC, HS, false, true>(S.s, LS, S.q, LE, S.k, LE, false); /* Q K^T */
  __syncthreads();
  for (int i = threadIdx.x; i < BR * BC; i += NT) {
    int r = i / BC, c = i % BC, t = t0 + r;
    float P = t < T && j0 + c <= t ? kern__cu_rnd(kern__expf(S.s[r * LS + c] * sc - S.lse[r]), p)
                                   : 0.0f;
    S.p[r * LP + c] = kern__cu_to<E>(P);
  }
  __syncthreads();
  mm<E, BR, BC, HS, false, true>(S.s, LS, S.dy, LE, S.v, LE, false); /* dP = dO V^T */
  __syncthreads();
  for (int i = threadIdx.x; i < BR * BC; i += NT) {
    int r = i / BC, c = i % BC;
    float P = kern__cu_f(S.p[r * LP + c]);
    S.ds[r * LP + c] = kern__cu_to<E>(kern__cu_rnd(P * (S.s[r * LS + c] - S.D[r]) * sc, p));
  }
  __syncthreads();
}

/* Loads the query tile at t0: Q, dO, lse and D (rows past T: zeros). */
template <typename E, int HS, int BR, int BC>
__device__ __forceinline__ void load_queries(bwd_smem<E, HS, BR, BC> &S, const E *qb, const E *dyb,
                                             const float *lse, const float *D, int t0, int T,
                                             int C) {
  load_rows<E, HS, BR>(S.q, pitch<E>::e(HS), qb, 3 * (size_t)C, t0, T);
  load_rows<E, HS, BR>(S.dy, pitch<E>::e(HS), dyb, (size_t)C, t0, T);
  for (int r = threadIdx.x; r < BR; r += NT) {
    S.lse[r] = t0 + r < T ? lse[t0 + r] : 0.0f;
    S.D[r] = t0 + r < T ? D[t0 + r] : 0.0f;
  }
}

/* dst[(row0 + r)*3C + e] = round(src[r][e]) for the rows below T */
template <typename E, int HS, int ROWS>
__device__ __forceinline__ void store_rows(E *dst, int C, const float *src, int ld, int row0,
                                           int T) {
  for (int i = threadIdx.x; i < ROWS * HS; i += NT) {
    int r = i / HS, e = i % HS;
    if (row0 + r < T)
      dst[(size_t)(row0 + r) * 3 * C + e] = kern__cu_to<E>(src[r * ld + e]);
  }
}

/* dK and dV of one key tile (rows [j0, j0 + BC)) of head (b, h), over the
 * query tiles that reach it; blockIdx.x 0 is the first key tile (the most
 * query tiles). */
template <typename E, int HS, int BR, int BC>
__global__ void __launch_bounds__(NT)
    flash_bwd_kv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *D,
                        int T, int C, int NH, float sc, int p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bwd_smem<E, HS, BR, BC> S;
  S.carve(smem, 2, BC);
  constexpr int LE = pitch<E>::e(HS), LP = pitch<E>::e(BC), LO = pitch<E>::f(HS);
  int bh = blockIdx.y, b = bh / NH, h = bh % NH, j0 = blockIdx.x * BC;
  size_t ld = 3 * (size_t)C;
  const E *qb = qkv + (size_t)b * T * ld + h * HS, *dyb = dout + (size_t)b * T * C + h * HS;
  float *dk = S.acc[0], *dv = S.acc[1];
  load_rows<E, HS, BC>(S.k, LE, qb + C, ld, j0, T);
  load_rows<E, HS, BC>(S.v, LE, qb + 2 * C, ld, j0, T);
  for (int i = threadIdx.x; i < BC * HS; i += NT)
    dk[i / HS * LO + i % HS] = 0.0f, dv[i / HS * LO + i % HS] = 0.0f;
  for (int t0 = j0 / BR * BR; t0 < T; t0 += BR) {
    __syncthreads(); /* the last query tile's Q, dO, P and dS are consumed */
    load_queries(S, qb, dyb, lse + (size_t)bh * T, D + (size_t)bh * T, t0, T, C);
    __syncthreads();
    probs_and_ds(S, t0, j0, T, sc, p);
    mm<E, BC, HS, BR, true, false>(dv, LO, S.p, LP, S.dy, LE, true); /* dV += P^T dO */
    mm<E, BC, HS, BR, true, false>(dk, LO, S.ds, LP, S.q, LE, true); /* dK += dS^T Q */
  }
  __syncthreads();
  E *dst = dqkv + (size_t)b * T * ld + h * HS;
  store_rows<E, HS, BC>(dst + C, C, dk, LO, j0, T);
  store_rows<E, HS, BC>(dst + 2 * C, C, dv, LO, j0, T);
}

/* dQ of one query tile of head (b, h), over the key tiles up to the
 * diagonal; blockIdx.x 0 is the last query tile (the most key tiles). */
template <typename E, int HS, int BR, int BC>
__global__ void __launch_bounds__(NT)
    flash_bwd_q_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *D,
                       int T, int C, int NH, float sc, int p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bwd_smem<E, HS, BR, BC> S;
  S.carve(smem, 1, BR);
  constexpr int LE = pitch<E>::e(HS), LP = pitch<E>::e(BC), LO = pitch<E>::f(HS);
  int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  int t0 = (gridDim.x - 1 - blockIdx.x) * BR;
  size_t ld = 3 * (size_t)C;
  const E *qb = qkv + (size_t)b * T * ld + h * HS, *dyb = dout + (size_t)b * T * C + h * HS;
  float *dq = S.acc[0];
  load_queries(S, qb, dyb, lse + (size_t)bh * T, D + (size_t)bh * T, t0, T, C);
  for (int i = threadIdx.x; i < BR * HS; i += NT)
    dq[i / HS * LO + i % HS] = 0.0f;
  int kend = min(T, t0 + BR);
  for (int j0 = 0; j0 < kend; j0 += BC) {
    __syncthreads(); /* the last key tile's K, V and dS are consumed */
    load_rows<E, HS, BC>(S.k, LE, qb + C, ld, j0, T);
    load_rows<E, HS, BC>(S.v, LE, qb + 2 * C, ld, j0, T);
    __syncthreads();
    probs_and_ds(S, t0, j0, T, sc, p);
    mm<E, BR, HS, BC, false, false>(dq, LO, S.ds, LP, S.k, LE, true); /* dQ += dS K */
  }
  __syncthreads();
  store_rows<E, HS, BR>(dqkv + (size_t)b * T * ld + h * HS, C, dq, LO, t0, T);
}

/* ---- launchers ---- */

/* Tile sizes (query rows BR, keys BC) per kernel, chosen so each block's
 * shared memory fits an A100's 163 KiB at hs 128: fp32 tiles are twice the
 * bytes, so smaller. */
template <typename E> struct cfg {
  static constexpr bool f32 = std::is_same<E, float>::value;
  static constexpr int FWD_BR = 64, FWD_BC = f32 ? 32 : 64;
  static constexpr int KV_BR = 32, KV_BC = f32 ? 32 : 64;
  static constexpr int Q_BR = f32 ? 32 : 64, Q_BC = f32 ? 32 : 64;
};

/* Lets kernel f take `bytes` of dynamic shared memory; stops with a hint
 * when the device has less. */
static void smem_for(kern_ctx *k, const void *f, size_t bytes) {
  int most = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                    kern__cu_of(k)->device));
  if (bytes > (size_t)most) {
    fprintf(stderr,
            "%s:%d: flash attention needs %zu bytes of shared memory per block, the device has "
            "%d\nHINT: head size 128 needs up to 140 kB (A100, H100 and H200 have it, "
            "sm_86 and sm_89 GPUs 99 kB); the trainer takes flash attention up to head size 64\n",
            __FILE__, __LINE__, bytes, most);
    exit(1);
  }
  CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* Stops with a hint unless the shapes are ones the kernels take. */
static void check_args(const char *op, const void *a, const void *b, int B, int T, int C, int NH) {
  int hs = NH > 0 ? C / NH : 0;
  const char *why = NULL;
  if (NH <= 0 || C % NH != 0 || !(hs == 16 || hs == 32 || hs == 64 || hs == 128))
    why = "head size C / NH must be 16, 32, 64 or 128";
  else if ((size_t)B * NH > 65535)
    why = "B * NH must be at most 65535";
  else if ((uintptr_t)a % 16 != 0 || (uintptr_t)b % 16 != 0)
    why = "buffers must be 16-byte aligned (128-bit loads)";
  if (why) {
    fprintf(stderr,
            "%s:%d: %s: B %d T %d C %d NH %d: %s\nHINT: trainer/model.c takes "
            "attention_forward/backward for other head sizes\n",
            __FILE__, __LINE__, op, B, T, C, NH, why);
    exit(1);
  }
}

template <typename E, int HS>
static void fwd(kern_ctx *k, E *out, float *lse, const E *qkv, int B, int T, int C, int NH) {
  constexpr int BR = cfg<E>::FWD_BR, BC = cfg<E>::FWD_BC;
  size_t bytes = fwd_smem<E, HS, BR, BC>().carve(nullptr);
  auto f = flash_fwd_kernel<E, HS, BR, BC>;
  smem_for(k, (const void *)f, bytes);
  dim3 grid((unsigned)((T + BR - 1) / BR), (unsigned)(B * NH));
  f<<<grid, NT, bytes, kern__cu_stream(k)>>>(out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)HS),
                                             k->prec);
  KERN__CU_LAUNCHED();
}

template <typename E, int HS>
static void bwd(kern_ctx *k, E *dqkv, const E *dout, const E *qkv, const float *lse, const float *D,
                int B, int T, int C, int NH) {
  float sc = 1.0f / sqrtf((float)HS);
  cudaStream_t st = kern__cu_stream(k);
  {
    constexpr int BR = cfg<E>::KV_BR, BC = cfg<E>::KV_BC;
    size_t bytes = bwd_smem<E, HS, BR, BC>().carve(nullptr, 2, BC);
    auto f = flash_bwd_kv_kernel<E, HS, BR, BC>;
    smem_for(k, (const void *)f, bytes);
    dim3 grid((unsigned)((T + BC - 1) / BC), (unsigned)(B * NH));
    f<<<grid, NT, bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, sc, k->prec);
    KERN__CU_LAUNCHED();
  }
  {
    constexpr int BR = cfg<E>::Q_BR, BC = cfg<E>::Q_BC;
    size_t bytes = bwd_smem<E, HS, BR, BC>().carve(nullptr, 1, BR);
    auto f = flash_bwd_q_kernel<E, HS, BR, BC>;
    smem_for(k, (const void *)f, bytes);
    dim3 grid((unsigned)((T + BR - 1) / BR), (unsigned)(B * NH));
    f<<<grid, NT, bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, sc, k->prec);
    KERN__CU_LAUNCHED();
  }
}

/* CALL(E, HS) for the run's element type and the head size */
#define DISPATCH_HS(E, hs, CALL) \
  switch (hs) {                  \
  case 16:                       \
    CALL(E, 16);                 \
    break;                       \
  case 32:                       \
    CALL(E, 32);                 \
    break;                       \
  case 64:                       \
    CALL(E, 64);                 \
    break;                       \
  default:                       \
    CALL(E, 128);                \
  }
#define DISPATCH(prec, hs, CALL)           \
  do {                                     \
    if ((prec) == KERN_BF16) {             \
      DISPATCH_HS(__nv_bfloat16, hs, CALL) \
    } else if ((prec) == KERN_FP16) {      \
      DISPATCH_HS(__half, hs, CALL)        \
    } else {                               \
      DISPATCH_HS(float, hs, CALL)         \
    }                                      \
  } while (0)

void flash_attention_forward(kern_ctx *k, kern_x *out, float *lse, const kern_x *qkv, int B, int T,
                             int C, int NH) {
  if (B == 0 || T == 0)
    return;
  check_args("flash_attention_forward", qkv, out, B, T, C, NH);
#define CALL(E, HS) fwd<E, HS>(k, (E *)out, lse, (const E *)qkv, B, T, C, NH)
  DISPATCH(k->prec, C / NH, CALL);
#undef CALL
}

void flash_attention_backward(kern_ctx *k, kern_x *dqkv, const kern_x *dout, const kern_x *out,
                              const kern_x *qkv, const float *lse, int B, int T, int C, int NH) {
  if (B == 0 || T == 0)
    return;
  check_args("flash_attention_backward", qkv, dout, B, T, C, NH);
  check_args("flash_attention_backward", dqkv, out, B, T, C, NH);
  size_t rows = (size_t)B * NH * T;
  float *D = (float *)kern__cu_scratch(k, rows * sizeof(float));
  KERN__CU_WITH_X(k->prec, flash_rowdot_kernel<X>
                  <<<kern__cu_grid(rows, NT / 32), NT, 0, kern__cu_stream(k)>>>(
                      D, (const X *)dout, (const X *)out, B, T, C, NH));
  KERN__CU_LAUNCHED();
#define CALL(E, HS) bwd<E, HS>(k, (E *)dqkv, (const E *)dout, (const E *)qkv, lse, D, B, T, C, NH)
  DISPATCH(k->prec, C / NH, CALL);
#undef CALL
}

} // namespace

void kern__cuda_flash_attention(kern_ops *o) {
  o->flash_attention_forward = flash_attention_forward;
  o->flash_attention_backward = flash_attention_backward;
}

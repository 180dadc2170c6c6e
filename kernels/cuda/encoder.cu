/* Token plus position embedding (or the token's alone). CPU twin: kernels/cpu/encoder.c. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include "kernels/cuda/internal.cuh"

/* out[r, c] = round(wte[tokens[r], c] + wpe[r % T, c]), one thread per
 * element; all three kern_x (X). wpe NULL (no learned positions): out =
 * wte[tokens[r], c], a copy (no + 0.0f, which would turn -0 into +0). */
template <typename X>
__global__ void encoder_forward_kernel(X *out, const int32_t *tokens, const X *wte, const X *wpe,
                                       int N, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)N * C)
    return;
  int r = (int)(i / C), c = (int)(i % C);
  X e = wte[(size_t)tokens[r] * C + c];
  out[i] = wpe ? kern__cu_to<X>(kern__cu_f(e) + kern__cu_f(wpe[(size_t)(r % T) * C + c])) : e;
}

/* dwpe[t, c] += dout[b, t, c] for b = 0, 1, ... in order (the CPU's order):
 * one thread per (t, c) */
template <typename X>
__global__ void encoder_dwpe_kernel(float *dwpe, const X *dout, int B, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C)
    return;
  float acc = dwpe[i];
  for (int b = 0; b < B; b++)
    acc += kern__cu_f(dout[(size_t)b * T * C + i]);
  dwpe[i] = acc;
}

/* ---- dwte on the device: rows bucketed by token without the host ----
 *
 * keys = tokens sorted with their row indices as values (CUB's radix sort:
 * stable, and its output is a function of its input alone, so the rows of
 * one token come out ascending on every call); a bucket starts where the
 * sorted token changes (CUB's order-keeping compaction of those positions);
 * then one block per bucket adds its rows in that order. */

/* rows[i] = i: the values the sort carries along with the tokens */
__global__ void encoder_iota_kernel(int32_t *rows, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N)
    rows[i] = i;
}

/* position i of the sorted tokens starts a bucket */
struct bucket_start {
  const int32_t *keys;
  __device__ __forceinline__ bool operator()(int32_t i) const {
    return i == 0 || keys[i] != keys[i - 1];
  }
};

#define DWTE_AHEAD 8 /* rows of a bucket loaded before they are added */

/* Bucket j (of *nb) holds the sorted positions start[j] .. start[j+1]-1 (the
 * last up to N), all with token keys[start[j]], rows ascending. Block
 * (x, tile) takes buckets x, x + gridDim.x, ... and for its VEC channels per
 * thread adds each bucket's rows in that order into dwte[token, c]: no
 * atomics, one block per bucket, and every element gets its rows in row
 * order, as the CPU twin adds them. A frequent token's bucket holds hundreds
 * of rows, one chain of additions per element: their loads are issued
 * DWTE_AHEAD rows at a time, ahead of the additions (which keep their
 * order). VEC = KERN__CU_VEC(X): 128-bit accesses of dout (kern_x; 8
 * values at bf16) and of dwte (two float4 at bf16), C % VEC == 0 and both
 * 16-byte aligned. */
template <int VEC, typename X>
__global__ void encoder_dwte_kernel(float *__restrict__ dwte, const X *__restrict__ dout,
                                    const int32_t *__restrict__ keys,
                                    const int32_t *__restrict__ rows,
                                    const int32_t *__restrict__ start,
                                    const int32_t *__restrict__ nb, int N, int C) {
  int c = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
  if (c >= C)
    return;
  int nbuckets = *nb;
  for (int j = blockIdx.x; j < nbuckets; j += gridDim.x) {
    int s0 = start[j], s1 = j + 1 < nbuckets ? start[j + 1] : N;
    float *de = dwte + (size_t)keys[s0] * C + c;
    float acc[VEC], v[DWTE_AHEAD][VEC];
    kern__cu_load<VEC>(acc, de);
    int s = s0;
    for (; s + DWTE_AHEAD <= s1; s += DWTE_AHEAD) {
#pragma unroll
      for (int u = 0; u < DWTE_AHEAD; u++)
        kern__cu_load<VEC>(v[u], dout + (size_t)rows[s + u] * C + c);
#pragma unroll
      for (int u = 0; u < DWTE_AHEAD; u++)
        for (int e = 0; e < VEC; e++)
          acc[e] += v[u][e];
    }
    for (; s < s1; s++) {
      kern__cu_load<VEC>(v[0], dout + (size_t)rows[s] * C + c);
      for (int e = 0; e < VEC; e++)
        acc[e] += v[0][e];
    }
    kern__cu_store<VEC>(de, acc);
  }
}

/* ---- launchers ---- */

static void encoder_forward(kern_ctx *k, kern_x *out, const int32_t *tokens, const kern_x *wte,
                            const kern_x *wpe, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  if (n == 0)
    return;
  KERN__CU_WITH_X(k->prec,
                  encoder_forward_kernel<X><<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(
                      (X *)out, tokens, (const X *)wte, (const X *)wpe, B * T, T, C));
  KERN__CU_LAUNCHED();
}

#define DWTE_MAX_BLOCKS 2048 /* bucket blocks in x; each loops over buckets */

/* All on the stream, no host synchronisation: the bucket count stays on the
 * device (the dwte kernel reads it), the grid covers at most
 * DWTE_MAX_BLOCKS buckets at a time. Scratch, carved from one call:
 * sorted tokens, row indices in and out of the sort, bucket starts, the
 * bucket count, CUB's temporary storage (sort and compaction, one after the
 * other, share it). */
static void encoder_backward(kern_ctx *k, float *dwte, float *dwpe, const kern_x *dout,
                             const int32_t *tokens, int B, int T, int C) {
  int N = B * T;
  if (N == 0 || C == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  if (dwpe) { /* NULL: no learned positions */
    KERN__CU_WITH_X(
        k->prec, encoder_dwpe_kernel<X>
        <<<kern__cu_grid((size_t)T * C, 256), 256, 0, st>>>(dwpe, (const X *)dout, B, T, C));
    KERN__CU_LAUNCHED();
  }

  size_t sort_bytes = 0, select_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, tokens, (int32_t *)NULL,
                                             (const int32_t *)NULL, (int32_t *)NULL, N, 0, 32, st));
  CUDA_CHECK(cub::DeviceSelect::If(NULL, select_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                   (int32_t *)NULL, N, bucket_start{NULL}, st));
  size_t temp_bytes = sort_bytes > select_bytes ? sort_bytes : select_bytes;
  size_t list = kern__cu_al((size_t)N * sizeof(int32_t));
  char *s = (char *)kern__cu_scratch(k, 4 * list + kern__cu_al(sizeof(int32_t)) + temp_bytes);
  int32_t *keys = (int32_t *)s, *iota = (int32_t *)(s + list), *rows = (int32_t *)(s + 2 * list);
  int32_t *start = (int32_t *)(s + 3 * list), *nb = (int32_t *)(s + 4 * list);
  void *temp = s + 4 * list + kern__cu_al(sizeof(int32_t));

  encoder_iota_kernel<<<kern__cu_grid((size_t)N, 256), 256, 0, st>>>(iota, N);
  KERN__CU_LAUNCHED();
  CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, sort_bytes, tokens, keys, iota, rows, N, 0, 32, st));
  /* the positions 0..N-1 are iota again: the sort left its inputs as they were */
  CUDA_CHECK(cub::DeviceSelect::If(temp, select_bytes, iota, start, nb, N, bucket_start{keys}, st));

  KERN__CU_WITH_X(k->prec, {
    constexpr int W = KERN__CU_VEC(X);
    const X *dx = (const X *)dout;
    int wide = kern__cu_vec_ok((size_t)C, W, sizeof(float), dwte, dwte) &&
               kern__cu_vec_ok((size_t)C, W, sizeof(X), dout, dout);
    int lanes = wide ? C / W : C, block = lanes < 256 ? (lanes + 31) / 32 * 32 : 256;
    dim3 grid((unsigned)(N < DWTE_MAX_BLOCKS ? N : DWTE_MAX_BLOCKS),
              kern__cu_grid((size_t)lanes, block));
    if (wide)
      encoder_dwte_kernel<W, X><<<grid, block, 0, st>>>(dwte, dx, keys, rows, start, nb, N, C);
    else
      encoder_dwte_kernel<1, X><<<grid, block, 0, st>>>(dwte, dx, keys, rows, start, nb, N, C);
  });
  KERN__CU_LAUNCHED();
}

void kern__cuda_encoder(kern_ops *o) {
  o->encoder_forward = encoder_forward;
  o->encoder_backward = encoder_backward;
}

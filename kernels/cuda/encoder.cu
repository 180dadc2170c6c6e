/* Token plus position embedding. CPU twin: kernels/cpu/encoder.c. */
#include <stdlib.h>

#include "kernels/cuda/internal.cuh"

/* out[r, c] = round(wte[tokens[r], c] + wpe[r % T, c]), one thread per element */
__global__ void encoder_forward_kernel(float *out, const int32_t *tokens, const float *wte,
                                       const float *wpe, int N, int T, int C, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)N * C)
    return;
  int r = (int)(i / C), c = (int)(i % C);
  out[i] = kern__cu_rnd(wte[(size_t)tokens[r] * C + c] + wpe[(size_t)(r % T) * C + c], p);
}

/* dwpe[t, c] += dout[b, t, c] for b = 0, 1, ... in order (the CPU's order):
 * one thread per (t, c) */
__global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C)
    return;
  float acc = dwpe[i];
  for (int b = 0; b < B; b++)
    acc += dout[(size_t)b * T * C + i];
  dwpe[i] = acc;
}

/* dwte: bucket j holds the rows rows[start[j]] .. rows[start[j+1]-1] (all
 * with one token, ascending); block (j, tile) adds them in that order into
 * dwte[token, c] for the tile's channels: no atomics, and every element gets
 * its rows in row order, as the CPU twin adds them. */
__global__ void encoder_dwte_kernel(float *dwte, const float *dout, const int32_t *tokens,
                                    const int32_t *rows, const int32_t *start, int C) {
  int j = blockIdx.x;
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  int s0 = start[j], s1 = start[j + 1];
  int tok = tokens[rows[s0]];
  float *de = dwte + (size_t)tok * C + c;
  float acc = *de;
  for (int s = s0; s < s1; s++)
    acc += dout[(size_t)rows[s] * C + c];
  *de = acc;
}

/* ---- launchers ---- */

static void encoder_forward(kern_ctx *k, float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  if (n == 0)
    return;
  encoder_forward_kernel<<<kern__cu_grid(n, 256), 256, 0, kern__cu_stream(k)>>>(
      out, tokens, wte, wpe, B * T, T, C, k->prec);
  KERN__CU_LAUNCHED();
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The buckets are formed on the host (as llm.c does): the tokens come back
 * (N ints, a synchronising copy), rows are sorted by (token, row) and the
 * row lists and bucket starts go up into scratch. */
static void encoder_backward(kern_ctx *k, float *dwte, float *dwpe, const float *dout,
                             const int32_t *tokens, int B, int T, int C) {
  int N = B * T;
  if (N == 0 || C == 0)
    return;
  cudaStream_t st = kern__cu_stream(k);
  encoder_dwpe_kernel<<<kern__cu_grid((size_t)T * C, 256), 256, 0, st>>>(dwpe, dout, B, T, C);
  KERN__CU_LAUNCHED();

  uint64_t *keys = (uint64_t *)malloc((size_t)N * sizeof *keys);
  int32_t *host = (int32_t *)malloc(((size_t)2 * N + 1) * sizeof *host);
  if (!keys || !host) {
    fprintf(stderr, "%s:%d: out of host memory (encoder backward, %d rows)\n", __FILE__, __LINE__,
            N);
    exit(1);
  }
  int32_t *rows = host, *start = host + N;
  CUDA_CHECK(
      cudaMemcpyAsync(rows, tokens, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  for (int r = 0; r < N; r++)
    keys[r] = (uint64_t)(uint32_t)rows[r] << 32 | (uint32_t)r;
  qsort(keys, (size_t)N, sizeof *keys, cmp_u64);
  int nb = 0;
  for (int i = 0; i < N; i++) {
    if (i == 0 || keys[i] >> 32 != keys[i - 1] >> 32)
      start[nb++] = i;
    rows[i] = (int32_t)(keys[i] & 0xffffffffu);
  }
  start[nb] = N;

  int32_t *dev = (int32_t *)kern__cu_scratch(k, ((size_t)N + nb + 1) * sizeof(int32_t));
  CUDA_CHECK(cudaMemcpyAsync(dev, rows, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(dev + N, start, ((size_t)nb + 1) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaStreamSynchronize(st)); /* the host arrays are freed below */
  free(keys);
  free(host);
  dim3 grid((unsigned)nb, kern__cu_grid((size_t)C, 256));
  encoder_dwte_kernel<<<grid, 256, 0, st>>>(dwte, dout, tokens, dev, dev + N, C);
  KERN__CU_LAUNCHED();
}

void kern__cuda_encoder(kern_ops *o) {
  o->encoder_forward = encoder_forward;
  o->encoder_backward = encoder_backward;
}

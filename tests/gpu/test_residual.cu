/* CUDA residual kernel against its CPU twin, at every precision: inputs
 * and output are kern_x, the values themselves in the precision's type. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kern.h"

extern "C" void kern_cuda_residual_forward(void *out, const void *a, const void *b, size_t n,
                                           int prec, cudaStream_t stream);

static float rnd(float x, int p) {
  return p == KERN_BF16 ? kern_round_bf16(x) : p == KERN_FP16 ? kern_round_fp16(x) : x;
}

/* x (already rounded to p) in p's storage type at dst, and back */
static void store(void *dst, const float *x, size_t n, int p) {
  for (size_t i = 0; i < n; i++) {
    if (p == KERN_BF16)
      ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
    else if (p == KERN_FP16)
      ((__half *)dst)[i] = __float2half_rn(x[i]);
    else
      ((float *)dst)[i] = x[i];
  }
}
static float load(const void *src, size_t i, int p) {
  return p == KERN_BF16   ? __bfloat162float(((const __nv_bfloat16 *)src)[i])
         : p == KERN_FP16 ? __half2float(((const __half *)src)[i])
                          : ((const float *)src)[i];
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const size_t n = 1 << 20;
  float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
  void *ha = malloc(n * 4), *hb = malloc(n * 4), *o = malloc(n * 4);
  void *da, *db, *dout;
  cudaMalloc(&da, n * 4);
  cudaMalloc(&db, n * 4);
  cudaMalloc(&dout, n * 4);
  int failures = 0;
  for (int p = 0; p < 3; p++) {
    for (size_t i = 0; i < n; i++) {
      a[i] = rnd(sinf((float)i) * 100.0f, p);
      b[i] = rnd(cosf((float)i * 0.37f) * 1e-3f, p);
    }
    store(ha, a, n, p);
    store(hb, b, n, p);
    cudaMemcpy(da, ha, n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, n * 4, cudaMemcpyHostToDevice);
    kern_cuda_residual_forward(dout, da, db, n, p, 0);
    cudaMemcpy(o, dout, n * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) {
      float ref = rnd(a[i] + b[i], p), got = load(o, i, p);
      /* rounding is exact arithmetic: the bits must agree */
      if (got != ref) {
        if (failures++ < 5)
          fprintf(stderr, "prec %d i %zu: gpu %.9g cpu %.9g\n", p, i, got, ref);
      }
    }
  }
  printf(failures ? "%d mismatches\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}

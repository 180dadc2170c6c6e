/* CUDA residual kernel against its CPU twin, at every precision. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kern.h"

extern "C" void kern_cuda_residual_forward(float *out, const float *a, const float *b, size_t n,
                                           int prec, cudaStream_t stream);

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const size_t n = 1 << 20;
  float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4), *o = (float *)malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = sinf((float)i) * 100.0f;
    b[i] = cosf((float)i * 0.37f) * 1e-3f;
  }
  float *da, *db, *dout;
  cudaMalloc(&da, n * 4);
  cudaMalloc(&db, n * 4);
  cudaMalloc(&dout, n * 4);
  cudaMemcpy(da, a, n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b, n * 4, cudaMemcpyHostToDevice);
  int failures = 0;
  for (int p = 0; p < 3; p++) {
    kern_cuda_residual_forward(dout, da, db, n, p, 0);
    cudaMemcpy(o, dout, n * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) {
      float x = a[i] + b[i];
      float ref = p == KERN_BF16 ? kern_round_bf16(x) : p == KERN_FP16 ? kern_round_fp16(x) : x;
      /* rounding is exact arithmetic: the bits must agree */
      if (o[i] != ref) {
        if (failures++ < 5)
          fprintf(stderr, "prec %d i %zu: gpu %.9g cpu %.9g\n", p, i, o[i], ref);
      }
    }
  }
  printf(failures ? "%d mismatches\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}

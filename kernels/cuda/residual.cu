/* Residual addition and precision rounding on the GPU: the first kernels of
 * the CUDA backend (the rest of the ops table follows in the GPU trainer).
 * Each has its CPU twin in kernels/cpu/elementwise.c. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/kern.h"

/* out = round(a + b) at precision p, one element per thread */
__global__ void residual_forward_kernel(float *out, const float *a, const float *b,
                                        size_t n, int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = a[i] + b[i];
  if (p == KERN_BF16)
    x = __bfloat162float(__float2bfloat16_rn(x));
  else if (p == KERN_FP16)
    x = __half2float(__float2half_rn(x));
  out[i] = x;
}

extern "C" void kern_cuda_residual_forward(float *out, const float *a, const float *b,
                                           size_t n, int prec, cudaStream_t stream) {
  if (n == 0)
    return;
  const int block = 256;
  unsigned grid = (unsigned)((n + block - 1) / block);
  residual_forward_kernel<<<grid, block, 0, stream>>>(out, a, b, n, prec);
  CUDA_CHECK(cudaGetLastError());
}

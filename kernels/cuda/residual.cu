/* Residual addition. CPU twin: residual_forward in kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"

/* out = round(a + b) at precision p, one element per thread */
__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n,
                                        int p) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  out[i] = kern__cu_rnd(a[i] + b[i], p);
}

/* The launcher, also called directly by tests/gpu/test_residual.cu. */
extern "C" void kern_cuda_residual_forward(float *out, const float *a, const float *b, size_t n,
                                           int prec, cudaStream_t stream) {
  if (n == 0)
    return;
  const int block = 256;
  residual_forward_kernel<<<kern__cu_grid(n, block), block, 0, stream>>>(out, a, b, n, prec);
  KERN__CU_LAUNCHED();
}

static void residual_forward(kern_ctx *k, float *out, const float *a, const float *b, size_t n) {
  kern_cuda_residual_forward(out, a, b, n, k->prec, kern__cu_stream(k));
}

void kern__cuda_residual(kern_ops *o) { o->residual_forward = residual_forward; }

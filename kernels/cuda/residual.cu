/* Residual addition. CPU twin: residual_forward in kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"

/* out = round(a + b) in kern_x's type X, VEC consecutive elements per thread
 * (VEC = KERN__CU_VEC(X): one 128-bit load of each input and one store; n %
 * VEC == 0) */
template <int VEC, typename X>
__global__ void residual_forward_kernel(X *out, const X *a, const X *b, size_t n) {
  size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (i >= n)
    return;
  float u[VEC], v[VEC];
  kern__cu_load<VEC>(u, a + i);
  kern__cu_load<VEC>(v, b + i);
  for (int j = 0; j < VEC; j++)
    u[j] += v[j];
  kern__cu_store<VEC>(out + i, u);
}

/* The launcher, also called directly by tests/gpu/test_residual.cu: out, a
 * and b are kern_x of precision prec (float, bf16 or fp16 values). 128-bit
 * accesses where every pointer is 16-byte aligned and n is a multiple of
 * their elements, one element per thread otherwise: the same arithmetic per
 * element either way. */
extern "C" void kern_cuda_residual_forward(void *out, const void *a, const void *b, size_t n,
                                           int prec, cudaStream_t stream) {
  if (n == 0)
    return;
  const int block = 256;
  KERN__CU_WITH_X((kern_prec)prec, {
    constexpr int W = KERN__CU_VEC(X);
    if (kern__cu_vec_ok(n, W, sizeof(X), out, a) && kern__cu_vec_ok(n, W, sizeof(X), b, b))
      residual_forward_kernel<W, X><<<kern__cu_grid(n / W, block), block, 0, stream>>>(
          (X *)out, (const X *)a, (const X *)b, n);
    else
      residual_forward_kernel<1, X>
          <<<kern__cu_grid(n, block), block, 0, stream>>>((X *)out, (const X *)a, (const X *)b, n);
  });
  KERN__CU_LAUNCHED();
}

static void residual_forward(kern_ctx *k, kern_x *out, const kern_x *a, const kern_x *b, size_t n) {
  kern_cuda_residual_forward(out, a, b, n, k->prec, kern__cu_stream(k));
}

void kern__cuda_residual(kern_ops *o) { o->residual_forward = residual_forward; }

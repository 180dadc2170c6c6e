/* Residual addition. CPU twin: residual_forward in kernels/cpu/elementwise.c. */
#include "kernels/cuda/internal.cuh"

/* out = round(a + b) at precision p, VEC consecutive elements per thread
 * (VEC 4: one 128-bit load of each input and one store; n % VEC == 0) */
template <int VEC>
__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n,
                                        int p) {
  size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (i >= n)
    return;
  if (VEC == 4) {
    float4 u = *(const float4 *)(a + i), v = *(const float4 *)(b + i);
    *(float4 *)(out + i) = make_float4(kern__cu_rnd(u.x + v.x, p), kern__cu_rnd(u.y + v.y, p),
                                       kern__cu_rnd(u.z + v.z, p), kern__cu_rnd(u.w + v.w, p));
  } else {
    out[i] = kern__cu_rnd(a[i] + b[i], p);
  }
}

/* The launcher, also called directly by tests/gpu/test_residual.cu. 128-bit
 * accesses where every pointer is 16-byte aligned and n % 4 == 0, one
 * element per thread otherwise: the same arithmetic per element either way. */
extern "C" void kern_cuda_residual_forward(float *out, const float *a, const float *b, size_t n,
                                           int prec, cudaStream_t stream) {
  if (n == 0)
    return;
  const int block = 256;
  if (n % 4 == 0 && ((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) % 16 == 0)
    residual_forward_kernel<4>
        <<<kern__cu_grid(n / 4, block), block, 0, stream>>>(out, a, b, n, prec);
  else
    residual_forward_kernel<1><<<kern__cu_grid(n, block), block, 0, stream>>>(out, a, b, n, prec);
  KERN__CU_LAUNCHED();
}

static void residual_forward(kern_ctx *k, float *out, const float *a, const float *b, size_t n) {
  kern_cuda_residual_forward(out, a, b, n, k->prec, kern__cu_stream(k));
}

void kern__cuda_residual(kern_ops *o) { o->residual_forward = residual_forward; }

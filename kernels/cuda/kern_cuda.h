/* The CUDA backend of kern_ops (kernels/kern.h): device memory, one stream,
 * cuBLASLt for the matrix products, hand-written kernels for the rest. Every
 * kernel has its CPU twin in kernels/cpu, the reference it is tested against
 * (tests/gpu/test_cuda_kernels.cu). C-callable. */
#ifndef SS_KERNELS_CUDA_KERN_CUDA_H
#define SS_KERNELS_CUDA_KERN_CUDA_H

#include <stddef.h>

#include "kernels/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Selects GPU `device`, creates the stream and the cuBLAS(Lt) handles and
 * fills k (k->threads = 1, k->backend = the backend's state, owned by k
 * until kern_cuda_close). Returns 0, or -1 with a message in err: no device
 * (naming cudaGetDeviceCount's answer) or a failed initialisation. */
int kern_cuda_init(kern_ctx *k, kern_prec prec, int device, char *err, size_t errlen);

/* Waits for the stream, frees the backend's own buffers and handles. Buffers
 * from ops->alloc must be freed before. */
void kern_cuda_close(kern_ctx *k);

/* Most device bytes held at once through this context: ops->alloc
 * allocations plus the backend's scratch and cuBLASLt workspace. */
size_t kern_cuda_peak_bytes(const kern_ctx *k);

/* fp32 matrix products in TF32 (on) or plain fp32 (off, the default). Off
 * keeps an fp32 run within fp32 rounding of the CPU reference. */
void kern_cuda_set_tf32(kern_ctx *k, int on);

#ifdef __cplusplus
}
#endif

#endif

/* Error checking for the CUDA kernels: every runtime call, cuBLAS call and
 * launch is checked, and a failure stops the trainer with file, line and a
 * hint (a run that cannot continue is re-queued from its last checkpoint). */
#ifndef SS_KERNELS_CUDA_CHECK_H
#define SS_KERNELS_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static inline void kern__cuda_check(cudaError_t e, const char *file, int line) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: CUDA error: %s (%s)\nHINT: %s\n", file, line, cudaGetErrorString(e),
            cudaGetErrorName(e),
            e == cudaErrorMemoryAllocation
                ? "out of device memory: lower train.micro_batch_size or turn on "
                  "memory.recompute"
                : "check nvidia-smi and the driver; an illegal address is a kernel bug "
                  "(rerun under compute-sanitizer)");
    exit(1);
  }
}
#define CUDA_CHECK(call) kern__cuda_check((call), __FILE__, __LINE__)

/* cuBLAS(Lt) status checks, where cublas_api.h is included first */
#ifdef CUBLAS_API_H_
static inline void kern__cublas_check(cublasStatus_t s, const char *file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "%s:%d: cuBLAS error: %s (%d)\nHINT: %s\n", file, line,
            cublasGetStatusString(s), (int)s,
            s == CUBLAS_STATUS_ALLOC_FAILED
                ? "out of device memory for cuBLAS: lower train.micro_batch_size"
                : "an unsupported shape or type is a kernel bug; check nvidia-smi and "
                  "the CUDA toolkit version");
    exit(1);
  }
}
#define CUBLAS_CHECK(call) kern__cublas_check((call), __FILE__, __LINE__)
#endif

#endif

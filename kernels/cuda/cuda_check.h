/* Error checking for the CUDA kernels: every runtime call and launch is
 * checked, and a failure stops the trainer with file, line and a hint
 * (a run that cannot continue is re-queued from its last checkpoint). */
#ifndef SS_KERNELS_CUDA_CHECK_H
#define SS_KERNELS_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static inline void kern__cuda_check(cudaError_t e, const char *file, int line) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: CUDA error: %s (%s)\nHINT: check nvidia-smi and the driver\n",
            file, line, cudaGetErrorString(e), cudaGetErrorName(e));
    exit(1);
  }
}
#define CUDA_CHECK(call) kern__cuda_check((call), __FILE__, __LINE__)

#endif

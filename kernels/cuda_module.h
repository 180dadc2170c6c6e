/* The CUDA backend as a run-time module.
 *
 * The CUDA backend (kernels/cuda) is built, wherever nvcc is found, into a
 * shared module of its own, libscalesweep_cuda.so, next to the scalesweep
 * executable. Only a trainer whose config says "backend": "cuda" (and
 * `scalesweep devices`) loads it, with dlopen: the scheduler, the worker and
 * CPU trainers never map cudart, cuBLAS or cuBLASLt (about 140 MiB resident
 * when linked in), and one executable serves CPU and GPU hosts alike.
 *
 * The module exports one symbol, KERN_CUDA_MODULE_SYMBOL, a kern_cuda_module
 * table whose abi must equal KERN_CUDA_MODULE_ABI (a module of another build
 * is refused by name, never called). */
#ifndef SS_KERNELS_CUDA_MODULE_H
#define SS_KERNELS_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KERN_CUDA_MODULE_ABI 5
#define KERN_CUDA_MODULE_SYMBOL "kern_cuda_module_v4"
#define KERN_CUDA_MODULE_FILE "libscalesweep_cuda.so"
/* the module to load instead of the one beside the executable */
#define KERN_CUDA_MODULE_ENV "SCALESWEEP_CUDA_MODULE"

/* One CUDA device as the runtime sees it (CUDA ordinal `index`). */
typedef struct kern_cuda_device {
  int index;
  char name[96];
  int64_t memory_bytes;
  int cc_major, cc_minor; /* compute capability */
  char pci_bus_id[32];    /* "0000:3B:00.0": nvidia-smi's pci.bus_id */
} kern_cuda_device;

/* Collectives over NCCL on device buffers, the backend's stream
 * (kernels/cuda/nccl.cu; NCCL is loaded at the first unique_id or open):
 * kern.h's kern_coll_ops on device memory; a dead or stalled rank aborts
 * the communicator after timeout_ms. */
typedef struct kern_nccl_ops {
  int (*unique_id)(void *id128, char *err, size_t errlen); /* rank 0's, for open */
  /* the communicator: the ctx of coll's operations, or NULL with err */
  void *(*open)(kern_ctx *k, int rank, int world, const void *id128, int timeout_ms, char *err,
                size_t errlen);
  kern_coll_ops coll;
  /* NCCL's version (22708 is 2.27.8), loading it when it is not yet; 0 when
   * it cannot be loaded */
  int (*version)(void);
} kern_nccl_ops;

/* The versions a CUDA run depends on (0: none): the runtime's and the
 * driver's (13000 is 13.0), cuBLASLt's (130100 is 13.1.0). */
typedef struct kern_cuda_versions {
  int runtime, driver, cublas;
} kern_cuda_versions;

#define KERN_NCCL_ID_BYTES 128

typedef struct kern_cuda_module {
  int abi;
  /* kern_cuda.h's functions */
  int (*init)(kern_ctx *k, kern_prec prec, int device, char *err, size_t errlen);
  void (*close)(kern_ctx *k);
  size_t (*peak_bytes)(const kern_ctx *k);
  void (*set_tf32)(kern_ctx *k, int on);
  /* Fills at most max devices; their count, or -1 with a message in err
   * (no driver, no device: cudaGetDeviceCount's answer). */
  int (*devices)(kern_cuda_device *out, int max, char *err, size_t errlen);
  void (*versions)(kern_cuda_versions *v);
  const kern_nccl_ops *nccl; /* data parallelism */
} kern_cuda_module;

/* Loads the module once per process: $SCALESWEEP_CUDA_MODULE when set, else
 * KERN_CUDA_MODULE_FILE in the executable's directory, then in
 * ../lib/scalesweep beside it. NULL with a message in err (the paths tried
 * and dlopen's reason: a build without nvcc has no module; a host without
 * the CUDA libraries cannot load it). */
const kern_cuda_module *kern_cuda_load(char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif

/* The module's one export (kernels/cuda_module.h): kern_cuda.h's functions,
 * the device list and the versions, as a table the trainer finds with
 * dlsym. Every other symbol of the module is hidden (CMakeLists.txt). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda_module.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

static int cu_devices(kern_cuda_device *out, int max, char *err, size_t errlen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    snprintf(err, errlen, "cudaGetDeviceCount returned %d devices (%s: %s)",
             e == cudaSuccess ? n : 0, cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();
    return -1;
  }
  int k = 0;
  for (int i = 0; i < n && k < max; i++) {
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, i)) != cudaSuccess) {
      snprintf(err, errlen, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(e));
      return -1;
    }
    kern_cuda_device *d = &out[k++];
    memset(d, 0, sizeof *d);
    d->index = i;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->memory_bytes = (int64_t)p.totalGlobalMem;
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "%08X:%02X:%02X.0", (unsigned)p.pciDomainID,
             (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
  }
  return k;
}

static void cu_versions(kern_cuda_versions *v) {
  memset(v, 0, sizeof *v);
  cudaRuntimeGetVersion(&v->runtime);
  cudaDriverGetVersion(&v->driver);
  v->cublas = (int)cublasLtGetVersion();
}

extern "C" const kern_nccl_ops kern__cu_nccl_ops; /* nccl.cu */

extern "C" __attribute__((visibility("default"))) const kern_cuda_module kern_cuda_module_v4 = {
    KERN_CUDA_MODULE_ABI, kern_cuda_init, kern_cuda_close, kern_cuda_peak_bytes,
    kern_cuda_set_tf32,   cu_devices,     cu_versions,     &kern__cu_nccl_ops};

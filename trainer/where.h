/* Where a run trains: what its config event reports as "environment", so
 * that every stored run says where it ran and a reproduction can tell a
 * different machine from a bug (docs/runtime.md, "Where a run ran"). */
#ifndef SS_TRAINER_WHERE_H
#define SS_TRAINER_WHERE_H

#include <cjson/cJSON.h>

#include "kernels/cuda_module.h"
#include "runcfg/runcfg.h"

/* A new object: host, cpu (the model name), the code's version, the
 * backend and threads; for a CPU run the kernels' level and OpenBLAS's
 * core type; for a CUDA run (m, device: the rank's CUDA ordinal) the GPU's
 * name and compute capability and the CUDA runtime's and driver's
 * versions. NULL when out of memory. */
cJSON *trn_where(const rcfg *c, const kern_cuda_module *m, int device);

#endif

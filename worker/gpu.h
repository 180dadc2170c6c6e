/* GPUs (gpu.c): what nvidia-smi lists, restricted by --gpus, and the
 * CUDA_VISIBLE_DEVICES of a run. */
#ifndef SS_WORKER_GPU_H
#define SS_WORKER_GPU_H

#include <stddef.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__run wrk__run;

/* The GPUs nvidia-smi lists into w->gpus (none when it is missing or fails:
 * a CPU host is fine). */
void wrk__gpu_discover(wrk__worker *w);
/* Keeps only the n GPUs listed (gpus NULL: all); SS_EINVAL, logged, for an
 * index that does not exist. */
int wrk__gpu_restrict(wrk__worker *w, const int *gpus, int n);
int wrk__gpu_offered(const wrk__worker *w, int index);
/* The offered GPUs' indices joined by sep into buf ("" when none). */
void wrk__gpu_list(const wrk__worker *w, const char *sep, char *buf, size_t len);
/* "CUDA_VISIBLE_DEVICES=1,3" for r's GPUs into buf. */
void wrk__gpu_visible(const wrk__run *r, char *buf, size_t len);

#endif

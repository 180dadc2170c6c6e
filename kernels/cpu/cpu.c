/* The CPU backend: host memory, OpenMP threads, OpenBLAS sgemm. One
 * threading model for everything: the OpenMP build of OpenBLAS shares the
 * OpenMP runtime (and thread count) of our own loops. */
#include <omp.h>
#include <stdlib.h>

#include "internal.h"

void openblas_set_num_threads(int num_threads);

static void *cpu_alloc(kern_ctx *k, size_t bytes) {
  void *p = NULL;
  size_t rounded = (bytes + 63) / 64 * 64;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
    return NULL;
  memset(p, 0, rounded);
  return p;
}

static void cpu_free(kern_ctx *k, void *p) { free(p); }
static void cpu_zero(kern_ctx *k, void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(kern_ctx *k, void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
}
static void cpu_sync(kern_ctx *k) {}

static kern_ops cpu_ops;

int kern_cpu_init(kern_ctx *k, kern_prec prec, int threads) {
  if (!cpu_ops.name) {
    cpu_ops.name = "cpu";
    cpu_ops.alloc = cpu_alloc;
    cpu_ops.free = cpu_free;
    cpu_ops.zero = cpu_zero;
    cpu_ops.to_host = cpu_copy;
    cpu_ops.from_host = cpu_copy;
    cpu_ops.sync = cpu_sync;
    kern__cpu_elementwise(&cpu_ops);
    kern__cpu_matmul(&cpu_ops);
    kern__cpu_layernorm(&cpu_ops);
    kern__cpu_attention(&cpu_ops);
    kern__cpu_encoder(&cpu_ops);
    kern__cpu_xent(&cpu_ops);
    kern__cpu_adamw(&cpu_ops);
  }
  if (threads <= 0)
    threads = omp_get_num_procs();
  omp_set_dynamic(0);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  k->ops = &cpu_ops;
  k->prec = prec;
  k->xbytes = (int)sizeof(float);
  k->threads = threads;
  k->backend = NULL;
  return 0;
}

void kern_cpu_close(kern_ctx *k) { k->ops = NULL; }

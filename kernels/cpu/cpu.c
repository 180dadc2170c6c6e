/* The CPU backend: host memory, OpenMP threads, OpenBLAS sgemm. One
 * threading model for everything: the OpenMP build of OpenBLAS shares the
 * OpenMP runtime (and thread count) of our own loops. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

/* ---- instruction-set levels (internal.h) ------------------------------------ */

/* What one level's copy of the kernels exports. */
typedef struct kern__level {
  const char *name;
  int (*runs_here)(void); /* does this CPU run it? NULL: every x86-64 does */
  void (*fill[8])(kern_ops *o);
  void (*fa_fwd)(kern_ctx *k, kern_x *out, float *lse, const kern_x *qkv, int B, int T, int C,
                 int NH);
  void (*fa_bwd)(kern_ctx *k, kern_x *dqkv, const kern_x *dout, const kern_x *out,
                 const kern_x *qkv, const float *lse, int B, int T, int C, int NH);
  float (*round_bf16)(float), (*round_fp16)(float);
  float (*q8_signed)(int), (*q8_unsigned)(int);
} kern__level;

#define KERN__LEVEL(L, RUNS_HERE)                                                            \
  void kern__cpu_elementwise_##L(kern_ops *o);                                               \
  void kern__cpu_matmul_##L(kern_ops *o);                                                    \
  void kern__cpu_layernorm_##L(kern_ops *o);                                                 \
  void kern__cpu_attention_##L(kern_ops *o);                                                 \
  void kern__cpu_encoder_##L(kern_ops *o);                                                   \
  void kern__cpu_xent_##L(kern_ops *o);                                                      \
  void kern__cpu_adamw_##L(kern_ops *o);                                                     \
  void kern__cpu_llama_##L(kern_ops *o);                                                     \
  void kern_cpu_flash_attention_forward_##L(kern_ctx *k, kern_x *out, float *lse,            \
                                            const kern_x *qkv, int B, int T, int C, int NH); \
  void kern_cpu_flash_attention_backward_##L(kern_ctx *k, kern_x *dqkv, const kern_x *dout,  \
                                             const kern_x *out, const kern_x *qkv,           \
                                             const float *lse, int B, int T, int C, int NH); \
  float kern_round_bf16_##L(float x);                                                        \
  float kern_round_fp16_##L(float x);                                                        \
  float kern_q8_signed_value_##L(int q);                                                     \
  float kern_q8_unsigned_value_##L(int q);                                                   \
  static const kern__level level_##L = {#L,                                                  \
                                        RUNS_HERE,                                           \
                                        {kern__cpu_elementwise_##L, kern__cpu_matmul_##L,    \
                                         kern__cpu_layernorm_##L, kern__cpu_attention_##L,   \
                                         kern__cpu_encoder_##L, kern__cpu_xent_##L,          \
                                         kern__cpu_adamw_##L, kern__cpu_llama_##L},          \
                                        kern_cpu_flash_attention_forward_##L,                \
                                        kern_cpu_flash_attention_backward_##L,               \
                                        kern_round_bf16_##L,                                 \
                                        kern_round_fp16_##L,                                 \
                                        kern_q8_signed_value_##L,                            \
                                        kern_q8_unsigned_value_##L};

/* the levels this build holds (kernels/CMakeLists.txt), lowest first */
#ifdef KERN_CPU_NATIVE
KERN__LEVEL(native, NULL)
static const kern__level *const levels[] = {&level_native};
#else
/* GCC knows the levels by name; clang 14 (the fuzzers' compiler) knows
 * their features, all but F16C, MOVBE and LZCNT, which every CPU with AVX2
 * and BMI2 has */
#ifdef __clang__
static int runs_v3(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
static int runs_v4(void) {
  return runs_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#else
static int runs_v3(void) { return __builtin_cpu_supports("x86-64-v3"); }
static int runs_v4(void) { return __builtin_cpu_supports("x86-64-v4"); }
#endif
KERN__LEVEL(v1, NULL)
KERN__LEVEL(v3, runs_v3)
KERN__LEVEL(v4, runs_v4)
static const kern__level *const levels[] = {&level_v1, &level_v3, &level_v4};
#endif
#define NLEVELS (sizeof levels / sizeof levels[0])

static const kern__level *level; /* chosen once, by the first kern_cpu_init */

/* The highest level this CPU runs, or SCALESWEEP_CPU_KERNELS's when the CPU
 * runs that one (a lower one to compare, say; an unknown or unsupported
 * name is said on stderr and the highest is kept). */
static const kern__level *choose_level(void) {
  __builtin_cpu_init();
  const kern__level *best = levels[0];
  for (size_t i = 1; i < NLEVELS; i++)
    if (!levels[i]->runs_here || levels[i]->runs_here())
      best = levels[i];
  const char *want = getenv("SCALESWEEP_CPU_KERNELS");
  if (!want || !*want)
    return best;
  for (size_t i = 0; i < NLEVELS; i++)
    if (!strcmp(want, levels[i]->name)) {
      if (levels[i]->runs_here && !levels[i]->runs_here())
        break;
      return levels[i];
    }
  fprintf(stderr,
          "scalesweep: SCALESWEEP_CPU_KERNELS=%s: not a kernel level this build and CPU run; "
          "using %s (this build's levels: %s)\n",
          want, best->name, NLEVELS == 1 ? levels[0]->name : "v1, v3, v4");
  return best;
}

static const kern__level *current(void) {
  if (!level)
    level = choose_level();
  return level;
}

const char *kern_cpu_level(void) { return current()->name; }

const char *kern_cpu_blas_core(void) {
  const char *c = openblas_get_corename();
  return c && *c ? c : "unknown";
}

const char *kern_cpu_blas_portable_core(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : NULL;
}

void kern_cpu_flash_attention_forward(kern_ctx *k, kern_x *out, float *lse, const kern_x *qkv,
                                      int B, int T, int C, int NH) {
  current()->fa_fwd(k, out, lse, qkv, B, T, C, NH);
}

void kern_cpu_flash_attention_backward(kern_ctx *k, kern_x *dqkv, const kern_x *dout,
                                       const kern_x *out, const kern_x *qkv, const float *lse,
                                       int B, int T, int C, int NH) {
  current()->fa_bwd(k, dqkv, dout, out, qkv, lse, B, T, C, NH);
}

/* the same values at every level: the lowest's */
float kern_round_bf16(float x) { return levels[0]->round_bf16(x); }
float kern_round_fp16(float x) { return levels[0]->round_fp16(x); }
float kern_q8_signed_value(int q) { return levels[0]->q8_signed(q); }
float kern_q8_unsigned_value(int q) { return levels[0]->q8_unsigned(q); }

/* ---- the backend ---------------------------------------------------------------- */

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

/* the memory operations here; the kernels filled in by the first init */
static kern_ops cpu_ops = {.name = "cpu", .alloc = cpu_alloc, .free = cpu_free, .zero = cpu_zero,
                           .to_host = cpu_copy, .from_host = cpu_copy, .sync = cpu_sync};
static int cpu_ops_filled;

int kern_cpu_init(kern_ctx *k, kern_prec prec, int threads) {
  if (!cpu_ops_filled) {
    cpu_ops_filled = 1;
    for (int i = 0; i < 8; i++)
      current()->fill[i](&cpu_ops);
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

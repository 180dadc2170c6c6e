/* Helpers shared by the CPU kernels (not exported outside kernels/cpu). */
#ifndef SS_KERNELS_CPU_INTERNAL_H
#define SS_KERNELS_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/step_scale.h"
#include "kernels/twins.h"

/* Instruction-set levels (cpu.c): every kernel file but cpu.c is compiled
 * once per level, with KERN_CPU_LEVEL its name (v1, v3, v4; or native
 * under SS_NATIVE) and the matching -march, and each copy's outside names
 * carry the level (kern__cpu_matmul_v3), so that one binary holds them all
 * and cpu.c picks one when the backend starts. The kernels sum in a fixed
 * order and C11 contracts no multiply-add (-ffp-contract=off), so every
 * level computes the same bits; only the speed differs. */
#ifdef KERN_CPU_LEVEL
#define KERN__PASTE2(a, b) a##_##b
#define KERN__PASTE(a, b) KERN__PASTE2(a, b)
#define KERN__LEVELED(name) KERN__PASTE(name, KERN_CPU_LEVEL)
#define kern__split KERN__LEVELED(kern__split)
#define kern__colsum_add KERN__LEVELED(kern__colsum_add)
#define kern__cpu_elementwise KERN__LEVELED(kern__cpu_elementwise)
#define kern__cpu_matmul KERN__LEVELED(kern__cpu_matmul)
#define kern__cpu_layernorm KERN__LEVELED(kern__cpu_layernorm)
#define kern__cpu_attention KERN__LEVELED(kern__cpu_attention)
#define kern__cpu_encoder KERN__LEVELED(kern__cpu_encoder)
#define kern__cpu_xent KERN__LEVELED(kern__cpu_xent)
#define kern__cpu_adamw KERN__LEVELED(kern__cpu_adamw)
#define kern__cpu_llama KERN__LEVELED(kern__cpu_llama)
#define kern_cpu_flash_attention_forward KERN__LEVELED(kern_cpu_flash_attention_forward)
#define kern_cpu_flash_attention_backward KERN__LEVELED(kern_cpu_flash_attention_backward)
#define kern_round_bf16 KERN__LEVELED(kern_round_bf16)
#define kern_round_fp16 KERN__LEVELED(kern_round_fp16)
#define kern_q8_signed_value KERN__LEVELED(kern_q8_signed_value)
#define kern_q8_unsigned_value KERN__LEVELED(kern_q8_unsigned_value)
#endif

static inline float kern__rnd(float x, kern_prec p) {
  return p == KERN_BF16 ? kern__bf16(x) : p == KERN_FP16 ? kern__fp16(x) : x;
}

/* Expands CALL(P) with P a compile-time constant for each precision, so a
 * loop inside an inlined CALL rounds without a branch and vectorises. */
#define KERN__WITH_PREC(p, CALL) \
  do {                           \
    switch (p) {                 \
    case KERN_BF16:              \
      CALL(KERN_BF16);           \
      break;                     \
    case KERN_FP16:              \
      CALL(KERN_FP16);           \
      break;                     \
    default:                     \
      CALL(KERN_FP32);           \
    }                            \
  } while (0)

#define KERN__INLINE static inline __attribute__((always_inline))

/* This thread's share [*lo, *hi) of n items inside an OpenMP parallel
 * region: contiguous, in multiples of 16 (whole cache lines). */
void kern__split(size_t n, size_t *lo, size_t *hi);

/* dst[c] += sum over rows of src[r, c] (and of src[r,c]*src2[r,c] when
 * asked), summed row by row in order for each column, so the bits do not
 * depend on the thread count. Threads split the columns. */
void kern__colsum_add(float *dst, const float *src, int N, int C);

/* Each kernel file fills its part of the CPU ops table (of its level). */
void kern__cpu_elementwise(kern_ops *o);
void kern__cpu_matmul(kern_ops *o);
void kern__cpu_layernorm(kern_ops *o);
void kern__cpu_attention(kern_ops *o);
void kern__cpu_encoder(kern_ops *o);
void kern__cpu_xent(kern_ops *o);
void kern__cpu_adamw(kern_ops *o);
void kern__cpu_llama(kern_ops *o);

#endif

/* Helpers shared by the CPU kernels (not exported outside kernels/cpu). */
#ifndef SS_KERNELS_CPU_INTERNAL_H
#define SS_KERNELS_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/step_scale.h"

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

static inline uint32_t kern__bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static inline float kern__float(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* Round to bfloat16, nearest even. NaN stays NaN (quietened); infinities
 * and overflow to infinity follow from the integer carry. Branch-free (the
 * selects vectorise). */
static inline float kern__bf16(float x) {
  uint32_t u = kern__bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t n = (u | 0x00400000u) & 0xffff0000u;
  return kern__float((u & 0x7fffffffu) > 0x7f800000u ? n : r);
}

/* Round to IEEE binary16, nearest even, as a float. Normal halves keep 10
 * mantissa bits (13 dropped); below 2^-14 the grid is 2^-24 (subnormals);
 * magnitudes from 65520 up round to infinity; NaN stays. Branch-free. */
static inline float kern__fp16(float x) {
  uint32_t u = kern__bits(x);
  uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  /* below 2^-14: multiples of 2^-24; scaling by 2^24 is exact and adding
   * 1.5 * 2^23 rounds to the nearest even integer */
  float s = kern__float(a < 0x38800000u ? a : 0u) * 16777216.0f;
  float ri = (s + 12582912.0f) - 12582912.0f;
  uint32_t sub = kern__bits(ri * 5.9604644775390625e-8f);
  uint32_t m = a < 0x38800000u ? sub : normal;
  m = a >= 0x477ff000u ? 0x7f800000u : m; /* 65520 rounds up to infinity */
  m = a > 0x7f800000u ? a : m;            /* NaN */
  return kern__float(sign | m);
}

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

/* exp(x) in float, vectorisable (no libm call, no branches but selects):
 * x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
 * (relative error < 2e-7), 2^n by exponent arithmetic. NaN propagates;
 * inputs are clamped to [-87, 88] where the result stays a normal float. */
static inline float kern__expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to integer */
  float t = x * 1.44269504088896341f + shift;
  float n = t - shift;
  int32_t ni = (int32_t)(kern__bits(t) - kern__bits(shift));
  float r = x - n * 0.693145751953125f; /* ln2 high part, exact in n*hi */
  r = r - n * 1.428606765330187e-06f;   /* ln2 low part */
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return kern__float(kern__bits(p) + ((uint32_t)ni << 23));
}

/* tanh(u) = 1 - 2 / (e^{2u} + 1): saturates cleanly at +-1. */
static inline float kern__tanhf(float u) { return 1.0f - 2.0f / (kern__expf(2.0f * u) + 1.0f); }

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

/* The scalar functions the CPU and CUDA backends compute alike, defined
 * once: compiled as C for the CPU kernels (kernels/cpu/internal.h) and as
 * host-and-device functions for the CUDA ones (kernels/cuda/internal.cuh),
 * so a rounding or a code lookup gives the same bits on both by
 * construction. Both sides compile without multiply-add contraction (C11's
 * -ffp-contract=off, nvcc's --fmad=false). */
#ifndef SS_KERNELS_TWINS_H
#define SS_KERNELS_TWINS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KERN_TWIN static __host__ __device__ __forceinline__
#else
#define KERN_TWIN static inline
#endif

/* A float's bits and back (on the device, its own reinterpreting moves) */
#ifdef __CUDA_ARCH__
KERN_TWIN uint32_t kern__bits(float x) { return __float_as_uint(x); }
KERN_TWIN float kern__float(uint32_t u) { return __uint_as_float(u); }
#else
KERN_TWIN uint32_t kern__bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

KERN_TWIN float kern__float(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
#endif

/* Round to bfloat16, nearest even. NaN stays NaN (quietened); infinities
 * and overflow to infinity follow from the integer carry. Branch-free (the
 * selects vectorise). */
KERN_TWIN float kern__bf16(float x) {
  uint32_t u = kern__bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t n = (u | 0x00400000u) & 0xffff0000u;
  return kern__float((u & 0x7fffffffu) > 0x7f800000u ? n : r);
}

/* Round to IEEE binary16, nearest even, as a float. Normal halves keep 10
 * mantissa bits (13 dropped); below 2^-14 the grid is 2^-24 (subnormals);
 * magnitudes from 65520 up round to infinity; NaN stays. Branch-free. */
KERN_TWIN float kern__fp16(float x) {
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

/* exp(x) in float, vectorisable (no libm call, no branches but selects):
 * x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
 * (relative error < 2e-7), 2^n by exponent arithmetic. NaN propagates;
 * inputs are clamped to [-87, 88] where the result stays a normal float. */
KERN_TWIN float kern__expf(float x) {
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
KERN_TWIN float kern__tanhf(float u) { return 1.0f - 2.0f / (kern__expf(2.0f * u) + 1.0f); }

/* Index of the code nearest to x (x in [0, 1], codes sorted ascending; a
 * tie goes to the lower): the 8-bit optimizer states' quantisation. */
KERN_TWIN int kern__nearest(const float *code, int ncode, float x) {
  int lo = 0, hi = ncode - 1; /* invariant: code[lo] <= x < code[hi] or edges */
  if (x <= code[0])
    return 0;
  if (x >= code[hi])
    return hi;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (code[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return x - code[lo] <= code[hi] - x ? lo : hi;
}

#endif

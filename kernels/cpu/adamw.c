/* AdamW (decoupled weight decay), fp32 moments or 8-bit blockwise moments. */
#include <omp.h>

#include "internal.h"

KERN__INLINE void adamw_range(float *p, float *plow, const float *g, float *m, float *v, size_t lo,
                              size_t hi, const kern_adamw_args *a, const kern_prec prec) {
  float b1 = a->beta1, b2 = a->beta2;
  float bc1 = (float)(1.0 - pow(b1, a->step)), bc2 = (float)(1.0 - pow(b2, a->step));
  for (size_t i = lo; i < hi; i++) {
    float gi = g[i] * a->grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float upd = (mi / bc1) / (sqrtf(vi / bc2) + a->eps);
    float pi = p[i] - a->lr * (upd + a->weight_decay * p[i]);
    p[i] = pi;
    if (prec != KERN_FP32)
      plow[i] = kern__rnd(pi, prec);
  }
}

/* plow is only written (and must only be given) at bf16 and fp16 */
/* a with grad_scale_dev resolved (host memory here); 1 when step_scale
 * decided to skip the update */
static int skipped(kern_adamw_args *out, const kern_adamw_args *a) {
  *out = *a;
  if (!a->grad_scale_dev)
    return 0;
  out->grad_scale = *a->grad_scale_dev;
  return out->grad_scale == 0.0f;
}

static void adamw(kern_ctx *k, float *p, kern_x *plow_x, const float *g, float *m, float *v,
                  size_t n, const kern_adamw_args *args) {
  float *plow = plow_x;
  kern_adamw_args ra;
  const kern_adamw_args *a = &ra;
  if (skipped(&ra, args))
    return;
  kern_prec prec = plow ? k->prec : KERN_FP32;
#pragma omp parallel
  {
    size_t lo, hi;
    kern__split(n, &lo, &hi);
#define CALL(P) adamw_range(p, plow, g, m, v, lo, hi, a, P)
    KERN__WITH_PREC(prec, CALL);
#undef CALL
  }
}

/* Code books: m is signed with value(q) = sign(q) (|q|/127)^3, v unsigned
 * with value(q) = (q/255)^4, both times the block's absmax. The odd powers
 * give small values most of the codes, where the moments of most weights
 * are (the role of bitsandbytes' dynamic quantisation map). */
static float code_m[128], code_v[256];

static void init_codes(void) {
  for (int i = 0; i < 128; i++) {
    double x = i / 127.0;
    code_m[i] = (float)(x * x * x);
  }
  for (int i = 0; i < 256; i++) {
    double x = i / 255.0;
    code_v[i] = (float)(x * x * x * x);
  }
}

/* The code books are filled by kern_cpu_init; a backend that reads them
 * without it (CUDA) fills them here first (the same values every time). */
float kern_q8_signed_value(int q) {
  if (code_m[127] == 0.0f)
    init_codes();
  return q < 0 ? -code_m[-q] : code_m[q];
}
float kern_q8_unsigned_value(int q) {
  if (code_v[255] == 0.0f)
    init_codes();
  return code_v[q];
}

static void adamw8bit(kern_ctx *k, float *p, kern_x *plow_x, const float *g, int8_t *qm,
                      uint8_t *qv, float *sm, float *sv, size_t n, const kern_adamw_args *args) {
  float *plow = plow_x;
  kern_adamw_args ra;
  const kern_adamw_args *a = &ra;
  if (skipped(&ra, args))
    return;
  float b1 = a->beta1, b2 = a->beta2;
  float bc1 = (float)(1.0 - pow(b1, a->step)), bc2 = (float)(1.0 - pow(b2, a->step));
  kern_prec prec = k->prec;
  size_t nblocks = (n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t lo = blk * KERN_Q8_BLOCK, hi = lo + KERN_Q8_BLOCK < n ? lo + KERN_Q8_BLOCK : n;
    float mb[KERN_Q8_BLOCK], vb[KERN_Q8_BLOCK];
    float am = 0.0f, av = 0.0f;
    for (size_t i = lo; i < hi; i++) {
      float gi = g[i] * a->grad_scale;
      int q = qm[i];
      float mi = (q < 0 ? -code_m[-q] : code_m[q]) * sm[blk];
      float vi = code_v[qv[i]] * sv[blk];
      mi = b1 * mi + (1.0f - b1) * gi;
      vi = b2 * vi + (1.0f - b2) * gi * gi;
      float upd = (mi / bc1) / (sqrtf(vi / bc2) + a->eps);
      float pi = p[i] - a->lr * (upd + a->weight_decay * p[i]);
      p[i] = pi;
      if (plow)
        plow[i] = kern__rnd(pi, prec);
      mb[i - lo] = mi;
      vb[i - lo] = vi;
      am = fabsf(mi) > am ? fabsf(mi) : am;
      av = vi > av ? vi : av;
    }
    float im = am > 0.0f ? 1.0f / am : 0.0f, iv = av > 0.0f ? 1.0f / av : 0.0f;
    for (size_t i = lo; i < hi; i++) {
      float mi = mb[i - lo];
      int q = kern__nearest(code_m, 128, fabsf(mi) * im);
      qm[i] = (int8_t)(mi < 0.0f ? -q : q);
      qv[i] = (uint8_t)kern__nearest(code_v, 256, vb[i - lo] * iv);
    }
    sm[blk] = am;
    sv[blk] = av;
  }
}

/* part by part: the bits of the one-tensor calls */
static void adamw_fused(kern_ctx *k, float *p, kern_x *plow_x, const float *g, float *m, float *v,
                        const kern_adamw_parts *parts, const kern_adamw_args *a) {
  float *plow = plow_x;
  for (int i = 0; i < parts->n; i++) {
    kern_adamw_args pa = *a;
    pa.weight_decay = parts->part[i].weight_decay;
    pa.lr = a->lr * parts->part[i].lr_scale;
    size_t off = parts->part[i].off, st = parts->part[i].state;
    adamw(k, p + off, plow ? plow + off : NULL, g + off, m + st, v + st, parts->part[i].n, &pa);
  }
}

static void adamw8bit_fused(kern_ctx *k, float *p, kern_x *plow_x, const float *g, int8_t *qm,
                            uint8_t *qv, float *sm, float *sv, const kern_adamw_parts *parts,
                            const kern_adamw_args *a) {
  float *plow = plow_x;
  for (int i = 0; i < parts->n; i++) {
    kern_adamw_args pa = *a;
    pa.weight_decay = parts->part[i].weight_decay;
    pa.lr = a->lr * parts->part[i].lr_scale;
    size_t off = parts->part[i].off, st = parts->part[i].state, b = parts->part[i].block;
    adamw8bit(k, p + off, plow ? plow + off : NULL, g + off, qm + st, qv + st, sm + b, sv + b,
              parts->part[i].n, &pa);
  }
}

void kern__cpu_adamw(kern_ops *o) {
  init_codes();
  o->adamw = adamw;
  o->adamw8bit = adamw8bit;
  o->adamw_fused = adamw_fused;
  o->adamw8bit_fused = adamw8bit_fused;
}

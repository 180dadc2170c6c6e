/* Model shapes from a target N: fixed aspect ratio and head size, nearest
 * exact non-embedding count in log space. */
#include "sweeps/shapes.h"

#include <math.h>

#include "common/err.h"

/* The trainer's limits on n_layer and d_model (runcfg/runcfg.c). */
#define MAX_LAYERS 1024
#define MAX_WIDTH 65536

shape_rule shape_rule_default(void) {
  shape_rule r = {SHAPE_ASPECT_DEFAULT, 0};
  return r;
}

int shape_head_size(const shape_rule *r, int d_model) {
  if (r->head_size > 0)
    return r->head_size;
  /* the largest power of two that leaves at least 4 heads, within [8, 64] */
  int h = 8;
  while (h < 64 && 2 * h * 4 <= d_model)
    h *= 2;
  return h;
}

/* d is a legal width: a whole number of heads, at least one. */
static int width_ok(const shape_rule *r, int d) {
  int h = shape_head_size(r, d);
  return d >= h && d % h == 0;
}

/* The width step to scan with: every legal width is a multiple of it. */
static int width_step(const shape_rule *r) { return r->head_size > 0 ? r->head_size : 8; }

static void fill(const shape_rule *r, int L, int d, rcfg_shape *out) {
  out->n_layer = L;
  out->d_model = d;
  out->n_head = d / shape_head_size(r, d);
}

static int64_t nonemb(int L, int d) {
  rcfg_shape s = {.n_layer = L, .d_model = d, .n_head = 1, .seq_len = 1, .vocab_size = 1};
  return rcfg_nonembedding_params(&s);
}

void shape_smallest(const shape_rule *r, rcfg_shape *out) {
  int step = width_step(r);
  int lo = (int)ceil(r->aspect_ratio / SHAPE_ASPECT_BAND);
  int d = step;
  while (d < lo || !width_ok(r, d))
    d += step;
  fill(r, 1, d, out);
}

int shape_for_params(const shape_rule *r, double target, rcfg_shape *out) {
  rcfg_shape small = *out;
  shape_smallest(r, &small);
  double n_small = (double)nonemb(small.n_layer, small.d_model);
  if (!(target > 0) || target < n_small / SHAPE_TOO_SMALL) {
    *out = small;
    return SS_ERANGE;
  }
  /* Two passes over the same candidates: the first finds the smallest
   * log-distance to the target, the second takes, among candidates within
   * SHAPE_SLACK of the target (or of that best distance when nothing is that
   * close), the aspect ratio nearest the rule's. */
  int step = width_step(r);
  double ln_t = log(target), ln_r = log(r->aspect_ratio);
  double best_err = INFINITY, cut = INFINITY, best_aspect = INFINITY, pick_err = INFINITY;
  int best_L = small.n_layer, best_d = small.d_model;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1)
      cut = fmax(best_err, log(SHAPE_SLACK)) + 1e-12;
    for (int L = 1; L <= MAX_LAYERS; L++) {
      double lo = r->aspect_ratio * L / SHAPE_ASPECT_BAND;
      double hi = r->aspect_ratio * L * SHAPE_ASPECT_BAND;
      int d0 = (int)ceil(lo / step) * step;
      if (d0 < step)
        d0 = step;
      if (d0 > MAX_WIDTH)
        break;
      /* the narrowest candidate of this depth is already far above the
       * target, and deeper ones are larger still */
      if (L > 1 && (double)nonemb(L, d0) > 4.0 * target)
        break;
      for (int d = d0; d <= hi + 1e-9 && d <= MAX_WIDTH; d += step) {
        if (!width_ok(r, d))
          continue;
        double n = (double)nonemb(L, d);
        double e = fabs(log(n) - ln_t);
        if (pass == 0) {
          best_err = fmin(best_err, e);
        } else if (e <= cut) {
          double a = fabs(log((double)d / L) - ln_r);
          /* scanning L then d upwards, strict improvements only: equal
           * aspect keeps the nearer count, then the shallower model */
          if (a < best_aspect - 1e-12 || (a <= best_aspect + 1e-12 && e < pick_err - 1e-12)) {
            best_aspect = a;
            pick_err = e;
            best_L = L;
            best_d = d;
          }
        }
        if (n > 4.0 * target)
          break;
      }
    }
  }
  fill(r, best_L, best_d, out);
  return 0;
}

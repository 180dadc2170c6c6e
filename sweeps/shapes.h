/* Model shapes from a target non-embedding parameter count N.
 *
 * The rule (docs/sweeps.md "Shape rule"), as the scaling-law papers do it:
 * hold the aspect ratio d_model / n_layer and the attention head size fixed
 * and let N pick the size. Kaplan et al. (2020, fig. 5) found the loss at a
 * given N changes by only a few percent over aspect ratios 20 to 200, so a
 * fixed ratio loses little and keeps shapes comparable across a sweep.
 *
 * Candidates are every (n_layer, d_model) with d_model a multiple of the head
 * size, at least one head wide, and d_model / n_layer within a factor
 * SHAPE_ASPECT_BAND of the target ratio; the one whose exact non-embedding
 * count in the caller's model family (rcfg_nonembedding_params: gpt2
 * 12 L d^2 + 13 L d + 2 d; llama L (4 d^2 + 3 F d + 2 d [+ 2 hs]) + d, F
 * rounded up to mlp_multiple_of) is nearest to the target in log space wins,
 * where counts within SHAPE_SLACK of the target are equally near and the
 * aspect ratio nearer the rule's decides among them. Every candidate is
 * scored, so a count that is not smooth in d (llama's F steps) is fine; the
 * scan stops early only where counts only grow (in L, and in d: F never
 * shrinks as d grows). The caller records the exact N it got. */
#ifndef SS_SWEEPS_SHAPES_H
#define SS_SWEEPS_SHAPES_H

#include "runcfg/flops.h"

/* d_model / n_layer: 32 is at the small end of the range the papers use
 * (Kaplan: 20-200 with little effect) and gives the shapes small CPU studies
 * use (2 layers x 64 at 1e5, 5 x 128 at 1e6); GPT-2 small is 64. */
#define SHAPE_ASPECT_DEFAULT 32.0
/* Candidates have d_model / n_layer in [aspect / band, aspect * band]. */
#define SHAPE_ASPECT_BAND 2.0
/* Counts within this factor of the target are equally near: among them the
 * aspect ratio nearest the rule's wins (at large N many shapes come within
 * a fraction of a percent, and the nearest count alone would pick an
 * extreme aspect ratio). */
#define SHAPE_SLACK 1.05
/* A target below the smallest shape divided by this is refused: it would
 * need a d_model below one head. */
#define SHAPE_TOO_SMALL 1.5

typedef struct shape_rule {
  double aspect_ratio; /* target d_model / n_layer, > 0 */
  int head_size;       /* channels per head; 0: by width, see shape_head_size */
} shape_rule;

/* The default rule: SHAPE_ASPECT_DEFAULT and automatic head size. */
shape_rule shape_rule_default(void);

/* Head size used at width d_model. A fixed r->head_size is returned as is;
 * 0 (automatic) gives the largest power of two that leaves at least 4 heads,
 * within [8, 64]: 8 below d_model 64, 16 below 128, 32 below 256, 64 from
 * 256 (GPT-2's 64 from GPT-2 sizes up: 768 / 12 heads, 1024 / 16). Narrow
 * heads at small widths keep the candidate widths fine enough (steps of 8
 * below 64) to hit small targets: 1.2e4-3e4 within x1.25, above 3e4 within
 * x1.17, above 1e6 within x1.08, above 1e7 within x1.05; llama alike from
 * 1e5 up, and within x1.28 below 3e4 and x1.2 to 1e5 (its F, rounded up to
 * mlp_multiple_of, spaces the small shapes' counts further apart). */
int shape_head_size(const shape_rule *r, int d_model);

/* The smallest shape the rule builds: one layer, one head, the narrowest
 * width in the aspect band. Fills n_layer, d_model and n_head of out. */
void shape_smallest(const shape_rule *r, rcfg_shape *out);

/* Fills out->n_layer, d_model and n_head with the candidate nearest to
 * target (non-embedding parameters), counted in the family the caller set in
 * out (family, mlp_ratio, mlp_multiple_of, qk_norm, ...: rcfg_shape_of of
 * the run's config, or zero for gpt2); those and seq_len and vocab_size are
 * left as the caller set them. Returns 0, or SS_ERANGE when the target is
 * below the smallest shape by more than SHAPE_TOO_SMALL (out then holds the
 * smallest shape, for the message). */
int shape_for_params(const shape_rule *r, double target, rcfg_shape *out);

#endif

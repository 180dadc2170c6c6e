/* The coordinate check (Yang et al. 2022, "Tensor Programs V", section 6
 * and appendix; the `mup` package's coord_check): train the same model at
 * several widths for a few Adam steps at one learning rate, then measure
 * the RMS of every layer's activations. In standard parametrisation they
 * grow with width (an update of each weight by ~lr moves a width-d product
 * by ~lr d); under muP they stay flat, which is what lets a rate tuned at
 * one width hold at another. docs/models.md shows the table;
 * tests/bench/coordcheck prints it, tests/unit/test_coordcheck.c checks it
 * with a loose bound. */
#ifndef SS_TRAINER_COORDCHECK_H
#define SS_TRAINER_COORDCHECK_H

#include <stdint.h>

#include "runcfg/flops.h"

/* Rows of the table for n_layer L: the embedding output, then per layer
 * the attention output (before its projection), the MLP's hidden
 * activation (after GELU or SwiGLU) and the block's output (the residual
 * stream), then the logits. */
#define TRN_CC_ROWS(L) (2 + 3 * (L))

/* Row r's name ("embed", "0.attn", "0.mlp", "0.out", ..., "logits") into buf. */
void trn_cc_row_name(int L, int r, char *buf, int n);

/* Trains `shape` at d_model = widths[i] (n_head = d_model / head_size) for
 * steps AdamW steps at a constant learning rate lr (no warmup, no weight
 * decay, no clipping, fp32, batch 8 sequences of the synthetic corpus's
 * default lexicon, weights from seed), then forwards one held-out batch and
 * writes the RMS of each row's activations into rms[i * TRN_CC_ROWS(L) + r].
 * shape's parametrisation and base_width apply. Returns 0, or an error code
 * (common/err.h) with err filled. */
int trn_coordcheck(const rcfg_shape *shape, int head_size, const int *widths, int nw, int steps,
                   double lr, uint64_t seed, double *rms, char *err, int errlen);

#endif

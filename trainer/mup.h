/* muP, the maximal update parametrisation for Adam (Yang et al. 2022,
 * "Tensor Programs V", table 3 in its base-shape form as the `mup` package
 * implements it), for both model families: the learning rate tuned on a
 * proxy of width base_width holds at every width d_model. With
 * width_mult m = d_model / base_width:
 *
 *   tensor                                   init std        Adam lr   multiplier
 *   token (and gpt2 position) embedding      sigma           eta       1
 *   hidden matrices: qkv, attproj, fc/gate|up, fcproj/down
 *                                            sigma / sqrt(m) eta / m   1
 *   output head (llama untied, or tied wte)  sigma           eta       logits x 1/m
 *   norm gains, biases                       1, 0            eta       1
 *   attention scores                         -               -         q.k / hs (sp: / sqrt(hs))
 *
 * sigma is the standard parametrisation's (0.02; the residual projections'
 * 0.02 / sqrt(2 L)). At m = 1 muP is standard parametrisation but for the
 * attention's 1/hs. docs/models.md, "muP", gives the table with its
 * sources and the coordinate check that shows it at work. */
#ifndef SS_TRAINER_MUP_H
#define SS_TRAINER_MUP_H

#include "runcfg/flops.h"

/* m = d_model / base_width under muP; 1 in standard parametrisation. */
double trn_mup_width_mult(const rcfg_shape *s);

/* Is tensor t (trn_weights' order, trainer/model.h) a hidden matrix (the
 * ones whose init scale and learning rate muP divides)? */
int trn_mup_hidden(int t);

/* Tensor t's learning-rate factor: 1 / m for hidden matrices under muP, else 1. */
float trn_mup_lr_scale(const rcfg_shape *s, int t);

/* Tensor t's init-std factor: 1 / sqrt(m) for hidden matrices under muP, else 1. */
double trn_mup_init_scale(const rcfg_shape *s, int t);

/* The logits' multiplier: 1 / m under muP, else 1. */
float trn_mup_out_mult(const rcfg_shape *s);

/* q's multiplier before attention's 1/sqrt(hs): 1/sqrt(hs) under muP
 * (scores q.k / hs), else 1. */
float trn_mup_attn_qscale(const rcfg_shape *s);

#endif

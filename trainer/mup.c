/* muP's factors (trainer/mup.h). */
#include "trainer/mup.h"

#include <math.h>

#include "trainer/model.h"

double trn_mup_width_mult(const rcfg_shape *s) {
  if (s->parametrization != RCFG_MUP || s->base_width <= 0)
    return 1.0;
  return (double)s->d_model / (double)s->base_width;
}

int trn_mup_hidden(int t) {
  return t == TRN_QKVW || t == TRN_ATTPROJW || t == TRN_FCW || t == TRN_FCPROJW;
}

float trn_mup_lr_scale(const rcfg_shape *s, int t) {
  return trn_mup_hidden(t) ? (float)(1.0 / trn_mup_width_mult(s)) : 1.0f;
}

double trn_mup_init_scale(const rcfg_shape *s, int t) {
  return trn_mup_hidden(t) ? 1.0 / sqrt(trn_mup_width_mult(s)) : 1.0;
}

float trn_mup_out_mult(const rcfg_shape *s) { return (float)(1.0 / trn_mup_width_mult(s)); }

float trn_mup_attn_qscale(const rcfg_shape *s) {
  if (s->parametrization != RCFG_MUP)
    return 1.0f;
  return (float)(1.0 / sqrt((double)s->d_model / s->n_head));
}

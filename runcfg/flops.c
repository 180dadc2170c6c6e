#include "runcfg/flops.h"

rcfg_shape rcfg_shape_of(const rcfg *c) {
  return (rcfg_shape){c->model.n_layer, c->model.d_model, c->model.n_head, c->model.seq_len,
                      c->model.vocab_size};
}

int64_t rcfg_nonembedding_params(const rcfg_shape *s) {
  int64_t L = s->n_layer, d = s->d_model;
  /* per layer: ln1 2d, qkv 3d^2+3d, proj d^2+d, ln2 2d, fc 4d^2+4d, fcproj 4d^2+d;
   * then the final LayerNorm 2d */
  return L * (12 * d * d + 13 * d) + 2 * d;
}

int64_t rcfg_params(const rcfg_shape *s) {
  int64_t d = s->d_model;
  return rcfg_nonembedding_params(s) + (int64_t)s->vocab_size * d + (int64_t)s->seq_len * d;
}

double rcfg_flops_per_token(const rcfg_shape *s) {
  double L = s->n_layer, d = s->d_model, T = s->seq_len, V = s->vocab_size;
  return 6.0 * (12.0 * L * d * d + d * V) + 6.0 * L * T * d;
}

#include "runcfg/flops.h"

rcfg_shape rcfg_shape_of(const rcfg *c) {
  rcfg_shape s = {.n_layer = c->model.n_layer,
                  .d_model = c->model.d_model,
                  .n_head = c->model.n_head,
                  .seq_len = c->model.seq_len,
                  .vocab_size = c->model.vocab_size};
  s.family = c->model.family;
  s.parametrization = c->model.parametrization;
  s.base_width = c->model.base_width;
  if (s.family == RCFG_LLAMA) {
    s.mlp_ratio = c->model.mlp_ratio;
    s.mlp_multiple_of = c->model.mlp_multiple_of;
    s.rope_theta = c->model.rope_theta;
    s.untied = !c->model.tie_embeddings;
    s.qk_norm = c->model.qk_norm;
  }
  return s;
}

int rcfg_ffn_hidden(const rcfg_shape *s) {
  if (s->family != RCFG_LLAMA)
    return 4 * s->d_model;
  int64_t m = s->mlp_multiple_of > 0 ? s->mlp_multiple_of : 1;
  /* ceil in exact arithmetic where the ratio is 8/3: x = 8 d / 3 up to
   * rounding, so subtract a hair before ceil (8/3 x 96 = 256 exactly) */
  double x = s->mlp_ratio * s->d_model / (double)m;
  int64_t q = (int64_t)x;
  if (x - (double)q > 1e-9)
    q++;
  if (q < 1)
    q = 1;
  return (int)(q * m);
}

int64_t rcfg_nonembedding_params(const rcfg_shape *s) {
  int64_t L = s->n_layer, d = s->d_model;
  if (s->family == RCFG_LLAMA) {
    int64_t F = rcfg_ffn_hidden(s), hs = s->n_head > 0 ? d / s->n_head : 0;
    /* per layer: rms1 d, qkv 3d^2, proj d^2, rms2 d, gate|up 2Fd, down Fd,
     * QK-norm gains 2 hs; then the final RMSNorm d */
    return L * (4 * d * d + 3 * F * d + 2 * d + (s->qk_norm ? 2 * hs : 0)) + d;
  }
  /* per layer: ln1 2d, qkv 3d^2+3d, proj d^2+d, ln2 2d, fc 4d^2+4d, fcproj 4d^2+d;
   * then the final LayerNorm 2d */
  return L * (12 * d * d + 13 * d) + 2 * d;
}

int64_t rcfg_params(const rcfg_shape *s) {
  int64_t d = s->d_model, V = s->vocab_size;
  if (s->family == RCFG_LLAMA)
    return rcfg_nonembedding_params(s) + V * d * (s->untied ? 2 : 1);
  return rcfg_nonembedding_params(s) + V * d + (int64_t)s->seq_len * d;
}

double rcfg_flops_per_token(const rcfg_shape *s) {
  double L = s->n_layer, d = s->d_model, T = s->seq_len, V = s->vocab_size;
  if (s->family == RCFG_LLAMA) {
    double F = rcfg_ffn_hidden(s);
    return 6.0 * ((4.0 * d * d + 3.0 * F * d) * L + d * V) + 6.0 * L * T * d + 12.0 * L * d;
  }
  return 6.0 * (12.0 * L * d * d + d * V) + 6.0 * L * T * d;
}

/* The GPT: parameter carving, activations, forward and backward. */
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "trainer/mup.h"
#include "trainer/rng.h"

/* Sizes of the tensors in trn_weights order: zero for those the family
 * lacks (model.h). */
static void tensor_sizes(const rcfg_shape *s, size_t sz[TRN_NTENSORS]) {
  size_t V = s->vocab_size, T = s->seq_len, L = s->n_layer, C = s->d_model;
  if (s->family == RCFG_LLAMA) {
    size_t F = (size_t)rcfg_ffn_hidden(s), hs = C / (size_t)s->n_head;
    size_t qk = s->qk_norm ? L * hs : 0;
    size_t v[TRN_NTENSORS] = {V * C,
                              0,
                              L * C,
                              0,
                              L * 3 * C * C,
                              0,
                              L * C * C,
                              0,
                              L * C,
                              0,
                              L * 2 * F * C,
                              0,
                              L * C * F,
                              0,
                              qk,
                              qk,
                              C,
                              0,
                              s->untied ? V * C : 0};
    memcpy(sz, v, sizeof v);
    return;
  }
  size_t v[TRN_NTENSORS] = {V * C,
                            T * C,
                            L * C,
                            L * C,
                            L * 3 * C * C,
                            L * 3 * C,
                            L * C * C,
                            L * C,
                            L * C,
                            L * C,
                            L * 4 * C * C,
                            L * 4 * C,
                            L * C * 4 * C,
                            L * C,
                            0,
                            0,
                            C,
                            C,
                            0};
  memcpy(sz, v, sizeof v);
}

static const char *const tensor_names[TRN_NTENSORS] = {
    "wte", "wpe", "ln1w",    "ln1b",    "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
    "fcw", "fcb", "fcprojw", "fcprojb", "qnw",  "knw",  "lnfw",     "lnfb",     "head"};
static const int tensor_decay[TRN_NTENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0,
                                               1, 0, 1, 0, 0, 0, 0, 0, 1};

static void carve(trn_weights *p, float *base, const trn_tensor_info *t) {
  float **ptrs[TRN_NTENSORS] = {&p->wte,  &p->wpe,      &p->ln1w,     &p->ln1b,    &p->qkvw,
                                &p->qkvb, &p->attprojw, &p->attprojb, &p->ln2w,    &p->ln2b,
                                &p->fcw,  &p->fcb,      &p->fcprojw,  &p->fcprojb, &p->qnw,
                                &p->knw,  &p->lnfw,     &p->lnfb,     &p->head};
  for (int i = 0; i < TRN_NTENSORS; i++)
    *ptrs[i] = t[i].size ? base + t[i].offset : NULL;
}

/* Carves buffers of n elements of es bytes out of one allocation; with base
 * NULL only counts. used: the bytes so far. */
typedef struct carver {
  char *base;
  size_t used;
  size_t xbytes; /* of one kern_x */
} carver;

static void *take_bytes(carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->used : NULL;
  c->used += (bytes + 63) / 64 * 64; /* 64-byte alignment for every buffer */
  return p;
}
static float *take(carver *c, size_t n) { return take_bytes(c, n * sizeof(float)); }
static kern_x *take_x(carver *c, size_t n) { return take_bytes(c, n * c->xbytes); }

/* The rounded copy of tensor t from its element i, as the kernels take it. */
static const kern_x *wlow(const trn_model *m, int t, size_t i) {
  return kern_x_at(m->k, m->params_low, m->tensors[t].offset + i);
}

/* Attention through the backend's flash ops (no (B, NH, T, T) buffers,
 * kernels/kern.h) where it has them, at head sizes 16, 32 and 64 (the CUDA
 * kernels also take 128, but with up to 140 kB of shared memory per block,
 * more than sm_86 / sm_89 GPUs have); else attention_forward/backward.
 * runcfg/memory.c counts the same. */
static int use_flash(const trn_model *m) {
  int hs = m->shape.d_model / m->shape.n_head;
  return m->k->ops->flash_attention_forward && m->k->ops->flash_attention_backward &&
         (hs == 16 || hs == 32 || hs == 64);
}

/* One layer's saved activations. gpt2: F = 4C (fch and fch_gelu both
 * (BT, 4C)); llama: fch (BT, 2F), fch_gelu (BT, F), no LayerNorm means. */
static void layer_acts(carver *c, trn_layer_acts *a, const trn_model *m, size_t BT, int flash) {
  size_t C = m->shape.d_model, NH = m->shape.n_head, T = m->shape.seq_len, F = m->F;
  int llama = m->llama;
  a->ln1 = take_x(c, BT * C);
  if (!llama)
    a->ln1_mean = take(c, BT);
  a->ln1_rstd = take(c, BT);
  a->qkv = take_x(c, BT * 3 * C);
  if (llama && m->shape.qk_norm) {
    a->qkv_pre = take_x(c, BT * 3 * C);
    a->qk_rstd = take(c, BT * 2 * NH);
  }
  if (flash)
    a->lse = take(c, BT / T * NH * T);
  else
    a->att = take(c, BT / T * NH * T * T);
  a->atty = take_x(c, BT * C);
  a->resid2 = take_x(c, BT * C);
  a->ln2 = take_x(c, BT * C);
  if (!llama)
    a->ln2_mean = take(c, BT);
  a->ln2_rstd = take(c, BT);
  a->fch = take_x(c, BT * (llama ? 2 * F : F));
  a->fch_gelu = take_x(c, BT * F);
}

/* Lays out all activations; counts only when c->base is NULL. */
static void carve_acts(trn_model *m, carver *c) {
  const rcfg_shape *s = &m->shape;
  size_t B = m->B, T = s->seq_len, C = s->d_model, V = s->vocab_size;
  size_t BT = B * T, L = s->n_layer;
  int flash = use_flash(m);
  for (size_t l = 0; l <= L; l++)
    m->resid[l] = take_x(c, BT * C);
  trn_layer_acts shared = {0};
  if (m->recompute)
    layer_acts(c, &shared, m, BT, flash);
  for (size_t l = 0; l < L; l++) {
    if (m->recompute)
      m->layer[l] = shared;
    else
      layer_acts(c, &m->layer[l], m, BT, flash);
  }
  m->proj = take_x(c, BT * C);
  m->lnf = take_x(c, BT * C);
  if (!m->llama)
    m->lnf_mean = take(c, BT);
  m->lnf_rstd = take(c, BT);
  m->logits = take_x(c, BT * V);
  m->losses = take(c, BT);
}

static void carve_grads(trn_model *m, carver *c) {
  const rcfg_shape *s = &m->shape;
  size_t B = m->B, T = s->seq_len, C = s->d_model, NH = s->n_head, BT = B * T, F = m->F;
  m->dresid = take_x(c, BT * C);
  m->dln = take_x(c, BT * C);
  m->dqkv = take_x(c, BT * 3 * C);
  if (!use_flash(m))
    m->datt = take(c, B * NH * T * T);
  m->datty = take_x(c, BT * C);
  m->dfch = take_x(c, BT * (m->llama ? 2 * F : F));
  if (m->llama)
    m->dact = take_x(c, BT * F);
}

int trn_model_init(trn_model *m, kern_ctx *k, const rcfg_shape *s, int B, int recompute,
                   int accumulate) {
  memset(m, 0, sizeof *m);
  m->k = k;
  m->shape = *s;
  m->B = B;
  m->cur_B = B;
  m->recompute = recompute;
  m->llama = s->family == RCFG_LLAMA;
  m->F = rcfg_ffn_hidden(s);
  m->out_mult = trn_mup_out_mult(s);
  m->attn_qscale = trn_mup_attn_qscale(s);
  size_t sz[TRN_NTENSORS], off = 0;
  tensor_sizes(s, sz);
  for (int i = 0; i < TRN_NTENSORS; i++) {
    m->tensors[i] =
        (trn_tensor_info){tensor_names[i], off, sz[i], tensor_decay[i], trn_mup_lr_scale(s, i)};
    off += sz[i];
  }
  m->nparams = off;
  size_t pb = m->nparams * sizeof(float);
  m->params = k->ops->alloc(k, pb);
  m->grads = k->ops->alloc(k, pb);
  m->params_low =
      k->prec == KERN_FP32 ? (kern_x *)m->params : k->ops->alloc(k, m->nparams * k->xbytes);
  m->mgrads = accumulate ? k->ops->alloc(k, pb) : m->grads;
  m->resid = calloc((size_t)s->n_layer + 1, sizeof *m->resid);
  m->layer = calloc((size_t)s->n_layer, sizeof *m->layer);
  m->tokens = k->ops->alloc(k, (size_t)B * s->seq_len * sizeof(int32_t));
  m->targets = k->ops->alloc(k, (size_t)B * s->seq_len * sizeof(int32_t));
  m->loss_acc = k->ops->alloc(k, 8 * sizeof(double));
  if (!m->params || !m->grads || !m->params_low || !m->mgrads || !m->resid || !m->layer ||
      !m->tokens || !m->targets || !m->loss_acc) {
    trn_model_free(m);
    return SS_ENOMEM;
  }
  m->step_acc = m->loss_acc + 1;
  m->grad_scale = (float *)(m->loss_acc + 4);
  carve(&m->p, m->params, m->tensors);
  carve(&m->g, m->grads, m->tensors);
  carve(&m->mg, m->mgrads, m->tensors);

  size_t xb = (size_t)k->xbytes;
  carver c = {NULL, 0, xb};
  carve_acts(m, &c);
  carver g = {NULL, 0, xb};
  carve_grads(m, &g);
  m->acts_bytes = c.used + g.used;
  m->acts_mem = k->ops->alloc(k, c.used);
  m->grad_mem = k->ops->alloc(k, g.used);
  if (!m->acts_mem || !m->grad_mem) {
    trn_model_free(m);
    return SS_ENOMEM;
  }
  c = (carver){m->acts_mem, 0, xb};
  carve_acts(m, &c);
  g = (carver){m->grad_mem, 0, xb};
  carve_grads(m, &g);
  return 0;
}

void trn_model_free(trn_model *m) {
  kern_ctx *k = m->k;
  if (!k)
    return;
  if (m->params_low != (kern_x *)m->params)
    k->ops->free(k, m->params_low);
  if (m->mgrads != m->grads)
    k->ops->free(k, m->mgrads);
  k->ops->free(k, m->params);
  k->ops->free(k, m->grads);
  k->ops->free(k, m->acts_mem);
  k->ops->free(k, m->grad_mem);
  k->ops->free(k, m->tokens);
  k->ops->free(k, m->loss_acc);
  k->ops->free(k, m->targets);
  free(m->resid);
  free(m->layer);
  memset(m, 0, sizeof *m);
}

size_t trn_model_activation_bytes(const trn_model *m) { return m->acts_bytes; }

static double normal(uint64_t s[4]) {
  /* Box-Muller on two uniforms in (0, 1] and [0, 1) */
  double u1 = 1.0 - trn_rng_uniform(s), u2 = trn_rng_uniform(s);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void trn_model_init_weights(trn_model *m, uint64_t seed) {
  size_t n = m->nparams;
  float *host = malloc(n * sizeof(float));
  if (!host)
    abort();
  uint64_t rng[4];
  trn_rng_seed(rng, seed);
  double resid_std = 0.02 / sqrt(2.0 * m->shape.n_layer);
  for (int i = 0; i < TRN_NTENSORS; i++) {
    const trn_tensor_info *t = &m->tensors[i];
    float *p = host + t->offset;
    const char *nm = t->name;
    int is_gain = !strcmp(nm, "ln1w") || !strcmp(nm, "ln2w") || !strcmp(nm, "lnfw") ||
                  !strcmp(nm, "qnw") || !strcmp(nm, "knw");
    int is_proj = !strcmp(nm, "attprojw") || !strcmp(nm, "fcprojw");
    /* muP's hidden matrices: / sqrt(width_mult); 1 (the same bits) in sp */
    double mup = trn_mup_init_scale(&m->shape, i);
    double std = (is_proj ? resid_std : 0.02) * mup;
    for (size_t j = 0; j < t->size; j++) {
      if (is_gain)
        p[j] = 1.0f;
      else if (t->decay)
        p[j] = (float)(normal(rng) * std);
      else
        p[j] = 0.0f;
    }
  }
  m->k->ops->from_host(m->k, m->params, host, n * sizeof(float));
  free(host);
  trn_model_sync_low(m);
}

void trn_model_sync_low(trn_model *m) {
  if (m->params_low != (kern_x *)m->params)
    m->k->ops->to_x(m->k, m->params_low, m->params, m->nparams);
}

/* Where the norm of resid[l] goes: block l's ln1, or lnf after the last
 * block. llama's RMSNorm has no mean and no bias (NULL). */
typedef struct ln_dst {
  kern_x *out;
  float *mean, *rstd;
  const kern_x *w, *b;
} ln_dst;

static ln_dst ln_of(trn_model *m, int l) {
  if (l < m->shape.n_layer) {
    trn_layer_acts *a = &m->layer[l];
    size_t LC = (size_t)l * m->shape.d_model;
    return (ln_dst){a->ln1, a->ln1_mean, a->ln1_rstd, wlow(m, TRN_LN1W, LC),
                    m->llama ? NULL : wlow(m, TRN_LN1B, LC)};
  }
  return (ln_dst){m->lnf, m->lnf_mean, m->lnf_rstd, wlow(m, TRN_LNFW, 0),
                  m->llama ? NULL : wlow(m, TRN_LNFB, 0)};
}

/* The family's norm of inp into d: LayerNorm (gpt2) or RMSNorm (llama). */
static void norm_forward(trn_model *m, ln_dst d, const kern_x *inp) {
  kern_ctx *k = m->k;
  int N = m->cur_B * m->shape.seq_len, C = m->shape.d_model;
  if (m->llama)
    k->ops->rmsnorm_forward(k, d.out, d.rstd, inp, d.w, N, C);
  else
    k->ops->layernorm_forward(k, d.out, d.mean, d.rstd, inp, d.w, d.b, N, C);
}

/* dinp += the norm's input gradient from dout; dw, db += (db unused by RMSNorm) */
static void norm_backward(trn_model *m, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                          const kern_x *inp, const kern_x *w, const float *mean,
                          const float *rstd) {
  kern_ctx *k = m->k;
  int N = m->cur_B * m->shape.seq_len, C = m->shape.d_model;
  if (m->llama)
    k->ops->rmsnorm_backward(k, dinp, dw, dout, inp, w, rstd, N, C);
  else
    k->ops->layernorm_backward(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* resid = a + b, then the norm d of resid: LayerNorm in one fused kernel
 * where the backend has it, else the two kernels (the same bits either way). */
static void residual_layernorm(trn_model *m, kern_x *resid, const kern_x *a, const kern_x *b,
                               ln_dst d) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  int N = m->cur_B * m->shape.seq_len, C = m->shape.d_model;
  if (!m->llama && o->residual_layernorm_forward) {
    o->residual_layernorm_forward(k, resid, d.out, d.mean, d.rstd, a, b, d.w, d.b, N, C);
    return;
  }
  o->residual_forward(k, resid, a, b, (size_t)N * C);
  norm_forward(m, d, resid);
}

/* Rotary embedding and muP's q scale on qkv (theta 0 in gpt2: the scale
 * alone); nothing in gpt2 under sp. */
static int rotates(const trn_model *m) { return m->llama || m->attn_qscale != 1.0f; }
static float rope_theta(const trn_model *m) { return m->llama ? (float)m->shape.rope_theta : 0.0f; }

/* Block l forward: resid[l] -> resid[l + 1]. Chained (the forward pass):
 * block l's ln1 is already made from resid[l] (by the block before, or by
 * trn_model_forward for block 0), and the block ends with the norm of
 * resid[l + 1] as well (ln_of(l + 1)), fused with its residual. Unchained
 * (recompute in the backward pass, where the blocks share one set of
 * activations, so the next block's ln1 would overwrite this block's): the
 * block makes its own ln1 and ends with resid[l + 1] alone. */
static void layer_forward(trn_model *m, int l, int chained) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  const rcfg_shape *s = &m->shape;
  int B = m->cur_B, T = s->seq_len, C = s->d_model, NH = s->n_head, N = B * T, F = m->F;
  int llama = m->llama;
  size_t LC = (size_t)l * C, hs = (size_t)(C / NH);
  trn_layer_acts *a = &m->layer[l];
  if (!chained)
    norm_forward(m, ln_of(m, l), m->resid[l]);
  kern_x *qkv_out = a->qkv_pre ? a->qkv_pre : a->qkv;
  o->matmul_forward(k, qkv_out, a->ln1, wlow(m, TRN_QKVW, LC * 3 * C),
                    llama ? NULL : wlow(m, TRN_QKVB, LC * 3), N, C, 3 * C);
  if (a->qkv_pre)
    o->qknorm_forward(k, a->qkv, a->qk_rstd, a->qkv_pre, wlow(m, TRN_QNW, l * hs),
                      wlow(m, TRN_KNW, l * hs), N, C, NH);
  if (rotates(m))
    o->rope_forward(k, a->qkv, B, T, C, NH, rope_theta(m), m->attn_qscale);
  if (use_flash(m))
    o->flash_attention_forward(k, a->atty, a->lse, a->qkv, B, T, C, NH);
  else
    o->attention_forward(k, a->atty, a->att, a->qkv, B, T, C, NH);
  o->matmul_forward(k, m->proj, a->atty, wlow(m, TRN_ATTPROJW, LC * C),
                    llama ? NULL : wlow(m, TRN_ATTPROJB, LC), N, C, C);
  residual_layernorm(m, a->resid2, m->resid[l], m->proj,
                     (ln_dst){a->ln2, a->ln2_mean, a->ln2_rstd, wlow(m, TRN_LN2W, LC),
                              llama ? NULL : wlow(m, TRN_LN2B, LC)});
  if (llama) { /* SwiGLU: gate | up in one product, then silu(gate) * up */
    o->matmul_forward(k, a->fch, a->ln2, wlow(m, TRN_FCW, LC * 2 * F), NULL, N, C, 2 * F);
    o->swiglu_forward(k, a->fch_gelu, a->fch, N, F);
    o->matmul_forward(k, m->proj, a->fch_gelu, wlow(m, TRN_FCPROJW, LC * F), NULL, N, F, C);
  } else {
    const kern_x *fcw = wlow(m, TRN_FCW, LC * 4 * C), *fcb = wlow(m, TRN_FCB, LC * 4);
    if (o->matmul_gelu_forward) { /* the same two results, fused where the backend can */
      o->matmul_gelu_forward(k, a->fch_gelu, a->fch, a->ln2, fcw, fcb, N, C, 4 * C);
    } else {
      o->matmul_forward(k, a->fch, a->ln2, fcw, fcb, N, C, 4 * C);
      o->gelu_forward(k, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    }
    o->matmul_forward(k, m->proj, a->fch_gelu, wlow(m, TRN_FCPROJW, LC * 4 * C),
                      wlow(m, TRN_FCPROJB, LC), N, 4 * C, C);
  }
  if (chained)
    residual_layernorm(m, m->resid[l + 1], a->resid2, m->proj, ln_of(m, l + 1));
  else
    o->residual_forward(k, m->resid[l + 1], a->resid2, m->proj, (size_t)N * C);
}

/* The output head's weights: wte when tied (gpt2 always), else head. */
static int head_tensor(const trn_model *m) {
  return m->tensors[TRN_HEAD].size ? TRN_HEAD : TRN_WTE;
}

void trn_model_forward_into(trn_model *m, int nseq, const int32_t *tokens, const int32_t *targets,
                            double *loss_acc, float dscale) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  const rcfg_shape *s = &m->shape;
  m->cur_B = nseq;
  int B = nseq, T = s->seq_len, C = s->d_model, V = s->vocab_size, N = B * T;
  o->from_host(k, m->tokens, tokens, (size_t)N * sizeof(int32_t));
  o->encoder_forward(k, m->resid[0], m->tokens, wlow(m, TRN_WTE, 0),
                     m->llama ? NULL : wlow(m, TRN_WPE, 0), B, T, C);
  norm_forward(m, ln_of(m, 0), m->resid[0]);
  for (int l = 0; l < s->n_layer; l++)
    layer_forward(m, l, 1); /* each ends with the next norm: ln1, lnf after the last */
  if (m->out_mult != 1.0f)  /* muP's output multiplier, on the head's input */
    o->scale_x(k, m->lnf, m->out_mult, (size_t)N * C);
  o->matmul_forward(k, m->logits, m->lnf, wlow(m, head_tensor(m), 0), NULL, N, C, V);
  if (!targets)
    return;
  o->from_host(k, m->targets, targets, (size_t)N * sizeof(int32_t));
  /* the losses, and with dscale the head's gradient in the same pass over
   * the logits (backward then starts below the head) */
  o->softmax_xent(k, m->losses, m->logits, m->targets, N, V, dscale / (float)N);
  m->head_dscale = dscale;
  if (loss_acc)
    o->mean_into(k, loss_acc, m->losses, (size_t)N);
}

double trn_model_forward(trn_model *m, int nseq, const int32_t *tokens, const int32_t *targets) {
  kern_ctx *k = m->k;
  double loss = 0.0;
  k->ops->zero(k, m->loss_acc, sizeof loss);
  trn_model_forward_into(m, nseq, tokens, targets, targets ? m->loss_acc : NULL, 0.0f);
  if (targets)
    k->ops->to_host(k, &loss, m->loss_acc, sizeof loss);
  return loss;
}

/* The tensor's gradient at element i (NULL for a tensor the family lacks). */
static float *gat(const trn_model *m, int t, size_t i) {
  return m->tensors[t].size ? m->mgrads + m->tensors[t].offset + i : NULL;
}

/* The head: a forward without dscale left the logits intact; this pass
 * turns them into dlogits of the mean loss, in place. Then the head's and
 * the final norm's gradients, leaving the residual's in dresid. */
static void head_backward(trn_model *m, float dscale) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  const rcfg_shape *s = &m->shape;
  int N = m->cur_B * s->seq_len, C = s->d_model, V = s->vocab_size, L = s->n_layer;
  if (m->head_dscale == 0.0f) {
    o->softmax_xent(k, m->losses, m->logits, m->targets, N, V, dscale / (float)N);
  } else if (m->head_dscale != dscale) { /* the logits hold another scale's gradient */
    fprintf(stderr, "%s:%d: backward with dscale %g after a forward that formed %g's\n", __FILE__,
            __LINE__, (double)dscale, (double)m->head_dscale);
    abort();
  }
  m->head_dscale = 0.0f;
  int ht = head_tensor(m);
  o->matmul_backward(k, m->dln, gat(m, ht, 0), NULL, m->logits, m->lnf, wlow(m, ht, 0), N, C, V);
  if (m->out_mult != 1.0f)
    o->scale_x(k, m->dln, m->out_mult, (size_t)N * C);
  o->zero(k, m->dresid, (size_t)N * C * k->xbytes);
  norm_backward(m, m->dresid, gat(m, TRN_LNFW, 0), gat(m, TRN_LNFB, 0), m->dln, m->resid[L],
                wlow(m, TRN_LNFW, 0), m->lnf_mean, m->lnf_rstd);
}

/* Block l's MLP half: resid[l+1] = resid2 + down(act(up(norm2(resid2)))). */
static void mlp_backward(trn_model *m, int l) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  int N = m->cur_B * m->shape.seq_len, C = m->shape.d_model, F = m->F;
  trn_layer_acts *a = &m->layer[l];
  size_t LC = (size_t)l * C;
  if (m->llama) {
    o->matmul_backward(k, m->dact, gat(m, TRN_FCPROJW, LC * F), NULL, m->dresid, a->fch_gelu,
                       wlow(m, TRN_FCPROJW, LC * F), N, F, C);
    o->swiglu_backward(k, m->dfch, a->fch, m->dact, N, F);
    o->matmul_backward(k, m->dln, gat(m, TRN_FCW, LC * 2 * F), NULL, m->dfch, a->ln2,
                       wlow(m, TRN_FCW, LC * 2 * F), N, C, 2 * F);
  } else {
    o->matmul_backward(k, m->dfch, gat(m, TRN_FCPROJW, LC * 4 * C), gat(m, TRN_FCPROJB, LC),
                       m->dresid, a->fch_gelu, wlow(m, TRN_FCPROJW, LC * 4 * C), N, 4 * C, C);
    o->gelu_backward(k, m->dfch, a->fch, m->dfch, (size_t)N * 4 * C);
    o->matmul_backward(k, m->dln, gat(m, TRN_FCW, LC * 4 * C), gat(m, TRN_FCB, LC * 4), m->dfch,
                       a->ln2, wlow(m, TRN_FCW, LC * 4 * C), N, C, 4 * C);
  }
  norm_backward(m, m->dresid, gat(m, TRN_LN2W, LC), gat(m, TRN_LN2B, LC), m->dln, a->resid2,
                wlow(m, TRN_LN2W, LC), a->ln2_mean, a->ln2_rstd);
}

/* Block l's attention half: resid2 = resid[l] + attproj(attn(qkv(norm1(resid[l])))). */
static void attn_backward(trn_model *m, int l) {
  kern_ctx *k = m->k;
  const kern_ops *o = k->ops;
  const rcfg_shape *s = &m->shape;
  int B = m->cur_B, T = s->seq_len, C = s->d_model, NH = s->n_head, N = B * T;
  size_t hs = (size_t)(C / NH);
  trn_layer_acts *a = &m->layer[l];
  size_t LC = (size_t)l * C;
  o->matmul_backward(k, m->datty, gat(m, TRN_ATTPROJW, LC * C), gat(m, TRN_ATTPROJB, LC), m->dresid,
                     a->atty, wlow(m, TRN_ATTPROJW, LC * C), N, C, C);
  if (use_flash(m)) /* from the forward's output atty and lse */
    o->flash_attention_backward(k, m->dqkv, m->datty, a->atty, a->qkv, a->lse, B, T, C, NH);
  else
    o->attention_backward(k, m->dqkv, m->datt, m->datty, a->qkv, a->att, B, T, C, NH);
  if (rotates(m))
    o->rope_backward(k, m->dqkv, B, T, C, NH, rope_theta(m), m->attn_qscale);
  if (a->qkv_pre)
    o->qknorm_backward(k, m->dqkv, gat(m, TRN_QNW, l * hs), gat(m, TRN_KNW, l * hs), m->dqkv,
                       a->qkv_pre, wlow(m, TRN_QNW, l * hs), wlow(m, TRN_KNW, l * hs), a->qk_rstd,
                       N, C, NH);
  o->matmul_backward(k, m->dln, gat(m, TRN_QKVW, LC * 3 * C), gat(m, TRN_QKVB, LC * 3), m->dqkv,
                     a->ln1, wlow(m, TRN_QKVW, LC * 3 * C), N, C, 3 * C);
  norm_backward(m, m->dresid, gat(m, TRN_LN1W, LC), gat(m, TRN_LN1B, LC), m->dln, m->resid[l],
                wlow(m, TRN_LN1W, LC), a->ln1_mean, a->ln1_rstd);
}

/* Block l's gradient is final: tells grads_ready its slice of each block
 * tensor. */
static void block_grads_ready(trn_model *m, int l) {
  int L = m->shape.n_layer;
  size_t r[TRN_NTENSORS][2];
  int n = 0;
  for (int t = TRN_FIRST_BLOCK_TENSOR; t <= TRN_LAST_BLOCK_TENSOR; t++) {
    size_t per = m->tensors[t].size / (size_t)L;
    if (!per) /* a tensor this family lacks */
      continue;
    r[n][0] = m->tensors[t].offset + (size_t)l * per;
    r[n][1] = r[n][0] + per;
    n++;
  }
  m->grads_ready(m->grads_ready_ud, (const size_t(*)[2])r, n);
}

/* The rest: the embeddings, the final norm, the head. */
static void rest_grads_ready(trn_model *m) {
  size_t r[5][2];
  const int rest[5] = {TRN_WTE, TRN_WPE, TRN_LNFW, TRN_LNFB, TRN_HEAD};
  int n = 0;
  for (int i = 0; i < 5; i++)
    if (m->tensors[rest[i]].size) {
      r[n][0] = m->tensors[rest[i]].offset;
      r[n][1] = r[n][0] + m->tensors[rest[i]].size;
      n++;
    }
  m->grads_ready(m->grads_ready_ud, (const size_t(*)[2])r, n);
}

void trn_model_backward(trn_model *m, float dscale) {
  kern_ctx *k = m->k;
  const rcfg_shape *s = &m->shape;
  k->ops->zero(k, m->mgrads, m->nparams * sizeof(float));
  head_backward(m, dscale);
  for (int l = s->n_layer - 1; l >= 0; l--) {
    if (m->recompute)
      layer_forward(m, l, 0);
    mlp_backward(m, l);
    attn_backward(m, l);
    if (m->grads_ready)
      block_grads_ready(m, l);
  }
  k->ops->encoder_backward(k, gat(m, TRN_WTE, 0), gat(m, TRN_WPE, 0), m->dresid, m->tokens,
                           m->cur_B, s->seq_len, s->d_model);
  if (m->grads_ready)
    rest_grads_ready(m);
}

/* The coordinate check (coordcheck.h). */
#include "trainer/coordcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#define CC_BATCH 8

void trn_cc_row_name(int L, int r, char *buf, int n) {
  static const char *const part[3] = {"attn", "mlp", "out"};
  if (r == 0)
    snprintf(buf, (size_t)n, "embed");
  else if (r == TRN_CC_ROWS(L) - 1)
    snprintf(buf, (size_t)n, "logits");
  else
    snprintf(buf, (size_t)n, "%d.%s", (r - 1) / 3, part[(r - 1) % 3]);
}

/* RMS of n kern_x values (fp32 containers on the CPU backend). */
static double rms_of(kern_ctx *k, const kern_x *x, size_t n) {
  float *h = malloc(n * sizeof(float));
  if (!h)
    abort();
  k->ops->to_host(k, h, x, n * sizeof(float));
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    ss += (double)h[i] * h[i];
  free(h);
  return sqrt(ss / (double)n);
}

/* One width: train, then the rows' RMS into out. */
static int one_width(const rcfg_shape *s, int steps, double lr, uint64_t seed, trn_loader *ld,
                     double *out, char *err, int errlen) {
  kern_ctx k;
  kern_cpu_init(&k, KERN_FP32, 0);
  trn_model m;
  if (trn_model_init(&m, &k, s, CC_BATCH, 0, 0)) {
    snprintf(err, (size_t)errlen, "d_model %d: out of memory", s->d_model);
    return SS_ENOMEM;
  }
  trn_optim o;
  if (trn_optim_init(&o, &m, 0)) {
    trn_model_free(&m);
    snprintf(err, (size_t)errlen, "d_model %d: out of memory", s->d_model);
    return SS_ENOMEM;
  }
  trn_model_init_weights(&m, seed);
  size_t T = (size_t)s->seq_len, n = CC_BATCH * T;
  int32_t *tok = malloc((n + 1) * sizeof(int32_t));
  if (!tok)
    abort();
  for (int step = 1; step <= steps; step++) {
    trn_loader_next(ld, tok, n + 1);
    trn_model_forward(&m, CC_BATCH, tok, tok + 1);
    trn_model_backward(&m, 1.0f);
    trn_optim_step(&o, &m, lr, 0.9, 0.95, 1e-8, 0.0, 1.0f, NULL, step);
  }
  trn_loader_next(ld, tok, n + 1);
  trn_model_forward(&m, CC_BATCH, tok, tok + 1);
  size_t C = (size_t)s->d_model;
  int L = s->n_layer, r = 0;
  out[r++] = rms_of(&k, m.resid[0], n * C);
  for (int l = 0; l < L; l++) {
    out[r++] = rms_of(&k, m.layer[l].atty, n * C);
    out[r++] = rms_of(&k, m.layer[l].fch_gelu, n * (size_t)m.F);
    out[r++] = rms_of(&k, m.resid[l + 1], n * C);
  }
  /* the forward with targets turned the logits into the losses' inputs,
   * untouched without dscale */
  out[r++] = rms_of(&k, m.logits, n * (size_t)s->vocab_size);
  free(tok);
  trn_optim_free(&o);
  trn_model_free(&m);
  return 0;
}

int trn_coordcheck(const rcfg_shape *shape, int head_size, const int *widths, int nw, int steps,
                   double lr, uint64_t seed, double *rms, char *err, int errlen) {
  rcfg_synth p = {26, 4096, 2, 8, 1.2, 1}; /* the run config's default corpus */
  trn_lexicon *lx = NULL;
  char e[256];
  if (trn_lexicon_new(&p, &lx, e, sizeof e)) {
    snprintf(err, (size_t)errlen, "the synthetic corpus: %s", e);
    return SS_EINVAL;
  }
  int rc = 0;
  for (int i = 0; i < nw && !rc; i++) {
    rcfg_shape s = *shape;
    s.d_model = widths[i];
    s.n_head = widths[i] / head_size;
    if (s.n_head < 1 || widths[i] % head_size) {
      snprintf(err, (size_t)errlen, "width %d: not a multiple of the head size %d", widths[i],
               head_size);
      rc = SS_EINVAL;
      break;
    }
    /* every width sees the same batches */
    trn_loader *ld = NULL;
    if (trn_loader_open_synth(lx, seed, &ld, e, sizeof e)) {
      snprintf(err, (size_t)errlen, "the synthetic stream: %s", e);
      rc = SS_EINVAL;
      break;
    }
    rc = one_width(&s, steps, lr, seed, ld, rms + (size_t)i * TRN_CC_ROWS(s.n_layer), err, errlen);
    trn_loader_free(ld);
  }
  trn_lexicon_free(lx);
  return rc;
}

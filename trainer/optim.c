#include "trainer/optim.h"

#include <string.h>

#include "common/err.h"

/* The state is one allocation from the kern_ctx, carved into the moments:
 * fp32 m then v; 8-bit the absmax scales sm, sv first (float-aligned at any
 * nparams), then qm, qv. One free. */
int trn_optim_init(trn_optim *o, const trn_model *m, int q8) {
  memset(o, 0, sizeof *o);
  o->q8 = q8;
  o->k = m->k;
  kern_ctx *k = m->k;
  size_t n = m->nparams;
  if (!q8) {
    o->state_bytes = 2 * n * sizeof(float);
    if (!(o->mem = k->ops->alloc(k, o->state_bytes)))
      return SS_ENOMEM;
    o->m = o->mem;
    o->v = o->m + n;
    return 0;
  }
  size_t nb = 0;
  for (int i = 0; i < TRN_NTENSORS; i++) {
    o->block_off[i] = nb;
    nb += (m->tensors[i].size + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
  }
  o->nblocks = nb;
  o->state_bytes = 2 * n + 2 * nb * sizeof(float);
  if (!(o->mem = k->ops->alloc(k, o->state_bytes)))
    return SS_ENOMEM;
  o->sm = o->mem;
  o->sv = o->sm + nb;
  o->qm = (int8_t *)(o->sv + nb);
  o->qv = (uint8_t *)(o->qm + n);
  return 0;
}

void trn_optim_free(trn_optim *o) {
  if (o->k)
    o->k->ops->free(o->k, o->mem);
  memset(o, 0, sizeof *o);
}

void trn_optim_step(trn_optim *o, trn_model *m, double lr, double beta1, double beta2, double eps,
                    double weight_decay, float grad_scale, int step) {
  kern_ctx *k = m->k;
  float *plow = m->params_low == m->params ? NULL : m->params_low;
  for (int i = 0; i < TRN_NTENSORS; i++) {
    const trn_tensor_info *t = &m->tensors[i];
    kern_adamw_args a = {
        (float)lr,  (float)beta1, (float)beta2, (float)eps, t->decay ? (float)weight_decay : 0.0f,
        grad_scale, step};
    size_t off = t->offset;
    if (o->q8)
      k->ops->adamw8bit(k, m->params + off, plow ? plow + off : NULL, m->grads + off, o->qm + off,
                        o->qv + off, o->sm + o->block_off[i], o->sv + o->block_off[i], t->size, &a);
    else
      k->ops->adamw(k, m->params + off, plow ? plow + off : NULL, m->grads + off, o->m + off,
                    o->v + off, t->size, &a);
  }
}

void trn_optim_save(const trn_optim *o, void *host) {
  kern_ctx *k = o->k;
  char *h = host;
  if (!o->q8) {
    size_t half = o->state_bytes / 2;
    k->ops->to_host(k, h, o->m, half);
    k->ops->to_host(k, h + half, o->v, half);
    return;
  }
  size_t n = (o->state_bytes - 2 * o->nblocks * sizeof(float)) / 2;
  k->ops->to_host(k, h, o->qm, n);
  k->ops->to_host(k, h + n, o->qv, n);
  k->ops->to_host(k, h + 2 * n, o->sm, o->nblocks * sizeof(float));
  k->ops->to_host(k, h + 2 * n + o->nblocks * sizeof(float), o->sv, o->nblocks * sizeof(float));
}

void trn_optim_load(trn_optim *o, const void *host) {
  kern_ctx *k = o->k;
  const char *h = host;
  if (!o->q8) {
    size_t half = o->state_bytes / 2;
    k->ops->from_host(k, o->m, h, half);
    k->ops->from_host(k, o->v, h + half, half);
    return;
  }
  size_t n = (o->state_bytes - 2 * o->nblocks * sizeof(float)) / 2;
  k->ops->from_host(k, o->qm, h, n);
  k->ops->from_host(k, o->qv, h + n, n);
  k->ops->from_host(k, o->sm, h + 2 * n, o->nblocks * sizeof(float));
  k->ops->from_host(k, o->sv, h + 2 * n + o->nblocks * sizeof(float), o->nblocks * sizeof(float));
}

#include "trainer/optim.h"

#include <string.h>

#include "common/err.h"

/* The state is one allocation from the kern_ctx, carved into the moments:
 * fp32 m then v; 8-bit the absmax scales sm, sv first (float-aligned at any
 * size), then qm, qv. One free. A shard [lo, hi) holds the state of those
 * parameters only, and of their blocks [blo, bhi). */
int trn_optim_init_shard(trn_optim *o, const trn_model *m, int q8, size_t lo, size_t hi) {
  memset(o, 0, sizeof *o);
  o->q8 = q8;
  o->k = m->k;
  o->lo = lo;
  o->hi = hi;
  kern_ctx *k = m->k;
  size_t n = hi - lo;
  if (!q8) {
    o->state_bytes = 2 * n * sizeof(float);
    if (!(o->mem = k->ops->alloc(k, o->state_bytes ? o->state_bytes : 1)))
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
  o->blo = trn_optim_block_of(o, m, lo);
  o->bhi = trn_optim_block_of(o, m, hi);
  nb = o->nblocks = o->bhi - o->blo;
  o->state_bytes = 2 * n + 2 * nb * sizeof(float);
  if (!(o->mem = k->ops->alloc(k, o->state_bytes ? o->state_bytes : 1)))
    return SS_ENOMEM;
  o->sm = o->mem;
  o->sv = o->sm + nb;
  o->qm = (int8_t *)(o->sv + nb);
  o->qv = (uint8_t *)(o->qm + n);
  return 0;
}

int trn_optim_init(trn_optim *o, const trn_model *m, int q8) {
  return trn_optim_init_shard(o, m, q8, 0, m->nparams);
}

size_t trn_optim_block_of(const trn_optim *o, const trn_model *m, size_t at) {
  size_t nb = 0;
  for (int i = 0; i < TRN_NTENSORS; i++) {
    const trn_tensor_info *t = &m->tensors[i];
    size_t blocks = (t->size + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
    if (at >= t->offset && at < t->offset + t->size)
      return o->block_off[i] + (at - t->offset) / KERN_Q8_BLOCK;
    nb = o->block_off[i] + blocks;
  }
  return nb; /* at == nparams: past the last block */
}

void trn_optim_shards(const trn_model *m, int world, size_t *off) {
  size_t n = m->nparams;
  off[0] = 0;
  off[world] = n;
  for (int r = 1; r < world; r++) {
    size_t want = n * (size_t)r / (size_t)world, at = n;
    /* the tensor holding want; snap to its nearest block bound */
    for (int i = 0; i < TRN_NTENSORS; i++) {
      const trn_tensor_info *t = &m->tensors[i];
      if (want < t->offset || want >= t->offset + t->size)
        continue;
      size_t rel = (want - t->offset + KERN_Q8_BLOCK / 2) / KERN_Q8_BLOCK * KERN_Q8_BLOCK;
      at = rel >= t->size ? t->offset + t->size : t->offset + rel;
      break;
    }
    off[r] = at < off[r - 1] ? off[r - 1] : at;
  }
}

void trn_optim_free(trn_optim *o) {
  if (o->k)
    o->k->ops->free(o->k, o->mem);
  memset(o, 0, sizeof *o);
}

_Static_assert(TRN_NTENSORS <= KERN_ADAMW_MAX_PARTS, "one fused AdamW part per tensor");

void trn_optim_step(trn_optim *o, trn_model *m, double lr, double beta1, double beta2, double eps,
                    double weight_decay, float grad_scale, const float *grad_scale_dev, int step) {
  kern_ctx *k = m->k;
  kern_x *plow = m->params_low == (kern_x *)m->params ? NULL : m->params_low;
  kern_adamw_args a = {(float)lr, (float)beta1, (float)beta2, (float)eps,
                       0.0f,      grad_scale,   step,         grad_scale_dev};
  /* every tensor's part that this state covers, in one call */
  kern_adamw_parts parts;
  parts.n = 0;
  for (int i = 0; i < TRN_NTENSORS; i++) {
    const trn_tensor_info *t = &m->tensors[i];
    size_t from = t->offset > o->lo ? t->offset : o->lo;
    size_t to = t->offset + t->size < o->hi ? t->offset + t->size : o->hi;
    if (from >= to)
      continue;
    parts.part[parts.n].off = from;
    parts.part[parts.n].n = to - from;
    parts.part[parts.n].state = from - o->lo;
    parts.part[parts.n].block =
        o->q8 ? o->block_off[i] + (from - t->offset) / KERN_Q8_BLOCK - o->blo : 0;
    parts.part[parts.n].weight_decay = t->decay ? (float)weight_decay : 0.0f;
    parts.part[parts.n].lr_scale = t->lr_scale;
    parts.n++;
  }
  if (o->q8)
    k->ops->adamw8bit_fused(k, m->params, plow, m->grads, o->qm, o->qv, o->sm, o->sv, &parts, &a);
  else
    k->ops->adamw_fused(k, m->params, plow, m->grads, o->m, o->v, &parts, &a);
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

/* Data parallelism (run.h): what the training loop adds when world_size > 1.
 *
 * Each rank trains on its share of every step's micro-batches (train.c);
 * the step's gradient is then the sum over ranks in rank order (dist.h), so
 * that with one micro-batch per rank it is bit for bit the gradient one
 * process folds over the same micro-batches. Without ZeRO every rank holds
 * the whole optimizer state and makes the same update. With ZeRO-1
 * (optimizer.zero 1) the gradient is reduce-scattered: each rank updates
 * its shard of the parameters with its shard of the state (about
 * 1/world_size of it) and the shards are all-gathered. AdamW is elementwise,
 * so the parameters are those of the unsharded update whenever the clipping
 * factor is (no clipping, or a gradient norm under the limit); the norm
 * itself is summed from the shards, whose order of addition differs from
 * one pass over the whole gradient in the last bits.
 *
 * Checkpoints are those of a single process: rank 0 writes them (gathering
 * the shards first) and reads them (scattering the shards), so a run may
 * resume on another number of ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "trainer/run.h"
#include "trainer/train.h"

static int failed(run *r, char *err, size_t errlen) {
  snprintf(err, errlen, "rank %d of %d: %s", r->rank, r->world, trn_dist_error(r->dist));
  return SS_EIO;
}

int trn_dp_open(run *r, const trn_train_opts *o, char *err, size_t errlen) {
  if (r->world == 1)
    return 0;
  if (r->cuda) {
    snprintf(err, errlen,
             "$.world_size: found %d with \"backend\": \"cuda\": data parallelism over NCCL is "
             "not built yet (the CPU backend's is)\nHINT: use \"world_size\": 1 on a GPU",
             r->world);
    return SS_EINVAL;
  }
  if (o->rank < 0) {
    snprintf(err, errlen, "world_size %d: each rank needs --rank and --dist (a launcher of "
                          "`scalesweep train` gives them)", r->world);
    return SS_EINVAL;
  }
  trn_dist_opts d = {o->rank,   r->world,         o->dist_addr, o->dist_listen_fd,
                     o->dist_secret, o->dist_timeout_ms};
  return trn_dist_open(&r->dist, &d, err, errlen);
}

void trn_dp_close(run *r) {
  trn_dist_close(r->dist);
  r->dist = NULL;
}

int trn_dp_reduce(run *r, double ctl[3], double *gnorm2, char *err, size_t errlen) {
  trn_model *m = &r->model;
  kern_ctx *k = &r->k;
  if (r->world == 1) {
    *gnorm2 = k->ops->sumsq(k, m->grads, m->nparams);
    return 0;
  }
  int zero = r->cfg->optimizer.zero;
  int rc = zero ? trn_dist_reduce_scatter_f32(r->dist, m->grads, r->shard)
                : trn_dist_allreduce_f32(r->dist, m->grads, m->nparams);
  if (!rc)
    rc = trn_dist_allreduce_f64(r->dist, ctl, 3);
  if (rc)
    return failed(r, err, errlen);
  if (!zero) {
    *gnorm2 = k->ops->sumsq(k, m->grads, m->nparams);
    return 0;
  }
  size_t lo = r->shard[r->rank], hi = r->shard[r->rank + 1];
  double part = k->ops->sumsq(k, m->grads + lo, hi - lo);
  if (trn_dist_allreduce_f64(r->dist, &part, 1))
    return failed(r, err, errlen);
  *gnorm2 = part;
  return 0;
}

/* byte bounds of the ranks' shards of an array of es-byte values indexed
 * like the parameters (by = NULL) or like the 8-bit blocks (by = o) */
static void byte_bounds(const run *r, const trn_optim *by, size_t es, size_t *out) {
  for (int i = 0; i <= r->world; i++)
    out[i] = es * (by ? trn_optim_block_of(by, &r->model, r->shard[i]) : r->shard[i]);
}

int trn_dp_after_step(run *r, char *err, size_t errlen) {
  if (r->world == 1 || !r->cfg->optimizer.zero)
    return 0;
  size_t off[1025];
  byte_bounds(r, NULL, sizeof(float), off);
  trn_model *m = &r->model;
  if (trn_dist_all_gather(r->dist, m->params, off) ||
      (m->params_low != m->params && trn_dist_all_gather(r->dist, m->params_low, off)))
    return failed(r, err, errlen);
  return 0;
}

int trn_dp_share(run *r, double *v, char *err, size_t errlen) {
  if (r->world > 1 && trn_dist_broadcast(r->dist, v, sizeof *v))
    return failed(r, err, errlen);
  return 0;
}

/* The shard's state and a whole state (rank 0's; NULL elsewhere) as
 * matching pieces: (shard buffer, whole buffer, bounds) x n. */
typedef struct piece {
  void *mine, *all;
  size_t off[1025];
} piece;

static int pieces(run *r, const trn_optim *shard, const trn_optim *whole, piece *p) {
  int q8 = shard->q8;
  if (!q8) {
    p[0] = (piece){shard->m, whole ? whole->m : NULL, {0}};
    p[1] = (piece){shard->v, whole ? whole->v : NULL, {0}};
    byte_bounds(r, NULL, sizeof(float), p[0].off);
    byte_bounds(r, NULL, sizeof(float), p[1].off);
    return 2;
  }
  p[0] = (piece){shard->qm, whole ? whole->qm : NULL, {0}};
  p[1] = (piece){shard->qv, whole ? whole->qv : NULL, {0}};
  p[2] = (piece){shard->sm, whole ? whole->sm : NULL, {0}};
  p[3] = (piece){shard->sv, whole ? whole->sv : NULL, {0}};
  byte_bounds(r, NULL, 1, p[0].off);
  byte_bounds(r, NULL, 1, p[1].off);
  byte_bounds(r, shard, sizeof(float), p[2].off);
  byte_bounds(r, shard, sizeof(float), p[3].off);
  return 4;
}

int trn_dp_save(run *r, const trn_ckpt_state *st, trn_dp_save_fn save, char *err, size_t errlen) {
  if (r->world == 1 || !r->cfg->optimizer.zero)
    return r->rank == 0 ? save(r, &r->optim, st, err, errlen) : 0;
  trn_optim whole;
  int root = r->rank == 0;
  if (root && trn_optim_init(&whole, &r->model, r->optim.q8) != 0) {
    snprintf(err, errlen, "rank 0: out of memory gathering the optimizer state to save it");
    return SS_ENOMEM;
  }
  piece p[4];
  int n = pieces(r, &r->optim, root ? &whole : NULL, p), rc = 0;
  for (int i = 0; i < n && !rc; i++)
    if (trn_dist_gather(r->dist, p[i].mine, p[i].all, p[i].off))
      rc = failed(r, err, errlen);
  if (root) {
    if (!rc)
      rc = save(r, &whole, st, err, errlen);
    trn_optim_free(&whole);
  }
  return rc;
}

int trn_dp_resume(run *r, trn_ckpt_state *st, trn_dp_load_fn load, char *err, size_t errlen) {
  if (r->world == 1)
    return load(r, &r->optim, st, err, errlen);
  int zero = r->cfg->optimizer.zero, root = r->rank == 0;
  trn_model *m = &r->model;
  trn_optim whole;
  int64_t rc = 0;
  if (root) {
    if (zero && trn_optim_init(&whole, m, r->optim.q8) != 0) {
      snprintf(err, errlen, "rank 0: out of memory for the optimizer state to resume");
      rc = SS_ENOMEM;
    } else {
      rc = load(r, zero ? &whole : &r->optim, st, err, errlen);
    }
  }
  /* every rank learns rank 0's answer: all resume, all start afresh, or all fail */
  if (trn_dist_broadcast(r->dist, &rc, sizeof rc))
    rc = failed(r, err, errlen);
  else if (rc < 0 && !root)
    snprintf(err, errlen, "rank %d: rank 0 could not resume (its error says why)", r->rank);
  if (rc == 1) {
    int bad = trn_dist_broadcast(r->dist, st, sizeof *st) ||
              trn_dist_broadcast(r->dist, m->params, m->nparams * sizeof(float));
    if (!bad && zero) {
      piece p[4];
      int n = pieces(r, &r->optim, root ? &whole : NULL, p);
      for (int i = 0; i < n && !bad; i++)
        bad = trn_dist_scatter(r->dist, p[i].all, p[i].mine, p[i].off) != 0;
    } else if (!bad) {
      bad = trn_dist_broadcast(r->dist, r->optim.mem, r->optim.state_bytes) != 0;
    }
    if (bad)
      rc = failed(r, err, errlen);
    else if (!root) {
      trn_model_sync_low(m);
      if (trn_loader_set_pos(r->train, &st->train_pos) != 0) {
        snprintf(err, errlen, "rank %d: data position %llu does not fit the training data",
                 r->rank, (unsigned long long)st->train_pos.offset);
        rc = SS_EINVAL;
      }
    }
  }
  if (root && zero && whole.mem)
    trn_optim_free(&whole);
  return (int)rc;
}

/* Data parallelism (run.h): what the training loop adds when world_size > 1.
 * The model's buffers move through r->dc (the CPU twin, or NCCL for a CUDA
 * run: its order of summation is NCCL's, so a CUDA run is not bit for bit
 * world_size 1); host values (losses, flags, the training state) through
 * r->dist.
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

/* a collective on the model's buffers failed */
static int dc_failed(run *r, char *err, size_t errlen) {
  snprintf(err, errlen, "rank %d of %d: %s", r->rank, r->world, r->dc.ops->error(r->dc.ctx));
  return SS_EIO;
}

/* the CPU twin as the model buffers' collectives (host memory) */
static const char *host_error(void *d) { return trn_dist_error(d); }
static int host_allreduce(void *d, float *b, size_t n) { return trn_dist_allreduce_f32(d, b, n); }
static int host_reduce_scatter(void *d, float *b, const size_t *off) {
  return trn_dist_reduce_scatter_f32(d, b, off);
}
static int host_all_gather(void *d, void *b, const size_t *off) {
  return trn_dist_all_gather(d, b, off);
}
static int host_broadcast(void *d, void *b, size_t n) { return trn_dist_broadcast(d, b, n); }
static int host_gather(void *d, const void *mine, void *full, const size_t *off) {
  return trn_dist_gather(d, mine, full, off);
}
static int host_scatter(void *d, const void *full, void *mine, const size_t *off) {
  return trn_dist_scatter(d, full, mine, off);
}
static const kern_coll_ops host_ops = {host_error,      host_allreduce, host_reduce_scatter,
                                       host_all_gather, host_broadcast, host_gather,
                                       host_scatter,    NULL};

/* NCCL's, through the CUDA module: rank 0's unique id travels over dist */
static int open_nccl(run *r, const trn_train_opts *o, char *err, size_t errlen) {
  const kern_nccl_ops *n = r->cuda->nccl;
  char id[KERN_NCCL_ID_BYTES] = {0};
  int64_t ok = r->rank != 0 || n->unique_id(id, err, errlen) == 0;
  if (trn_dist_broadcast(r->dist, &ok, sizeof ok) ||
      (ok && trn_dist_broadcast(r->dist, id, sizeof id)))
    return failed(r, err, errlen);
  if (!ok) {
    if (r->rank != 0)
      snprintf(err, errlen, "rank %d: rank 0 could not start NCCL (its error says why)",
               r->rank);
    return SS_EIO;
  }
  void *ctx = n->open(&r->k, r->rank, r->world, id, o->dist_timeout_ms, err, errlen);
  if (!ctx)
    return SS_EIO;
  r->dc = (trn_dcoll){ctx, &n->coll};
  return 0;
}

int trn_dp_open(run *r, const trn_train_opts *o, char *err, size_t errlen) {
  if (r->world == 1)
    return 0;
  if (o->rank < 0) {
    snprintf(err, errlen, "world_size %d: each rank needs --rank and --dist (a launcher of "
                          "`scalesweep train` gives them)", r->world);
    return SS_EINVAL;
  }
  trn_dist_opts d = {o->rank,   r->world,         o->dist_addr, o->dist_listen_fd,
                     o->dist_secret, o->dist_timeout_ms};
  int rc = trn_dist_open(&r->dist, &d, err, errlen);
  if (rc)
    return rc;
  if (r->cuda)
    return open_nccl(r, o, err, errlen);
  r->dc = (trn_dcoll){r->dist, &host_ops};
  return 0;
}

void trn_dp_close(run *r) {
  if (r->dc.ops && r->dc.ops->close)
    r->dc.ops->close(r->dc.ctx);
  r->dc = (trn_dcoll){0};
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
  int rc = zero ? r->dc.ops->reduce_scatter_f32(r->dc.ctx, m->grads, r->shard)
                : r->dc.ops->allreduce_f32(r->dc.ctx, m->grads, m->nparams);
  if (rc)
    return dc_failed(r, err, errlen);
  if (trn_dist_allreduce_f64(r->dist, ctl, 3))
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
  if (r->dc.ops->all_gather(r->dc.ctx, m->params, off) ||
      (m->params_low != m->params && r->dc.ops->all_gather(r->dc.ctx, m->params_low, off)))
    return dc_failed(r, err, errlen);
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
    if (r->dc.ops->gather(r->dc.ctx, p[i].mine, p[i].all, p[i].off))
      rc = dc_failed(r, err, errlen);
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
    int bad = trn_dist_broadcast(r->dist, st, sizeof *st);
    if (bad)
      rc = failed(r, err, errlen);
    bad = bad || r->dc.ops->broadcast(r->dc.ctx, m->params, m->nparams * sizeof(float));
    if (!bad && zero) {
      piece p[4];
      int n = pieces(r, &r->optim, root ? &whole : NULL, p);
      for (int i = 0; i < n && !bad; i++)
        bad = r->dc.ops->scatter(r->dc.ctx, p[i].all, p[i].mine, p[i].off) != 0;
    } else if (!bad) {
      bad = r->dc.ops->broadcast(r->dc.ctx, r->optim.mem, r->optim.state_bytes) != 0;
    }
    if (bad && rc != SS_EIO)
      rc = dc_failed(r, err, errlen);
    else if (!bad && !root) {
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

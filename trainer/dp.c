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
 * The reduction overlaps the backward pass: on a rank's last micro-batch of
 * a step, each block's gradient is handed to the collectives as soon as
 * backward has finished it (a bucket: the block's slices of its 12 tensors;
 * the embeddings and the final LayerNorm last), and the step waits for all
 * of them before the optimizer. The CPU twin reduces on a thread of its own,
 * NCCL on a stream of its own. A bucket's sums are, element for element,
 * those of one reduction over the whole gradient, so bucketing changes no
 * bit. SCALESWEEP_DP_OVERLAP=0 turns it off (one reduction after backward),
 * for comparing step times.
 *
 * Checkpoints are those of a single process: rank 0 writes them (gathering
 * the shards first) and reads them (scattering the shards), so a run may
 * resume on another number of ranks. */
#include <pthread.h>
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

/* ---- the CPU twin as the model buffers' collectives (host memory) ---- */

/* A bucket's range waiting for the reduction thread. */
typedef struct host_job {
  float *buf;
  size_t lo, hi;
  const size_t *off; /* shard bounds: reduce-scatter; NULL: all-reduce */
} host_job;

/* The twin's context: the connections (every collective but the buckets
 * runs on the caller's thread) and the thread that reduces buckets. Only
 * one thread uses d at a time: the caller waits (host_reduce_wait) before
 * its next collective. */
typedef struct host_coll {
  trn_dist *d;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  host_job *jobs;
  int njobs, cap, head; /* queued: jobs[head .. njobs) */
  int busy;             /* the thread is reducing one */
  int failed;           /* a reduction failed: the rest are dropped */
  int quit;
} host_coll;

static void *host_reducer(void *arg) {
  host_coll *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (h->head == h->njobs && !h->quit)
      pthread_cond_wait(&h->cv, &h->mu);
    if (h->head == h->njobs)
      break;
    host_job j = h->jobs[h->head++];
    h->busy = 1;
    int skip = h->failed;
    pthread_mutex_unlock(&h->mu);
    int rc = 0;
    if (!skip && !j.off) {
      rc = trn_dist_allreduce_f32(h->d, j.buf + j.lo, j.hi - j.lo);
    } else if (!skip) {
      int world = trn_dist_world(h->d);
      size_t sub[1025];
      for (int i = 0; i <= world; i++) /* the range's part of each shard */
        sub[i] = (j.off[i] < j.lo ? j.lo : j.off[i] > j.hi ? j.hi : j.off[i]) - j.lo;
      sub[0] = 0;
      sub[world] = j.hi - j.lo;
      rc = trn_dist_reduce_scatter_f32(h->d, j.buf + j.lo, sub);
    }
    pthread_mutex_lock(&h->mu);
    h->busy = 0;
    if (rc)
      h->failed = 1;
    if (h->head == h->njobs) {
      h->head = h->njobs = 0;
      pthread_cond_broadcast(&h->cv);
    }
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static const char *host_error(void *c) { return trn_dist_error(((host_coll *)c)->d); }
static int host_allreduce(void *c, float *b, size_t n) {
  return trn_dist_allreduce_f32(((host_coll *)c)->d, b, n);
}
static int host_reduce_scatter(void *c, float *b, const size_t *off) {
  return trn_dist_reduce_scatter_f32(((host_coll *)c)->d, b, off);
}
static int host_all_gather(void *c, void *b, const size_t *off) {
  return trn_dist_all_gather(((host_coll *)c)->d, b, off);
}
static int host_broadcast(void *c, void *b, size_t n) {
  return trn_dist_broadcast(((host_coll *)c)->d, b, n);
}
static int host_gather(void *c, const void *mine, void *full, const size_t *off) {
  return trn_dist_gather(((host_coll *)c)->d, mine, full, off);
}
static int host_scatter(void *c, const void *full, void *mine, const size_t *off) {
  return trn_dist_scatter(((host_coll *)c)->d, full, mine, off);
}

static int host_reduce_start(void *c, float *buf, const size_t (*r)[2], int n, const size_t *off) {
  host_coll *h = c;
  pthread_mutex_lock(&h->mu);
  if (h->njobs + n > h->cap) {
    int cap = h->cap ? h->cap : 64;
    while (cap < h->njobs + n)
      cap *= 2;
    host_job *nj = realloc(h->jobs, (size_t)cap * sizeof *nj);
    if (!nj) {
      h->failed = 1;
      pthread_mutex_unlock(&h->mu);
      return -1;
    }
    h->jobs = nj;
    h->cap = cap;
  }
  for (int i = 0; i < n; i++)
    h->jobs[h->njobs++] = (host_job){buf, r[i][0], r[i][1], off};
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return 0;
}

static int host_reduce_wait(void *c) {
  host_coll *h = c;
  pthread_mutex_lock(&h->mu);
  while (h->head < h->njobs || h->busy)
    pthread_cond_wait(&h->cv, &h->mu);
  int failed = h->failed;
  h->failed = 0;
  pthread_mutex_unlock(&h->mu);
  return failed ? -1 : 0;
}

static void host_close(void *c) {
  host_coll *h = c;
  if (h->started) {
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
  }
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h->jobs);
  free(h);
}

static const kern_coll_ops host_ops = {
    host_error,   host_allreduce, host_reduce_scatter, host_all_gather,  host_broadcast,
    host_gather,  host_scatter,   host_close,          host_reduce_start, host_reduce_wait};

static int open_host(run *r, char *err, size_t errlen) {
  host_coll *h = calloc(1, sizeof *h);
  if (!h) {
    snprintf(err, errlen, "rank %d: out of memory", r->rank);
    return SS_ENOMEM;
  }
  h->d = r->dist;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  if (pthread_create(&h->thread, NULL, host_reducer, h) != 0) {
    host_close(h);
    snprintf(err, errlen, "rank %d: cannot start the gradient reduction thread", r->rank);
    return SS_EIO;
  }
  h->started = 1;
  r->dc = (trn_dcoll){h, &host_ops};
  return 0;
}

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
  return open_host(r, err, errlen);
}

void trn_dp_close(run *r) {
  if (r->dc.ops && r->dc.ops->close)
    r->dc.ops->close(r->dc.ctx);
  r->dc = (trn_dcoll){0};
  trn_dist_close(r->dist);
  r->dist = NULL;
}

int trn_dp_overlap(const run *r) {
  const char *e = getenv("SCALESWEEP_DP_OVERLAP");
  return r->world > 1 && r->dc.ops && r->dc.ops->reduce_start && !(e && !strcmp(e, "0"));
}

/* model.h's grads_ready: the bucket's micro-batch gradient into the step's
 * (when they are two buffers), then its reduction started */
static void bucket_ready(void *ud, const size_t (*ranges)[2], int n) {
  run *r = ud;
  trn_model *m = &r->model;
  if (r->bucket_scale != 0.0f)
    for (int i = 0; i < n; i++)
      r->k.ops->axpy(&r->k, m->grads + ranges[i][0], m->mgrads + ranges[i][0], r->bucket_scale,
                     ranges[i][1] - ranges[i][0], r->bucket_init);
  if (!r->bucket_failed &&
      r->dc.ops->reduce_start(r->dc.ctx, m->grads, ranges, n,
                              r->cfg->optimizer.zero ? r->shard : NULL) != 0)
    r->bucket_failed = 1;
  r->buckets++;
}

void trn_dp_buckets(run *r, float scale, int init) {
  r->bucket_scale = r->model.mgrads != r->model.grads ? scale : 0.0f;
  r->bucket_init = init;
  r->bucket_failed = 0;
  r->bucketed = 1;
  r->model.grads_ready = bucket_ready;
  r->model.grads_ready_ud = r;
}

void trn_dp_buckets_end(run *r) {
  r->model.grads_ready = NULL;
  r->model.grads_ready_ud = NULL;
}

int trn_dp_reduce(run *r, double ctl[3], double *gnorm2, char *err, size_t errlen) {
  trn_model *m = &r->model;
  kern_ctx *k = &r->k;
  if (r->world == 1) {
    *gnorm2 = k->ops->sumsq(k, m->grads, m->nparams);
    return 0;
  }
  int zero = r->cfg->optimizer.zero;
  int rc;
  if (r->bucketed) { /* started during backward: wait for the last bucket */
    r->bucketed = 0;
    rc = r->dc.ops->reduce_wait(r->dc.ctx) || r->bucket_failed;
  } else {
    rc = zero ? r->dc.ops->reduce_scatter_f32(r->dc.ctx, m->grads, r->shard)
              : r->dc.ops->allreduce_f32(r->dc.ctx, m->grads, m->nparams);
  }
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
  size_t off[1025], xoff[1025];
  trn_model *m = &r->model;
  byte_bounds(r, NULL, sizeof(float), off);
  byte_bounds(r, NULL, (size_t)m->k->xbytes, xoff); /* the rounded copy: kern_x */
  if (r->dc.ops->all_gather(r->dc.ctx, m->params, off) ||
      (m->params_low != (kern_x *)m->params &&
       r->dc.ops->all_gather(r->dc.ctx, m->params_low, xoff)))
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

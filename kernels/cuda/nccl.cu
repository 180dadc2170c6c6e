/* Data parallelism over NCCL (cuda_module.h's nccl_* entries): the device
 * half of trainer/dp.c's collectives for a CUDA run, on the backend's
 * stream. NCCL itself is loaded with dlopen when a run of world_size > 1
 * first asks for it (libnccl.so.2 from the toolkit, or from PyTorch's
 * wheels on LD_LIBRARY_PATH), so a single-GPU run never needs it. The
 * communicator is non-blocking: every call and every wait polls NCCL's
 * asynchronous error and a deadline, and a rank that died or stalled aborts
 * the communicator (the caller's run then fails and resumes from its
 * checkpoint) instead of waiting forever.
 *
 * Gradient buckets (reduce_start) go on a stream of the communicator's own,
 * after an event recorded on the backend's stream, so that backward's next
 * kernels run while NCCL sums the last block's gradient; reduce_wait makes
 * the backend's stream wait for them and watches them like any call.
 *
 * NCCL sums in an order of its own choosing: a CUDA run's world_size N is
 * not bit for bit world_size 1 (the CPU twin, trainer/dist.c, is). */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda/internal.cuh"
#include "kernels/cuda_module.h"

/* the NCCL functions used, resolved once */
static struct {
  void *lib;
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*init_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*abort)(ncclComm_t);
  ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
  const char *(*error_string)(ncclResult_t);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)(void);
  ncclResult_t (*group_end)(void);
  ncclResult_t (*get_version)(int *);
} nc;

typedef struct kern__nccl {
  ncclComm_t comm;
  cudaStream_t stream;     /* the backend's */
  cudaStream_t bstream;    /* the buckets' */
  cudaEvent_t ready, done; /* backward's work so far; the buckets' */
  int buckets;             /* started since the last reduce_wait */
  int rank, world, timeout_ms;
  int broken; /* aborted: only close is left */
  char err[512];
} kern__nccl;

static int load_nccl(char *err, size_t errlen) {
  if (nc.lib)
    return 0;
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    snprintf(err, errlen,
             "data parallelism on CUDA needs NCCL: %s\nHINT: put the directory of libnccl.so.2 "
             "(the CUDA toolkit's, or PyTorch's nvidia/nccl/lib) on LD_LIBRARY_PATH",
             dlerror());
    return -1;
  }
#define SYM(field, name)                                                                  \
  if (!(*(void **)&nc.field = dlsym(h, name))) {                                          \
    snprintf(err, errlen, "libnccl.so.2 has no %s (NCCL 2.18 or later is needed)", name); \
    dlclose(h);                                                                           \
    return -1;                                                                            \
  }
  SYM(get_unique_id, "ncclGetUniqueId")
  SYM(init_config, "ncclCommInitRankConfig")
  SYM(destroy, "ncclCommDestroy")
  SYM(abort, "ncclCommAbort")
  SYM(async_error, "ncclCommGetAsyncError")
  SYM(error_string, "ncclGetErrorString")
  SYM(all_reduce, "ncclAllReduce")
  SYM(reduce, "ncclReduce")
  SYM(broadcast, "ncclBroadcast")
  SYM(send, "ncclSend")
  SYM(recv, "ncclRecv")
  SYM(group_start, "ncclGroupStart")
  SYM(group_end, "ncclGroupEnd")
  SYM(get_version, "ncclGetVersion")
#undef SYM
  nc.lib = h;
  return 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The communicator failed or stalled: aborted, with why. */
static int broke(kern__nccl *c, const char *what, ncclResult_t r) {
  if (!c->broken) {
    snprintf(c->err, sizeof c->err, "rank %d of %d: NCCL %s: %s", c->rank, c->world, what,
             r == ncclInProgress ? "no progress within the timeout (a rank died or stalled)"
                                 : nc.error_string(r));
    nc.abort(c->comm);
    c->broken = 1;
  }
  return -1;
}

/* A call's answer: done, or in progress until NCCL says otherwise. */
static int settle(kern__nccl *c, const char *what, ncclResult_t r) {
  int64_t deadline = now_ms() + c->timeout_ms;
  while (r == ncclInProgress && now_ms() < deadline) {
    usleep(100);
    nc.async_error(c->comm, &r);
  }
  return r == ncclSuccess ? 0 : broke(c, what, r);
}

/* A stream's work done, NCCL's errors and the deadline watched. */
static int wait_on(kern__nccl *c, cudaStream_t s, const char *what) {
  int64_t deadline = now_ms() + c->timeout_ms;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady) {
      snprintf(c->err, sizeof c->err, "rank %d: %s: %s", c->rank, what, cudaGetErrorString(e));
      return -1;
    }
    ncclResult_t r;
    nc.async_error(c->comm, &r);
    if (r != ncclSuccess && r != ncclInProgress)
      return broke(c, what, r);
    if (now_ms() > deadline)
      return broke(c, what, ncclInProgress);
    usleep(50);
  }
}

static int wait_stream(kern__nccl *c, const char *what) { return wait_on(c, c->stream, what); }

/* A fused group of calls on c->stream: group_begin opens it (-1 where the
 * communicator is broken or NCCL refuses), group_finish closes it and waits
 * for its work, `what` naming the collective in errors. */
static int group_begin(kern__nccl *c) {
  return c->broken || settle(c, "group", nc.group_start()) ? -1 : 0;
}

static int group_finish(kern__nccl *c, const char *what) {
  if (settle(c, what, nc.group_end()))
    return -1;
  return wait_stream(c, what);
}

static int cu_nccl_unique_id(void *id, char *err, size_t errlen) {
  if (load_nccl(err, errlen))
    return -1;
  ncclUniqueId u;
  ncclResult_t r = nc.get_unique_id(&u);
  if (r != ncclSuccess) {
    snprintf(err, errlen, "ncclGetUniqueId: %s", nc.error_string(r));
    return -1;
  }
  memcpy(id, &u, sizeof u);
  return 0;
}

static void *cu_nccl_open(kern_ctx *k, int rank, int world, const void *id, int timeout_ms,
                          char *err, size_t errlen) {
  if (load_nccl(err, errlen))
    return NULL;
  kern__nccl *c = (kern__nccl *)calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->stream = kern__cu_stream(k);
  c->rank = rank;
  c->world = world;
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 600000;
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  if (settle(c, "init", nc.init_config(&c->comm, world, u, rank, &cfg)) != 0) {
    snprintf(err, errlen, "%s", c->err);
    free(c);
    return NULL;
  }
  cudaError_t e = cudaStreamCreateWithFlags(&c->bstream, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
  if (e == cudaSuccess)
    e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "rank %d: the gradient buckets' stream: %s", rank, cudaGetErrorString(e));
    nc.destroy(c->comm);
    free(c);
    return NULL;
  }
  return c;
}

static void cu_nccl_close(void *ctx) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (!c)
    return;
  if (!c->broken)
    nc.destroy(c->comm);
  if (c->ready)
    cudaEventDestroy(c->ready);
  if (c->done)
    cudaEventDestroy(c->done);
  if (c->bstream)
    cudaStreamDestroy(c->bstream);
  free(c);
}

static const char *cu_nccl_error(void *ctx) { return ((kern__nccl *)ctx)->err; }

static int cu_allreduce_f32(void *ctx, float *buf, size_t n) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (c->broken ||
      settle(c, "all-reduce", nc.all_reduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, c->stream)))
    return -1;
  return wait_stream(c, "all-reduce");
}

/* uneven slices: one reduce per rank, rooted at it, fused in a group */
static int cu_reduce_scatter_f32(void *ctx, float *buf, const size_t *off) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (group_begin(c))
    return -1;
  for (int r = 0; r < c->world; r++)
    nc.reduce(buf + off[r], buf + off[r], off[r + 1] - off[r], ncclFloat32, ncclSum, r, c->comm,
              c->stream);
  return group_finish(c, "reduce-scatter");
}

/* every rank's slice broadcast from it, in place */
static int cu_all_gather(void *ctx, void *buf, const size_t *off) {
  kern__nccl *c = (kern__nccl *)ctx;
  char *b = (char *)buf;
  if (group_begin(c))
    return -1;
  for (int r = 0; r < c->world; r++)
    nc.broadcast(b + off[r], b + off[r], off[r + 1] - off[r], ncclInt8, r, c->comm, c->stream);
  return group_finish(c, "all-gather");
}

static int cu_broadcast(void *ctx, void *buf, size_t bytes) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (c->broken ||
      settle(c, "broadcast", nc.broadcast(buf, buf, bytes, ncclInt8, 0, c->comm, c->stream)))
    return -1;
  return wait_stream(c, "broadcast");
}

static int cu_gather(void *ctx, const void *mine, void *full, const size_t *off) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (group_begin(c))
    return -1;
  size_t n = off[c->rank + 1] - off[c->rank];
  if (c->rank == 0) {
    CUDA_CHECK(
        cudaMemcpyAsync((char *)full + off[0], mine, n, cudaMemcpyDeviceToDevice, c->stream));
    for (int r = 1; r < c->world; r++)
      nc.recv((char *)full + off[r], off[r + 1] - off[r], ncclInt8, r, c->comm, c->stream);
  } else if (n) {
    nc.send(mine, n, ncclInt8, 0, c->comm, c->stream);
  }
  return group_finish(c, "gather");
}

static int cu_scatter(void *ctx, const void *full, void *mine, const size_t *off) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (group_begin(c))
    return -1;
  size_t n = off[c->rank + 1] - off[c->rank];
  if (c->rank == 0) {
    for (int r = 1; r < c->world; r++)
      nc.send((const char *)full + off[r], off[r + 1] - off[r], ncclInt8, r, c->comm, c->stream);
    CUDA_CHECK(
        cudaMemcpyAsync(mine, (const char *)full + off[0], n, cudaMemcpyDeviceToDevice, c->stream));
  } else if (n) {
    nc.recv(mine, n, ncclInt8, 0, c->comm, c->stream);
  }
  return group_finish(c, "scatter");
}

/* a bucket: after backward's work so far, on the buckets' stream, fused in
 * one group (all-reduces, or per range one reduce per rank of its part of
 * that rank's shard) */
static int cu_reduce_start(void *ctx, float *buf, const size_t (*rg)[2], int n, const size_t *off) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (c->broken)
    return -1;
  cudaError_t e = cudaEventRecord(c->ready, c->stream);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->bstream, c->ready, 0);
  if (e != cudaSuccess) {
    snprintf(c->err, sizeof c->err, "rank %d: a gradient bucket: %s", c->rank,
             cudaGetErrorString(e));
    return -1;
  }
  if (settle(c, "group", nc.group_start()))
    return -1;
  for (int i = 0; i < n; i++) {
    size_t lo = rg[i][0], hi = rg[i][1];
    if (!off) {
      nc.all_reduce(buf + lo, buf + lo, hi - lo, ncclFloat32, ncclSum, c->comm, c->bstream);
      continue;
    }
    for (int r = 0; r < c->world; r++) {
      size_t a = off[r] < lo ? lo : off[r] > hi ? hi : off[r];
      size_t b = off[r + 1] < lo ? lo : off[r + 1] > hi ? hi : off[r + 1];
      if (b > a)
        nc.reduce(buf + a, buf + a, b - a, ncclFloat32, ncclSum, r, c->comm, c->bstream);
    }
  }
  if (settle(c, "bucket reduce", nc.group_end()))
    return -1;
  c->buckets++;
  return 0;
}

static int cu_reduce_wait(void *ctx) {
  kern__nccl *c = (kern__nccl *)ctx;
  if (c->broken)
    return -1;
  if (!c->buckets)
    return 0;
  c->buckets = 0;
  if (wait_on(c, c->bstream, "bucket reduce"))
    return -1;
  cudaError_t e = cudaEventRecord(c->done, c->bstream);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->stream, c->done, 0);
  if (e != cudaSuccess) {
    snprintf(c->err, sizeof c->err, "rank %d: waiting for the gradient buckets: %s", c->rank,
             cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

static int cu_nccl_version(void) {
  char err[512];
  int v = 0;
  if (load_nccl(err, sizeof err) != 0 || !nc.get_version || nc.get_version(&v) != ncclSuccess)
    return 0;
  return v;
}

extern "C" const kern_nccl_ops kern__cu_nccl_ops = {
    cu_nccl_unique_id,
    cu_nccl_open,
    {cu_nccl_error, cu_allreduce_f32, cu_reduce_scatter_f32, cu_all_gather, cu_broadcast, cu_gather,
     cu_scatter, cu_nccl_close, cu_reduce_start, cu_reduce_wait},
    cu_nccl_version};

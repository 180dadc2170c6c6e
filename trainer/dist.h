/* Collectives between the ranks of a data-parallel run: the CPU twin.
 *
 * The ranks are processes (on one host, or several) joined over TCP in a
 * star: rank 0 listens, every other rank connects to it and says its rank
 * and the run's secret. Every reduction is done by rank 0 in rank order,
 * element by element: out = in_0, then out += in_1, ..., out += in_{n-1};
 * so its bits are fixed whatever the timing, and a sum over ranks that each
 * hold one micro-batch's scaled gradient is exactly the sum a single
 * process folds over those micro-batches in the same order (train.c).
 *
 * Buffers are host memory: the CPU backend's. The operations are those a
 * GPU run takes from NCCL (all-reduce, reduce-scatter, all-gather,
 * broadcast) plus gather and scatter to and from rank 0 (checkpoints of a
 * sharded optimizer). Every rank must call the same operations in the same
 * order with the same sizes. No call waits forever: a peer that closes its
 * connection (it died) fails the call at once, and a peer silent for
 * timeout_ms fails it then; either way the message names the rank. A
 * failed trn_dist is only good for trn_dist_close. */
#ifndef SS_TRAINER_DIST_H
#define SS_TRAINER_DIST_H

#include <stddef.h>

typedef struct trn_dist trn_dist;

typedef struct trn_dist_opts {
  int rank, world;
  /* HOST:PORT: where rank 0 listens (":PORT" for every address) and the
   * others connect; unused by rank 0 when listen_fd >= 0 */
  const char *addr;
  int listen_fd;      /* rank 0: a socket already listening (a launcher's), or -1 */
  const char *secret; /* every rank's must match (NULL: "") */
  int timeout_ms;     /* the longest wait for a peer (<= 0: 600 s) */
} trn_dist_opts;

/* Joins the ranks: rank 0 waits for all others (at most timeout_ms), the
 * others connect (retrying until rank 0 listens, within timeout_ms). 0 and
 * *out, or SS_EIO / SS_EINVAL with the reason in err. */
int trn_dist_open(trn_dist **out, const trn_dist_opts *o, char *err, size_t errlen);
void trn_dist_close(trn_dist *d);
int trn_dist_rank(const trn_dist *d);
int trn_dist_world(const trn_dist *d);
/* The reason of the last failed call ("" when none failed). */
const char *trn_dist_error(const trn_dist *d);

/* Every call below returns 0, or SS_EIO (trn_dist_error says why). */

/* buf (n values) becomes the sum over ranks, in rank order, on every rank. */
int trn_dist_allreduce_f32(trn_dist *d, float *buf, size_t n);
int trn_dist_allreduce_f64(trn_dist *d, double *buf, size_t n);
/* Rank 0's bytes to every rank. */
int trn_dist_broadcast(trn_dist *d, void *buf, size_t bytes);
/* buf (off[world] values, every rank's full input): on return each rank's
 * slice [off[rank], off[rank + 1]) holds the sum over ranks in rank order;
 * the rest of buf is unspecified. */
int trn_dist_reduce_scatter_f32(trn_dist *d, float *buf, const size_t *off);
/* buf (off[world] bytes): each rank's slice [off[rank], off[rank + 1]) is
 * its own; on return every rank holds every slice. */
int trn_dist_all_gather(trn_dist *d, void *buf, const size_t *off);
/* mine (off[rank + 1] - off[rank] bytes) to rank 0's full buffer at
 * off[rank] (full is only read on rank 0: NULL elsewhere). */
int trn_dist_gather(trn_dist *d, const void *mine, void *full, const size_t *off);
/* The inverse: rank 0's full[off[r] ..] to each rank's mine. */
int trn_dist_scatter(trn_dist *d, const void *full, void *mine, const size_t *off);

#endif

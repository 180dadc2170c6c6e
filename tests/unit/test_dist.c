/* The CPU twin of the collectives (trainer/dist.h), with real processes
 * over loopback: every operation gives each rank the bits of a fold in rank
 * order (values chosen so that another order gives other bits), buffers
 * larger than one chunk, uneven slices; a rank that dies fails the others
 * at once, a silent one after the timeout, and a stranger or a wrong secret
 * at the rendezvous does not stop the ranks from joining. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "trainer/dist.h"

enum { BIG = 3 << 20 }; /* floats: 12 MiB, over the 1 MiB chunk */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* rank r's value at i: small, +big, -big, small, ... so that the order of
 * the sum decides its bits ((3 + 1e8) - 1e8 is 0 in float, (-1e8 + 1e8) + 3
 * is 3) */
static float val32(int r, size_t i) {
  float big = 1e8f * (1.0f + (float)(i % 7) * 0.125f);
  switch (r % 4) {
  case 0:
    return 3.0f + (float)(i % 5) + (float)r;
  case 1:
    return big;
  case 2:
    return -big;
  default:
    return 0.5f * (float)(1 + i % 3);
  }
}

static double val64(int r, size_t i) { return 1e17 * (r % 2 ? -1 : 1) + (double)(r * 3 + i); }

static int listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
      getsockname(fd, (struct sockaddr *)&a, &len))
    abort();
  *port = ntohs(a.sin_port);
  return fd;
}

typedef int (*rank_fn)(trn_dist *d, int rank, int world);

static trn_dist *join(int rank, int world, int lfd, int port, const char *secret, int timeout) {
  char addr[64], err[512];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  trn_dist_opts o = {rank, world, addr, rank == 0 ? lfd : -1, secret, timeout};
  trn_dist *d;
  if (trn_dist_open(&d, &o, err, sizeof err) != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return NULL;
  }
  return d;
}

/* Runs fn on world processes; the number of ranks that failed. */
static int run(int world, rank_fn fn, int timeout) {
  int port, lfd = listener(&port);
  pid_t pid[8];
  for (int r = 0; r < world; r++) {
    if ((pid[r] = fork()) == 0) {
      if (r != 0)
        close(lfd);
      trn_dist *d = join(r, world, lfd, port, "s3cret", timeout);
      int bad = !d || fn(d, r, world);
      trn_dist_close(d);
      _exit(bad);
    }
  }
  close(lfd);
  int failed = 0;
  for (int r = 0; r < world; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return failed;
}

static int ops(trn_dist *d, int rank, int world) {
  int bad = 0;
  /* all-reduce, f32, over several chunks: the fold in rank order, bitwise */
  float *x = malloc(sizeof *x * BIG), *want = malloc(sizeof *want * BIG);
  for (size_t i = 0; i < BIG; i++) {
    x[i] = val32(rank, i);
    want[i] = val32(0, i);
    for (int r = 1; r < world; r++)
      want[i] += val32(r, i);
  }
  if (trn_dist_allreduce_f32(d, x, BIG) || memcmp(x, want, sizeof *x * BIG)) {
    fprintf(stderr, "rank %d: allreduce_f32 differs from the fold in rank order\n", rank);
    bad = 1;
  }
  /* the same values in reverse rank order give other bits: the check can fail */
  int told = 0;
  for (size_t i = 0; i < 64 && !told; i++) {
    float rev = val32(world - 1, i);
    for (int r = world - 2; r >= 0; r--)
      rev += val32(r, i);
    told = rev != want[i];
  }
  if (world > 2 && !told) {
    fprintf(stderr, "the test's values do not tell the order apart\n");
    bad = 1;
  }
  double y[5], yw[5];
  for (int i = 0; i < 5; i++) {
    y[i] = val64(rank, (size_t)i);
    yw[i] = val64(0, (size_t)i);
    for (int r = 1; r < world; r++)
      yw[i] += val64(r, (size_t)i);
  }
  bad |= trn_dist_allreduce_f64(d, y, 5) || memcmp(y, yw, sizeof y);
  /* broadcast */
  char msg[32] = "";
  if (rank == 0)
    snprintf(msg, sizeof msg, "from rank 0");
  bad |= trn_dist_broadcast(d, msg, sizeof msg) || strcmp(msg, "from rank 0");
  /* reduce-scatter with uneven slices: each rank's slice is the fold */
  size_t off[9];
  for (int r = 0; r <= world; r++)
    off[r] = (size_t)r * BIG / (size_t)world + (r > 0 && r < world ? 17 : 0);
  for (size_t i = 0; i < BIG; i++)
    x[i] = val32(rank, i);
  if (trn_dist_reduce_scatter_f32(d, x, off) ||
      memcmp(x + off[rank], want + off[rank], (off[rank + 1] - off[rank]) * sizeof *x)) {
    fprintf(stderr, "rank %d: reduce_scatter slice differs\n", rank);
    bad = 1;
  }
  /* all-gather: every slice everywhere */
  size_t boff[9];
  for (int r = 0; r <= world; r++)
    boff[r] = off[r] * sizeof *x;
  for (size_t i = 0; i < BIG; i++)
    x[i] = i >= off[rank] && i < off[rank + 1] ? want[i] : 0.0f;
  if (trn_dist_all_gather(d, x, boff) || memcmp(x, want, sizeof *x * BIG)) {
    fprintf(stderr, "rank %d: all_gather differs\n", rank);
    bad = 1;
  }
  /* gather to rank 0, scatter back */
  float *full = rank == 0 ? calloc(BIG, sizeof *full) : NULL;
  float *mine = malloc((off[rank + 1] - off[rank]) * sizeof *mine);
  memcpy(mine, want + off[rank], (off[rank + 1] - off[rank]) * sizeof *mine);
  bad |= trn_dist_gather(d, mine, full, boff) != 0;
  if (rank == 0 && memcmp(full, want, sizeof *x * BIG)) {
    fprintf(stderr, "gather differs\n");
    bad = 1;
  }
  memset(mine, 0, (off[rank + 1] - off[rank]) * sizeof *mine);
  bad |= trn_dist_scatter(d, full, mine, boff) != 0;
  if (memcmp(mine, want + off[rank], (off[rank + 1] - off[rank]) * sizeof *mine)) {
    fprintf(stderr, "rank %d: scatter differs\n", rank);
    bad = 1;
  }
  free(full);
  free(mine);
  free(x);
  free(want);
  return bad;
}

/* rank 2 dies before the all-reduce: the others fail at once, naming it */
static int one_dies(trn_dist *d, int rank, int world) {
  (void)world;
  if (rank == 2)
    _exit(0);
  double t0 = now_s();
  float v[4] = {1, 2, 3, 4};
  int rc = trn_dist_allreduce_f32(d, v, 4);
  double took = now_s() - t0;
  const char *e = trn_dist_error(d);
  int named = rank == 0 ? strstr(e, "rank 2 closed its connection") != NULL
                        : strstr(e, "rank 0 closed its connection") != NULL;
  if (rc == 0 || !named || took > 5.0) {
    fprintf(stderr, "rank %d: rc %d after %.2f s: %s\n", rank, rc, took, e);
    return 1;
  }
  if (rank == 0)
    trn_dist_close(d), _exit(0); /* closing tells rank 1 */
  return 0;
}

/* rank 1 says nothing: rank 0 gives up after the timeout, naming it */
static int one_silent(trn_dist *d, int rank, int world) {
  (void)world;
  if (rank == 1) {
    sleep(3);
    return 0;
  }
  double t0 = now_s();
  float v = 1;
  int rc = trn_dist_allreduce_f32(d, &v, 1);
  double took = now_s() - t0;
  if (rc == 0 || !strstr(trn_dist_error(d), "rank 1 sent nothing for 500 ms") || took < 0.4 ||
      took > 2.5) {
    fprintf(stderr, "rank 0: rc %d after %.2f s: %s\n", rc, took, trn_dist_error(d));
    return 1;
  }
  return 0;
}

static int noop(trn_dist *d, int rank, int world) {
  (void)rank;
  (void)world;
  float v = 1;
  return trn_dist_allreduce_f32(d, &v, 1) || v != 2.0f;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  for (int world = 1; world <= 4; world++) {
    int failed = run(world, ops, 60000);
    CHECK_INT_EQ(failed, 0);
    printf("world %d: all-reduce, broadcast, reduce-scatter, all-gather, gather, scatter: %s\n",
           world, failed ? "FAILED" : "the fold in rank order, bitwise");
  }
  CHECK_INT_EQ(run(3, one_dies, 60000), 0);
  CHECK_INT_EQ(run(2, one_silent, 500), 0);

  /* strangers at the rendezvous: one says nothing useful, one has the
   * wrong secret, one claims a rank out of range; rank 1 still joins */
  int port, lfd = listener(&port);
  pid_t root = fork();
  if (root == 0) {
    trn_dist *d = join(0, 2, lfd, port, "s3cret", 20000);
    _exit(!d || noop(d, 0, 2));
  }
  close(lfd);
  int s1 = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(s1, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(write(s1, "GET / HTTP/1.0\r\n\r\n", 18) == 18);
  pid_t wrong = fork();
  if (wrong == 0) {
    trn_dist *d = join(1, 2, -1, port, "not-it", 20000);
    _exit(d != NULL); /* must be refused */
  }
  int st;
  waitpid(wrong, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  pid_t right = fork();
  if (right == 0) {
    trn_dist *d = join(1, 2, -1, port, "s3cret", 20000);
    _exit(!d || noop(d, 1, 2));
  }
  waitpid(right, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  waitpid(root, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(s1);
  printf("a stranger and a wrong secret at the rendezvous are closed; the rank joins\n");
  CHECK_DONE();
}

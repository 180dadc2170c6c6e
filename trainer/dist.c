/* The CPU twin of the collectives (dist.h): a star over TCP, rank 0 at its
 * centre, every reduction folded by rank 0 in rank order. */
#include "trainer/dist.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/token.h"

#define DIST_MAGIC 0x53534450u /* "PDSS": a scalesweep rank's hello */
#define DIST_MAX_SECRET 256
#define DIST_CHUNK ((size_t)1 << 20) /* bytes folded per receive */

struct trn_dist {
  int rank, world;
  int timeout_ms;
  int *fd;     /* rank 0: fd[r] of rank r (fd[0] unused); others: fd[0], rank 0's */
  char *chunk; /* rank 0: DIST_CHUNK bytes to receive into before folding */
  char err[512];
};

/* the hello a rank sends rank 0 */
typedef struct hello {
  uint32_t magic;
  int32_t rank, world;
  uint32_t secret_len;
} hello;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(trn_dist *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(trn_dist *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->err, sizeof d->err, fmt, ap);
  va_end(ap);
  return SS_EIO;
}

/* Moves n bytes to or from the peer rank `peer` on fd, waiting at most
 * timeout_ms between two pieces of progress. */
static int xfer(trn_dist *d, int fd, int peer, void *buf, size_t n, int out) {
  char *p = buf;
  int64_t deadline = now_ms() + d->timeout_ms;
  while (n > 0) {
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      deadline = now_ms() + d->timeout_ms;
      continue;
    }
    if (k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE)))
      return fail(d, "rank %d closed its connection (it stopped or died)", peer);
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return fail(d, "rank %d: %s: %s", peer, out ? "send" : "receive", strerror(errno));
    int64_t left = deadline - now_ms();
    if (left <= 0)
      return fail(d, "rank %d sent nothing for %d ms (timeout; is it alive?)", peer,
                  d->timeout_ms);
    struct pollfd pfd = {.fd = fd, .events = out ? POLLOUT : POLLIN};
    if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
      return fail(d, "poll: %s", strerror(errno));
  }
  return 0;
}

static int put(trn_dist *d, int peer, const void *buf, size_t n) {
  return xfer(d, d->fd[d->rank == 0 ? peer : 0], peer, (void *)buf, n, 1);
}

static int get(trn_dist *d, int peer, void *buf, size_t n) {
  return xfer(d, d->fd[d->rank == 0 ? peer : 0], peer, buf, n, 0);
}

/* ---- joining ------------------------------------------------------------------ */

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static int listen_on(trn_dist *d, const char *addr) {
  char host[256], port[16];
  int p;
  if (addr_split(addr, "0.0.0.0", 0, host, sizeof host, &p, NULL, 0) != 0)
    return fail(d, "--dist %s: expected HOST:PORT", addr), -1;
  snprintf(port, sizeof port, "%d", p);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *ai;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc)
    return fail(d, "--dist %s: %s", addr, gai_strerror(rc)), -1;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    fail(d, "--dist %s: cannot listen: %s", addr, strerror(errno));
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

/* Reads one newcomer's hello: its rank, or -1 (then it is closed). A
 * stranger, a wrong secret or a rank seen twice does not end the wait. */
static int admit(trn_dist *d, int fd, const char *secret) {
  hello h;
  char s[DIST_MAX_SECRET + 1];
  int saved = d->timeout_ms;
  d->timeout_ms = saved < 10000 ? saved : 10000; /* a silent stranger is not waited for */
  int ok = xfer(d, fd, -1, &h, sizeof h, 0) == 0 && h.magic == DIST_MAGIC &&
           h.secret_len <= DIST_MAX_SECRET && xfer(d, fd, -1, s, h.secret_len, 0) == 0;
  d->timeout_ms = saved;
  if (!ok) {
    fprintf(stderr, "scalesweep train: rank 0: a connection that is no rank of this run; closed\n");
    return -1;
  }
  s[h.secret_len] = '\0';
  const char *why = h.world != d->world ? "another world size"
                    : h.rank < 1 || h.rank >= d->world ? "a rank out of range"
                    : d->fd[h.rank] >= 0               ? "a rank already joined"
                    : (secret[0] || s[0]) && !token_equal(secret, s) ? "a wrong secret"
                                                       : NULL;
  if (why) {
    fprintf(stderr, "scalesweep train: rank 0: a peer claiming rank %d of %d with %s; closed\n",
            h.rank, h.world, why);
    return -1;
  }
  return h.rank;
}

static int open_root(trn_dist *d, const trn_dist_opts *o) {
  int lfd = o->listen_fd >= 0 ? o->listen_fd : listen_on(d, o->addr ? o->addr : "");
  if (lfd < 0)
    return SS_EIO;
  int64_t deadline = now_ms() + d->timeout_ms;
  int joined = 1, rc = 0;
  while (joined < d->world) {
    int64_t left = deadline - now_ms();
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (left <= 0 || (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)) {
      rc = fail(d, "rank 0: %d of %d ranks joined within %d ms", joined, d->world, d->timeout_ms);
      break;
    }
    if (pfd.revents & (POLLNVAL | POLLERR)) {
      rc = fail(d, "rank 0: the listening socket is not usable (%s)",
                pfd.revents & POLLNVAL ? "not open" : "error");
      break;
    }
    if (!(pfd.revents & POLLIN))
      continue;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      continue;
    tune(fd);
    int r = admit(d, fd, o->secret ? o->secret : "");
    char ok = 1;
    if (r < 0 || xfer(d, fd, r, &ok, 1, 1) != 0) {
      close(fd);
      continue;
    }
    d->fd[r] = fd;
    joined++;
  }
  close(lfd);
  d->err[0] = rc ? d->err[0] : '\0';
  return rc;
}

static int open_peer(trn_dist *d, const trn_dist_opts *o) {
  char host[256], port[16];
  int p;
  if (!o->addr || addr_split(o->addr, NULL, 1, host, sizeof host, &p, NULL, 0) != 0)
    return fail(d, "--dist %s: expected HOST:PORT", o->addr ? o->addr : "(none)");
  snprintf(port, sizeof port, "%d", p);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc)
    return fail(d, "--dist %s: %s", o->addr, gai_strerror(rc));
  int64_t deadline = now_ms() + d->timeout_ms;
  int fd = -1, e = 0;
  while (fd < 0 && now_ms() < deadline) { /* rank 0 may not listen yet */
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      e = errno;
      close(fd);
      fd = -1;
      usleep(50000);
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return fail(d, "rank %d: cannot reach rank 0 at %s within %d ms: %s", d->rank, o->addr,
                d->timeout_ms, strerror(e ? e : ETIMEDOUT));
  tune(fd);
  d->fd[0] = fd;
  const char *s = o->secret ? o->secret : "";
  hello h = {DIST_MAGIC, d->rank, d->world, (uint32_t)strlen(s)};
  char ok = 0;
  if (h.secret_len > DIST_MAX_SECRET)
    return fail(d, "the run's secret is over %d bytes", DIST_MAX_SECRET);
  if (put(d, 0, &h, sizeof h) || put(d, 0, s, h.secret_len) || get(d, 0, &ok, 1) || ok != 1) {
    char why[sizeof d->err];
    snprintf(why, sizeof why, "%s", d->err[0] ? d->err : "refused");
    return fail(d,
                "rank %d: rank 0 at %s did not admit it (%s)\nHINT: a wrong secret or world "
                "size, or another run's rank 0 at that address",
                d->rank, o->addr, why);
  }
  return 0;
}

int trn_dist_open(trn_dist **out, const trn_dist_opts *o, char *err, size_t errlen) {
  *out = NULL;
  if (o->world < 1 || o->rank < 0 || o->rank >= o->world) {
    snprintf(err, errlen, "rank %d of %d: expected 0 <= rank < world size", o->rank, o->world);
    return SS_EINVAL;
  }
  trn_dist *d = calloc(1, sizeof *d);
  if (!d || !(d->fd = malloc(sizeof *d->fd * (size_t)o->world)) ||
      (o->rank == 0 && !(d->chunk = malloc(DIST_CHUNK)))) {
    if (d)
      free(d->fd);
    free(d);
    snprintf(err, errlen, "out of memory");
    return SS_ENOMEM;
  }
  for (int r = 0; r < o->world; r++)
    d->fd[r] = -1;
  d->rank = o->rank;
  d->world = o->world;
  d->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 600000;
  int rc = d->world == 1 ? 0 : d->rank == 0 ? open_root(d, o) : open_peer(d, o);
  if (rc) {
    snprintf(err, errlen, "%s", d->err);
    trn_dist_close(d);
    return rc;
  }
  *out = d;
  return 0;
}

void trn_dist_close(trn_dist *d) {
  if (!d)
    return;
  for (int r = 0; r < d->world; r++)
    if (d->fd[r] >= 0)
      close(d->fd[r]);
  free(d->fd);
  free(d->chunk);
  free(d);
}

int trn_dist_rank(const trn_dist *d) { return d->rank; }
int trn_dist_world(const trn_dist *d) { return d->world; }
const char *trn_dist_error(const trn_dist *d) { return d->err; }

/* ---- the operations -------------------------------------------------------- */

/* Rank 0: acc (n values of size es) += rank r's, received a chunk at a
 * time and folded element by element. */
static int fold_from(trn_dist *d, int r, void *acc, size_t n, size_t es) {
  size_t per = DIST_CHUNK / es;
  for (size_t at = 0; at < n; at += per) {
    size_t k = n - at < per ? n - at : per;
    if (get(d, r, d->chunk, k * es))
      return SS_EIO;
    if (es == sizeof(float)) {
      float *a = (float *)acc + at;
      const float *b = (const float *)d->chunk;
      for (size_t i = 0; i < k; i++)
        a[i] += b[i];
    } else {
      double *a = (double *)acc + at;
      const double *b = (const double *)d->chunk;
      for (size_t i = 0; i < k; i++)
        a[i] += b[i];
    }
  }
  return 0;
}

static int allreduce(trn_dist *d, void *buf, size_t n, size_t es) {
  if (d->world == 1)
    return 0;
  if (d->rank != 0)
    return put(d, 0, buf, n * es) || get(d, 0, buf, n * es) ? SS_EIO : 0;
  for (int r = 1; r < d->world; r++)
    if (fold_from(d, r, buf, n, es))
      return SS_EIO;
  for (int r = 1; r < d->world; r++)
    if (put(d, r, buf, n * es))
      return SS_EIO;
  return 0;
}

int trn_dist_allreduce_f32(trn_dist *d, float *buf, size_t n) {
  return allreduce(d, buf, n, sizeof(float));
}

int trn_dist_allreduce_f64(trn_dist *d, double *buf, size_t n) {
  return allreduce(d, buf, n, sizeof(double));
}

int trn_dist_broadcast(trn_dist *d, void *buf, size_t bytes) {
  if (d->rank != 0)
    return d->world == 1 ? 0 : get(d, 0, buf, bytes);
  for (int r = 1; r < d->world; r++)
    if (put(d, r, buf, bytes))
      return SS_EIO;
  return 0;
}

int trn_dist_reduce_scatter_f32(trn_dist *d, float *buf, const size_t *off) {
  size_t n = off[d->world];
  if (d->world == 1)
    return 0;
  if (d->rank != 0) {
    float *mine = buf + off[d->rank];
    return put(d, 0, buf, n * sizeof *buf) ||
                   get(d, 0, mine, (off[d->rank + 1] - off[d->rank]) * sizeof *buf)
               ? SS_EIO
               : 0;
  }
  for (int r = 1; r < d->world; r++)
    if (fold_from(d, r, buf, n, sizeof *buf))
      return SS_EIO;
  for (int r = 1; r < d->world; r++)
    if (put(d, r, buf + off[r], (off[r + 1] - off[r]) * sizeof *buf))
      return SS_EIO;
  return 0;
}

int trn_dist_gather(trn_dist *d, const void *mine, void *full, const size_t *off) {
  if (d->rank != 0)
    return put(d, 0, mine, off[d->rank + 1] - off[d->rank]);
  memmove((char *)full + off[0], mine, off[1] - off[0]);
  for (int r = 1; r < d->world; r++)
    if (get(d, r, (char *)full + off[r], off[r + 1] - off[r]))
      return SS_EIO;
  return 0;
}

int trn_dist_scatter(trn_dist *d, const void *full, void *mine, const size_t *off) {
  if (d->rank != 0)
    return get(d, 0, mine, off[d->rank + 1] - off[d->rank]);
  for (int r = 1; r < d->world; r++)
    if (put(d, r, (const char *)full + off[r], off[r + 1] - off[r]))
      return SS_EIO;
  memmove(mine, (const char *)full + off[0], off[1] - off[0]);
  return 0;
}

int trn_dist_all_gather(trn_dist *d, void *buf, const size_t *off) {
  char *b = buf;
  if (d->world == 1)
    return 0;
  if (d->rank != 0)
    return put(d, 0, b + off[d->rank], off[d->rank + 1] - off[d->rank]) ||
                   get(d, 0, b, off[d->world])
               ? SS_EIO
               : 0;
  for (int r = 1; r < d->world; r++)
    if (get(d, r, b + off[r], off[r + 1] - off[r]))
      return SS_EIO;
  return trn_dist_broadcast(d, b, off[d->world]);
}

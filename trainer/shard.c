#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "trainer/data.h"

static void put_le32(uint8_t *b, int32_t v) {
  uint32_t u = (uint32_t)v;
  b[0] = (uint8_t)u;
  b[1] = (uint8_t)(u >> 8);
  b[2] = (uint8_t)(u >> 16);
  b[3] = (uint8_t)(u >> 24);
}

static int write_all(int fd, const uint8_t *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    buf += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Tokens go out through a fixed buffer in little-endian byte order, so the
 * file is the same on every host. */
static int write_shard_fd(int fd, const uint16_t *tokens, size_t n) {
  uint8_t header[TRN_SHARD_HEADER_INTS * 4] = {0};
  put_le32(header, TRN_SHARD_MAGIC);
  put_le32(header + 4, TRN_SHARD_VERSION);
  put_le32(header + 8, (int32_t)n);
  if (write_all(fd, header, sizeof header) < 0)
    return -1;
  enum { CHUNK = 1 << 15 };
  uint8_t buf[CHUNK];
  size_t done = 0;
  while (done < n) {
    size_t m = n - done < CHUNK / 2 ? n - done : CHUNK / 2;
    for (size_t i = 0; i < m; i++) {
      buf[2 * i] = (uint8_t)tokens[done + i];
      buf[2 * i + 1] = (uint8_t)(tokens[done + i] >> 8);
    }
    if (write_all(fd, buf, 2 * m) < 0)
      return -1;
    done += m;
  }
  return 0;
}

int trn_shard_write(const char *path, const uint16_t *tokens, size_t n,
                    char *err, size_t errlen) {
  if (n > INT32_MAX) {
    snprintf(err, errlen,
             "%s: %zu tokens do not fit one shard (its header counts at most "
             "%d)",
             path, n, INT32_MAX);
    return SS_EINVAL;
  }
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  if (!tmp) {
    snprintf(err, errlen, "%s: out of memory", path);
    return SS_ENOMEM;
  }
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);

  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(e));
    free(tmp);
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  const char *what = "write failed";
  int bad = write_shard_fd(fd, tokens, n) < 0;
  if (!bad && fsync(fd) < 0) {
    bad = 1;
    what = "fsync failed";
  }
  int e = errno;
  if (close(fd) < 0 && !bad) {
    bad = 1;
    what = "close failed";
    e = errno;
  }
  if (!bad && rename(tmp, path) < 0) {
    bad = 1;
    what = "rename to the final name failed";
    e = errno;
  }
  if (bad) {
    snprintf(err, errlen, "%s: %s: %s", tmp, what, strerror(e));
    unlink(tmp);
    free(tmp);
    return SS_EIO;
  }
  free(tmp);
  return 0;
}

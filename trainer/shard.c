#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "trainer/data.h"

static void put_le32(uint8_t *b, int32_t v) {
  uint32_t u = (uint32_t)v;
  b[0] = (uint8_t)u;
  b[1] = (uint8_t)(u >> 8);
  b[2] = (uint8_t)(u >> 16);
  b[3] = (uint8_t)(u >> 24);
}

/* Tokens go out through a fixed buffer in little-endian byte order, so the
 * file is the same on every host. */
static void write_shard(fio_atomic *f, const uint16_t *tokens, size_t n) {
  uint8_t header[TRN_SHARD_HEADER_INTS * 4] = {0};
  put_le32(header, TRN_SHARD_MAGIC);
  put_le32(header + 4, TRN_SHARD_VERSION);
  put_le32(header + 8, (int32_t)n);
  fio_atomic_write(f, header, sizeof header);
  enum { CHUNK = 1 << 15 };
  uint8_t buf[CHUNK];
  size_t done = 0;
  while (done < n) {
    size_t m = n - done < CHUNK / 2 ? n - done : CHUNK / 2;
    for (size_t i = 0; i < m; i++) {
      buf[2 * i] = (uint8_t)tokens[done + i];
      buf[2 * i + 1] = (uint8_t)(tokens[done + i] >> 8);
    }
    fio_atomic_write(f, buf, 2 * m);
    done += m;
  }
}

int trn_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen) {
  if (n > INT32_MAX) {
    snprintf(err, errlen,
             "%s: %zu tokens do not fit one shard (its header counts at most "
             "%d)",
             path, n, INT32_MAX);
    return SS_EINVAL;
  }
  fio_atomic f;
  int rc = fio_atomic_open(&f, path, err, errlen);
  if (rc)
    return rc;
  write_shard(&f, tokens, n);
  return fio_atomic_commit(&f, err, errlen);
}

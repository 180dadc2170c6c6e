#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"

int fio_atomic_open(fio_atomic *a, const char *path, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%d", path, (int)getpid());
  a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (a->fd < 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot create: %s", a->tmp, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  return 0;
}

void fio_atomic_write(fio_atomic *a, const void *p, size_t n) {
  const char *c = p;
  while (n && !a->failed) {
    ssize_t w = write(a->fd, c, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      a->failed = 1;
      a->err = errno;
      return;
    }
    c += w;
    n -= (size_t)w;
  }
}

int fio_atomic_commit(fio_atomic *a, char *err, size_t errlen) {
  const char *what = "write failed";
  int bad = a->failed, e = a->err;
  if (!bad && fsync(a->fd) != 0) {
    bad = 1;
    e = errno;
    what = "fsync failed";
  }
  if (close(a->fd) != 0 && !bad) {
    bad = 1;
    e = errno;
    what = "close failed";
  }
  a->fd = -1;
  if (!bad && rename(a->tmp, a->path) != 0) {
    bad = 1;
    e = errno;
    what = "rename to the final name failed";
  }
  if (bad) {
    unlink(a->tmp);
    snprintf(err, errlen, "%s: %s: %s", a->path, what, strerror(e));
    return SS_EIO;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", a->path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd); /* make the rename itself durable */
    close(dfd);
  }
  return 0;
}

void fio_atomic_abort(fio_atomic *a) {
  if (a->fd >= 0)
    close(a->fd);
  a->fd = -1;
  unlink(a->tmp);
}

#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int fio_read_all(const char *path, char **out, size_t *len, char *err, size_t errlen) {
  *out = NULL;
  int is_stdin = !strcmp(path, "-");
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  size_t cap = 1 << 16, n = 0, r;
  char *text = malloc(cap);
  while (text && (r = fread(text + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (n + 1 >= cap) {
      char *t = realloc(text, cap * 2);
      if (!t) {
        free(text);
        text = NULL;
        break;
      }
      text = t;
      cap *= 2;
    }
  }
  int bad = ferror(f);
  if (!is_stdin)
    fclose(f);
  if (!text) {
    snprintf(err, errlen, "%s: out of memory reading it", path);
    return SS_ENOMEM;
  }
  if (bad) {
    free(text);
    snprintf(err, errlen, "%s: read error", path);
    return SS_EIO;
  }
  text[n] = 0;
  *out = text;
  if (len)
    *len = n;
  return 0;
}

int fio_mkdirs(const char *path, unsigned mode) {
  char tmp[4096];
  if (!*path) {
    errno = ENOENT;
    return -1;
  }
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *s = tmp + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    int rc = mkdir(tmp, 0755);
    *s = '/';
    if (rc != 0 && errno != EEXIST)
      return -1;
  }
  return mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST ? -1 : 0;
}

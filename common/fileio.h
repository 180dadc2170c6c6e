/* Crash-safe file writing: data goes to PATH.tmp.PID, is fsync'ed, and is
 * renamed over PATH only when complete (then the directory is fsync'ed), so
 * a crash at any point leaves either the old file or the new one, never a
 * torn one. Used for checkpoints and token shards. */
#ifndef SS_COMMON_FILEIO_H
#define SS_COMMON_FILEIO_H

#include <stddef.h>

typedef struct fio_atomic {
  int fd;
  int failed; /* a write failed; commit will report it */
  int err;    /* errno of the first failure */
  char path[4096];
  char tmp[4128];
} fio_atomic;

/* Creates the temporary file. SS_ENOENT/SS_EIO with a message on failure. */
int fio_atomic_open(fio_atomic *a, const char *path, char *err, size_t errlen);

/* Appends n bytes (retrying short writes and EINTR). Errors are remembered
 * and reported by fio_atomic_commit, so callers can write without checking. */
void fio_atomic_write(fio_atomic *a, const void *p, size_t n);

/* fsync, close, rename over the final path, fsync the directory. On any
 * failure the temporary file is removed, the old file (if any) is left as it
 * was, and SS_EIO comes back with the step and the system's reason. */
int fio_atomic_commit(fio_atomic *a, char *err, size_t errlen);

/* Gives up: closes and removes the temporary file. */
void fio_atomic_abort(fio_atomic *a);

/* Reads a whole file ("-": standard input) into a NUL-terminated malloc'd
 * buffer; *len (may be NULL) gets its length. Returns 0, or SS_ENOENT /
 * SS_EIO / SS_ENOMEM with "PATH: cannot open: reason" or "PATH: read error"
 * in err. */
int fio_read_all(const char *path, char **out, size_t *len, char *err, size_t errlen);

/* mkdir -p: creates path and any missing parents; the parents get mode
 * 0755, path itself mode (both less the umask; an existing directory is left
 * as it is). Returns 0, or -1 with errno set (ENOENT for ""). */
int fio_mkdirs(const char *path, unsigned mode);

#endif

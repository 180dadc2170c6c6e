/* Token-shard patterns confined to allowed directories (common/shardpath.c):
 * the one check the scheduler (a spec's data.train / data.val), the trainer
 * (`scalesweep train --data-dir`) and the fuzz harness share.
 *
 * A pattern is a path whose last component alone may be a glob() pattern
 * (* ? [...] and backslash escapes); its directory components are literal
 * and none is "." or "..". Every match is realpath()'d (symlinks resolved)
 * and must be a regular file under one of the allowed directories, which
 * are realpath()'d too; "under" compares whole components (/data is not a
 * prefix of /database).
 *
 * Messages never describe a file outside the allowed directories: not its
 * size, not its bytes, not whether it exists ("outside the allowed data
 * directories" whether or not it does). They do not repeat the pattern
 * either: the caller prefixes where (a JSON path) and what (the pattern).
 *
 * Pure C (glob, realpath, stat): no libuv, no JSON, no global state; safe to
 * call from any thread (glob is called without GLOB_TILDE, so without the
 * passwd lookups that make it MT-unsafe). */
#ifndef SS_COMMON_SHARDPATH_H
#define SS_COMMON_SHARDPATH_H

#include <stddef.h>

/* ndirs for "no confinement": anything the caller can read (direct CLI use
 * of `scalesweep train` without --data-dir). */
#define SPATH_ANY (-1)

/* The matches of a pattern, in glob() order (sorted). Owns every string. */
typedef struct spath_list {
  size_t n;
  char **match;    /* (n) as glob() gave them */
  char **resolved; /* (n) realpath() of each: what to open */
} spath_list;

/* Expands pattern into *out (zeroed first, and empty again after an error;
 * free it with spath_list_free). dirs[0..ndirs) are the allowed directories; ndirs 0
 * refuses every pattern, SPATH_ANY (dirs ignored) confines nothing but
 * still needs a match. Returns 0, SS_EINVAL (a refused pattern: wildcards
 * or . / .. in a directory component, outside the directories, a match
 * that is not a regular file), SS_ENOENT (no match), SS_ENOMEM or SS_EIO,
 * with the reason in err. */
int spath_expand(const char *pattern, const char *const *dirs, int ndirs, spath_list *out,
                 char *err, size_t errlen);

/* spath_expand without keeping the matches. */
int spath_check(const char *pattern, const char *const *dirs, int ndirs, char *err, size_t errlen);

void spath_list_free(spath_list *l);

/* 1 when the canonical path `path` is dir or lies under it (both
 * absolute, without trailing slashes except the root "/"); else 0. */
int spath_is_under(const char *path, const char *dir);

/* 1 when the file open on fd is (by /proc/self/fd) under one of the
 * directories (realpath()'d here), 0 when it is not, -1 when that cannot be
 * told (no /proc). Closes the window between spath_expand and open(): a
 * component swapped for a symlink in between is caught. */
int spath_fd_under(int fd, const char *const *dirs, int ndirs);

#endif

#include "common/shardpath.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"

#define OUTSIDE "outside the allowed data directories"

int spath_is_under(const char *path, const char *dir) {
  if (!strcmp(dir, "/"))
    return path[0] == '/';
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

/* The canonical forms of the allowed directories (those that exist), and
 * their given forms without repeated or trailing slashes: a pattern is
 * first compared with either as text, so that a directory outside is
 * refused before anything is asked of the file system about it. */
typedef struct dirset {
  int n;
  char **real; /* (n) realpath()'d, or NULL when it does not resolve */
  char **text; /* (n) */
} dirset;

static void tidy(char *p) {
  char *o = p;
  for (const char *c = p; *c; c++)
    if (!(c[0] == '/' && c[1] == '/'))
      *o++ = *c;
  *o = '\0';
  while (o - p > 1 && o[-1] == '/')
    *--o = '\0';
}

static void dirset_free(dirset *d) {
  for (int i = 0; i < d->n; i++) {
    free(d->real[i]);
    free(d->text[i]);
  }
  free(d->real);
  free(d->text);
}

static int dirset_init(dirset *d, const char *const *dirs, int ndirs) {
  memset(d, 0, sizeof *d);
  d->real = calloc((size_t)ndirs + 1, sizeof *d->real);
  d->text = calloc((size_t)ndirs + 1, sizeof *d->text);
  if (!d->real || !d->text) {
    dirset_free(d);
    return SS_ENOMEM;
  }
  for (int i = 0; i < ndirs; i++, d->n++) {
    d->real[i] = dirs[i] && dirs[i][0] ? realpath(dirs[i], NULL) : NULL;
    d->text[i] = strdup(dirs[i] ? dirs[i] : "");
    if (!d->text[i]) {
      d->n++;
      dirset_free(d);
      return SS_ENOMEM;
    }
    tidy(d->text[i]);
  }
  return 0;
}

static int under_real(const dirset *d, const char *path) {
  for (int i = 0; i < d->n; i++)
    if (d->real[i] && spath_is_under(path, d->real[i]))
      return 1;
  return 0;
}

static int under_text(const dirset *d, const char *path) {
  for (int i = 0; i < d->n; i++)
    if ((d->text[i][0] && spath_is_under(path, d->text[i])) ||
        (d->real[i] && spath_is_under(path, d->real[i])))
      return 1;
  return 0;
}

/* The pattern's text: no . or .. component, no wildcard before the last
 * '/', a file-name component after it. Returns the length of the
 * directory part (0 for a pattern without '/'; 1 for "/x"). */
static int check_text(const char *p, size_t *dirlen, char *err, size_t errlen) {
  size_t len = strlen(p);
  if (!len) {
    err_setf(err, errlen, "an empty path, expected a token-shard file or pattern");
    return SS_EINVAL;
  }
  if (len >= PATH_MAX) {
    err_setf(err, errlen, "a path of %zu bytes, expected under %d", len, PATH_MAX);
    return SS_EINVAL;
  }
  const char *slash = strrchr(p, '/');
  if (slash && slash[1] == '\0') {
    err_setf(err, errlen, "ends with '/', expected a file name or pattern after the directory");
    return SS_EINVAL;
  }
  for (const char *c = p; *c;) {
    while (*c == '/')
      c++;
    size_t n = strcspn(c, "/");
    if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
      err_setf(err, errlen, "has a '%.*s' component, expected a path without . or ..", (int)n, c);
      return SS_EINVAL;
    }
    c += n;
  }
  *dirlen = slash ? (size_t)(slash - p) + (slash == p) : 0;
  size_t bad = strcspn(p, "*?[\\");
  if (slash && bad < (size_t)(slash - p)) {
    err_setf(err, errlen,
             "has a wildcard or escape ('%c') in a directory component, expected literal "
             "directories (only the file name may be a pattern)",
             p[bad]);
    return SS_EINVAL;
  }
  return 0;
}

static int list_push(spath_list *l, const char *match, char *resolved) {
  char **m = realloc(l->match, (l->n + 1) * sizeof *m);
  if (m)
    l->match = m;
  char **r = realloc(l->resolved, (l->n + 1) * sizeof *r);
  if (r)
    l->resolved = r;
  char *copy = strdup(match);
  if (!m || !r || !copy) {
    free(copy);
    free(resolved);
    return SS_ENOMEM;
  }
  l->match[l->n] = copy;
  l->resolved[l->n++] = resolved;
  return 0;
}

/* The directory part of the pattern (absolute, or joined to the working
 * directory) as text, then resolved: it must lie under an allowed
 * directory both ways before glob() reads it. */
static int check_dir(const char *p, size_t dirlen, const dirset *d, char *err, size_t errlen) {
  char dir[PATH_MAX * 2 + 2];
  if (p[0] == '/') {
    snprintf(dir, sizeof dir, "%.*s", (int)dirlen, p);
  } else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
      err_setf(err, errlen, "cannot tell the working directory: %s", strerror(errno));
      return SS_EIO;
    }
    snprintf(dir, sizeof dir, "%s/%.*s", cwd, (int)dirlen, p);
  }
  tidy(dir);
  if (!under_text(d, dir)) {
    err_setf(err, errlen, OUTSIDE);
    return SS_EINVAL;
  }
  char *real = realpath(dir, NULL);
  if (!real) {
    int e = errno;
    err_setf(err, errlen, "no files match (expected token shards)");
    return e == ENOMEM ? SS_ENOMEM : SS_ENOENT;
  }
  int ok = under_real(d, real);
  free(real);
  if (!ok) {
    err_setf(err, errlen, OUTSIDE);
    return SS_EINVAL;
  }
  return 0;
}

static int expand(const char *pattern, const dirset *d, int confined, spath_list *out, char *err,
                  size_t errlen) {
  glob_t g;
  /* no GLOB_ERR: an unreadable directory is "no match", the user's mistake;
   * no GLOB_TILDE, GLOB_BRACE: the pattern means what it says */
  int grc = glob(pattern, 0, NULL, &g);
  if (grc == GLOB_NOMATCH) {
    err_setf(err, errlen, "no files match (expected token shards)");
    globfree(&g);
    return SS_ENOENT;
  }
  if (grc != 0) {
    err_setf(err, errlen, "%s",
             grc == GLOB_NOSPACE ? "out of memory while matching"
                                 : "cannot read a directory while matching");
    globfree(&g);
    return grc == GLOB_NOSPACE ? SS_ENOMEM : SS_EIO;
  }
  int rc = 0;
  for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
    const char *m = g.gl_pathv[i];
    char *real = realpath(m, NULL);
    struct stat st;
    if (confined && (!real || !under_real(d, real))) {
      /* a symlink in an allowed directory that leads out (or nowhere) */
      err_setf(err, errlen, "a match resolves " OUTSIDE);
      rc = SS_EINVAL;
    } else if (confined && (stat(real, &st) != 0 || !S_ISREG(st.st_mode))) {
      err_setf(err, errlen, "'%.200s' matches, but is not a regular file", m);
      rc = SS_EINVAL;
    }
    if (rc) {
      free(real);
      break;
    }
    if (!real && !(real = strdup(m))) /* unconfined: glob's name as it is */
      rc = SS_ENOMEM;
    else
      rc = list_push(out, m, real);
    if (rc == SS_ENOMEM)
      err_setf(err, errlen, "out of memory while matching");
  }
  globfree(&g);
  return rc;
}

int spath_expand(const char *pattern, const char *const *dirs, int ndirs, spath_list *out,
                 char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (ndirs == SPATH_ANY) {
    dirset none = {0};
    int rc = expand(pattern, &none, 0, out, err, errlen);
    if (rc)
      spath_list_free(out);
    return rc;
  }
  if (ndirs <= 0) {
    err_setf(err, errlen,
             "no data directories are allowed here, so no token shards are read "
             "(expected synthetic data, or an operator's --data-dir DIR)");
    return SS_EINVAL;
  }
  size_t dirlen;
  int rc = check_text(pattern, &dirlen, err, errlen);
  if (rc)
    return rc;
  dirset d;
  if ((rc = dirset_init(&d, dirs, ndirs)) != 0) {
    err_setf(err, errlen, "out of memory while matching");
    return rc;
  }
  rc = check_dir(pattern, dirlen, &d, err, errlen);
  if (!rc)
    rc = expand(pattern, &d, 1, out, err, errlen);
  dirset_free(&d);
  if (rc) /* the matches before a refused one are no use to anyone */
    spath_list_free(out);
  return rc;
}

int spath_check(const char *pattern, const char *const *dirs, int ndirs, char *err, size_t errlen) {
  spath_list l;
  int rc = spath_expand(pattern, dirs, ndirs, &l, err, errlen);
  spath_list_free(&l);
  return rc;
}

void spath_list_free(spath_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->match[i]);
    free(l->resolved[i]);
  }
  free(l->match);
  free(l->resolved);
  memset(l, 0, sizeof *l);
}

int spath_fd_under(int fd, const char *const *dirs, int ndirs) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 0)
    return -1;
  path[n] = '\0';
  dirset d;
  if (ndirs <= 0 || dirset_init(&d, dirs, ndirs) != 0)
    return 0;
  int ok = under_real(&d, path);
  dirset_free(&d);
  return ok;
}

/* The directories the worker's trainers may read token shards under: the
 * scheduler's (its welcome's data_dirs), narrowed by the worker's own
 * --data-dir. Every trainer gets them as --data-dir flags, or
 * --no-data-dirs when there are none, so that a trainer spawned by a worker
 * never reads a file outside them (common/shardpath.h). */
#include "worker/datadirs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/shardpath.h"
#include "worker/internal.h"
#include "worker/log.h"

int wrk__data_dirs_init(wrk__worker *w, const char *const *dirs, int n) {
  w->n_own = 0;
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (w->n_own == WRK__MAX_DATA_DIRS) {
      wrk__log("--data-dir %s: too many (at most %d)", dirs[i], WRK__MAX_DATA_DIRS);
      return SS_EINVAL;
    }
    if (!realpath(dirs[i], w->own_dirs[w->n_own]) || stat(w->own_dirs[w->n_own], &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      wrk__log("--data-dir %s: expected a directory", dirs[i]);
      return SS_EINVAL;
    }
    w->n_own++;
  }
  return 0;
}

static void keep(wrk__worker *w, const char *dir) {
  for (int i = 0; i < w->ndata_dirs; i++)
    if (!strcmp(w->data_dirs[i], dir))
      return;
  if (w->ndata_dirs < WRK__MAX_DATA_DIRS)
    snprintf(w->data_dirs[w->ndata_dirs++], PATH_MAX, "%s", dir);
}

void wrk__data_dirs_welcome(wrk__worker *w, const json_t *welcome) {
  w->ndata_dirs = 0;
  json_t *list = json_object_get(welcome, "data_dirs"), *e;
  size_t i;
  char real[PATH_MAX];
  json_array_foreach(list, i, e) {
    if (!realpath(json_string_value(e), real)) {
      wrk__log("the scheduler allows shards under %s, which is not on this host; ignored",
               json_string_value(e));
      continue;
    }
    if (!w->n_own)
      keep(w, real);
    /* the deeper of the two where one holds the other: their intersection */
    for (int k = 0; k < w->n_own; k++) {
      if (spath_is_under(real, w->own_dirs[k]))
        keep(w, real);
      else if (spath_is_under(w->own_dirs[k], real))
        keep(w, w->own_dirs[k]);
    }
  }
  char text[1024] = "";
  for (int k = 0, n = 0; k < w->ndata_dirs && n < (int)sizeof text; k++)
    n += snprintf(text + n, sizeof text - (size_t)n, "%s%s", k ? ", " : "", w->data_dirs[k]);
  wrk__log("token shards allowed under: %s", w->ndata_dirs ? text : "none (synthetic data only)");
}

void wrk__data_dirs_args(wrk__worker *w, char **args, int *na) {
  if (!w->ndata_dirs) {
    args[(*na)++] = "--no-data-dirs";
    return;
  }
  for (int i = 0; i < w->ndata_dirs; i++) {
    args[(*na)++] = "--data-dir";
    args[(*na)++] = w->data_dirs[i];
  }
}

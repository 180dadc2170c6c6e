#include "scheduler/spec_paths.h"

#include <stdio.h>
#include <string.h>

#include "common/shardpath.h"

/* Paths in a spec (docs/design.md#what-is-trusted, issue "Reliability and security"): token
 * shards only under the directories the operator allowed (--data-dir),
 * given as absolute paths whose matches all resolve there
 * (common/shardpath.h: wildcards only in the file name, symlinks resolved,
 * nothing said about files outside); checkpoint directories are the
 * scheduler's choice (--checkpoints), never the spec's. Every "data" and
 * "checkpoint" object anywhere in the spec is checked, wherever the method
 * puts it. */
typedef struct paths_ctx {
  const char *const *dirs;
  int ndirs;
  spec_problems *pr;
} paths_ctx;

/* spec_walk's visit: no checkpoint directories, shards only under --data-dir */
static void check_path(void *ud, const char *path, const char *key, json_t *e) {
  paths_ctx *x = ud;
  char where[600];
  if (!strcmp(key, "checkpoint") && json_object_get(e, "dir")) {
    snprintf(where, sizeof where, "%s.dir", path);
    spec_problem_add(x->pr, where,
                     "a spec may not choose checkpoint directories; the scheduler keeps "
                     "them under its --checkpoints directory");
  }
  if (strcmp(key, "data") || !json_is_object(e))
    return;
  static const char *const shard_keys[] = {"train", "val"};
  for (int k = 0; k < 2; k++) {
    const char *p = json_string_value(json_object_get(e, shard_keys[k]));
    if (!p) /* a value of another type is the run config's problem */
      continue;
    snprintf(where, sizeof where, "%s.%s", path, shard_keys[k]);
    char why[512];
    if (!x->ndirs) {
      spec_problem_add(x->pr, where,
                       "found '%.200s', but this scheduler allows no token shards (start "
                       "it with --data-dir DIR to allow those under DIR)",
                       p);
      continue;
    }
    if (p[0] != '/') {
      spec_problem_add(x->pr, where,
                       "found '%.200s', expected an absolute path under an allowed data "
                       "directory (%s%s)",
                       p, x->dirs[0], x->ndirs > 1 ? ", ..." : "");
      continue;
    }
    if (spath_check(p, x->dirs, x->ndirs, why, sizeof why) != 0)
      spec_problem_add(x->pr, where,
                       "found '%.200s': %s; expected token shards under an allowed data "
                       "directory (%s%s), with wildcards in the file name only",
                       p, why, x->dirs[0], x->ndirs > 1 ? ", ..." : "");
  }
}

void sched__spec_paths_check(const char *const *data_dirs, int ndirs, json_t *spec_json,
                             spec_problems *pr) {
  paths_ctx pc = {data_dirs, ndirs, pr};
  spec_walk(spec_json, "$", check_path, &pc);
}

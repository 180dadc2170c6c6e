/* The paths a sweep spec names (scheduler/spec_paths.c): token shards only
 * under the operator's --data-dir directories, no checkpoint directories. */
#ifndef SS_SCHEDULER_SPEC_PATHS_H
#define SS_SCHEDULER_SPEC_PATHS_H

#include <jansson.h>

#include "sweeps/spec.h"

/* Adds a problem to pr for every "data" shard path in spec_json that
 * spath_check (common/shardpath.h) refuses under data_dirs[0..ndirs) (a
 * wildcard in a directory component, a match resolving outside, no match)
 * and every "checkpoint" object with a "dir". Reads the file system
 * (glob, realpath) but touches no scheduler state: safe on a worker thread. */
void sched__spec_paths_check(const char *const *data_dirs, int ndirs, json_t *spec_json,
                             spec_problems *pr);

#endif

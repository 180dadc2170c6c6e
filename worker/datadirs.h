/* The token-shard directories trainers may read (datadirs.c): the
 * scheduler's, narrowed by the worker's own --data-dir. */
#ifndef SS_WORKER_DATADIRS_H
#define SS_WORKER_DATADIRS_H

#include <jansson.h>

typedef struct wrk__worker wrk__worker;

/* Resolves the worker's own --data-dir directories into w->own_dirs;
 * SS_EINVAL, logged, for one that is not a directory or too many. */
int wrk__data_dirs_init(wrk__worker *w, const char *const *dirs, int n);
/* After a welcome: w->data_dirs = its data_dirs (resolved here; those that
 * do not exist on this host dropped), each narrowed to the worker's own
 * directories when it has any (its choice narrows, never widens). */
void wrk__data_dirs_welcome(wrk__worker *w, const json_t *welcome);
/* The trainer's flags for them, appended to args at *na (room for
 * 2 * WRK__MAX_DATA_DIRS + 1): --data-dir DIR ..., or --no-data-dirs. */
void wrk__data_dirs_args(wrk__worker *w, char **args, int *na);

#endif

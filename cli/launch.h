/* `scalesweep train` of a data-parallel config (world_size > 1) without
 * --rank: runs its ranks on this host. */
#ifndef SS_CLI_LAUNCH_H
#define SS_CLI_LAUNCH_H

#include <sys/types.h>

#include "runcfg/runcfg.h"

/* Starts world_size processes of `scalesweep train` (argv: the train
 * command's own, argv[0] "train"), rank 0 on a listening socket it hands
 * over, the others connecting to it, all sharing a fresh secret; rank 0's
 * stdout is this process's, the others' is /dev/null. With ranks ("0,1" or
 * "2,3": this host's part of a run spread over hosts) only those, with
 * dist (HOST:PORT: rank 0's address; rank 0, when here, listens on its
 * port) and $SCALESWEEP_DIST_SECRET; the lowest of them prints the run's
 * lines (every rank knows them). SIGTERM and SIGINT are
 * passed on to every rank (they stop together, after rank 0's checkpoint);
 * a rank that fails ends the others (they see it at once; SIGKILL after 10
 * s), and the ranks die with this process. Returns the exit code: rank 0's
 * when it failed, else the first failed rank's (128+N for a signal), else 0.
 * config: the --config argument (stdin or a pipe: already read; the ranks
 * get the resolved config in a temporary file). */
int cli_train_launch(int argc, char **argv, const rcfg *cfg, const char *config,
                     const char *ranks, const char *dist);

/* What both launchers share (this one, and `scalesweep launch`'s for a
 * declared trainer): cli_launch_begin passes SIGTERM and SIGINT on to every
 * rank from then on; cli_launch_fork forks rank's process (0 in the child,
 * whose signals are the defaults again and which dies with the launcher;
 * the pid, or -1, in the launcher); cli_launch_wait waits for the ranks
 * marked in mark[0..world) that were started: when one fails, the others
 * get SIGTERM with stop_others (a program whose ranks may wait for a dead
 * peer forever) and SIGKILL 10 s later either way. It puts the signal
 * handlers back and returns the exit code: with stop_others the first
 * failed rank's (the others' are the SIGTERM's), else the first marked
 * rank's when it failed, else the first failed rank's (128+N for a
 * signal), else 0; each
 * failure is said on stderr, after who. */
void cli_launch_begin(int world);
pid_t cli_launch_fork(int rank);
int cli_launch_wait(const char *who, int world, const char *mark, int first, int stop_others);

/* "2,3" into mark[rank] = 1 (mark[0..world) cleared by the caller): the
 * count, or -1 for a rank that is not a number below world, a repeated
 * one, or a separator other than a comma. What to say then is the
 * caller's. */
int cli_launch_parse_ranks(const char *list, int world, char *mark);

#endif

/* A sweep's progress while a command waits for it (`up --wait`,
 * `submit --wait`): runs done of total, the running runs and their latest
 * training loss, compute spent of planned, and an estimate of the time left
 * from the compute rate seen while waiting. On a terminal one line is
 * rewritten in place; otherwise a plain line is printed when the counts
 * change, when a running run first reports its loss, or a minute after the
 * last one (logs stay short). */
#ifndef SS_CLI_PROGRESS_H
#define SS_CLI_PROGRESS_H

#include <stdio.h>
#include <time.h>

#include "cli/client.h"

typedef struct cli_progress {
  FILE *out;
  int tty;          /* out is a terminal: one line, rewritten */
  int shown;        /* a line is on the terminal, not ended */
  char last[96];    /* the counts of the last plain line */
  double last_t;    /* and when it was printed */
  double t0, spent0; /* the first poll: its time and compute spent */
  /* the counts of the last poll */
  long long total, done, running, queued, succeeded, failed, cancelled;
  /* the sweep's own status is "failed": a run failed that the sweep does not
   * replace (a diverged rate of a decided lr tune, and a run an adaptive
   * design replaced, do not count) */
  int sweep_failed;
  double ended_at; /* when the runs were first seen ended (0: not yet) */
} cli_progress;

void cli_progress_init(cli_progress *p, FILE *out);

/* Polls the sweep once and shows its progress. 1 when it has finished
 * (runs, none queued or running, no lr tune or adaptive round to come, and
 * its status settled), 0 when not, -1 when the scheduler did not
 * answer (nothing shown; try again). */
int cli_progress_poll(cli_progress *p, const cli_target *t, long long id);

/* Ends the line on a terminal (before other output). */
void cli_progress_end(cli_progress *p);

#endif

/* The scheduler's log lines (log.h). */
#include "scheduler/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

void sched__logf(const char *fmt, ...) {
  char ts[32];
  time_t t = time(NULL);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s scheduler: ", ts);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

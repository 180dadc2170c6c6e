#include "cli/args.h"

#include <stdarg.h>
#include <stdio.h>

#include "common/err.h"

int cli_usage_error(const char *cmd, const char *sub, const char *fmt, ...) {
  fprintf(stderr, "scalesweep %s%s%s: ", cmd, sub ? " " : "", sub ? sub : "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(scalesweep %s --help for usage)\n", cmd);
  return SS_EXIT_USAGE;
}

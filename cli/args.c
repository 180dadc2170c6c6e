#include "cli/args.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int cli_opt_read(int argc, char **argv, int *i, const cli_opt *opts, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (strcmp(argv[*i], opts[k].name))
      continue;
    if (opts[k].flag) {
      *opts[k].flag = 1;
      return 1;
    }
    if (*i + 1 >= argc)
      return 0;
    *opts[k].text = argv[++*i];
    return 1;
  }
  return 0;
}

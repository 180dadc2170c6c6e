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
    if ((!opts[k].text && !opts[k].flag) || strcmp(argv[*i], opts[k].name))
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

/* The value option of opts that a is spelt "--name=VALUE" for: stores
 * VALUE and returns 1; 0 when it is none. */
static int opt_eq_read(const char *a, const cli_opt *opts, size_t n) {
  const char *eq = strchr(a, '=');
  if (!eq || a[0] != '-')
    return 0;
  for (size_t k = 0; k < n; k++)
    if (opts[k].text && strlen(opts[k].name) == (size_t)(eq - a) &&
        !strncmp(a, opts[k].name, (size_t)(eq - a))) {
      *opts[k].text = eq + 1;
      return 1;
    }
  return 0;
}

/* 1 when a names one of opts' value options (given without its value). */
static int is_value_opt(const char *a, const cli_opt *opts, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (opts[k].text && !strcmp(a, opts[k].name))
      return 1;
  return 0;
}

int cli_args_read(int argc, char **argv, const char *cmd, const cli_opt *opts, size_t n,
                  const char **pos, int max_pos, int *npos, const char *usage) {
  int got = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      fputs(usage, stdout);
      return SS_EXIT_OK;
    }
    if (cli_opt_read(argc, argv, &i, opts, n) || opt_eq_read(a, opts, n))
      continue;
    if (is_value_opt(a, opts, n))
      return cli_usage_error(cmd, NULL, "%s needs a value", a);
    if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) /* -5: a number */
      return cli_usage_error(cmd, NULL, "unknown option '%s'", a);
    if (got == max_pos)
      return cli_usage_error(cmd, NULL, "unexpected argument '%s'", a);
    pos[got++] = a;
  }
  if (npos)
    *npos = got;
  return -1;
}

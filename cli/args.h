/* What the subcommands share when they read their arguments. */
#ifndef SS_CLI_ARGS_H
#define SS_CLI_ARGS_H

#include <stddef.h>

/* Prints "scalesweep CMD[ SUB]: MESSAGE" and "(scalesweep CMD --help for
 * usage)" to stderr and returns SS_EXIT_USAGE (2), for `return
 * cli_usage_error(...)`. sub (may be NULL) is the subcommand the user typed
 * ("prepare" of "data prepare"). */
int cli_usage_error(const char *cmd, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when the argument asks for a command's usage: "-h" or "--help". */
int cli_is_help(const char *arg);

/* One option of a command, by its full name ("--state"): a value option
 * ("--state DIR" stores DIR in *text) or a flag ("--wait" sets *flag to 1);
 * exactly one of text and flag is non-NULL. The strings stored point into
 * argv. */
typedef struct cli_opt {
  const char *name;
  const char **text;
  int *flag;
} cli_opt;

/* Reads argv[*i] when it is one of the n options: sets the flag, or stores
 * the argument after it (whatever it is) and steps *i onto it. Returns 1
 * when read; 0 when argv[*i] is none of them, or is a value option with
 * nothing after it: what to say then is the command's (its messages
 * differ). Only the "--name VALUE" spelling is read, as a command that also
 * takes "--name=VALUE" checks that itself. */
int cli_opt_read(int argc, char **argv, int *i, const cli_opt *opts, size_t n);

#endif

/* What the subcommands share when they read their arguments. */
#ifndef SS_CLI_ARGS_H
#define SS_CLI_ARGS_H

/* Prints "scalesweep CMD[ SUB]: MESSAGE" and "(scalesweep CMD --help for
 * usage)" to stderr and returns SS_EXIT_USAGE (2), for `return
 * cli_usage_error(...)`. sub (may be NULL) is the subcommand the user typed
 * ("prepare" of "data prepare"). */
int cli_usage_error(const char *cmd, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

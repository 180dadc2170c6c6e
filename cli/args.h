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
 * at most one of text and flag is non-NULL, and an entry with neither is
 * not an option of this command (a table shared by commands). The strings
 * stored point into argv. */
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

/* The options of every command that talks to the scheduler's API, as
 * entries of a cli_opt table, into the fields of the same names of *o. */
#define CLI_API_OPTS(o)                                                                           \
  {"--json", NULL, &(o)->json}, {"--url", &(o)->url, NULL}, {"--state", &(o)->state, NULL},       \
      {"--token-file", &(o)->token_file, NULL}

/* Reads a command's whole argument list: "-h" or "--help" prints usage on
 * stdout; each of the n options is read as cli_opt_read does, a value
 * option also as "--name=VALUE"; any other argument that does not start
 * with '-' (or is "-", standard input, or a negative number) is
 * positional, kept in pos[] (up to max_pos of them; *npos, when not NULL,
 * counts them). Returns -1 when all
 * is read; SS_EXIT_OK after --help; SS_EXIT_USAGE after cli_usage_error
 * said what is wrong: an unknown option, a value option with no value, a
 * positional argument over max_pos. cmd names the command in messages. */
int cli_args_read(int argc, char **argv, const char *cmd, const cli_opt *opts, size_t n,
                  const char **pos, int max_pos, int *npos, const char *usage);

#endif

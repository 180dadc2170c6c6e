/* The scalesweep subcommands: each takes main's argc/argv with argv[0] the
 * subcommand's name and returns the process exit code (common/err.h). */
#ifndef SS_CLI_COMMANDS_H
#define SS_CLI_COMMANDS_H

int cmd_data(int argc, char **argv);
int cmd_fit(int argc, char **argv);
int cmd_migrate(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_scheduler(int argc, char **argv);
int cmd_up(int argc, char **argv);
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_reproduce(int argc, char **argv);
int cmd_worker(int argc, char **argv);

/* submit's work: sends the spec in `file` (relative token shard paths made
 * absolute against the current directory) to the scheduler found from url,
 * state and token_file (cli/client.h); prints the new sweep (its JSON with
 * json_out) and sets *id. With `earlier` non-NULL, a spec identical to one
 * submitted before (409 with that sweep's id) is no error: *id is that sweep
 * and *earlier is set to 1. Returns the exit code. */
int cli_submit(const char *file, const char *url, const char *state, const char *token_file,
               int json_out, long long *id, int *earlier);

#endif

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

#endif

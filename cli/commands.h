/* The scalesweep subcommands: each takes main's argc/argv with argv[0] the
 * subcommand's name and returns the process exit code (common/err.h). */
#ifndef SS_CLI_COMMANDS_H
#define SS_CLI_COMMANDS_H

int cmd_data(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif

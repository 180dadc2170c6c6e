/* scalesweep: argument parsing and subcommand dispatch, nothing else. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"

#ifndef SS_VERSION
#define SS_VERSION "0.1.0"
#endif

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} commands[] = {
#define CLI__ENTRY(name, help) {#name, cmd_##name, help},
    CLI_COMMANDS(CLI__ENTRY)
#undef CLI__ENTRY
};

static void usage(FILE *f) {
  fprintf(f, "usage: scalesweep COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n'scalesweep COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return SS_EXIT_USAGE;
  }
  if (cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
    usage(stdout);
    return SS_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    printf("scalesweep %s\n", SS_VERSION);
    return SS_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "scalesweep: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return SS_EXIT_USAGE;
}

/* scalesweep: argument parsing and subcommand dispatch, nothing else. */
#include <stdio.h>
#include <string.h>

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
    {"up", cmd_up, "everything on one machine: database, scheduler, a local worker"},
    {"plan", cmd_plan, "validate a sweep spec and print the runs it plans"},
    {"submit", cmd_submit, "submit a sweep spec to the scheduler"},
    {"status", cmd_status, "sweeps and their progress"},
    {"runs", cmd_runs, "the runs of a sweep"},
    {"cancel", cmd_cancel, "cancel a sweep or a run"},
    {"reproduce", cmd_reproduce, "run a finished run again from its stored config"},
    {"fit", cmd_fit, "fit scaling laws to a sweep's runs or to a CSV of points"},
    {"train", cmd_train, "train one model from a run config, JSON lines on stdout"},
    {"data", cmd_data, "prepare token shards from text, or write the synthetic corpus"},
    {"scheduler", cmd_scheduler, "the scheduler daemon (API, page, worker port)"},
    {"worker", cmd_worker, "the worker agent of a GPU (or CPU) host"},
    {"migrate", cmd_migrate, "apply the database migrations"},
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
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
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

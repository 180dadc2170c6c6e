/* scalesweep migrate: applies the embedded SQL migrations to a database. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "store/migrate.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: scalesweep migrate --database URL\n"
          "\n"
          "Applies every migration built into scalesweep (migrations/NNN_name.sql)\n"
          "that the database has not recorded in schema_migrations, in order, each\n"
          "in its own transaction, under an advisory lock (two schedulers starting\n"
          "together apply each once). Prints how many were applied.\n"
          "URL is a libpq URL or conninfo (postgresql://user@host/db, \"host=... dbname=...\").\n"
          "\n"
          "Exit codes: 0 done, 1 database unreachable or a migration failed, 2 bad usage.\n");
}

int cmd_migrate(int argc, char **argv) {
  const char *url = NULL;
  const cli_opt opts[] = {{"--database", &url, NULL}};
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) {
      usage(stdout);
      return SS_EXIT_OK;
    } else if (!strncmp(argv[i], "--database=", 11)) {
      url = argv[i] + 11;
    } else if (!cli_opt_read(argc, argv, &i, opts, 1)) {
      fprintf(stderr, "scalesweep migrate: unexpected argument '%s'%s\n", argv[i],
              !strcmp(argv[i], "--database") ? " (it needs a value)" : "");
      usage(stderr);
      return SS_EXIT_USAGE;
    }
  }
  if (!url || !*url) {
    fprintf(stderr, "scalesweep migrate: --database URL is required\n");
    usage(stderr);
    return SS_EXIT_USAGE;
  }
  int applied = 0;
  char err[1024];
  int rc = db_migrate(url, &applied, err, sizeof err);
  if (rc) {
    if (applied)
      fprintf(stderr, "scalesweep migrate: applied %d migration%s, then:\n", applied,
              applied == 1 ? "" : "s");
    fprintf(stderr, "scalesweep migrate: %s\n", err);
    return SS_EXIT_FAILURE;
  }
  printf("applied %d migration%s (%d known)\n", applied, applied == 1 ? "" : "s", db_nmigrations);
  return SS_EXIT_OK;
}

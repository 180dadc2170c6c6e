/* scalesweep migrate: applies the embedded SQL migrations to a database. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "store/migrate.h"

static const char usage[] =
    "usage: scalesweep migrate --database URL\n"
    "\n"
    "Applies every migration built into scalesweep (migrations/NNN_name.sql)\n"
    "that the database has not recorded in schema_migrations, in order, each\n"
    "in its own transaction, under an advisory lock (two schedulers starting\n"
    "together apply each once). Prints how many were applied.\n"
    "URL is a libpq URL or conninfo (postgresql://user@host/db, \"host=... dbname=...\").\n"
    "\n"
    "Exit codes: 0 done, 1 database unreachable or a migration failed, 2 bad usage.\n";

int cmd_migrate(int argc, char **argv) {
  const char *url = NULL;
  const cli_opt opts[] = {{"--database", &url, NULL}};
  int rc = cli_args_read(argc, argv, "migrate", opts, 1, NULL, 0, NULL, usage);
  if (rc >= 0)
    return rc;
  if (!url || !*url)
    return cli_usage_error("migrate", NULL, "--database URL is required");
  int applied = 0;
  char err[1024];
  rc = db_migrate(url, &applied, err, sizeof err);
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

/* Migrations: numbered SQL files of migrations/, embedded in the binary and
 * applied in order, each once. Blocking: for start-up and `scalesweep
 * migrate`, before any loop runs. */
#ifndef SS_STORE_MIGRATE_H
#define SS_STORE_MIGRATE_H

#include <stddef.h>

/* The SQL migrations, embedded in the binary at build time from
 * migrations/NNN_name.sql (sorted by NNN). */
typedef struct db_migration {
  int version;
  const char *name;
  const char *sql;
} db_migration;
extern const db_migration db_migrations[];
extern const int db_nmigrations;

/* Blocking, for commands that run before any loop (migrate, scheduler start,
 * up): applies every embedded migration not yet recorded in
 * schema_migrations, in order, each in its own transaction, under
 * pg_advisory_lock so that two schedulers starting together apply each
 * once. Returns 0 or SS_E* with a message; *applied counts those applied. */
int db_migrate(const char *url, int *applied, char *err, size_t errlen);

#endif

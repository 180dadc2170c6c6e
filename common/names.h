/* Names that travel between programs and end up on pages and in logs:
 * trainer names (a run config's "trainer", a worker's --trainer). */
#ifndef SS_COMMON_NAMES_H
#define SS_COMMON_NAMES_H

/* The longest trainer name. */
#define SS_TRAINER_NAME_MAX 32

/* 1 when name is a valid trainer name: 1 to SS_TRAINER_NAME_MAX ASCII
 * letters, digits, '_', '-' and '.', the first a letter or digit (nothing
 * a shell, a path, a page or a terminal would read differently); else 0. */
int ss_trainer_name_ok(const char *name);

#endif

/* Names that travel between programs and end up on pages and in logs:
 * trainer names (a run config's "trainer", a worker's --trainer), and the
 * characters that no shown name may hold. */
#ifndef SS_COMMON_NAMES_H
#define SS_COMMON_NAMES_H

#include <stddef.h>

/* The longest trainer name. */
#define SS_TRAINER_NAME_MAX 32

/* 1 when name is a valid trainer name: 1 to SS_TRAINER_NAME_MAX ASCII
 * letters, digits, '_', '-' and '.', the first a letter or digit (nothing
 * a shell, a path, a page or a terminal would read differently); else 0. */
int ss_trainer_name_ok(const char *name);

/* Text that a person reads (a sweep's or a worker's name, in a terminal's
 * table or a page) must show as itself: a control character, a line or
 * paragraph separator or a Unicode format character (general category Cf:
 * the bidirectional overrides and isolates such as U+202E, zero-width
 * characters, U+FEFF, the tag characters U+E0001 and U+E0020..U+E007F, ...)
 * would move, end or hide what follows it. Returns 1 when s (len bytes)
 * holds one, or a byte that is not valid UTF-8, with its byte offset in
 * *at and its code point in *cp (-1 for invalid UTF-8); else 0. */
int ss_text_hidden(const char *s, size_t len, size_t *at, long *cp);

/* s with each of those code points escaped, "\u202e" (or "\U000e0001"
 * beyond U+FFFF), and each byte of invalid UTF-8 as "\xff", into out (n
 * bytes, NUL-terminated, cut at a whole character). Returns out. */
char *ss_text_escape(const char *s, char *out, size_t n);

#endif

/* The worker's log line and the UTF-8 cleaning of text it did not write
 * (log.c). */
#ifndef SS_WORKER_LOG_H
#define SS_WORKER_LOG_H

#include <stddef.h>

/* One line per event on stderr: "2024-05-01T12:00:00.123Z worker: ...".
 * Built in one buffer and written with one call so lines never interleave. */
void wrk__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A malloc'd copy of s[0..n) that is valid UTF-8 (json_string refuses
 * anything else): a sequence cut by the start of the window is dropped, any
 * other invalid byte becomes '?'. NULL when out of memory. */
char *wrk__utf8_clean(const char *s, size_t n);

#endif

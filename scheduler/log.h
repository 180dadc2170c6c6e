/* The scheduler's log (internal). */
#ifndef SS_SCHEDULER_LOG_H
#define SS_SCHEDULER_LOG_H

/* A timestamped line on stderr ("2026-12-01T10:00:00Z scheduler: what
 * happened"). */
void sched__logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

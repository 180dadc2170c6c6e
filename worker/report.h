/* What a trainer reports, turned into messages (report.c): its config event
 * into started, checkpoint events into checkpoint, step and eval rows into
 * the outbox, and at its end one finished message (exit code, signal,
 * error, the tail of its log). */
#ifndef SS_WORKER_REPORT_H
#define SS_WORKER_REPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct wrk__run wrk__run;

/* proto_reader callback for the trainer's stdout (ud: the run). */
int wrk__on_trainer_line(void *ud, const char *line, size_t len);
/* At the end of an attempt whose exit code is code: a trainer that exited
 * 0 without a done event broke the contract, and a failure without an
 * error event takes the last line of its log. Returns the log's tail for
 * the finished message (malloc'd; NULL when out of memory). */
char *wrk__report_settle(wrk__run *r, int64_t code);
/* The finished message (continuing the seq) into the outbox, and the
 * attempt's last log line; tail is freed. 1, or 0 when it cannot be
 * encoded (a bug, logged). */
int wrk__report_finished(wrk__run *r, int64_t code, int interrupted, int fenced, char *tail);

#endif

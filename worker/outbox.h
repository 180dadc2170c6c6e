/* The outbox of each run (outbox.c): metric rows batched into metrics
 * messages with sequence numbers, every metrics and finished message kept
 * until the scheduler acks it, and resent in order after a reconnect. */
#ifndef SS_WORKER_OUTBOX_H
#define SS_WORKER_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__conn wrk__conn;
typedef struct wrk__run wrk__run;
typedef struct wrk__wbuf wrk__wbuf;
typedef struct proto_row proto_row;

/* A kept message (metrics or finished) waiting for its ack. */
typedef struct wrk__qmsg {
  struct wrk__qmsg *next;
  int64_t seq;
  wrk__wbuf *b;
} wrk__qmsg;

/* {"type": type, "run_id": ..., "attempt": ...}: a new reference. */
json_t *wrk__run_header(const wrk__run *r, const char *type);
/* Adds a trainer's step or eval row, as read from its line, to the
 * current batch, which is sealed after 500 rows or 200 ms. */
void wrk__outbox_add_row(wrk__run *r, const proto_row *row);
/* Seals the current batch into the next metrics message now. */
void wrk__outbox_flush(wrk__run *r);
/* Keeps b as message seq until its ack and sends it when connected. */
void wrk__outbox_push(wrk__run *r, int64_t seq, wrk__wbuf *b);
/* After a welcome: every run's last started and checkpoint messages and its
 * unacked ones, in order, on c. Returns how many unacked ones went. */
int wrk__outbox_resend(wrk__worker *w, wrk__conn *c);
/* Messages still waiting for their ack. */
int wrk__outbox_unacked(const wrk__run *r);
/* Frees every kept message (the run is being freed). */
void wrk__outbox_free(wrk__run *r);
/* The scheduler's ack (a wrk__handler): drops what it covers; the run's
 * finished message acknowledged releases the run (lifecycle.h). */
void wrk__on_ack(wrk__conn *c, json_t *m);

#endif

/* Refcounted wire buffers (wbuf.c): one encoded, valid message line
 * shared by the unacked queue and the writes in flight. */
#ifndef SS_WORKER_WBUF_H
#define SS_WORKER_WBUF_H

#include <stddef.h>

#include <jansson.h>

/* An encoded message line, shared by the unacked queue and in-flight
 * writes: freed when the last of them lets go. */
typedef struct wrk__wbuf {
  int refs;
  size_t len;
  char data[];
} wrk__wbuf;

/* Encodes msg and checks it against the protocol's own validation, so that a
 * message the scheduler would refuse (and the worker would then resend
 * forever) never leaves: the messages that carry a trainer's free-form
 * JSON (started's config, finished's done), which may nest past what
 * Jansson parses once wrapped in the message. One reference, or NULL with
 * the reason in err. */
wrk__wbuf *wrk__wbuf_encode(const json_t *msg, char *err, size_t errlen);
/* The same for a message valid by construction, which is not parsed back:
 * the metrics message, written from the rows' C values over the metric
 * table (proto_row_json). NULL only when out of memory or over
 * PROTO_MAX_LINE. */
wrk__wbuf *wrk__wbuf_encode_valid(const json_t *msg, char *err, size_t errlen);
/* Both take NULL; ref returns b. */
wrk__wbuf *wrk__wbuf_ref(wrk__wbuf *b);
void wrk__wbuf_unref(wrk__wbuf *b);

#endif

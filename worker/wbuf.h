/* Refcounted wire buffers (wbuf.c): one encoded, validated message line
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
 * forever) never leaves. One reference, or NULL with the reason in err. */
wrk__wbuf *wrk__wbuf_encode(const json_t *msg, char *err, size_t errlen);
/* Both take NULL; ref returns b. */
wrk__wbuf *wrk__wbuf_ref(wrk__wbuf *b);
void wrk__wbuf_unref(wrk__wbuf *b);

#endif

/* Refcounted wire buffers: one encoded, valid message line shared by the
 * unacked queue and the writes in flight. */
#include "worker/wbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

wrk__wbuf *wrk__wbuf_ref(wrk__wbuf *b) {
  if (b)
    b->refs++;
  return b;
}

void wrk__wbuf_unref(wrk__wbuf *b) {
  if (b && --b->refs == 0)
    free(b);
}

static wrk__wbuf *encode(const json_t *msg, int check, char *err, size_t errlen) {
  size_t len;
  char *line = proto_encode(msg, &len);
  if (!line) {
    snprintf(err, errlen, "cannot encode (over %u bytes, or not JSON)", PROTO_MAX_LINE);
    return NULL;
  }
  if (check && proto_parse(line, len - 1, NULL, err, errlen) == PROTO_INVALID) {
    free(line);
    return NULL;
  }
  wrk__wbuf *b = malloc(sizeof *b + len);
  if (b) {
    b->refs = 1;
    b->len = len;
    memcpy(b->data, line, len);
  } else {
    snprintf(err, errlen, "out of memory");
  }
  free(line);
  return b;
}

wrk__wbuf *wrk__wbuf_encode(const json_t *msg, char *err, size_t errlen) {
  return encode(msg, 1, err, errlen);
}

wrk__wbuf *wrk__wbuf_encode_valid(const json_t *msg, char *err, size_t errlen) {
  return encode(msg, 0, err, errlen);
}

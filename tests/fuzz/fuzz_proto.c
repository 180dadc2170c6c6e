/* The scheduler <-> worker protocol as a worker or the scheduler receives
 * it: bytes framed by proto_reader (fed in chunks of 1 + size % 257 bytes,
 * so that lines are split at many places), each line validated by proto_parse. A message it accepts
 * must survive proto_encode and parse again as the same type. */
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"
#include "fuzz.h"

static int on_line(void *ud, const char *line, size_t len) {
  (void)ud;
  if (line[len] != '\0' || memchr(line, '\n', len))
    abort();
  json_t *msg = NULL;
  char err[256] = "";
  proto_type t = proto_parse(line, len, &msg, err, sizeof err);
  if (t == PROTO_INVALID) {
    if (msg || !err[0])
      abort();
    return 0;
  }
  size_t n;
  char *enc = proto_encode(msg, &n);
  if (!enc || n == 0 || enc[n - 1] != '\n')
    abort();
  json_t *again = NULL;
  err[0] = 0;
  if (proto_parse(enc, n - 1, &again, err, sizeof err) != t)
    abort();
  json_decref(again);
  free(enc);
  json_decref(msg);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t chunk = 1 + size % 257;
  proto_reader r;
  proto_reader_init(&r);
  for (size_t off = 0; off < size; off += chunk) {
    size_t n = size - off < chunk ? size - off : chunk;
    if (proto_reader_feed(&r, (const char *)data + off, n, on_line, NULL) != 0)
      break;
  }
  proto_reader_free(&r);
  return 0;
}

/* A trainer's output as the worker reads it: the input is the stdout of one
 * run's trainer, framed by the worker's proto_reader into lines as
 * proc.c's reader does (a line over the limit ends the reading) and handed
 * to wrk__on_trainer_line (worker/report.c: config -> started, step and
 * eval rows -> the outbox's metrics batches, checkpoint, done, error);
 * then the trainer exits (code 0 after a done event, else 1) and
 * wrk__run_complete writes the finished message. The run is a real
 * assignment (run.c) on a worker without a connection (worker_stub.c), so
 * every message stays in the run's outbox, where the harness checks it.
 *
 * Invariants: every message kept is a valid protocol message of a worker's
 * type (proto_parse) for this run and attempt; the outbox's sequence
 * numbers rise by one from 1; the last is the one finished message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"
#include "fuzz.h"
#include "tests/fuzz/worker_stub.h"

enum { FUZZ_TLINE_MAX_INPUT = 4 << 20 };

static void check(const wrk__run *r, const wrk__wbuf *b, proto_type want) {
  char err[512];
  json_t *m = NULL;
  size_t len = b->len && b->data[b->len - 1] == '\n' ? b->len - 1 : b->len;
  proto_type t = proto_parse(b->data, len, &m, err, sizeof err);
  if (t != want || json_integer_value(json_object_get(m, "run_id")) != r->id ||
      json_integer_value(json_object_get(m, "attempt")) != r->attempt) {
    fprintf(stderr, "fuzz_tline: kept %.*s (%s)\n", (int)(len > 300 ? 300 : len), b->data,
            t == PROTO_INVALID ? err : proto_type_name(t));
    abort();
  }
  json_decref(m);
}

static int on_line(void *ud, const char *line, size_t len) {
  return wrk__on_trainer_line(ud, line, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_TLINE_MAX_INPUT)
    size = FUZZ_TLINE_MAX_INPUT;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/worker", fuzz_dir());
  wrk__worker *w = worker_stub_new(dir, 0);
  worker_stub_trainer = 0;
  json_error_t je;
  json_t *assign =
      json_loads("{\"type\":\"assign\",\"run_id\":7,\"attempt\":2,\"config\":{},\"gpus\":[1],"
                 "\"checkpoint_dir\":\"/ck/run-7\",\"resume\":true}",
                 0, &je);
  wrk__conn c = {.w = w};
  wrk__on_assign(&c, assign);
  json_decref(assign);
  wrk__run *r = w->runs;
  if (!r || r->state != WRK__RUN_RUNNING)
    abort();

  /* as proc.c's reader: in the pieces a pipe might give, until a line is
   * over the limit */
  for (size_t off = 0, piece = 1; off < size; off += piece, piece = piece * 3 + 1) {
    if (piece > size - off)
      piece = size - off;
    if (proto_reader_feed(&r->rd, (const char *)data + off, piece, on_line, r) != 0)
      break;
  }
  r->exit_status = r->done ? 0 : 1;
  wrk__run_complete(r);

  if (w->runs != r || !r->finished_seq || r->state != WRK__RUN_FINISHED)
    abort();
  if (r->started)
    check(r, r->started, PROTO_STARTED);
  if (r->ckpt)
    check(r, r->ckpt, PROTO_CHECKPOINT);
  int64_t seq = 0;
  for (const wrk__qmsg *q = r->q_head; q; q = q->next) {
    if (q->seq != ++seq)
      abort();
    check(r, q->b, q->next ? PROTO_METRICS : PROTO_FINISHED);
  }
  if (seq != r->finished_seq)
    abort();

  worker_stub_stop(w);
  worker_stub_free(w);
  worker_stub_trainer = 1;
  return 0;
}

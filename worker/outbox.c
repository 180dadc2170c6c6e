/* The outbox of each run (outbox.h): metric rows batched into metrics
 * messages with sequence numbers, every metrics and finished message kept
 * until the scheduler acks it, and resent in order after a reconnect. */
#include "worker/outbox.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/proto.h"
#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/run.h"
#include "worker/wbuf.h"

#define FLUSH_MS 200
#define FLUSH_ROWS 500

/* A row's longest form in a metrics message: "event", then each column as
 * ,"name": and a value of at most ROW_VALUE_MAX bytes (Jansson writes a
 * double in at most 24: sign, 17 digits, point and exponent; an int64 in
 * 20). So a full batch stays far below PROTO_MAX_LINE by construction:
 * no byte count is kept, and a trainer's line may be as long as the reader
 * allows (the keys outside the metric table are not passed on). */
#define ROW_VALUE_MAX 32
#define ROW_COL_MAX(name, kind, line, required, fmt) +sizeof #name + 3 + ROW_VALUE_MAX
enum { ROW_MAX_BYTES = sizeof "{\"event\":\"step\"}," SS_METRIC_COLS(ROW_COL_MAX) };
#undef ROW_COL_MAX
_Static_assert(256 + FLUSH_ROWS * ROW_MAX_BYTES < PROTO_MAX_LINE,
               "a full batch and its header fit one message line");

/* The rows not yet sealed into a metrics message, as the trainer's lines
 * were read (report.c): a run's, allocated with its first row. */
struct wrk__batch {
  size_t n;
  proto_row rows[FLUSH_ROWS];
};

void wrk__outbox_push(wrk__run *r, int64_t seq, wrk__wbuf *b) {
  wrk__qmsg *q = malloc(sizeof *q);
  if (!q) {
    wrk__log("run %" PRId64 ": out of memory; message %" PRId64 " lost", r->id, seq);
    return;
  }
  q->next = NULL;
  q->seq = seq;
  q->b = wrk__wbuf_ref(b);
  if (r->q_tail)
    r->q_tail->next = q;
  else
    r->q_head = q;
  r->q_tail = q;
  wrk__send(r->w, b);
}

json_t *wrk__run_header(const wrk__run *r, const char *type) {
  return json_pack("{s:s, s:I, s:I}", "type", type, "run_id", (json_int_t)r->id, "attempt",
                   (json_int_t)r->attempt);
}

/* The metrics message of the batch's rows, written from their C values
 * (proto_row_json): valid by construction, so not parsed back. NULL with
 * the reason in err. */
static wrk__wbuf *batch_message(const wrk__run *r, const struct wrk__batch *bt, char *err,
                                size_t errlen) {
  json_t *msg = wrk__run_header(r, "metrics");
  json_t *rows = json_array();
  int ok = !json_object_set_new(msg, "seq", json_integer(r->next_seq));
  for (size_t i = 0; ok && i < bt->n; i++)
    ok = !json_array_append_new(rows, proto_row_json(&bt->rows[i]));
  ok = !json_object_set_new(msg, "rows", rows) && ok;
  wrk__wbuf *b = ok ? wrk__wbuf_encode_valid(msg, err, errlen) : NULL;
  if (!ok)
    snprintf(err, errlen, "out of memory");
  json_decref(msg);
  return b;
}

/* Seals the current batch into metrics message seq N, keeps it until its
 * ack, and sends it when connected. */
void wrk__outbox_flush(wrk__run *r) {
  uv_timer_stop(&r->flush_timer);
  if (!r->batch || r->batch->n == 0)
    return;
  char err[512];
  wrk__wbuf *b = batch_message(r, r->batch, err, sizeof err);
  size_t n = r->batch->n;
  r->batch->n = 0;
  if (!b) {
    wrk__log("run %" PRId64 ": %zu trainer rows lost: %s", r->id, n, err);
    return;
  }
  int64_t seq = r->next_seq++;
  wrk__outbox_push(r, seq, b);
  wrk__wbuf_unref(b);
}

static void on_flush_timer(uv_timer_t *t) { wrk__outbox_flush(t->data); }

void wrk__outbox_add_row(wrk__run *r, const proto_row *row) {
  if (!r->batch && !(r->batch = calloc(1, sizeof *r->batch))) {
    wrk__log("run %" PRId64 ": out of memory; a trainer row lost", r->id);
    return;
  }
  r->batch->rows[r->batch->n++] = *row;
  if (r->batch->n == 1)
    uv_timer_start(&r->flush_timer, on_flush_timer, FLUSH_MS, 0);
  if (r->batch->n >= FLUSH_ROWS)
    wrk__outbox_flush(r);
}

/* Lets go of the kept messages up to seq (acknowledged, or all at the end). */
static void drop_through(wrk__run *r, int64_t seq) {
  while (r->q_head && r->q_head->seq <= seq) {
    wrk__qmsg *q = r->q_head;
    r->q_head = q->next;
    if (!r->q_head)
      r->q_tail = NULL;
    wrk__wbuf_unref(q->b);
    free(q);
  }
}

void wrk__on_ack(wrk__conn *c, json_t *m) {
  wrk__worker *w = c->w;
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int64_t attempt = json_integer_value(json_object_get(m, "attempt"));
  int64_t seq = json_integer_value(json_object_get(m, "seq"));
  wrk__run *r = wrk__run_find(w, id, attempt);
  if (!r)
    return; /* a repeated ack for a run already released: nothing to drop */
  if (json_is_false(json_object_get(m, "stored")))
    wrk__log("run %" PRId64 " attempt %" PRId64 ": the scheduler refused message %" PRId64
             ": this attempt is no longer this worker's; nothing of it was stored",
             id, attempt, seq);
  drop_through(r, seq);
  if (r->finished_seq && r->finished_seq <= seq)
    wrk__run_acked(r);
}

int wrk__outbox_resend(wrk__worker *w, wrk__conn *c) {
  int nmsg = 0;
  for (wrk__run *r = w->runs; r; r = r->next) {
    if (r->started)
      wrk__conn_write(c, r->started);
    if (r->ckpt)
      wrk__conn_write(c, r->ckpt);
    if (r->branch)
      wrk__conn_write(c, r->branch);
    for (wrk__qmsg *q = r->q_head; q; q = q->next, nmsg++)
      wrk__conn_write(c, q->b);
  }
  return nmsg;
}

int wrk__outbox_unacked(const wrk__run *r) {
  int n = 0;
  for (const wrk__qmsg *q = r->q_head; q; q = q->next)
    n++;
  return n;
}

void wrk__outbox_free(wrk__run *r) {
  drop_through(r, INT64_MAX);
  wrk__wbuf_unref(r->started);
  wrk__wbuf_unref(r->ckpt);
  wrk__wbuf_unref(r->branch);
  r->started = r->ckpt = r->branch = NULL;
  free(r->batch);
  r->batch = NULL;
}

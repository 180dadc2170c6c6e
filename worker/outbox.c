/* The outbox of each run (outbox.h): metric rows batched into metrics
 * messages with sequence numbers, every metrics and finished message kept
 * until the scheduler acks it, and resent in order after a reconnect. */
#include "worker/outbox.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/run.h"
#include "worker/wbuf.h"

#define FLUSH_MS 200
#define FLUSH_ROWS 500
#define FLUSH_BYTES (512u << 10) /* keeps a batch far below PROTO_MAX_LINE */

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

/* Seals the current batch into metrics message seq N, keeps it until its
 * ack, and sends it when connected. A row the protocol would refuse is
 * logged and dropped (so one odd trainer line cannot block the run). */
void wrk__outbox_flush(wrk__run *r) {
  uv_timer_stop(&r->flush_timer);
  if (!r->batch || json_array_size(r->batch) == 0)
    return;
  json_t *rows = r->batch;
  r->batch = NULL;
  r->batch_bytes = 0;
  json_t *msg = wrk__run_header(r, "metrics");
  json_object_set_new(msg, "seq", json_integer(r->next_seq));
  json_object_set(msg, "rows", rows);
  char err[512];
  wrk__wbuf *b = wrk__wbuf_encode(msg, err, sizeof err);
  if (!b) {
    json_t *good = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      json_t *probe = json_array();
      json_array_append(probe, row);
      json_object_set_new(msg, "rows", probe);
      char perr[512];
      wrk__wbuf *pb = wrk__wbuf_encode(msg, perr, sizeof perr);
      if (pb)
        json_array_append(good, row);
      else
        wrk__log("run %" PRId64 ": dropped a trainer row the protocol refuses: %s", r->id, perr);
      wrk__wbuf_unref(pb);
    }
    json_object_set_new(msg, "rows", good);
    b = json_array_size(good) ? wrk__wbuf_encode(msg, err, sizeof err) : NULL;
  }
  json_decref(rows);
  json_decref(msg);
  if (!b)
    return;
  int64_t seq = r->next_seq++;
  wrk__outbox_push(r, seq, b);
  wrk__wbuf_unref(b);
}

static void on_flush_timer(uv_timer_t *t) { wrk__outbox_flush(t->data); }

void wrk__outbox_add_row(wrk__run *r, json_t *row, size_t len) {
  if (len > FLUSH_BYTES) {
    wrk__log("run %" PRId64 ": dropped a trainer row of %zu bytes", r->id, len);
    return;
  }
  if (r->batch_bytes + len > FLUSH_BYTES)
    wrk__outbox_flush(r);
  if (!r->batch)
    r->batch = json_array();
  json_array_append(r->batch, row);
  r->batch_bytes += len;
  if (json_array_size(r->batch) == 1)
    uv_timer_start(&r->flush_timer, on_flush_timer, FLUSH_MS, 0);
  if (json_array_size(r->batch) >= FLUSH_ROWS)
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
  json_decref(r->batch);
  r->batch = NULL;
}

/* Leases: numbered heartbeats, the scheduler's answers that renew the
 * leases of the runs listed, and fencing (trainers whose lease lapsed are
 * killed before their run can go elsewhere: lifecycle.c's FENCED). */
#include "worker/lease.h"

#include <inttypes.h>

#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/trainers.h"

static void on_hb_timer(uv_timer_t *t) {
  wrk__worker *w = t->data;
  json_t *ids = json_array();
  for (wrk__run *r = w->runs; r; r = r->next) {
    int dup = 0;
    for (wrk__run *x = w->runs; x != r; x = x->next)
      dup |= x->id == r->id;
    if (!dup)
      json_array_append_new(ids, json_integer(r->id));
  }
  int64_t hb = ++w->hb_next;
  w->hb_sent[hb % WRK__HB_RING].hb = hb;
  w->hb_sent[hb % WRK__HB_RING].sent_ms = uv_now(&w->loop);
  json_t *msg =
      json_pack("{s:s, s:o, s:I}", "type", "heartbeat", "runs", ids, "hb", (json_int_t)hb);
  wrk__send_json(w, msg);
  json_decref(msg);
}

double wrk__lease_welcome(wrk__worker *w, json_t *welcome) {
  double lease = json_number_value(json_object_get(welcome, "lease_s"));
  w->lease_ms = lease * 1000 > 3.6e6 ? 3600000 : (int64_t)(lease * 1000);
  double hb = w->hb_override > 0 ? w->hb_override
                                 : json_number_value(json_object_get(welcome, "heartbeat_s"));
  uint64_t hb_ms = hb * 1000 < 10 ? 10 : hb * 1000 > 3.6e6 ? 3600000 : (uint64_t)(hb * 1000);
  /* the first heartbeat at once: after a reconnect the leases were last
   * renewed before the scheduler went away, and the fence (judged by the
   * lease this welcome tells, which may be shorter) must not outrun their
   * first renewal by the scheduler now back */
  uv_timer_start(&w->hb_timer, on_hb_timer, 0, hb_ms);
  return hb;
}

/* The scheduler renewed the leases of the runs listed, no earlier than the
 * heartbeat was sent. */
void wrk__on_lease_renewed(wrk__conn *c, json_t *m) {
  wrk__worker *w = c->w;
  int64_t hb = json_integer_value(json_object_get(m, "hb"));
  if (hb <= 0 || w->hb_sent[hb % WRK__HB_RING].hb != hb)
    return;
  uint64_t sent = w->hb_sent[hb % WRK__HB_RING].sent_ms;
  w->fencing = 1;
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(m, "runs"), i, id) {
    for (wrk__run *r = w->runs; r; r = r->next)
      if (r->id == json_integer_value(id) && r->renewed_ms < sent) {
        r->renewed_ms = sent;
        r->renewed_for_ms = w->lease_ms;
      }
  }
}

/* Fencing: a run whose lease this worker could not renew for most of the
 * lease (a partition, a scheduler or database away) may be re-queued and
 * started elsewhere; its trainer is killed (no SIGTERM: a checkpoint
 * written now could race the next attempt's) before that can happen. The
 * run's finished message still goes, when the scheduler is back. Only once
 * the scheduler has answered a heartbeat (an older one never does). */
void wrk__on_fence_timer(uv_timer_t *t) {
  wrk__worker *w = t->data;
  wrk__runs_check_hang(w);
  if (!w->fencing)
    return;
  uint64_t now = uv_now(&w->loop);
  for (wrk__run *r = w->runs; r; r = r->next) {
    uint64_t keep = (uint64_t)(r->renewed_for_ms - r->renewed_for_ms / 4);
    if (!wrk__run_fenceable(r) || r->renewed_for_ms <= 0 || now - r->renewed_ms <= keep)
      continue;
    wrk__log("run %" PRId64 " attempt %" PRId64 ": lease not renewed for %" PRIu64
             " ms (lease %" PRId64 " ms): SIGKILL to pid %d, the run may go to another worker",
             r->id, r->attempt, now - r->renewed_ms, r->renewed_for_ms, r->pid);
    wrk__run_fence(r);
  }
}

/* The lease timer (lease.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/internal.h"
#include "store/runs.h"

static void on_expired(void *ud, int status, const store_run_change *runs, int n,
                       const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    sched__logf("lease check failed: %s", errmsg);
    return;
  }
  for (int i = 0; i < n; i++) {
    sched__wconn *c = sched__conn_by_worker(&s->wp, runs[i].worker);
    if (c)
      sched__conn_release_run(c, runs[i].id);
    sched__logf("run %" PRId64 ": lease expired, now %s", runs[i].id, runs[i].status);
    if (!strcmp(runs[i].status, "failed"))
      s->n.runs_failed++;
    else
      s->n.runs_requeued++;
    sched__events_emit(
        &s->ev, "run",
        json_pack("{s:I,s:s}", "id", (json_int_t)runs[i].id, "status", runs[i].status));
    sched__sweep_touch(s, runs[i].sweep_id, 0);
  }
  if (n > 0)
    sched__place(s);
}

static void on_extended(void *ud, int status, int64_t rows, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    s->ls.db_was_down = 1; /* try again on the next tick */
    sched__logf("extending leases failed: %s", errmsg);
    return;
  }
  sched__logf("leases: %" PRId64 " running run(s) given a full lease (%d s) before any is "
              "judged, as no heartbeat could renew one while the database or this scheduler "
              "was away",
              rows, s->o.lease_s);
}

static void on_lease_timer(uv_timer_t *t) {
  sched *s = t->data;
  sched__wport_reap(&s->wp);
  if (db_ready(s->db))
    sched__sweep_flush(s);
  if (db_ready(s->db) && s->o.predict_s > 0 && ++s->ls.predict_ticks >= s->o.predict_s) {
    s->ls.predict_ticks = 0;
    sched__predict(&s->pr);
  }
  if (!db_ready(s->db)) {
    s->ls.db_was_down = 1;
    return;
  }
  if (s->ls.db_was_down) {
    /* while the database (or this scheduler) was away no heartbeat could
     * renew a lease: give every running run a full lease before judging */
    s->ls.db_was_down = 0;
    store_runs_extend_leases(s->db, s->o.lease_s, on_extended, s);
    return;
  }
  store_runs_expire(s->db, on_expired, s);
  sched__place(s);
}

void sched__lease_start(sched *s) {
  s->ls.db_was_down = 1; /* a (re)started scheduler first extends the leases */
  uv_timer_start(&s->ls.timer, on_lease_timer, 1000, 1000);
}

static void on_timer_closed(uv_handle_t *h) { (void)h; }

void sched__lease_close(sched *s) {
  uv_timer_stop(&s->ls.timer);
  uv_close((uv_handle_t *)&s->ls.timer, on_timer_closed);
}

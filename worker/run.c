/* Run objects (run.h): an assignment becomes a run in the worker's list, a
 * cancel reaches its attempts; lookup and lifetime (a run is freed with its
 * last handle once unlinked). */
#include "worker/run.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/outbox.h"

wrk__run *wrk__run_find(wrk__worker *w, int64_t id, int64_t attempt) {
  for (wrk__run *r = w->runs; r; r = r->next)
    if (r->id == id && r->attempt == attempt)
      return r;
  return NULL;
}

static void run_free(wrk__run *r) {
  wrk__outbox_free(r);
  json_decref(r->done);
  json_decref(r->assign);
  proto_reader_free(&r->rd);
  free(r->error);
  free(r->gpus);
  free(r);
}

/* Out of the list (released or lost: lifecycle.c) and every handle closed. */
static void run_maybe_free(wrk__run *r) {
  if ((r->state == WRK__RUN_RELEASED || r->state == WRK__RUN_LOST) && r->nopen == 0)
    run_free(r);
}

static void on_run_handle_closed(uv_handle_t *h) {
  wrk__run *r = h->data;
  r->nopen--;
  run_maybe_free(r);
}

void wrk__run_close_handle(wrk__run *r, uv_handle_t *h) {
  if (!uv_is_closing(h))
    uv_close(h, on_run_handle_closed);
}

void wrk__run_unlink(wrk__run *r) {
  wrk__worker *w = r->w;
  for (wrk__run **p = &w->runs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  wrk__run_close_handle(r, (uv_handle_t *)&r->flush_timer);
  wrk__run_close_handle(r, (uv_handle_t *)&r->kill_timer);
  run_maybe_free(r);
}

wrk__run *wrk__run_new(wrk__worker *w, int64_t id, int64_t attempt, size_t ngpus) {
  wrk__run *r = calloc(1, sizeof *r);
  if (!r || (ngpus && !(r->gpus = calloc(ngpus, sizeof *r->gpus)))) {
    free(r);
    return NULL;
  }
  r->w = w;
  r->id = id;
  r->attempt = attempt;
  r->ngpus = (int)ngpus;
  r->next_seq = 1;
  r->ckpt_step = -1;
  r->state = WRK__RUN_ASSIGNED;
  r->renewed_ms = uv_now(&w->loop); /* claimed just before it was sent */
  r->renewed_for_ms = w->lease_ms;
  proto_reader_init(&r->rd);
  if (snprintf(r->dir, sizeof r->dir, "%s/runs/%" PRId64, w->work_dir, id) >= (int)sizeof r->dir ||
      snprintf(r->log_path, sizeof r->log_path, "%s/attempt-%" PRId64 ".log", r->dir, attempt) >=
          (int)sizeof r->log_path)
    wrk__log("run %" PRId64 ": the work directory's path is too long", id);
  uv_timer_init(&w->loop, &r->flush_timer);
  uv_timer_init(&w->loop, &r->kill_timer);
  r->flush_timer.data = r->kill_timer.data = r;
  r->nopen = 2;
  wrk__run **tail = &w->runs;
  while (*tail)
    tail = &(*tail)->next;
  *tail = r;
  return r;
}

void wrk__on_assign(wrk__conn *c, json_t *m) {
  wrk__worker *w = c->w;
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int64_t attempt = json_integer_value(json_object_get(m, "attempt"));
  if (wrk__run_find(w, id, attempt)) {
    wrk__log("run %" PRId64 " attempt %" PRId64 ": already assigned here; repeat ignored", id,
             attempt);
    return;
  }
  json_t *gl = json_object_get(m, "gpus");
  size_t ng = json_array_size(gl);
  wrk__run *r = wrk__run_new(w, id, attempt, ng);
  if (!r) {
    wrk__log("run %" PRId64 ": out of memory; assignment ignored", id);
    return;
  }
  r->assign = json_incref(m);
  for (size_t i = 0; i < ng; i++)
    r->gpus[i] = (int)json_integer_value(json_array_get(gl, i));
  wrk__run_assigned(r);
}

void wrk__on_cancel(wrk__conn *c, json_t *m) {
  wrk__worker *w = c->w;
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int found = 0;
  for (wrk__run *r = w->runs, *next; r; r = next) {
    next = r->next;
    if (r->id != id)
      continue;
    found = 1;
    wrk__run_cancel(r, "cancelled by the scheduler");
  }
  if (!found)
    wrk__log("cancel for run %" PRId64 ", which is not here; ignored", id);
}

int wrk__run_dist_ranks(const wrk__run *r, char *buf, size_t len) {
  json_t *dist = json_object_get(r->assign, "dist");
  json_t *list = json_object_get(dist, "ranks");
  if (!json_is_string(json_object_get(dist, "addr")) || !json_is_array(list))
    return 0;
  size_t i, off = 0;
  json_t *v;
  int n = 0;
  buf[0] = '\0';
  json_array_foreach(list, i, v) {
    if (!json_is_integer(v) || off >= len)
      return 0;
    off += (size_t)snprintf(buf + off, len - off, "%s%" JSON_INTEGER_FORMAT, n ? "," : "",
                            json_integer_value(v));
    n++;
  }
  return off < len ? n : 0;
}

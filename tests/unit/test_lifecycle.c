/* worker/lifecycle.c: the table of a run's transitions, every pair of
 * states against it, an illegal move logged and refused without a change,
 * and the events on a worker without a connection (every message stays in
 * its run's outbox, where the test reads it) and without trainers (no run
 * here ever spawns one: a running state is entered by its transitions, and
 * a start is refused for a GPU the worker does not offer). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/err.h"
#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/outbox.h"
#include "worker/run.h"
#include "worker/wbuf.h"

#define S(x) WRK__RUN_##x

/* The moves lifecycle.h draws, written out again: the table must hold
 * exactly these. */
static const struct {
  enum wrk__run_state from, to;
} moves[] = {
    {S(ASSIGNED), S(SPAWNING)}, {S(ASSIGNED), S(FINISHED)}, {S(ASSIGNED), S(LOST)},
    {S(SPAWNING), S(RUNNING)},  {S(SPAWNING), S(FINISHED)}, {S(SPAWNING), S(LOST)},
    {S(RUNNING), S(STOPPING)},  {S(RUNNING), S(FENCED)},    {S(RUNNING), S(FINISHED)},
    {S(RUNNING), S(LOST)},      {S(STOPPING), S(FENCED)},   {S(STOPPING), S(FINISHED)},
    {S(STOPPING), S(LOST)},     {S(FENCED), S(FINISHED)},   {S(FENCED), S(LOST)},
    {S(FINISHED), S(RELEASED)}, {S(FINISHED), S(LOST)},
};

static int listed(enum wrk__run_state from, enum wrk__run_state to) {
  for (size_t i = 0; i < sizeof moves / sizeof *moves; i++)
    if (moves[i].from == from && moves[i].to == to)
      return 1;
  return 0;
}

static void test_table(void) {
  for (int from = 0; from < WRK__RUN_NSTATES; from++)
    for (int to = 0; to < WRK__RUN_NSTATES; to++)
      if (wrk__run_transition_legal(from, to) != listed(from, to)) {
        fprintf(stderr, "%s -> %s: legal %d, expected %d\n", wrk__run_state_name(from),
                wrk__run_state_name(to), wrk__run_transition_legal(from, to), listed(from, to));
        CHECK(0);
      }
  CHECK(!wrk__run_transition_legal(WRK__RUN_NSTATES, S(LOST)));
  CHECK(!wrk__run_transition_legal(S(ASSIGNED), WRK__RUN_NSTATES));
  CHECK(!wrk__run_transition_legal((enum wrk__run_state) - 1, S(LOST)));
  CHECK(!strcmp(wrk__run_state_name(S(FENCED)), "fenced"));
  CHECK(!strcmp(wrk__run_state_name(WRK__RUN_NSTATES), "?"));
  for (int s = 0; s < WRK__RUN_NSTATES; s++)
    CHECK(strcmp(wrk__run_state_name(s), "?") != 0);
}

/* Every pair on a bare run: a legal one moves it, an illegal one is
 * refused (SS_EINVAL) and logged as a bug, and the run stays. */
static void test_transition(const char *dir) {
  char logpath[1100];
  snprintf(logpath, sizeof logpath, "%s/stderr.log", dir);
  fflush(stderr);
  int saved = dup(2);
  CHECK(freopen(logpath, "w", stderr) != NULL);
  wrk__run r;
  memset(&r, 0, sizeof r);
  r.id = 4;
  r.attempt = 2;
  int moved = 0, refused = 0;
  for (int from = 0; from < WRK__RUN_NSTATES; from++)
    for (int to = 0; to < WRK__RUN_NSTATES; to++) {
      r.state = from;
      int rc = wrk__run_transition(&r, to, "test");
      if (listed(from, to)) {
        moved += rc == 0 && r.state == (enum wrk__run_state)to;
      } else {
        refused += rc == SS_EINVAL && r.state == (enum wrk__run_state)from;
      }
    }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  int nlegal = (int)(sizeof moves / sizeof *moves);
  CHECK_INT_EQ(moved, nlegal);
  CHECK_INT_EQ(refused, WRK__RUN_NSTATES * WRK__RUN_NSTATES - nlegal);
  FILE *f = fopen(logpath, "r");
  char line[512];
  int bugs = 0, finished_running = 0;
  while (f && fgets(line, sizeof line, f)) {
    bugs += strstr(line, "worker: BUG: run 4 attempt 2: test while ") != NULL;
    finished_running += strstr(line, "test while finished: no way to running; ignored") != NULL;
  }
  if (f)
    fclose(f);
  CHECK_INT_EQ(bugs, WRK__RUN_NSTATES * WRK__RUN_NSTATES - nlegal);
  CHECK_INT_EQ(finished_running, 1);
}

/* ---- events on a worker ---------------------------------------------------- */

/* A connection that is welcomed but sends nothing (never connected): what
 * the runs send stays in their outbox, and a stopping worker waits for acks
 * on its drain timer instead of closing everything. */
static wrk__conn quiet_conn = {.welcomed = 1};

static wrk__worker *worker_new(const char *dir) {
  wrk__worker *w = calloc(1, sizeof *w);
  if (!w || uv_loop_init(&w->loop) != 0)
    abort();
  snprintf(w->work_dir, sizeof w->work_dir, "%s", dir);
  snprintf(w->bin, sizeof w->bin, "/nonexistent/scalesweep");
  w->cpu_slots = 1;
  w->kill_grace_ms = 60000;
  w->drain_ms = 60000;
  w->lease_ms = 30000;
  uv_timer_init(&w->loop, &w->drain_timer);
  quiet_conn.w = w;
  w->c = &quiet_conn;
  return w; /* no GPU: an assignment with one is refused at its start */
}

static void assign(wrk__worker *w, int64_t id, int64_t attempt, int gpu) {
  json_t *m = json_pack("{s:s, s:I, s:I, s:{}, s:[i]}", "type", "assign", "run_id", (json_int_t)id,
                        "attempt", (json_int_t)attempt, "config", "gpus", gpu);
  wrk__on_assign(&quiet_conn, m);
  json_decref(m);
}

static void ack(wrk__run *r) {
  json_t *m = json_pack("{s:s, s:I, s:I, s:I}", "type", "ack", "run_id", (json_int_t)r->id,
                        "attempt", (json_int_t)r->attempt, "seq", (json_int_t)r->finished_seq);
  wrk__on_ack(&quiet_conn, m);
  json_decref(m);
}

/* A CPU run put into RUNNING by its transitions, without a process
 * (proc_alive stays 0: no signal is ever sent); not through an assignment,
 * which would start it at once. */
static wrk__run *running(wrk__worker *w, int64_t id, int64_t attempt) {
  wrk__run *r = wrk__run_new(w, id, attempt, 0);
  if (!r)
    abort();
  CHECK(!wrk__run_transition(r, S(SPAWNING), "test start"));
  CHECK(!wrk__run_transition(r, S(RUNNING), "test spawned"));
  return r;
}

/* The run's kept messages; the last one parsed (a new reference). */
static json_t *last_kept(const wrk__run *r, int *n) {
  *n = 0;
  const wrk__qmsg *last = NULL;
  for (const wrk__qmsg *q = r->q_head; q; q = q->next, ++*n)
    last = q;
  return last ? json_loadb(last->b->data, last->b->len, 0, NULL) : NULL;
}

static int64_t field(const json_t *m, const char *key) {
  json_t *v = json_object_get(m, key);
  return json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
}

static void test_start_refused(wrk__worker *w) {
  /* ASSIGNED -> SPAWNING -> FINISHED: exit code 2, not interrupted */
  assign(w, 1, 1, 5);
  wrk__run *r = wrk__run_find(w, 1, 1);
  CHECK(r && r->state == S(FINISHED));
  int n;
  json_t *m = last_kept(r, &n);
  CHECK_INT_EQ(n, 1);
  CHECK(!strcmp(json_string_value(json_object_get(m, "type")), "finished"));
  CHECK_INT_EQ(field(m, "exit_code"), 2);
  CHECK_INT_EQ(field(m, "interrupted"), 0);
  CHECK(strstr(json_string_value(json_object_get(m, "error")), "GPU 5") != NULL);
  json_decref(m);
  /* nothing more happens to a finished run: a cancel is ignored, a second
   * end and a start are bugs, refused, and no second message is kept */
  wrk__run_cancel(r, "cancelled by the test");
  wrk__run_complete(r);
  wrk__run_start(r);
  CHECK(r->state == S(FINISHED));
  m = last_kept(r, &n);
  CHECK_INT_EQ(n, 1);
  json_decref(m);
  /* its ack releases it */
  ack(r);
  CHECK(wrk__run_find(w, 1, 1) == NULL);
}

/* The worker is stopping: an assignment goes back at once, interrupted,
 * and the worker waits for its ack. */
static void test_stopping(wrk__worker *w) {
  w->stopping = 1;
  assign(w, 2, 1, 0);
  wrk__run *r = wrk__run_find(w, 2, 1);
  CHECK(r && r->state == S(FINISHED));
  if (!r)
    return;
  int n;
  json_t *m = last_kept(r, &n);
  CHECK_INT_EQ(field(m, "exit_code"), 128 + SIGTERM);
  CHECK_INT_EQ(field(m, "interrupted"), 1);
  json_decref(m);
  CHECK(uv_is_active((uv_handle_t *)&w->drain_timer));
  uv_timer_stop(&w->drain_timer);
  w->stopping = 0;
  ack(r);
}

/* How a running trainer's end is reported, by the way it went. */
static void test_ends(wrk__worker *w) {
  static const struct {
    const char *how;
    int cancel, fence, term_signal, interrupted, fenced;
  } ends[] = {
      {"cancelled by the scheduler: failed", 1, 0, SIGTERM, 0, 0},
      {"SIGTERM from outside (Slurm): interrupted", 0, 0, SIGTERM, 1, 0},
      {"fenced: interrupted", 0, 1, SIGKILL, 1, 1},
      {"cancelled, then fenced: interrupted", 1, 1, SIGKILL, 1, 1},
      {"killed from outside: failed", 0, 0, SIGKILL, 0, 0},
  };
  for (int i = 0; i < (int)(sizeof ends / sizeof *ends); i++) {
    wrk__run *r = running(w, 10 + i, 1);
    if (ends[i].cancel) {
      wrk__run_cancel(r, "cancelled by the test");
      CHECK(r->state == S(STOPPING));
      wrk__run_cancel(r, "cancelled twice"); /* no second SIGTERM */
      CHECK(r->state == S(STOPPING));
    }
    if (ends[i].fence) {
      wrk__run_fence(r);
      CHECK(r->state == S(FENCED));
      wrk__run_fence(r); /* refused: already fenced */
      wrk__run_acked(r); /* refused: no finished message yet */
      CHECK(r->state == S(FENCED));
    }
    r->exit_status = 0;
    r->term_signal = ends[i].term_signal;
    wrk__run_complete(r);
    CHECK(r->state == S(FINISHED));
    int n;
    json_t *m = last_kept(r, &n);
    if (field(m, "interrupted") != ends[i].interrupted || field(m, "fenced") != ends[i].fenced ||
        field(m, "exit_code") != 128 + ends[i].term_signal) {
      fprintf(stderr, "%s: reported %s\n", ends[i].how, json_dumps(m, JSON_COMPACT));
      CHECK(0);
    }
    json_decref(m);
    ack(r);
    CHECK(wrk__run_find(w, 10 + i, 1) == NULL);
  }
}

/* A newer attempt waits for the older one's trainer to end, then starts
 * (and here is refused: its GPU is not offered). */
static void test_supersede(wrk__worker *w) {
  wrk__run *a = running(w, 30, 1);
  assign(w, 30, 2, 7);
  wrk__run *b = wrk__run_find(w, 30, 2);
  CHECK(a->state == S(STOPPING));
  CHECK(b && b->state == S(ASSIGNED));
  a->term_signal = SIGTERM;
  wrk__run_complete(a);
  CHECK(a->state == S(FINISHED));
  CHECK(b && b->state == S(FINISHED));
  int n;
  json_t *m = b ? last_kept(b, &n) : NULL;
  CHECK_INT_EQ(field(m, "exit_code"), 2);
  json_decref(m);
  /* at exit, a finished message not yet acknowledged is dropped: LOST */
  wrk__run_abandon(a);
  CHECK(a->state == S(LOST));
  CHECK(wrk__run_find(w, 30, 1) == NULL);
  if (b)
    ack(b);
}

/* Three attempts: the second waits for the first, the third supersedes
 * the second, which ends at once; the third starts only once the first's
 * trainer has ended. */
static void test_supersede_twice(wrk__worker *w) {
  wrk__run *a = running(w, 40, 1);
  assign(w, 40, 2, 7);
  wrk__run *b = wrk__run_find(w, 40, 2);
  assign(w, 40, 3, 7);
  wrk__run *c = wrk__run_find(w, 40, 3);
  CHECK(a->state == S(STOPPING));
  CHECK(b && b->state == S(FINISHED));
  CHECK(c && c->state == S(ASSIGNED));
  a->term_signal = SIGTERM;
  wrk__run_complete(a);
  CHECK(c && c->state == S(FINISHED)); /* started, then refused: GPU 7 */
  ack(a);
  if (b)
    ack(b);
  if (c)
    ack(c);
}

int main(void) {
  char dir[1024];
  if (check_tmpdir(dir, sizeof dir, "test_lifecycle"))
    return 1;
  test_table();
  test_transition(dir);
  wrk__worker *w = worker_new(dir);
  test_start_refused(w);
  test_ends(w);
  test_supersede(w);
  test_supersede_twice(w);
  test_stopping(w);
  CHECK(w->runs == NULL);
  uv_close((uv_handle_t *)&w->drain_timer, NULL);
  uv_run(&w->loop, UV_RUN_DEFAULT); /* the runs' handles close; the runs go */
  CHECK_INT_EQ(uv_loop_close(&w->loop), 0);
  free(w);
  CHECK_DONE();
}

/* POST /api/sweeps and GET /api/sweeps/{id}/fit (submit.h).
 *
 * A spec of up to 1 MiB can take tens of milliseconds to a second or more
 * to check and plan (10,000 runs, each resolved by the run config parser,
 * or a hostile spec of 100,000 problems), so none of it runs on the loop:
 * parsing, validation, planning, the path check, the canonical spec and
 * the runs' JSON are built by a job on libuv's thread pool, which owns a
 * copy of the body and touches no scheduler state. Its after-callback, on
 * the loop, answers (400) or stores the sweep (store_sweeps_insert copies
 * the texts; PostgreSQL parses them) on the scheduler's submission
 * connection (db_submit), so that the seconds PostgreSQL takes to insert
 * 10,000 runs delay no heartbeat. At most SCHED_SPEC_JOBS jobs are under
 * way at once; a further submission is answered 503 with Retry-After, so
 * that hostile specs cannot take every thread of the pool (the refits and
 * predictions share it) or the memory of a queue.
 *
 * The request stays valid until answered even if its client goes away
 * (http.h), and the loop does not end before a queued job's after-callback
 * has run; once the scheduler is stopping, the answer is 503 and the
 * database (being closed) is not touched. */
#include "scheduler/submit.h"
#include "scheduler/usage.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "scheduler/spec_paths.h"
#include "store/fits.h"
#include "store/sweeps.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

typedef struct sub_job {
  uv_work_t work;
  sched *s;
  http_request *r;
  /* in: the body (owned), the allowed shard directories (the options') */
  char *text;
  size_t len;
  const char *const *data_dirs;
  int ndata_dirs;
  /* out: either the 400 answer, or what to store (all owned) */
  sched__spec_out out;
  char *name, *canon;
  char hash[65];
  sched__who who; /* the submitter: the sweep's owner */
} sub_job;

static void job_free(sub_job *j) {
  free(j->text);
  sched__spec_out_free(&j->out);
  free(j->name);
  free(j->canon);
  free(j);
}

void sched__spec_out_free(sched__spec_out *out) {
  free(out->answer);
  free(out->runs);
}

store_sweep_new sched__spec_out_runs(const sched__spec_out *out) {
  return (store_sweep_new){.priority = out->priority,
                           .gpus = out->gpus,
                           .max_attempts = out->max_attempts,
                           .runs_json = out->runs};
}

int sched__spec_out_answered(const sched *s, http_request *r, int status,
                             const sched__spec_out *out, const char *again, const char *doing) {
  char msg[128];
  if (status != 0 || s->stopping) { /* cancelled, or the database is closing */
    snprintf(msg, sizeof msg, "the scheduler is stopping; %s again once it is back", again);
    http_respond_error(r, 503, msg, NULL);
  } else if (out->status == 400) {
    http_respond_json(r, 400, out->answer);
  } else if (out->status != 0) {
    snprintf(msg, sizeof msg, "out of memory %s", doing);
    http_respond_error(r, 500, msg, NULL);
  } else {
    return 0;
  }
  return 1;
}

void sched__spec_busy(http_request *r, const char *message) {
  char b[256];
  snprintf(b, sizeof b, "{\"error\":{\"message\":\"%s\",\"path\":null}}", message);
  http_respond(r, 503, "application/json", b, strlen(b), "Retry-After: 1\r\n");
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

/* Sets j->status and the answer or what to store. */
static void check_and_plan(sub_job *j) {
  spec_problems pr = {0};
  spec *sp = NULL;
  plan *p = NULL;
  if (spec_parse(j->text, "request body", &sp, &pr) == 0) {
    json_t *raw = json_loads(j->text, 0, NULL); /* parsed once already: valid */
    sched__spec_paths_check(j->data_dirs, j->ndata_dirs, raw, &pr);
    json_decref(raw);
    /* the planner opens the shards to count their tokens: only once every
     * pattern resolved to regular files under --data-dir (a FIFO or a
     * device elsewhere would block this thread, a file elsewhere would be
     * read) */
    if (!pr.n && plan_spec(sp, &p, &pr) != 0 && !pr.n)
      spec_problem_add(&pr, "$", "the spec could not be planned");
  } else if (!pr.n) {
    spec_problem_add(&pr, "$", "the spec could not be planned");
  }
  sched__spec_out *o = &j->out;
  if (pr.n) {
    o->status = 400;
    o->answer = spec_problems_answer(&pr, "invalid sweep spec");
  } else {
    o->status = 0;
    snprintf(j->hash, sizeof j->hash, "%s", sp->digest);
    j->name = dupstr(sp->name ? sp->name : "unnamed");
    j->canon = spec_canonical(sp);
    o->runs = plan_runs_json(p);
    o->priority = sp->priority;
    o->gpus = sp->gpus;
    o->max_attempts = sp->max_attempts > 0 ? sp->max_attempts : 3;
  }
  if ((o->status == 400 && !o->answer) || (o->status == 0 && (!j->name || !j->canon || !o->runs)))
    o->status = 500;
  size_t planned = p ? p->n : 0;
  spec_problems_free(&pr);
  plan_free(p);
  spec_free(sp);
  free(j->text);
  j->text = NULL;
  /* a large sweep's spec, plan and run list (or a hostile spec's problems)
   * were tens of MB of small blocks: give the freed memory back instead of
   * keeping it resident */
  if (j->len > (1u << 18) || planned > 1000)
    malloc_trim(0);
}

/* A spec job yields the CPU to the loop: on a small machine the loop, two
 * jobs and PostgreSQL would otherwise share the cores evenly, and a worker's
 * heartbeat would wait for a time slice. Linux nice values are per thread;
 * the job restores its pool thread's afterwards where it may (an
 * unprivileged thread cannot lower its nice value again: then the thread
 * stays niced, and refits or predictions it runs later are too, which suits
 * background work). */
#define SUBMIT_NICE 10

static void work(uv_work_t *w) {
  id_t tid = (id_t)gettid();
  errno = 0;
  int was = getpriority(PRIO_PROCESS, tid);
  int niced = errno == 0 && was < SUBMIT_NICE && setpriority(PRIO_PROCESS, tid, SUBMIT_NICE) == 0;
  check_and_plan(w->data);
  if (niced)
    setpriority(PRIO_PROCESS, tid, was);
}

typedef struct sub_ctx {
  sched *s;
  http_request *r;
  char hash[65];
} sub_ctx;

static void answer_store_error(http_request *r, int status, const char *errmsg) {
  http_respond_error(r, status == SS_ECONN ? 503 : 500, errmsg, NULL);
}

static void on_existing(void *ud, int status, int64_t sweep_id, const char *errmsg) {
  sub_ctx *x = ud;
  if (status != 0 || sweep_id == 0) {
    answer_store_error(x->r, status, status == 0 ? "sweep vanished" : errmsg);
    return;
  }
  char body[512];
  snprintf(body, sizeof body,
           "{\"error\":{\"message\":\"an identical spec was already submitted as sweep %" PRId64
           "; change the spec (for instance its name or seeds) to run it again\",\"path\":null},"
           "\"id\":%" PRId64 "}",
           sweep_id, sweep_id);
  http_respond_json(x->r, 409, body);
}

static void on_inserted(void *ud, int status, int64_t sweep_id, int64_t runs, const char *errmsg) {
  sub_ctx *x = ud;
  if (status == SCHED__ANSWERED) /* over a limit: x goes with the request */
    return;
  if (status != 0) {
    answer_store_error(x->r, status, errmsg);
    return;
  }
  if (sweep_id == 0) { /* the spec is there already */
    store_sweeps_find_by_hash(x->s->db_submit, x->hash, on_existing, x);
    return;
  }
  char body[256];
  snprintf(body, sizeof body, "{\"id\":%" PRId64 ",\"runs\":%" PRId64 ",\"spec_hash\":\"%s\"}",
           sweep_id, runs, x->hash);
  sched *s = x->s; /* x lives in the request's arena, freed by the answer */
  http_respond_json(x->r, 201, body);
  sched__events_emit(&s->ev, "sweep",
                     json_pack("{s:I,s:s}", "id", (json_int_t)sweep_id, "status", "queued"));
  sched__place(s);
}

/* The spec's priority is within its submitter's range (an admin's: any);
 * else the 403's message in msg. */
static int priority_allowed(sched *s, const sub_job *j, char *msg, size_t len) {
  const sched__user *u = sched__auth_user(&s->auth, j->who.user_id);
  int p = j->out.priority;
  if (j->who.role == SS_ROLE_ADMIN || (u && p >= u->priority_min && p <= u->priority_max))
    return 1;
  snprintf(msg, len,
           "submit refused: priority %d is outside the range %d..%d an admin allows %s "
           "(scalesweep user set NAME --priority-range MIN:MAX)",
           p, u ? u->priority_min : 0, u ? u->priority_max : 0, j->who.name);
  return 0;
}

/* Stores the sweep the job checked and planned (store_sweeps_insert
 * copies the texts), owned by its submitter. */
static void store(sub_job *j) {
  sub_ctx *x = http_alloc(j->r, sizeof *x);
  if (!x)
    return http_respond_error(j->r, 500, "out of memory", NULL);
  *x = (sub_ctx){.s = j->s, .r = j->r};
  snprintf(x->hash, sizeof x->hash, "%s", j->hash);
  store_sweep_new sw = sched__spec_out_runs(&j->out);
  sw.name = j->name;
  sw.spec_json = j->canon;
  sw.spec_hash = x->hash;
  sw.owner_id = j->who.user_id;
  sched__usage_add(j->s, j->r, 0, &sw, on_inserted, x); /* within its owner's queued limits */
}

static void after_work(uv_work_t *w, int status) {
  sub_job *j = w->data;
  char msg[256];
  j->s->submits--;
  if (!sched__spec_out_answered(j->s, j->r, status, &j->out, "submit", "checking the spec")) {
    if (priority_allowed(j->s, j, msg, sizeof msg))
      store(j);
    else
      http_respond_error(j->r, 403, msg, "$.priority");
  }
  job_free(j);
}

void sched__submit(sched *s, http_request *r, const sched__who *who, const char *body, size_t len) {
  if (s->submits >= SCHED_SPEC_JOBS) {
    char msg[128];
    snprintf(msg, sizeof msg, "%d sweep specs are being checked already; submit again in a second",
             SCHED_SPEC_JOBS);
    return sched__spec_busy(r, msg);
  }
  sub_job *j = calloc(1, sizeof *j);
  char *text = malloc(len + 1);
  if (!j || !text) {
    free(j);
    free(text);
    http_respond_error(r, 500, "out of memory", NULL);
    return;
  }
  memcpy(text, body, len);
  text[len] = 0;
  *j = (sub_job){.s = s,
                 .who = *who,
                 .r = r,
                 .text = text,
                 .len = len,
                 .data_dirs = s->o.data_dirs,
                 .ndata_dirs = s->o.ndata_dirs};
  j->work.data = j;
  int rc = uv_queue_work(s->loop, &j->work, work, after_work);
  if (rc) {
    job_free(j);
    http_respond_error(r, 500, uv_strerror(rc), NULL);
    return;
  }
  s->submits++;
}

static void on_fit(void *ud, int status, const char *json, const char *errmsg) {
  http_request *r = ud;
  if (status != 0)
    answer_store_error(r, status, errmsg);
  else if (!json)
    http_respond_error(r, 404, "no such sweep", NULL);
  else
    http_respond_json(r, 200, json);
}

void sched__get_fit(sched *s, http_request *r, int64_t sweep_id) {
  store_fits_latest(db_pool_get(s->reads, 0), sweep_id, on_fit, r);
}

/* Shared between the scheduler's files (not exported). */
#ifndef SS_SCHEDULER_INTERNAL_H
#define SS_SCHEDULER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "http/http.h"
#include "scheduler/counters.h"
#include "scheduler/events.h"
#include "scheduler/lease.h"
#include "scheduler/place.h"
#include "scheduler/predict.h"
#include "scheduler/sched.h"
#include "scheduler/wport.h"
#include "store/store.h"

typedef struct sched sched;

/* The scheduler's state, one struct per concern; the core (sched.c) owns
 * it, sets the concerns up and wires them together (the worker port
 * reports through its hooks). */
struct sched {
  uv_loop_t *loop;
  sched_options o;
  db *db; /* the main connection (the worker port's metric connections: wp) */
  http_server *http;
  int http_port;
  uv_signal_t sigint, sigterm;
  char token[512], api_token[512];
  int stopping;

  sched__events ev;    /* events.h */
  sched__wport wp;     /* wport.h: worker connections, auth failures */
  sched__placement pl; /* place.h */
  sched__leases ls;    /* lease.h */
  sched__predictor pr; /* predict.h */
  sched__counters n;   /* counters.h: for /metrics */

  int64_t touched[256]; /* sweeps waiting for sched__sweep_flush */
  char touched_refit[256];
  int ntouched;

  /* the API's request latencies, le 1,2,5,...ms (for /metrics) */
  uint64_t lat_count, lat_buckets[12];
  double lat_sum_s;
};

/* A timestamped line on stderr ("... scheduler: what happened"). */
void sched__logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* events.c's stream, for the API and refits */
void sched__emit(sched *s, const char *name, json_t *data); /* steals data */

/* place.c: a placement pass (one at a time; asked for during one, another
 * follows it) */
void sched__place(sched *s);

/* lease.c: the lease timer (lease.h), started once serving, closed at stop */
void sched__lease_start(sched *s);
void sched__lease_close(sched *s);

/* refit.c: refit a sweep's laws (after a run of it succeeded) */
void sched__refit(sched *s, int64_t sweep_id);
/* starts the refits asked for while their sweep was being refitted or
 * cooling down (once a second, from sched__sweep_flush) */
void sched__refit_due(sched *s);
/* recomputes sweeps.status from its runs */
void sched__sweep_status(sched *s, int64_t sweep_id);
/* Marks a sweep for a status update (and a refit when refit is set) at the
 * next tick of the lease timer: finishes arriving together cost one of each. */
void sched__sweep_touch(sched *s, int64_t sweep_id, int refit);
void sched__sweep_flush(sched *s);

#define SCHED__TOUCHED 256

/* the worker port (wport.h), for the API */
void sched__cancel_running(sched *s, int64_t run_id);
/* the main connection and every metrics connection are up */
int sched__db_up(const sched *s);

/* api.c */
void sched__http(http_request *r, void *ud);

/* For a run that reproduces another (runs.reproduces), once both have
 * finished (succeeded, failed or cancelled): does its curve match the
 * original's exactly (DESIGN.md: the same config on the same backend and
 * thread count gives the same losses), and if not, the largest difference of
 * a training or validation loss at a common step and where. A cancelled run
 * stored only a prefix of the curve: the steps both stored are compared, and
 * its status is there to say so. NULL for other runs and while either is
 * queued or running. Used by GET /api/runs/{id} (api.c) and the run's page
 * (web.c); $1 is the run. */
#define SCHED__REPRODUCTION_SQL                                                          \
  "(SELECT json_build_object('of', o.id, 'status_original', o.status, "                  \
  "'status_reproduced', me.status, 'steps_original', c.no, 'steps_reproduced', c.nr, "   \
  "'steps_compared', c.n, 'final_val_loss_original', o.final_val_loss, "                 \
  "'final_val_loss_reproduced', me.final_val_loss, "                                     \
  "'identical', c.n = c.no AND c.n = c.nr AND c.same AND "                               \
  "o.final_val_loss IS NOT DISTINCT FROM me.final_val_loss, "                            \
  "'identical_where_both', c.same AND c.n = least(c.no, c.nr), "                         \
  "'max_abs_diff', c.diff, 'at_step', c.at) "                                            \
  "FROM runs me JOIN runs o ON o.id = me.reproduces, LATERAL (SELECT "                   \
  "(SELECT count(*) FROM metrics WHERE run_id = o.id) AS no, "                           \
  "(SELECT count(*) FROM metrics WHERE run_id = me.id) AS nr, "                          \
  "count(*) AS n, coalesce(bool_and(a.train_loss IS NOT DISTINCT FROM b.train_loss AND " \
  "a.val_loss IS NOT DISTINCT FROM b.val_loss), true) AS same, "                         \
  "coalesce(max(greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "                \
  "coalesce(abs(a.val_loss - b.val_loss), 0))), 0) AS diff, "                            \
  "(array_agg(a.step ORDER BY greatest(coalesce(abs(a.train_loss - b.train_loss), 0), "  \
  "coalesce(abs(a.val_loss - b.val_loss), 0)) DESC, a.step))[1] AS at "                  \
  "FROM metrics a JOIN metrics b ON b.run_id = me.id AND b.step = a.step "               \
  "WHERE a.run_id = o.id) c "                                                            \
  "WHERE me.id = $1 AND me.status IN ('succeeded', 'failed', 'cancelled') "              \
  "AND o.status IN ('succeeded', 'failed', 'cancelled'))"

/* web.c: the status page. sched__web answers what is the page's (every path
 * outside /api/ but /metrics and /healthz, and the page's own JSON under
 * /api/: curves, fit points) and returns 1; 0 leaves the request to the API. */
int sched__web(sched *s, http_request *r);
/* text with & < > " ' replaced by their HTML character references (malloc;
 * NULL when out of memory): safe inside elements and quoted attributes */
char *sched__html_escape(const char *text);

/* The page's files, embedded at build time (scheduler/embed_web.cmake). */
typedef struct sched__asset {
  const char *name; /* served as /static/NAME */
  const char *type; /* Content-Type */
  const unsigned char *data;
  size_t len;
  const char *etag; /* quoted */
} sched__asset;
extern const sched__asset sched__assets[];
extern const int sched__nassets;
/* The asset named exactly name (no path is ever resolved), or NULL. */
const sched__asset *sched__asset_find(const char *name);

#endif

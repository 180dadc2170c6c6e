/* The read documents of the API and the status page: each is one JSON
 * document built by PostgreSQL, answered to a store_json_cb (json NULL:
 * no such object). Keys are the table columns (docs/design.md#the-http-api);
 * the page's documents carry what its HTML shows. */
#ifndef SS_STORE_PAGES_H
#define SS_STORE_PAGES_H

#include <stdint.h>

#include "store/store.h"

/* One page of a sweep's runs (GET /api/sweeps/{id}/runs). */
typedef struct store_runs_page {
  int64_t limit, offset;
  const char *status; /* a run status, or NULL: every status */
  const char *sort;   /* a name store_pages_sort_column accepted */
  int desc;           /* descending instead of ascending */
} store_runs_page;

/* The column name (from the store's own table, so safe to sort by) equal
 * to name, or NULL when runs cannot be sorted by it. */
const char *store_pages_sort_column(const char *name);

/* GET /api/sweeps: the newest 1000 sweeps with their run counts. */
void store_pages_sweeps(db *d, store_json_cb cb, void *ud);

/* GET /api/sweeps/{id}: the sweep document (header, its lr tune's state
 * or decision as "lr_tune" (null without one), its adaptive design as
 * "adaptive" (null without one), counts and one page of
 * runs; NULL: no such sweep), with the counts the scheduler needs beside it
 * as numbers, so that adding what only it knows (why queued runs wait) does
 * not mean parsing a document of half a megabyte. */
typedef struct store_sweep_doc {
  const char *json;
  int64_t queued;       /* queued runs */
  int64_t queued_gpus;  /* the most GPUs a queued run needs */
  int64_t queued_slots; /* the most CPU slots a queued CPU run needs */
  const char *queued_trainers; /* the queued runs' trainers, comma-separated */
} store_sweep_doc;
typedef void (*store_sweep_doc_cb)(void *ud, int status, const store_sweep_doc *doc,
                                   const char *errmsg);
void store_pages_sweep(db *d, int64_t sweep_id, const store_runs_page *pg, store_sweep_doc_cb cb,
                       void *ud);

/* GET /api/sweeps/{id}/runs: the page of runs alone, as
 * {"runs_total", "runs_offset", "runs_limit", "runs"}. */
void store_pages_sweep_runs(db *d, int64_t sweep_id, const store_runs_page *pg, store_json_cb cb,
                            void *ud);

/* GET /api/runs/{id}: {"run", "metrics" (limit rows in step order from
 * offset), "metrics_total", "reproduction"}. */
void store_pages_run(db *d, int64_t run_id, int64_t limit, int64_t offset, store_json_cb cb,
                     void *ud);

/* The overview page: {"sweeps" (newest 50), "sweeps_total", "queue",
 * "next" (the 10 runs to start next), "failures" (the 10 latest)}. */
void store_pages_overview(db *d, store_json_cb cb, void *ud);

/* The sweep page: {"sweep", "counts", "fits" (the latest of each law),
 * "lr_tune" and "adaptive" (as in the API's document),
 * "runs_total", "runs"}: limit runs from offset in id order, of one status
 * when status is not NULL. */
void store_pages_sweep_page(db *d, int64_t sweep_id, const char *status, int64_t offset, int limit,
                            store_json_cb cb, void *ud);

/* The run page (and its config.json): the run with its sweep's and
 * worker's names, times as UTC text, its reproduction check and the runs
 * that reproduce it. */
void store_pages_run_page(db *d, int64_t run_id, store_json_cb cb, void *ud);

/* Curves sampled on the server: per run, up to points + 1 steps spaced
 * evenly in log(step), training and validation. Runs: those of sweep_id
 * (when not 0; id order, limit of them from offset) or of run_ids (a
 * PostgreSQL array literal such as "{1,2}", or NULL). */
void store_pages_curves(db *d, int64_t sweep_id, const char *run_ids, int64_t points, int64_t limit,
                        int64_t offset, store_json_cb cb, void *ud);

/* A sweep's succeeded runs that the laws fit, as columns (the fit plots). */
void store_pages_points(db *d, int64_t sweep_id, store_json_cb cb, void *ud);

/* How many runs are in each status (for /metrics). */
typedef struct store_run_counts {
  int64_t queued, running, succeeded, failed;
} store_run_counts;
typedef void (*store_run_counts_cb)(void *ud, int status, const store_run_counts *c,
                                    const char *errmsg);
void store_pages_run_counts(db *d, store_run_counts_cb cb, void *ud);

#endif

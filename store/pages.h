/* What the API and the status page read: typed rows (the scheduler writes
 * the API's JSON from them in scheduler/pages_json.c, the HTML in
 * scheduler/web_*.c), and the documents still built by PostgreSQL: a run's
 * reproduction check, curves and fit points. Keys are the table columns
 * (docs/design.md#the-http-api). */
#ifndef SS_STORE_PAGES_H
#define SS_STORE_PAGES_H

#include <stdint.h>

#include "common/metric_row.h"
#include "store/store.h"

/* SQL NULL in an integer of the rows below (a double's is NAN, a string's
 * NULL). */
#define STORE_NULL_INT INT64_MIN

/* The rows below point into the store's result: valid during the callback
 * only. Times as ..._at are ISO 8601 text as PostgreSQL writes them in JSON
 * ("2026-01-02T00:10:00+00:00", the API's); as ..._utc, "YYYY-MM-DD
 * HH:MM:SS" in UTC (the page's). A document is a jsonb column's (or one
 * PostgreSQL built beside the row's columns) JSON text, passed through as it
 * is: it is the reader's to take apart, not the store's (a sweep's spec, its
 * lr tune and adaptive design, a run's environment and prediction). */

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

/* A sweep's runs counted, by status and compute: one pass over them, the
 * API's counts and the page's alike. */
typedef struct store_sweep_counts {
  int64_t total, queued, running, succeeded, failed, cancelled;
  int64_t done;                /* succeeded, failed or cancelled */
  int64_t queued_gpus;         /* the most GPUs a queued run needs */
  int64_t queued_slots;        /* the most CPU slots a queued CPU run needs (1 without one) */
  const char *queued_trainers; /* the queued runs' trainers, comma-separated ("" without) */
  int64_t branched;            /* succeeded runs that started from a trunk's checkpoint */
  double flops_planned, flops_done /* by the succeeded runs */, flops_spent /* so far, by all */,
      flops_trained /* by the succeeded runs themselves, not their trunks */;
  const char *models; /* its runs' models, each once ("gpt2, SP; llama, SP"), NULL without runs */
} store_sweep_counts;

/* A sweep with its runs counted (the API's sweep document, the page's
 * summary). */
typedef struct store_sweep {
  int64_t id, priority;
  const char *name, *status, *spec_hash;
  const char *owner; /* its owner's name (users.name) */
  const char *created_at, *created_utc;
  const char *method, *description; /* the spec's, NULL when it has none */
  const char *spec;                 /* document (the API's; NULL on the page) */
  const char *lr_tune;  /* document: its lr tune's decision or state, NULL without one */
  const char *adaptive; /* document: its adaptive design, NULL without one */
  const char *fits;     /* document: {law: the newest fit's params}, NULL without one */
  store_sweep_counts counts;
} store_sweep;

/* A run's row as the API writes it. */
typedef struct store_run {
  int64_t id, sweep_id, attempt, max_attempts, gpus, priority;
  const char *status;
  int64_t worker; /* the worker's id while it holds the run */
  const char *lease_until;
  int64_t params, nonembedding_params, tokens, batch_size;
  double flops, final_val_loss;
  const char *started_at, *finished_at;
  int64_t reproduces; /* the run it reproduces */
  const char *code_version, *error;
  int64_t checkpoint_step;
  const char *config_hash, *part;
  const char *target_loss, *prediction, *designed; /* documents */
  int64_t branch_of, branch_step;
  const char *retry_after; /* when a failed run waiting to retry starts again */
  const char *environment; /* document */
  const char *on_worker;   /* the worker it must run on */
  const char *model;       /* "gpt2, SP" (rcfg_model_text's words) */
} store_run;

/* One page of a sweep's runs: the runs of the page's status there are
 * (total) and n of them from offset. */
typedef struct store_runs {
  int64_t total, offset, limit;
  const store_run *runs;
  int n;
} store_runs;

/* page NULL: no such sweep. */
typedef void (*store_runs_cb)(void *ud, int status, const store_runs *page, const char *errmsg);

/* GET /api/sweeps: the newest 1000 sweeps with their run counts (of
 * store_sweep_counts: total, queued, running, succeeded, failed, queued_*,
 * flops_planned, flops_done; the others 0). */
typedef void (*store_sweep_list_cb)(void *ud, int status, const store_sweep *sweeps, int n,
                                    const char *errmsg);
void store_pages_sweeps(db *d, store_sweep_list_cb cb, void *ud);

/* GET /api/sweeps/{id}: the sweep with its counts and one page of its runs
 * (sweep and runs NULL: no such sweep). */
typedef void (*store_sweep_doc_cb)(void *ud, int status, const store_sweep *sweep,
                                   const store_runs *runs, const char *errmsg);
void store_pages_sweep_doc(db *d, int64_t sweep_id, const store_runs_page *pg,
                           store_sweep_doc_cb cb, void *ud);

/* One page of a sweep's runs (GET /api/sweeps/{id}/runs). */
void store_pages_sweep_runs(db *d, int64_t sweep_id, const store_runs_page *pg, store_runs_cb cb,
                            void *ud);

/* Where one attempt of a run ran (migration 014). */
typedef struct store_attempt {
  int64_t attempt;
  const char *worker, *started_at;
  const char *environment; /* document */
} store_attempt;

/* A page of a run's metric rows in step order: limit of its total from
 * offset, each row's stored columns (ss_metric_stored) read from the
 * table by SS_METRIC_COLS, NAN where null; the others NAN. */
typedef struct store_metric_page {
  int64_t total, offset, limit;
  const ss_metric_row *rows;
  int n;
} store_metric_page;

/* GET /api/runs/{id}: the run, its resolved config, its attempts, a page
 * of its metric rows and its reproduction check. */
typedef struct store_run_doc {
  store_run run;
  const char *config; /* document */
  const store_attempt *attempts;
  int nattempts;
  store_metric_page metrics;
  /* document PostgreSQL builds (it compares the two runs' metric rows
   * where they are): NULL unless the run reproduces one and both ended */
  const char *reproduction;
} store_run_doc;
/* doc NULL: no such run. */
typedef void (*store_run_doc_cb)(void *ud, int status, const store_run_doc *doc,
                                 const char *errmsg);
void store_pages_run(db *d, int64_t run_id, int64_t limit, int64_t offset, store_run_doc_cb cb,
                     void *ud);

/* The overview page. */
typedef struct store_overview_sweep {
  int64_t id;
  const char *name, *status, *owner;
  int64_t total, done, running, queued, failed;
  double flops_planned, flops_spent;
} store_overview_sweep;
/* A queued run, or a failed one (finished_utc and error). */
typedef struct store_overview_run {
  int64_t id, sweep_id;
  const char *sweep; /* its name */
  int64_t attempt, gpus;
  double nonembedding_params, flops;
  const char *finished_utc, *error;
} store_overview_run;
typedef struct store_overview {
  const store_overview_sweep *sweeps; /* the newest 50 */
  int nsweeps;
  int64_t sweeps_total;
  int64_t queued, queued_gpus, queued_cpu; /* queued runs, the GPUs they ask, those on CPU */
  const store_overview_run *next;          /* the 10 runs to start next */
  int nnext;
  const store_overview_run *failures; /* the 10 latest */
  int nfailures;
} store_overview;
typedef void (*store_overview_cb)(void *ud, int status, const store_overview *o,
                                  const char *errmsg);
void store_pages_overview(db *d, store_overview_cb cb, void *ud);

/* The sweep page: the sweep, the runs `next` designed, a page of runs. */
typedef struct store_page_run {
  int64_t id, attempt, max_attempts;
  const char *status, *worker; /* the worker's name */
  double nonembedding_params, tokens, batch_size, flops, final_val_loss;
  double duration_s;    /* so far while it runs; NAN before it started */
  const char *designed; /* document: what `next` predicted of it (the designed runs) */
} store_page_run;
typedef struct store_sweep_page {
  store_sweep sweep;
  const store_page_run *designed; /* predicted beside measured: the first 200 by budget, size */
  int ndesigned;
  int64_t runs_total; /* of the page's status */
  const store_page_run *runs;
  int nruns;
  const char *usage; /* document: the cost and waste of its ended attempts (the columns of
                      * store/usage.h store_usage_sweep's) */
} store_sweep_page;
typedef void (*store_sweep_page_cb)(void *ud, int status, const store_sweep_page *p,
                                    const char *errmsg);
/* limit runs from offset in id order, of one status when status is not
 * NULL; p NULL: no such sweep. */
void store_pages_sweep_page(db *d, int64_t sweep_id, const char *status, int64_t offset, int limit,
                            store_sweep_page_cb cb, void *ud);

/* A run that reproduces another (the run page's "Reproduced by"). */
typedef struct store_run_ref {
  int64_t id;
  const char *status;
} store_run_ref;

/* The run page (and its config.json): the run with its sweep's and
 * worker's names, times as UTC text (its attempts' too), its reproduction
 * check and the runs that reproduce it. */
typedef struct store_run_page {
  store_run run;
  const char *sweep, *worker_name;
  const char *owner; /* its sweep's owner's name (users.name) */
  const char *started_utc, *finished_utc;
  double duration_s; /* so far while it runs; NAN before it started */
  const char *log_tail;
  const char *config;            /* document */
  const char *reproduction;      /* document (store_run_doc's) */
  const store_attempt *attempts; /* started_at as ..._utc */
  int nattempts;
  const store_run_ref *reproduced_by;
  int nreproduced_by;
} store_run_page;
/* p NULL: no such run. */
typedef void (*store_run_page_cb)(void *ud, int status, const store_run_page *p,
                                  const char *errmsg);
void store_pages_run_page(db *d, int64_t run_id, store_run_page_cb cb, void *ud);

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

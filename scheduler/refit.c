/* Refitting a sweep's laws when its runs finish (DESIGN.md data flow, step
 * 4): the points come from PostgreSQL, the fits run on libuv's thread pool
 * (a Chinchilla fit with its bootstrap takes about a second and must not
 * hold the loop), and each result is stored in `fits` and announced on the
 * event stream. One refit per sweep at a time; finishes that arrive
 * meanwhile cause one more. */
#include <gsl/gsl_errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/internal.h"
#include "store/db.h"
#include "sweeps/fit.h"
#include "trainer/data.h"

#define REFIT_BOOTSTRAP 200 /* enough for 95% intervals; the CLI can ask for more */

/* chinchilla over every run but the ladder's and reproductions (a run
 * trained again is the same observation, not a new one), isoflop over the
 * isoflop runs, batch over the ladder (steps to each target loss, from the runs'
 * evaluations), bopt over every run but the ladder's */
static const char *const laws[] = {"chinchilla", "isoflop", "batch", "bopt"};
#define NLAWS 4

typedef struct refit {
  uv_work_t work;
  sched *s;
  int64_t sweep_id;
  fit_point *pts; /* the loss laws' points: one per run */
  int n;
  int *isoflop;   /* per point: 1 when it is an isoflop run */
  fit_point *lad; /* the ladder's points: one per run and target reached */
  int nlad;
  int lad_runs, lad_missed; /* ladder runs; (run, target) pairs never reached */
  double *bnoise;    /* per ladder run: median b_noise of its second half, tokens (NAN: none) */
  char *synthetic;   /* the first run's data.synthetic (JSON text; NULL: real data) */
  int seq_len;       /* and its seq_len */
  char *json[NLAWS]; /* results (NULL: the points do not support the law yet) */
  int npoints[NLAWS];
  char why[NLAWS][600]; /* why a law was not fitted */
  uint64_t started_ms;
  struct refit *next;
} refit;

/* sweeps being refitted, and those to refit again when that ends; after a
 * refit a sweep cools down for REFIT_COOLDOWN times as long as it took (a
 * sweep of 10,000 runs must not keep a core fitting) */
#define REFIT_COOLDOWN 4
#define REFIT_COOLDOWN_MAX_MS 60000
typedef struct refit_state {
  int64_t busy[64], again[64], cool[64];
  uint64_t cool_until_ms[64];
  int nbusy, nagain, ncool;
} refit_state;

static refit_state state;

static int in(const int64_t *a, int n, int64_t v) {
  for (int i = 0; i < n; i++)
    if (a[i] == v)
      return i;
  return -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The ladder's gradient noise scale: the median over its runs of each run's
 * late median b_noise (SCIENCE.md section 3), next to B_crit in the fit. */
static void add_bnoise(refit *r, fit_result *res) {
  double *v = malloc(sizeof(double) * (r->lad_runs ? r->lad_runs : 1));
  int m = 0;
  for (int i = 0; v && i < r->lad_runs; i++)
    if (isfinite(r->bnoise[i]))
      v[m++] = r->bnoise[i];
  if (m) {
    qsort(v, m, sizeof *v, cmp_double);
    double med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    fit_result_add_derived(res, "B_noise", med);
  } else {
    fit_result_warn(res, "no b_noise from the ladder's runs (the trainer measures it when "
                         "micro_batch_size is below batch_size)");
  }
  if (r->lad_missed)
    fit_result_warn(res,
                    "%d (run, target loss) pairs: the run never reached the target; "
                    "left out",
                    r->lad_missed);
  free(v);
}

/* The extrapolation check (SCIENCE.md section 2): the law refitted without
 * the largest compute budget predicts that budget's runs; NULL when the
 * points have a single budget or the refit fails. No bootstrap: the check
 * compares point estimates. */
static json_t *extrapolation(refit *r, const fit_options *o) {
  fit_options o2 = *o;
  o2.bootstrap = 0;
  fit_result ex;
  char err[512];
  json_t *j = NULL;
  if (fit_extrapolation_check(r->pts, r->n, &o2, &ex, err, sizeof err) == 0) {
    double v[4] = {NAN, NAN, NAN, NAN};
    static const char *const names[4] = {"holdout_flops", "holdout_pred_loss", "holdout_loss",
                                         "holdout_rel_err"};
    for (int k = 0; k < 4; k++) {
      const fit_param *q = fit_result_get(&ex, names[k]);
      v[k] = q ? q->value : NAN;
    }
    json_t *w = json_array();
    for (int i = 0; i < ex.nwarnings; i++)
      json_array_append_new(w, json_string(ex.warnings[i]));
    j = json_pack("{s:f,s:i,s:f,s:f,s:f,s:o}", "held_out_flops", v[0], "fitted_points", ex.n_points,
                  "predicted_loss", v[1], "measured_loss", v[2], "rel_err", v[3], "warnings", w);
  }
  fit_result_free(&ex);
  return j;
}

/* The corpus's true irreducible loss when the sweep trains on the synthetic
 * corpus (SCIENCE.md section 5): its exact entropy rate and the window floor
 * at the runs' seq_len, what E should come out near. NULL for real data. */
static json_t *corpus_truth(const refit *r) {
  json_t *syn = r->synthetic ? json_loads(r->synthetic, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
  json_t *j = NULL;
  if (json_is_object(syn) && r->seq_len > 0) {
    trn_synth_params p = {.letters = (int)json_number_value(json_object_get(syn, "letters")),
                          .words = (int)json_number_value(json_object_get(syn, "words")),
                          .min_len = (int)json_number_value(json_object_get(syn, "min_len")),
                          .max_len = (int)json_number_value(json_object_get(syn, "max_len")),
                          .zipf = json_number_value(json_object_get(syn, "zipf")),
                          .seed = (uint64_t)json_number_value(json_object_get(syn, "seed"))};
    trn_lexicon *lx;
    char err[256];
    if (trn_lexicon_new(&p, &lx, err, sizeof err) == 0) {
      double rate = trn_lexicon_entropy_rate(lx), floor_ = trn_lexicon_window_floor(lx, r->seq_len);
      trn_lexicon_free(lx);
      if (isfinite(rate) && isfinite(floor_))
        j = json_pack("{s:f,s:f,s:i}", "entropy_rate", rate, "window_floor", floor_, "seq_len",
                      r->seq_len);
    }
  }
  json_decref(syn);
  return j;
}

/* The stability check (exponents that move when the smallest budget goes
 * are not yet measured): law refitted without the points of the smallest
 * compute budget (ln C within 0.05 of the smallest's, as the fits group
 * budgets), with the same bootstrap.
 * NULL when fewer than 2 budgets would remain or the fit fails. */
static json_t *without_smallest_budget(const fit_point *pts, int n, const char *law,
                                       const fit_options *o) {
  double cmin = INFINITY;
  for (int k = 0; k < n; k++)
    cmin = pts[k].flops < cmin ? pts[k].flops : cmin;
  fit_point *rest = calloc(n > 0 ? (size_t)n : 1, sizeof *rest);
  int m = 0;
  double cnext = INFINITY, cmax = 0;
  for (int k = 0; k < n; k++)
    if (rest && log(pts[k].flops / cmin) > 0.05) { /* the fits' budget tolerance */
      rest[m++] = pts[k];
      cnext = pts[k].flops < cnext ? pts[k].flops : cnext;
      cmax = pts[k].flops > cmax ? pts[k].flops : cmax;
    }
  json_t *j = NULL;
  if (m > 0 && log(cmax / cnext) > 0.05) {
    fit_result res;
    char err[512];
    fit_result_init(&res, law);
    int rc = !strcmp(law, "isoflop") ? fit_isoflop(rest, m, o, &res, err, sizeof err)
                                     : fit_chinchilla(rest, m, o, &res, err, sizeof err);
    if (rc == 0) {
      json_t *v = json_object(), *ci = json_object();
      static const char *const names[] = {"E", "A", "B", "alpha", "beta", "a", "b"};
      for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const fit_param *q = fit_result_get(&res, names[i]);
        if (!q || !isfinite(q->value))
          continue;
        json_object_set_new(v, names[i], json_real(q->value));
        if (isfinite(q->ci_lo) && isfinite(q->ci_hi))
          json_object_set_new(ci, names[i], json_pack("[f,f]", q->ci_lo, q->ci_hi));
      }
      int usable = 0;
      for (int b = 0; b < res.nbudgets; b++)
        usable += res.budgets[b].usable;
      j = json_pack("{s:f,s:i,s:o,s:o}", "dropped_flops", cmin, "fitted_points", m, "params", v,
                    "ci95", ci);
      if (!strcmp(law, "isoflop"))
        json_object_set_new(j, "usable_budgets", json_integer(usable));
    }
    fit_result_free(&res);
  }
  free(rest);
  return j;
}

static void work(uv_work_t *w) {
  refit *r = w->data;
  fit_options o = {.bootstrap = REFIT_BOOTSTRAP,
                   .seed = (uint64_t)r->sweep_id,
                   .threads = 1,
                   .fit_irreducible = 1};
  fit_point *iso = calloc(r->n ? (size_t)r->n : 1, sizeof *iso);
  int niso = 0;
  for (int k = 0; k < r->n; k++)
    if (r->isoflop[k])
      iso[niso++] = r->pts[k];
  for (int l = 0; l < NLAWS; l++) {
    fit_result res;
    char err[512] = "";
    int rc = -1;
    fit_result_init(&res, laws[l]);
    if (l == 0)
      rc = fit_chinchilla(r->pts, r->n, &o, &res, err, sizeof err);
    else if (l == 1 && niso)
      rc = fit_isoflop(iso, niso, &o, &res, err, sizeof err);
    else if (l == 2 && r->nlad)
      rc = fit_batch(r->lad, r->nlad, &o, &res, err, sizeof err);
    else if (l == 3)
      rc = fit_bopt(r->pts, r->n, &o, &res, err, sizeof err);
    if (rc == 0 && l == 2)
      add_bnoise(r, &res);
    /* checks that ride along in the fit's object */
    json_t *extra = json_object();
    if (rc == 0 && l == 0) {
      json_object_set_new(extra, "extrapolation", extrapolation(r, &o));
      json_object_set_new(extra, "without_smallest_budget",
                          without_smallest_budget(r->pts, r->n, "chinchilla", &o));
      json_object_set_new(extra, "corpus", corpus_truth(r));
    } else if (rc == 0 && l == 1) {
      json_object_set_new(extra, "without_smallest_budget",
                          without_smallest_budget(iso, niso, "isoflop", &o));
    }
    /* a law the points cannot support (too few, one size, no ladder) is
     * simply not fitted yet */
    if (rc == 0) {
      r->json[l] = fit_result_to_json(&res);
      r->npoints[l] = res.n_points;
      if (json_object_size(extra) > 0) {
        json_t *j = json_loads(r->json[l], 0, NULL);
        json_object_update(j, extra);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
        if (text) {
          free(r->json[l]);
          r->json[l] = text;
        }
        json_decref(j);
      }
    } else {
      snprintf(r->why[l], sizeof r->why[l], "%s",
               rc != -1 ? err
               : l == 1 ? "no isoflop runs"
                        : "no batch ladder runs");
    }
    json_decref(extra);
    fit_result_free(&res);
  }
  free(iso);
}

static void refit_free(refit *r) {
  free(r->pts);
  free(r->isoflop);
  free(r->lad);
  free(r->bnoise);
  free(r->synthetic);
  free(r);
}

static void on_stored(void *ud, int status, PGresult *res, const char *errmsg) {
  (void)res;
  if (status != 0)
    fprintf(stderr, "scheduler: storing a fit failed: %s\n", errmsg);
  (void)ud;
}

static void after_work(uv_work_t *w, int status) {
  refit *r = w->data;
  sched *s = r->s;
  for (int l = 0; l < NLAWS && status == 0 && !s->stopping; l++) {
    if (!r->json[l]) {
      fprintf(stderr, "scheduler: sweep %" PRId64 ": %s not fitted (%d points): %s\n", r->sweep_id,
              laws[l], r->n, r->why[l]);
      continue;
    }
    char id[32], np[16];
    snprintf(id, sizeof id, "%" PRId64, r->sweep_id);
    snprintf(np, sizeof np, "%d", r->npoints[l]);
    const char *p[4] = {id, laws[l], r->json[l], np};
    db_query(s->db,
             "INSERT INTO fits (sweep_id, law, params, intervals, n_points) "
             "VALUES ($1, $2, $3::jsonb, jsonb_build_object('ci95', $3::jsonb->'ci95', "
             "'stderr', $3::jsonb->'stderr'), $4::int)",
             4, p, on_stored, NULL);
    json_error_t je;
    json_t *fit = json_loads(r->json[l], 0, &je);
    sched__emit(s, "fit",
                json_pack("{s:I,s:s,s:o}", "sweep_id", (json_int_t)r->sweep_id, "law", laws[l],
                          "fit", fit ? fit : json_null()));
  }
  int i = in(state.busy, state.nbusy, r->sweep_id);
  if (i >= 0)
    state.busy[i] = state.busy[--state.nbusy];
  uint64_t now = uv_now(s->loop), took = now - r->started_ms;
  int c = in(state.cool, state.ncool, r->sweep_id);
  if (c < 0 && state.ncool < 64)
    c = state.ncool++;
  if (c >= 0) {
    state.cool[c] = r->sweep_id;
    state.cool_until_ms[c] =
        now + (took * REFIT_COOLDOWN < REFIT_COOLDOWN_MAX_MS ? took * REFIT_COOLDOWN
                                                             : REFIT_COOLDOWN_MAX_MS);
  }
  /* a refit asked for meanwhile waits in `again` for sched__refit_due */
  for (int l = 0; l < NLAWS; l++)
    free(r->json[l]);
  refit_free(r);
}

static void refit_abandon(refit *r, int status, const char *errmsg) {
  if (status != 0)
    fprintf(stderr, "scheduler: reading fit points failed: %s\n", errmsg);
  int i = in(state.busy, state.nbusy, r->sweep_id);
  if (i >= 0)
    state.busy[i] = state.busy[--state.nbusy];
  refit_free(r);
}

/* Steps to first reach `target` from a run's evaluations [[step, val_loss],
 * ...] in step order: linear between the last evaluation above the target
 * and the first at or below it; NAN when never reached. */
static double steps_to(json_t *evals, double target) {
  double s0 = NAN, l0 = NAN;
  size_t i;
  json_t *e;
  json_array_foreach(evals, i, e) {
    double s = json_number_value(json_array_get(e, 0)), l = json_number_value(json_array_get(e, 1));
    if (l <= target) {
      if (isnan(s0) || !(l0 > l))
        return s;
      return s0 + (s - s0) * (l0 - target) / (l0 - l);
    }
    s0 = s;
    l0 = l;
  }
  return NAN;
}

/* rows: run id, batch size in tokens, target losses (JSON array), the
 * evaluations (JSON), median late b_noise in tokens (or NULL) */
static void on_ladder(void *ud, int status, PGresult *res, const char *errmsg) {
  refit *r = ud;
  sched *s = r->s;
  if (status != 0 || s->stopping)
    return refit_abandon(r, status, errmsg);
  int nrun = PQntuples(res), cap = 0;
  r->lad_runs = nrun;
  r->bnoise = calloc(nrun ? (size_t)nrun : 1, sizeof *r->bnoise);
  for (int k = 0; k < nrun; k++) {
    json_t *targets = json_loads(PQgetvalue(res, k, 2), 0, NULL);
    json_t *evals = json_loads(PQgetvalue(res, k, 3), 0, NULL);
    r->bnoise[k] = PQgetisnull(res, k, 4) ? NAN : atof(PQgetvalue(res, k, 4));
    size_t i;
    json_t *t;
    json_array_foreach(targets, i, t) {
      double st = steps_to(evals, json_number_value(t));
      if (!(st > 0)) {
        r->lad_missed++;
        continue;
      }
      if (r->nlad == cap) {
        cap = cap ? 2 * cap : 64;
        fit_point *np = realloc(r->lad, sizeof *np * (size_t)cap);
        if (!np)
          break;
        r->lad = np;
      }
      fit_point *p = &r->lad[r->nlad++];
      *p = (fit_point){.params = NAN, .tokens = NAN, .flops = NAN, .lr = NAN};
      p->batch_size = atof(PQgetvalue(res, k, 1));
      p->steps = st;
      p->loss = json_number_value(t);
      p->group = k;
    }
    json_decref(targets);
    json_decref(evals);
  }
  r->work.data = r;
  uv_queue_work(s->loop, &r->work, work, after_work);
}

static void on_points(void *ud, int status, PGresult *res, const char *errmsg) {
  refit *r = ud;
  sched *s = r->s;
  if (status != 0 || s->stopping)
    return refit_abandon(r, status, errmsg);
  r->n = PQntuples(res);
  r->pts = calloc(r->n ? (size_t)r->n : 1, sizeof *r->pts);
  r->isoflop = calloc(r->n ? (size_t)r->n : 1, sizeof *r->isoflop);
  for (int k = 0; k < r->n; k++) {
    fit_point *p = &r->pts[k];
    p->params = atof(PQgetvalue(res, k, 0));
    p->tokens = atof(PQgetvalue(res, k, 1));
    p->flops = atof(PQgetvalue(res, k, 2));
    p->loss = atof(PQgetvalue(res, k, 3));
    p->batch_size = atof(PQgetvalue(res, k, 4));
    p->steps = PQgetisnull(res, k, 5) ? NAN : atof(PQgetvalue(res, k, 5));
    p->lr = PQgetisnull(res, k, 6) ? NAN : atof(PQgetvalue(res, k, 6));
    p->group = k;
    r->isoflop[k] = !strcmp(PQgetvalue(res, k, 7), "isoflop");
  }
  if (r->n > 0 && !PQgetisnull(res, 0, 8)) { /* one corpus per sweep: the first run's */
    r->synthetic = strdup(PQgetvalue(res, 0, 8));
    r->seq_len = atoi(PQgetvalue(res, 0, 9));
  }
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, r->sweep_id);
  const char *p[1] = {id};
  /* the ladder: each run's evaluations (the partial index metrics_evals
   * finds them without its steps) and its late gradient noise scale */
  db_query(s->db,
           "SELECT r.id, r.batch_size * (r.config->'model'->>'seq_len')::int, "
           "coalesce(r.target_loss, '[]'::jsonb)::text, "
           "(SELECT coalesce(json_agg(json_build_array(m.step, m.val_loss) ORDER BY m.step), "
           "'[]') FROM metrics m WHERE m.run_id = r.id AND m.val_loss IS NOT NULL)::text, "
           "(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY m.b_noise) FROM metrics m "
           "WHERE m.run_id = r.id AND m.b_noise IS NOT NULL AND m.step * 2 > "
           "(SELECT max(step) FROM metrics WHERE run_id = r.id)) * "
           "(r.config->'model'->>'seq_len')::int "
           "FROM runs r WHERE r.sweep_id = $1 AND r.status = 'succeeded' AND r.part = 'batch' "
           "ORDER BY r.id",
           1, p, on_ladder, r);
}

static int cooling(const sched *s, int64_t sweep_id) {
  int c = in(state.cool, state.ncool, sweep_id);
  return c >= 0 && uv_now(s->loop) < state.cool_until_ms[c];
}

void sched__refit_due(sched *s) {
  for (int i = 0; i < state.nagain && !s->stopping;) {
    int64_t id = state.again[i];
    if (in(state.busy, state.nbusy, id) < 0 && !cooling(s, id)) {
      state.again[i] = state.again[--state.nagain];
      sched__refit(s, id);
    } else {
      i++;
    }
  }
  for (int i = 0; i < state.ncool;) { /* forget cooled-down sweeps */
    if (uv_now(s->loop) >= state.cool_until_ms[i] &&
        in(state.again, state.nagain, state.cool[i]) < 0) {
      state.cool[i] = state.cool[--state.ncool];
      state.cool_until_ms[i] = state.cool_until_ms[state.ncool];
    } else {
      i++;
    }
  }
}

void sched__refit(sched *s, int64_t sweep_id) {
  gsl_set_error_handler_off(); /* a numerical corner must not abort the daemon */
  if (in(state.busy, state.nbusy, sweep_id) >= 0 || cooling(s, sweep_id)) {
    if (in(state.again, state.nagain, sweep_id) < 0 && state.nagain < 64)
      state.again[state.nagain++] = sweep_id;
    return;
  }
  if (state.nbusy >= 64)
    return;
  state.busy[state.nbusy++] = sweep_id;
  refit *r = calloc(1, sizeof *r);
  r->s = s;
  r->sweep_id = sweep_id;
  r->started_ms = uv_now(s->loop);
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  const char *p[1] = {id};
  /* batch_size in tokens (sequences x seq_len), as the laws expect */
  db_query(s->db,
           "SELECT nonembedding_params, tokens, flops, final_val_loss, "
           "batch_size * (config->'model'->>'seq_len')::int, "
           "tokens / nullif(batch_size * (config->'model'->>'seq_len')::int, 0), "
           "(config->'train'->>'lr')::float8, coalesce(part, ''), "
           "config->'data'->'synthetic', (config->'model'->>'seq_len')::int "
           "FROM runs WHERE sweep_id = $1 AND status = 'succeeded' "
           "AND coalesce(part, '') <> 'batch' AND reproduces IS NULL "
           "AND final_val_loss > 0 AND nonembedding_params > 0 AND tokens > 0 ORDER BY id",
           1, p, on_points, r);
}

static void on_sweep_status(void *ud, int status, PGresult *res, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    fprintf(stderr, "scheduler: updating a sweep's status failed: %s\n", errmsg);
    return;
  }
  if (PQntuples(res) == 1)
    sched__emit(s, "sweep",
                json_pack("{s:I,s:s}", "id", (json_int_t)strtoll(PQgetvalue(res, 0, 0), NULL, 10),
                          "status", PQgetvalue(res, 0, 1)));
}

void sched__sweep_status(sched *s, int64_t sweep_id) {
  char id[32];
  snprintf(id, sizeof id, "%" PRId64, sweep_id);
  const char *p[1] = {id};
  /* running while anything runs or waits after a start; then failed if any
   * run failed, else succeeded (cancelled sweeps stay cancelled) */
  db_query(s->db,
           "UPDATE sweeps sw SET status = x.st FROM (SELECT CASE "
           "WHEN count(*) FILTER (WHERE status IN ('queued', 'running')) > 0 THEN "
           "CASE WHEN count(*) FILTER (WHERE status <> 'queued') > 0 THEN 'running' "
           "ELSE 'queued' END "
           "WHEN count(*) FILTER (WHERE status = 'failed') > 0 THEN 'failed' "
           "WHEN count(*) FILTER (WHERE status = 'succeeded') > 0 THEN 'succeeded' "
           "ELSE 'cancelled' END::run_status AS st FROM runs WHERE sweep_id = $1) x "
           "WHERE sw.id = $1 AND sw.status <> 'cancelled' AND sw.status <> x.st "
           "RETURNING sw.id, sw.status",
           1, p, on_sweep_status, s);
}

void sched__sweep_touch(sched *s, int64_t sweep_id, int refit) {
  for (int i = 0; i < s->ntouched; i++)
    if (s->touched[i] == sweep_id) {
      s->touched_refit[i] |= (char)refit;
      return;
    }
  if (s->ntouched == SCHED__TOUCHED) { /* full: do it now */
    sched__sweep_status(s, sweep_id);
    if (refit)
      sched__refit(s, sweep_id);
    return;
  }
  s->touched[s->ntouched] = sweep_id;
  s->touched_refit[s->ntouched++] = (char)refit;
}

void sched__sweep_flush(sched *s) {
  sched__refit_due(s);
  for (int i = 0; i < s->ntouched; i++) {
    sched__sweep_status(s, s->touched[i]);
    if (s->touched_refit[i])
      sched__refit(s, s->touched[i]);
  }
  s->ntouched = 0;
}

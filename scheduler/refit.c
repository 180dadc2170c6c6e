/* Refitting a sweep's laws when its runs finish (docs/design.md#data-flow, step
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
#include "scheduler/fit_points.h"
#include "store/fits.h"
#include "store/sweeps.h"
#include "sweeps/fit.h"

#define REFIT_BOOTSTRAP 200 /* enough for 95% intervals; the CLI can ask for more */

/* chinchilla over every run but the ladder's and reproductions (a run
 * trained again is the same observation, not a new one), isoflop over the
 * isoflop runs, batch over the ladder (steps to each target loss, from the runs'
 * evaluations), bopt over every run but the ladder's */
static const char *const laws[] = {"chinchilla", "isoflop", "batch", "bopt", "bcrit"};
#define NLAWS 5
#define LAW_BCRIT 4

typedef struct refit {
  uv_work_t work;
  sched *s;
  int64_t sweep_id;
  fit_point *pts; /* the loss laws' points: one per run */
  int n;
  int *isoflop;   /* per point: 1 when it is an isoflop run (in pts' block) */
  fit_point *lad; /* the ladder's points: one per run and target reached */
  int nlad;
  int lad_runs, lad_missed; /* ladder runs; (run, target) pairs never reached */
  double *bnoise; /* per ladder run: median b_noise of its second half, tokens (NAN: none) */
  fit_point *bc;  /* the branched ladder's rungs (fit_bcrit's points), trunks included */
  int nbc;
  int bc_scratch, bc_missed; /* rungs that trained from scratch; rungs never at the target */
  int bc_orphans, bc_flat;   /* rungs whose trunk has not succeeded; branch points where the
                              * trunk's loss did not fall over the window (their rungs) */
  int bc_runs;               /* the succeeded runs of the branched ladder read */
  double *bc_noise;          /* per rung point: the trunk's median noise scale over the point's
                              * window (tokens; NAN: none); in bc's block */
  store_corpus corpus;       /* the synthetic corpus's figures (NAN: real data) */
  char *json[NLAWS];         /* results (NULL: the points do not support the law yet) */
  int npoints[NLAWS];
  char why[NLAWS][600]; /* why a law was not fitted */
  uint64_t started_ms;
  struct refit *next;
} refit;

/* after a refit a sweep cools down for REFIT_COOLDOWN times as long as it
 * took (a sweep of 10,000 runs must not keep a core fitting) */
#define REFIT_COOLDOWN 4
#define REFIT_COOLDOWN_MAX_MS 60000

/* v with room for one more than its n elements of size bytes (capacity
 * *cap): v itself, or v reallocated; NULL when out of memory (v is then
 * unchanged). */
static void *grow(void *v, int *cap, int n, size_t size) {
  if (n < *cap)
    return v;
  int c = *cap ? 2 * *cap : 16;
  void *p = realloc(v, size * (size_t)c);
  if (p)
    *cap = c;
  return p;
}

/* The sweep's entry in s->refits (NULL when it has none). */
static sched__refit_sweep *sweep_find(sched *s, int64_t sweep_id) {
  for (int i = 0; i < s->refits.nsweeps; i++)
    if (s->refits.sweeps[i].sweep_id == sweep_id)
      return &s->refits.sweeps[i];
  return NULL;
}

/* The sweep's entry, added when it has none; NULL when out of memory. */
static sched__refit_sweep *sweep_get(sched *s, int64_t sweep_id) {
  sched__refits *st = &s->refits;
  sched__refit_sweep *e = sweep_find(s, sweep_id);
  if (e)
    return e;
  sched__refit_sweep *v = grow(st->sweeps, &st->cap, st->nsweeps, sizeof *v);
  if (!v)
    return NULL;
  st->sweeps = v;
  e = &st->sweeps[st->nsweeps++];
  *e = (sched__refit_sweep){.sweep_id = sweep_id};
  return e;
}

static int cooling(const sched *s, const sched__refit_sweep *e) {
  return e && uv_now(s->loop) < e->cool_until_ms;
}

void sched__refits_free(sched__refits *st) {
  free(st->sweeps);
  free(st->touched);
  *st = (sched__refits){0};
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..m) (m > 0), which it sorts. */
static double median(double *v, int m) {
  qsort(v, (size_t)m, sizeof *v, cmp_double);
  return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
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
    fit_result_add_derived(res, "B_noise", median(v, m));
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

/* The branched ladder's noise scale beside its B_crit: at each branch point
 * the median over its rungs' windows of the trunk's b_noise (tokens). */
static void add_bcrit_noise(refit *r, fit_result *res) {
  double *v = malloc(sizeof(double) * (r->nbc ? r->nbc : 1));
  for (int i = 0; v && i < r->nbc; i++) {
    int dup = 0, m = 0;
    for (int j = 0; j < i; j++)
      dup |= r->bc[j].tokens == r->bc[i].tokens;
    if (dup)
      continue;
    for (int j = i; j < r->nbc; j++)
      if (r->bc[j].tokens == r->bc[i].tokens && isfinite(r->bc_noise[j]))
        v[m++] = r->bc_noise[j];
    char name[24];
    snprintf(name, sizeof name, "B_noise(D=%.4g)", r->bc[i].tokens);
    if (m)
      fit_result_add_derived(res, name, median(v, m));
  }
  free(v);
  const struct {
    int n;
    const char *why;
  } left_out[] = {
      {r->bc_scratch, "trained from scratch (the trunk ended without its branch point): left out"},
      {r->bc_missed, "never reached the target within their tokens, or the trunk's evaluations "
                     "do not reach the target's tokens: left out"},
      {r->bc_flat, "at branch points where the trunk's loss did not fall over the window "
                   "(evaluation noise, or branch.tokens too short): no target, left out"},
      {r->bc_orphans, "whose trunk has not succeeded: left out"},
  };
  for (size_t i = 0; i < sizeof left_out / sizeof *left_out; i++)
    if (left_out[i].n)
      fit_result_warn(res, "%d rung%s %s", left_out[i].n, left_out[i].n == 1 ? "" : "s",
                      left_out[i].why);
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
 * at the runs' seq_len, what E should come out near, as the trainer reported
 * them when the runs started. NULL for real data. */
static json_t *corpus_truth(const refit *r) {
  const store_corpus *c = &r->corpus;
  if (c->seq_len <= 0 || !isfinite(c->entropy_rate) || !isfinite(c->window_floor))
    return NULL;
  return json_pack("{s:f,s:f,s:i}", "entropy_rate", c->entropy_rate, "window_floor",
                   c->window_floor, "seq_len", c->seq_len);
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
    else if (l == LAW_BCRIT && r->nbc)
      rc = fit_bcrit(r->bc, r->nbc, &o, &res, err, sizeof err);
    if (rc == 0 && l == 2)
      add_bnoise(r, &res);
    if (rc == 0 && l == LAW_BCRIT)
      add_bcrit_noise(r, &res);
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
    } else if (rc == 0 && l == LAW_BCRIT) {
      /* how many succeeded runs it read: `up --wait` waits for all of them */
      json_object_set_new(extra, "runs", json_integer(r->bc_runs));
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
    } else if (l == LAW_BCRIT && rc == -1 && r->bc_scratch) {
      snprintf(r->why[l], sizeof r->why[l],
               "%d rung%s of a branched batch ladder trained from scratch (the trunk ended "
               "without the branch point) and %s left out",
               r->bc_scratch, r->bc_scratch == 1 ? "" : "s", r->bc_scratch == 1 ? "is" : "are");
    } else {
      snprintf(r->why[l], sizeof r->why[l], "%s",
               rc != -1         ? err
               : l == 1         ? "no isoflop runs"
               : l == LAW_BCRIT ? "no branched batch ladder runs"
                                : "no batch ladder runs");
    }
    json_decref(extra);
    fit_result_free(&res);
  }
  free(iso);
}

/* store_fits_insert's answer: a fit that could not be stored is only logged */
static void on_stored(void *ud, int status, int64_t rows, const char *errmsg) {
  (void)ud, (void)rows;
  if (status != 0)
    fprintf(stderr, "scheduler: storing a fit failed: %s\n", errmsg);
}

static void refit_free(refit *r) {
  free(r->pts); /* and the isoflop flags after them */
  free(r->lad);
  free(r->bnoise);
  free(r->bc); /* and the rungs' noise scales after them */
  for (int l = 0; l < NLAWS; l++)
    free(r->json[l]);
  free(r);
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
    store_fits_insert(s->db, r->sweep_id, laws[l], r->json[l], r->npoints[l], on_stored, NULL);
    json_error_t je;
    json_t *fit = json_loads(r->json[l], 0, &je);
    sched__events_emit(&s->ev, "fit",
                       json_pack("{s:I,s:s,s:o}", "sweep_id", (json_int_t)r->sweep_id, "law",
                                 laws[l], "fit", fit ? fit : json_null()));
  }
  sched__refit_sweep *e = sweep_find(s, r->sweep_id);
  if (e) {
    uint64_t now = uv_now(s->loop), took = now - r->started_ms;
    e->busy = 0;
    e->cool_until_ms =
        now + (took * REFIT_COOLDOWN < REFIT_COOLDOWN_MAX_MS ? took * REFIT_COOLDOWN
                                                             : REFIT_COOLDOWN_MAX_MS);
  }
  /* a refit asked for meanwhile waits (again) for sched__refit_due */
  refit_free(r);
}

static void refit_abandon(refit *r, int status, const char *errmsg) {
  if (status != 0)
    fprintf(stderr, "scheduler: reading fit points failed: %s\n", errmsg);
  sched__refit_sweep *e = sweep_find(r->s, r->sweep_id);
  if (e) {
    e->busy = 0;
    /* a read that ran over the read limit, or found the database away, is
     * tried again (sched__refit_due) rather than losing the sweep's fit */
    if (status == SS_ETIMEOUT || status == SS_ECONN)
      e->again = 1;
  }
  refit_free(r);
}

/* A read's answer: 1 when it failed or the scheduler is stopping, the
 * refit then abandoned; 0 to go on. */
static int abandoned(refit *r, int status, const char *errmsg) {
  if (status == 0 && !r->s->stopping)
    return 0;
  refit_abandon(r, status, errmsg);
  return 1;
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

/* Linear interpolation of [[x, y], ...] (x ascending) at x; NAN outside. */
static double interp(json_t *xy, double x) {
  size_t i;
  json_t *e;
  double x0 = NAN, y0 = NAN;
  json_array_foreach(xy, i, e) {
    double xi = json_number_value(json_array_get(e, 0)),
           yi = json_number_value(json_array_get(e, 1));
    if (xi >= x)
      return xi == x ? yi : isnan(x0) ? NAN : y0 + (yi - y0) * (x - x0) / (xi - x0);
    x0 = xi;
    y0 = yi;
  }
  return NAN;
}

/* The trunk's median noise scale over a rung's window (at, at + window],
 * from its [[tokens, b_noise], ...] (tokens; NAN: none there). */
static double window_noise(json_t *tn, double at, double window) {
  double *nv = malloc(sizeof(double) * (json_array_size(tn) + 1));
  int m = 0;
  size_t i;
  json_t *e;
  json_array_foreach(tn, i, e) {
    double x = json_number_value(json_array_get(e, 0));
    if (nv && x > at && x <= at + window)
      nv[m++] = json_number_value(json_array_get(e, 1));
  }
  double noise = m ? median(nv, m) : NAN;
  free(nv);
  return noise;
}

/* Tokens at which the rung's curve from its branch point (at, start), then
 * its own evaluations be ([[tokens, val_loss], ...]) past it, first reaches
 * target; NAN when it never does. */
static double rung_reaches(json_t *be, double at, double start, double target) {
  if (!isfinite(target) || !isfinite(start))
    return NAN;
  json_t *curve = json_array();
  json_array_append_new(curve, json_pack("[f,f]", at, start));
  size_t i;
  json_t *e;
  json_array_foreach(be, i, e) {
    if (json_number_value(json_array_get(e, 0)) > at)
      json_array_append(curve, e);
  }
  double tok = steps_to(curve, target);
  json_decref(curve);
  return tok;
}

/* Adds a point of the branched ladder: group's steps at batch_tokens from
 * the branch point at to target, and the trunk's noise over the window. */
static void bc_add(refit *r, int group, double batch_tokens, double steps, double at, double target,
                   double noise) {
  r->bc_noise[r->nbc] = noise;
  r->bc[r->nbc++] = sched__steps_point(steps, batch_tokens, target, at, group);
}

/* One rung b of trunk t (te, tn: the trunk's evaluations and noise scale,
 * parsed): at its branch point D (the trunk's tokens there), the target is
 * the trunk's loss a quarter of the rung's own tokens later (interpolated
 * between its evaluations); the rung's steps to it are read off its
 * evaluations by tokens, the branch point (the trunk's loss there) first.
 * The trunk is a rung too, at its own batch size, once per branch point. */
static void add_rung(refit *r, const store_bcrit_run *b, const store_bcrit_run *t, json_t *te,
                     json_t *tn) {
  double at = (double)b->branch_step * b->trunk_batch_tokens, window = (b->train_tokens - at) / 4;
  double start = interp(te, at), target = interp(te, at + window);
  json_t *be = json_loads(b->evals, 0, NULL);
  double tok = rung_reaches(be, at, start, target);
  json_decref(be);
  double noise = window_noise(tn, at, window);
  if (isfinite(target) && isfinite(start) && !(target < start)) {
    r->bc_flat++; /* noise, or a window too short: no target to reach */
    return;
  }
  if (!(tok > at)) {
    r->bc_missed++;
    return;
  }
  int have = 0;
  for (int j = 0; j < r->nbc; j++)
    have |= r->bc[j].group == (int)t->id && r->bc[j].tokens == at;
  if (!have)
    bc_add(r, (int)t->id, t->batch_tokens, window / t->batch_tokens, at, target, noise);
  bc_add(r, (int)b->id, b->batch_tokens, (tok - at) / b->batch_tokens, at, target, noise);
}

/* The branched batch ladder (docs/sweeps.md "Critical batch size by
 * branching"): each rung whose trunk has succeeded (add_rung). */
static void on_bcrit(void *ud, int status, const store_bcrit_run *runs, int nrun,
                     const char *errmsg) {
  refit *r = ud;
  if (abandoned(r, status, errmsg))
    return;
  r->bc_runs = nrun;
  /* one block: the rungs' points (each rung, and each trunk once per branch
   * point), then their noise scales */
  size_t cap = 2 * (size_t)nrun + 1;
  r->bc = calloc(cap, sizeof *r->bc + sizeof *r->bc_noise);
  r->bc_noise = r->bc ? (double *)(r->bc + cap) : NULL;
  /* a trunk's evaluations and noise scale, parsed once for all its rungs */
  json_t **tev = calloc((size_t)nrun + 1, sizeof *tev),
         **tnz = calloc((size_t)nrun + 1, sizeof *tnz);
  if (!r->bc || !tev || !tnz) {
    free(tev);
    free(tnz);
    return refit_abandon(r, SS_ENOMEM, "out of memory");
  }
  for (int k = 0; k < nrun; k++) {
    const store_bcrit_run *b = &runs[k];
    if (!b->branch_of)
      continue;
    if (b->first_step <= 1) {
      r->bc_scratch++;
      continue;
    }
    int ti = -1;
    for (int j = 0; j < nrun; j++)
      if (runs[j].id == b->branch_of)
        ti = j;
    if (ti < 0) { /* its trunk has not succeeded (yet) */
      r->bc_orphans++;
      continue;
    }
    if (!tev[ti]) {
      tev[ti] = json_loads(runs[ti].evals, 0, NULL);
      tnz[ti] = json_loads(runs[ti].b_noise, 0, NULL);
    }
    add_rung(r, b, &runs[ti], tev[ti], tnz[ti]);
  }
  for (int k = 0; k < nrun; k++) {
    json_decref(tev[k]);
    json_decref(tnz[k]);
  }
  free(tev);
  free(tnz);
  r->work.data = r;
  uv_queue_work(r->s->loop, &r->work, work, after_work);
}

static void on_ladder(void *ud, int status, const store_ladder_run *runs, int nrun,
                      const char *errmsg) {
  refit *r = ud;
  if (abandoned(r, status, errmsg))
    return;
  int cap = 0;
  r->lad_runs = nrun;
  r->bnoise = calloc(nrun ? (size_t)nrun : 1, sizeof *r->bnoise);
  if (!r->bnoise)
    return refit_abandon(r, SS_ENOMEM, "out of memory");
  for (int k = 0; k < nrun; k++) {
    json_t *targets = json_loads(runs[k].target_loss, 0, NULL);
    json_t *evals = json_loads(runs[k].evals, 0, NULL);
    r->bnoise[k] = runs[k].b_noise;
    size_t i;
    json_t *t;
    json_array_foreach(targets, i, t) {
      double st = steps_to(evals, json_number_value(t));
      if (!(st > 0)) {
        r->lad_missed++;
        continue;
      }
      fit_point *np = grow(r->lad, &cap, r->nlad, sizeof *np);
      if (!np)
        break;
      r->lad = np;
      r->lad[r->nlad++] =
          sched__steps_point(st, runs[k].batch_tokens, json_number_value(t), NAN, k);
    }
    json_decref(targets);
    json_decref(evals);
  }
  store_fits_bcrit(db_pool_get(r->s->reads, 1), r->sweep_id, on_bcrit, r);
}

static void on_points(void *ud, int status, const store_fit_point *pts, int n,
                      const store_corpus *corpus, const char *errmsg) {
  refit *r = ud;
  if (abandoned(r, status, errmsg))
    return;
  r->n = n;
  size_t cap = n ? (size_t)n : 1; /* one block: the points, then their isoflop flags */
  r->pts = calloc(cap, sizeof *r->pts + sizeof *r->isoflop);
  r->isoflop = r->pts ? (int *)(r->pts + cap) : NULL;
  if (!r->pts)
    return refit_abandon(r, SS_ENOMEM, "out of memory");
  for (int k = 0; k < n; k++) {
    r->pts[k] = sched__fit_point(&pts[k], k);
    r->isoflop[k] = pts[k].isoflop;
  }
  r->corpus = *corpus;
  store_fits_ladder(db_pool_get(r->s->reads, 1), r->sweep_id, on_ladder, r);
}

void sched__refit_due(sched *s) {
  sched__refits *st = &s->refits;
  for (int i = 0; i < st->nsweeps && !s->stopping; i++) {
    sched__refit_sweep *e = &st->sweeps[i];
    if (e->again && !e->busy && !cooling(s, e)) {
      e->again = 0;
      sched__refit(s, e->sweep_id); /* finds e: the list does not grow */
    }
  }
  for (int i = 0; i < st->nsweeps;) { /* forget sweeps with nothing left to do */
    const sched__refit_sweep *e = &st->sweeps[i];
    if (!e->busy && !e->again && !cooling(s, e))
      st->sweeps[i] = st->sweeps[--st->nsweeps];
    else
      i++;
  }
}

void sched__refit(sched *s, int64_t sweep_id) {
  gsl_set_error_handler_off(); /* a numerical corner must not abort the daemon */
  sched__refit_sweep *e = sweep_get(s, sweep_id);
  if (e && (e->busy || cooling(s, e))) {
    e->again = 1;
    return;
  }
  refit *r = e ? calloc(1, sizeof *r) : NULL;
  if (!r) {
    fprintf(stderr, "scheduler: sweep %" PRId64 ": out of memory for its refit\n", sweep_id);
    return;
  }
  e->busy = 1;
  r->s = s;
  r->sweep_id = sweep_id;
  r->started_ms = uv_now(s->loop);
  store_fits_points(db_pool_get(s->reads, 1), sweep_id, on_points, r);
}

static void on_sweep_status(void *ud, int status, int64_t sweep_id, const char *new_status,
                            const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    fprintf(stderr, "scheduler: updating a sweep's status failed: %s\n", errmsg);
    return;
  }
  if (new_status)
    sched__events_emit(&s->ev, "sweep",
                       json_pack("{s:I,s:s}", "id", (json_int_t)sweep_id, "status", new_status));
}

void sched__sweep_status(sched *s, int64_t sweep_id) {
  store_sweeps_update_status(s->db, sweep_id, on_sweep_status, s);
}

void sched__sweep_touch(sched *s, int64_t sweep_id, int refit) {
  sched__refits *st = &s->refits;
  for (int i = 0; i < st->ntouched; i++)
    if (st->touched[i].sweep_id == sweep_id) {
      st->touched[i].refit |= refit != 0;
      return;
    }
  sched__touched *v = grow(st->touched, &st->touched_cap, st->ntouched, sizeof *v);
  if (!v) { /* no room: do it now */
    sched__sweep_status(s, sweep_id);
    if (refit)
      sched__refit(s, sweep_id);
    return;
  }
  st->touched = v;
  st->touched[st->ntouched++] = (sched__touched){.sweep_id = sweep_id, .refit = refit != 0};
}

static void on_unfinished(void *ud, int status, const int64_t *ids, int n, const char *errmsg) {
  sched *s = ud;
  if (status != 0) {
    fprintf(stderr, "scheduler: reading the unfinished sweeps failed: %s\n", errmsg);
    return;
  }
  for (int i = 0; i < n; i++)
    sched__sweep_touch(s, ids[i], 1);
}

/* A scheduler that stopped (or died) within a tick of a run's end never
 * updated that sweep's status nor refitted it; the next one does. */
void sched__sweeps_settle(sched *s) { store_sweeps_unfinished(s->db, on_unfinished, s); }

void sched__sweep_flush(sched *s) {
  sched__refits *st = &s->refits;
  sched__refit_due(s);
  for (int i = 0; i < st->ntouched; i++) {
    sched__sweep_status(s, st->touched[i].sweep_id);
    if (st->touched[i].refit)
      sched__refit(s, st->touched[i].sweep_id);
    sched__sweepq_touch(s, st->touched[i].sweep_id); /* a run of it started or ended */
  }
  st->ntouched = 0;
  sched__sweepq_flush(s);
}

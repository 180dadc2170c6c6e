/* The next budget (sweeps/next.c) against a surface whose truth is known:
 * an IsoFLOP study of 4 budgets on a Chinchilla law with 1% noise in ln L,
 * then the design of a budget 3x beyond the largest. The fitted N_opt(C)
 * and every proposed run's loss must hold the truth in their intervals,
 * the sizes must bracket the true optimum at that budget, the spec must be
 * the sweep's own at the new budget (and plan to the same runs), the rules
 * come from a usable bopt fit and from the spec otherwise, the runs' JSON
 * carries what was predicted, and bad requests say where. */
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "fit_testlib.h"
#include "sweeps/next.h"

/* the truth: a small-scale surface whose optimum at 1e11-1e13 FLOPs is
 * 1e4-2e5 parameters, as on the quick start's 2 cores */
#define E0 0.63
#define A0 30.0
#define B0 60.0
#define ALPHA0 0.35
#define BETA0 0.30
#define NOISE 0.01

static double law(double n, double d) { return E0 + A0 / pow(n, ALPHA0) + B0 / pow(d, BETA0); }

static double true_nopt(double c) {
  double n;
  fit_chinchilla_allocation(A0, B0, ALPHA0, BETA0, c, NULL, NULL, NULL, &n, NULL);
  return n;
}

/* the sweep: the quick start's spec without its ladder */
static const char *SPEC =
    "{\"name\":\"study\",\"method\":\"isoflop\",\"base\":{\"model\":{\"seq_len\":64},"
    "\"data\":{\"synthetic\":{\"letters\":26,\"words\":512,\"min_len\":2,\"max_len\":8,"
    "\"zipf\":1.2,\"seed\":1}},\"train\":{\"micro_batch_size\":16},\"eval\":{\"tokens\":32768},"
    "\"precision\":\"fp32\"},\"isoflop\":{\"flops\":{\"from\":1e11,\"to\":3.2e12,\"points\":4},"
    "\"centre\":{\"coef\":2.54,\"exponent\":0.35,\"span\":3,\"points\":5},"
    "\"flops_count\":\"exact\"},\"resources\":{\"cpus\":2},\"throughput_flops\":3e10,"
    "\"max_hours\":2}";

/* 4 budgets 1e11..3.2e12, 5 sizes over x3 either way of the true optimum */
static fit_point *study(int *n, unsigned long seed) {
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(r, seed);
  fit_point *p = calloc(20, sizeof *p);
  for (int i = 0, k = 0; i < 4; i++) {
    double c = 1e11 * pow(32, i / 3.0), no = true_nopt(c);
    for (int j = 0; j < 5; j++, k++) {
      double nn = no / 3 * pow(9, j / 4.0), d = c / (6 * nn);
      p[k] = fitt_point(nn, d, c, law(nn, d) * exp(gsl_ran_gaussian(r, NOISE)));
      p[k].group = k;
    }
  }
  gsl_rng_free(r);
  *n = 20;
  return p;
}

static int problem_at(const spec_problems *pr, const char *path) {
  for (size_t i = 0; i < pr->n; i++)
    if (!strcmp(pr->items[i].path, path))
      return 1;
  return 0;
}

static void test_design(const fit_point *pts, int n) {
  const double C = 1e13;
  next_options o = {.flops = C, .points = 5, .bootstrap = 400, .seed = 7, .threads = 2};
  next_design d;
  spec_problems pr = {0};
  int rc = next_design_make(SPEC, pts, n, NULL, &o, &d, &pr);
  CHECK_INT_EQ(rc, 0);
  if (rc) {
    for (size_t i = 0; i < pr.n; i++)
      fprintf(stderr, "  %s: %s\n", pr.items[i].path, pr.items[i].message);
    spec_problems_free(&pr);
    return;
  }
  double no = true_nopt(C), dopt = C / (6 * no);
  printf("N_opt(%.3g): %.4g [%.4g, %.4g], truth %.4g; span x%.3g; loss at N_opt %.4f "
         "[%.4f, %.4f], truth %.4f; noise sd %.4f (%s)\n",
         C, d.n_opt, d.n_lo, d.n_hi, no, d.span, d.opt.loss, d.opt.lo, d.opt.hi, law(no, dopt),
         d.noise_sd, d.noise_from);
  CHECK(d.n_lo <= no && no <= d.n_hi);
  CHECK_NEAR(d.n_opt, no, 0, 0.5); /* 20 points with 1% noise: the interval is what holds */
  CHECK(d.opt.lo <= law(no, dopt) && law(no, dopt) <= d.opt.hi);
  CHECK(d.span >= NEXT_SPAN_MIN && d.span <= NEXT_SPAN_MAX);
  CHECK(!strcmp(d.noise_from, "residuals"));
  CHECK_NEAR(d.noise_sd, NOISE, 0, 0.6); /* the residual RMS estimates the noise */
  CHECK(!d.batch_fitted && !d.lr_fitted);
  CHECK_INT_EQ(d.plan->n, 5);
  CHECK(d.largest_budget > 3e12 && d.largest_budget < 3.3e12);
  double smallest = INFINITY, largest = 0;
  for (size_t i = 0; i < d.plan->n; i++) {
    const plan_run *r = &d.plan->runs[i];
    double nn = (double)r->nonembedding_params, dd = (double)r->tokens, truth = law(nn, dd);
    printf("  run %zu: %d x %d, N %.4g, D %.4g, B %d, lr %.3g, C %.3g: %.4f [%.4f, %.4f], "
           "truth %.4f\n",
           i, r->n_layer, r->d_model, nn, dd, r->batch_size, r->lr, r->flops, d.runs[i].loss,
           d.runs[i].lo, d.runs[i].hi, truth);
    CHECK(!strcmp(r->part, "isoflop"));
    CHECK_NEAR(r->budget, C, 0, 1e-12);
    CHECK_NEAR(r->flops, C, 0, 0.02); /* the exact count, to whole batches */
    CHECK(d.runs[i].lo <= truth && truth <= d.runs[i].hi);
    CHECK_NEAR(d.runs[i].loss, truth, 0, 0.03);
    CHECK(d.runs[i].lo < d.runs[i].loss && d.runs[i].loss < d.runs[i].hi);
    smallest = fmin(smallest, nn);
    largest = fmax(largest, nn);
  }
  CHECK(smallest < no / 1.5 && largest > no * 1.5); /* the minimum is inside the sizes */

  /* the budget's spec is the sweep's at C, and plans to the same runs */
  json_t *sp = json_loads(d.spec_json, 0, NULL);
  CHECK(sp != NULL);
  CHECK(!strcmp(json_string_value(json_object_get(sp, "method")), "isoflop"));
  json_t *iso = json_object_get(sp, "isoflop");
  CHECK_NEAR(json_number_value(json_array_get(json_object_get(iso, "flops"), 0)), C, 0, 1e-12);
  CHECK(!strcmp(json_string_value(json_object_get(iso, "flops_count")), "exact"));
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(iso, "centre"), "span")), d.span, 0,
             1e-12);
  CHECK(json_object_get(sp, "base") != NULL && json_object_get(sp, "batch_rule") == NULL);
  json_decref(sp);
  spec *s2 = NULL;
  plan *p2 = NULL;
  spec_problems pr2 = {0};
  CHECK_INT_EQ(spec_parse(d.spec_json, "again", &s2, &pr2), 0);
  if (s2)
    CHECK_INT_EQ(plan_spec(s2, &p2, &pr2), 0);
  if (p2) {
    CHECK_INT_EQ(p2->n, d.plan->n);
    for (size_t i = 0; i < p2->n && i < d.plan->n; i++)
      CHECK(!strcmp(p2->runs[i].config_hash, d.plan->runs[i].config_hash));
  }
  plan_free(p2);
  spec_free(s2);
  spec_problems_free(&pr2);

  /* the answer and the runs to store */
  char *js = next_design_json(&d), *rj = next_runs_json(&d);
  json_t *a = json_loads(js ? js : "", 0, NULL), *runs = json_loads(rj ? rj : "", 0, NULL);
  CHECK(a && runs && json_array_size(runs) == d.plan->n);
  CHECK_INT_EQ(json_array_size(json_object_get(a, "runs")), d.plan->n);
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(a, "n_opt"), "value")), d.n_opt, 0,
             1e-6);
  size_t i;
  json_t *e;
  json_array_foreach(runs, i, e) {
    json_t *des = json_object_get(e, "designed");
    CHECK(
        !strcmp(json_string_value(json_object_get(e, "config_hash")), d.plan->runs[i].config_hash));
    CHECK(json_is_object(json_object_get(e, "config")));
    CHECK_NEAR(json_number_value(json_object_get(des, "loss")), d.runs[i].loss, 0, 1e-6);
    CHECK_NEAR(json_number_value(json_array_get(json_object_get(des, "ci95"), 1)), d.runs[i].hi, 0,
               1e-6);
    CHECK_NEAR(json_number_value(json_object_get(des, "flops")), C, 0, 1e-9);
  }
  json_decref(a);
  json_decref(runs);

  /* the same request gives the same design, from the spec as the store
   * keeps it too (canonical: every number a real, batch sizes included) */
  spec *sc = NULL;
  CHECK_INT_EQ(spec_parse(SPEC, "canonical", &sc, &pr), 0);
  char *canon = sc ? spec_canonical(sc) : NULL;
  spec_free(sc);
  CHECK(canon && strstr(canon, "\"seq_len\":64.0"));
  next_design d2;
  CHECK_INT_EQ(next_design_make(canon ? canon : SPEC, pts, n, NULL, &o, &d2, &pr), 0);
  free(canon);
  char *js2 = next_design_json(&d2);
  CHECK(js && js2 && !strcmp(js, js2));
  free(js2);
  next_design_free(&d2);
  free(js);
  free(rj);
  next_design_free(&d);
  spec_problems_free(&pr);
}

static void test_rules(const fit_point *study_pts, int n) {
  /* a bopt fit that used 3 budgets over runs that tried 2 batch sizes and
   * learning rates: its rules; an unusable one: the spec's */
  fit_point *pts = malloc((size_t)n * sizeof *pts);
  memcpy(pts, study_pts, (size_t)n * sizeof *pts);
  for (int i = 0; i < n; i++) {
    pts[i].batch_size = 512 << (i % 2);
    pts[i].lr = 0.002 * (1 + i % 2);
  }
  json_t *bopt = json_loads(
      "{\"law\":\"bopt\",\"params\":{\"k_B\":0.25,\"beta_B\":0.31,\"k_eta\":0.4,\"beta_eta\":-0.1},"
      "\"budgets\":[{\"usable\":true},{\"usable\":true},{\"usable\":true}]}",
      0, NULL);
  next_options o = {.flops = 1e13, .bootstrap = 100, .seed = 1, .threads = 2};
  next_design d;
  spec_problems pr = {0};
  CHECK_INT_EQ(next_design_make(SPEC, study_pts, n, bopt, &o, &d, &pr), 0);
  CHECK(!d.batch_fitted && !d.lr_fitted); /* the study's runs tried one of each */
  next_design_free(&d);
  CHECK_INT_EQ(next_design_make(SPEC, pts, n, bopt, &o, &d, &pr), 0);
  CHECK(d.batch_fitted && d.lr_fitted);
  CHECK_INT_EQ(d.plan ? d.plan->n : 0, NEXT_POINTS);
  json_t *sp = json_loads(d.spec_json ? d.spec_json : "", 0, NULL);
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(sp, "batch_rule"), "coef")), 0.25, 0,
             1e-12);
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(sp, "lr_rule"), "exponent")), -0.1,
             0, 1e-12);
  json_decref(sp);
  next_design_free(&d);

  json_object_set_new(json_object_get(bopt, "params"), "beta_B", json_real(3.5));
  CHECK_INT_EQ(next_design_make(SPEC, pts, n, bopt, &o, &d, &pr), 0);
  CHECK(!d.batch_fitted && d.lr_fitted && d.nwarnings >= 1 && strstr(d.warnings[0], "beta_B 3.5"));
  next_design_free(&d);
  /* a sweep of WSD branches: a size's runs share one batch and lr, so the
   * law across budgets follows the sizes; the spec's rules, and why */
  json_object_set_new(json_object_get(bopt, "params"), "beta_B", json_real(0.31));
  json_t *wsd = json_loads(SPEC, 0, NULL);
  json_object_set_new(json_object_get(json_object_get(wsd, "base"), "train"), "schedule",
                      json_string("wsd"));
  char *wsd_spec = json_dumps(wsd, 0);
  CHECK_INT_EQ(next_design_make(wsd_spec, pts, n, bopt, &o, &d, &pr), 0);
  CHECK(!d.batch_fitted && !d.lr_fitted && d.nwarnings >= 1 &&
        strstr(d.warnings[0], "branch (wsd)"));
  next_design_free(&d);
  free(wsd_spec);
  /* a grid of WSD branches (the same sizes at every budget): each size
   * trains at its smallest budget's batch and lr, so the next budget's
   * sizes join the grid, each also at 1e11, and their runs at C take the
   * batch and lr of their run at 1e11 (which branches from them) */
  json_t *iso = json_object_get(wsd, "isoflop");
  json_object_del(iso, "centre");
  json_object_set_new(iso, "params", json_pack("[f,f,f,f,f]", 7.3e3, 1.28e4, 2.84e4, 5.66e4, 1e5));
  wsd_spec = json_dumps(wsd, 0);
  CHECK_INT_EQ(next_design_make(wsd_spec, pts, n, bopt, &o, &d, &pr), 0);
  CHECK_NEAR(d.grid_flops, 1e11, 0, 1e-9);
  CHECK_INT_EQ(d.plan ? d.plan->n : 0, 2 * NEXT_POINTS);
  int at_c = 0, small_batch = 0;
  for (size_t i = 0; d.plan && i < d.plan->n; i++) {
    const plan_run *r = &d.plan->runs[i];
    if (fabs(r->budget / 1e13 - 1) > 1e-9) {
      CHECK_NEAR(r->budget, 1e11, 0, 1e-9);
      continue;
    }
    at_c++;
    int twins = 0; /* its run at 1e11: same size, batch and lr, a branch of it */
    for (size_t j = 0; j < d.plan->n; j++) {
      const plan_run *b = &d.plan->runs[j];
      if (j != i && b->nonembedding_params == r->nonembedding_params) {
        twins++;
        CHECK_NEAR(b->budget, 1e11, 0, 1e-9);
        CHECK_INT_EQ(b->batch_size, r->batch_size);
        CHECK_NEAR(b->lr, r->lr, 0, 1e-12);
        CHECK_INT_EQ(b->branch_of, r->index);
      }
    }
    CHECK_INT_EQ(twins, 1);
    small_batch += r->batch_size <= 16; /* the rules at 1e13 alone give 64 or more */
  }
  CHECK_INT_EQ(at_c, NEXT_POINTS);
  CHECK_INT_EQ(small_batch, NEXT_POINTS);
  next_design_free(&d);
  free(wsd_spec);
  json_object_set_new(wsd, "branches", json_false()); /* runs from scratch: the law holds */
  wsd_spec = json_dumps(wsd, 0);
  CHECK_INT_EQ(next_design_make(wsd_spec, pts, n, bopt, &o, &d, &pr), 0);
  CHECK(d.batch_fitted && d.lr_fitted && d.grid_flops == 0);
  CHECK_INT_EQ(d.plan ? d.plan->n : 0, NEXT_POINTS);
  next_design_free(&d);
  free(wsd_spec);
  json_decref(wsd);
  json_array_remove(json_object_get(bopt, "budgets"), 0);
  CHECK_INT_EQ(next_design_make(SPEC, pts, n, bopt, &o, &d, &pr), 0);
  CHECK(!d.batch_fitted && !d.lr_fitted); /* 2 budgets: too few for a rule */
  next_design_free(&d);
  json_decref(bopt);
  free(pts);
  spec_problems_free(&pr);
}

/* A sweep whose name is near the 128 bytes a spec's name may have: the
 * budget's name is cut to fit, on a character's boundary (a 2-byte
 * character straddles the cut). */
static void test_long_name(const fit_point *pts, int n) {
  char name[200], *spec = malloc(strlen(SPEC) + 256);
  memset(name, 'x', 100);
  strcpy(name + 100, "\xc3\xa9\xc3\xa9\xc3\xa9yyyyyyyyyyyyyyyyyyyy"); /* 126 bytes: e-acute x3 */
  const char *at = strstr(SPEC, "\"study\"");
  sprintf(spec, "%.*s\"%s\"%s", (int)(at - SPEC), SPEC, name, at + strlen("\"study\""));
  next_options o = {.flops = 1e13, .bootstrap = 50, .seed = 1, .threads = 2};
  next_design d;
  spec_problems pr = {0};
  CHECK_INT_EQ(next_design_make(spec, pts, n, NULL, &o, &d, &pr), 0);
  json_t *sp = json_loads(d.spec_json ? d.spec_json : "", 0, NULL);
  const char *got = json_string_value(json_object_get(sp, "name"));
  CHECK(got && strlen(got) <= 128 && strstr(got, ": next budget 1e+13 FLOPs") &&
        !strncmp(got, name, 100));
  json_decref(sp);
  next_design_free(&d);
  spec_problems_free(&pr);
  free(spec);
}

static void test_refusals(const fit_point *pts, int n) {
  next_design d;
  spec_problems pr = {0};
  next_options o = {.flops = -1, .points = 2};
  CHECK_INT_EQ(next_design_make(SPEC, pts, n, NULL, &o, &d, &pr), SS_EINVAL);
  CHECK(problem_at(&pr, "$.flops") && problem_at(&pr, "$.points"));
  spec_problems_free(&pr);

  o = (next_options){.flops = 1e13, .bootstrap = 50};
  memset(&pr, 0, sizeof pr);
  CHECK_INT_EQ(next_design_make(SPEC, pts, 4, NULL, &o, &d, &pr), SS_EINVAL);
  CHECK(pr.n == 1 && strstr(pr.items[0].message, "cannot be fitted yet (4 points)"));
  spec_problems_free(&pr);

  /* a budget the spec's max_hours refuses: the planner's problem, by path */
  o.flops = 1e16;
  memset(&pr, 0, sizeof pr);
  CHECK_INT_EQ(next_design_make(SPEC, pts, n, NULL, &o, &d, &pr), SS_EINVAL);
  CHECK(problem_at(&pr, "$.max_hours"));
  if (!problem_at(&pr, "$.max_hours"))
    for (size_t i = 0; i < pr.n; i++)
      fprintf(stderr, "  %s: %s\n", pr.items[i].path, pr.items[i].message);
  spec_problems_free(&pr);
}

/* Over 20 studies with their own noise, the 95% intervals hold what they
 * claim about that often: a run's measured loss (the law times its own
 * noise; 100 runs), and N_opt, each at least 85% of the time (a bootstrap
 * of 20 points is a little narrow; the seeds differ from test_design's).
 * The noise-free surface is inside more often still (the intervals are for
 * a run's measurement, its noise included). */
static void test_coverage(void) {
  int runs = 0, held = 0, measured = 0, nheld = 0, studies = 20;
  gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(rng, 5);
  for (int k = 0; k < studies; k++) {
    int n;
    fit_point *pts = study(&n, 100 + (unsigned long)k);
    next_options o = {.flops = 1e13, .bootstrap = 200, .seed = (uint64_t)k, .threads = 2};
    next_design d;
    spec_problems pr = {0};
    if (next_design_make(SPEC, pts, n, NULL, &o, &d, &pr) == 0) {
      double no = true_nopt(1e13);
      nheld += d.n_lo <= no && no <= d.n_hi;
      for (size_t i = 0; i < d.plan->n; i++, runs++) {
        double t = law((double)d.plan->runs[i].nonembedding_params, (double)d.plan->runs[i].tokens);
        double m = t * exp(gsl_ran_gaussian(rng, NOISE));
        held += d.runs[i].lo <= t && t <= d.runs[i].hi;
        measured += d.runs[i].lo <= m && m <= d.runs[i].hi;
      }
      next_design_free(&d);
    }
    spec_problems_free(&pr);
    free(pts);
  }
  gsl_rng_free(rng);
  printf("coverage over %d studies: runs' measured losses %d of %d (the surface %d), N_opt %d of "
         "%d\n",
         studies, measured, runs, held, nheld, studies);
  CHECK_INT_EQ(runs, studies * NEXT_POINTS);
  CHECK(measured >= 0.85 * runs);
  CHECK(held >= 0.85 * runs);
  CHECK(nheld >= 0.85 * studies);
}

int main(void) {
  int n;
  fit_point *pts = study(&n, 11);
  test_design(pts, n);
  test_rules(pts, n);
  test_refusals(pts, n);
  test_long_name(pts, n);
  test_coverage();
  free(pts);
  CHECK_DONE();
}

/* The adaptive design's criterion on a known-answer law (sweeps/adaptive.h;
 * docs/sweeps.md "An adaptive design"): points drawn from a given
 * L(N, D) = E + A/N^alpha + B/D^beta with 1% noise at a 6 x 6 grid of
 * candidates (WSD groups per size). The loop of rounds, run here as the
 * scheduler runs it: each round's choice is deterministic, stays within the
 * compute, never takes a failed candidate again, and the interval of N_opt
 * at C* shrinks to one that holds the truth; the chosen runs narrow it more
 * than random runs of the same compute do; the first round is
 * space-filling over the lower budgets; the spec's "adaptive" section and
 * its refusals; the plan keeps the first round with its branches. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "sweeps/adaptive.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

#define NS 6
#define NB 6
#define NC (NS * NB)

static const double TRUE_E = 1.2, TRUE_A = 30, TRUE_ALPHA = 0.5, TRUE_B = 60, TRUE_BETA = 0.3;
static const double C_STAR = 1.28e13;

static double true_loss(double n, double d) {
  return TRUE_E + TRUE_A * pow(n, -TRUE_ALPHA) + TRUE_B * pow(d, -TRUE_BETA);
}

static double true_n_opt(double C) {
  double g = pow(TRUE_ALPHA * TRUE_A / (TRUE_BETA * TRUE_B), 1 / (TRUE_ALPHA + TRUE_BETA));
  return g * pow(C / 6, TRUE_BETA / (TRUE_ALPHA + TRUE_BETA));
}

static uint64_t rng_state;
static double uniform(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((double)((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
}
static double normal(void) {
  return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* 6 sizes from 3.3k to 100k, 6 budgets from 1e11 to 3.2e12 (factors of
 * 2); each size's largest budget is its group's trunk, the others decay
 * 20% of their compute */
static void make_candidates(adaptive_cand *c) {
  for (int i = 0; i < NS; i++)
    for (int j = 0; j < NB; j++) {
      double n = 3300 * pow(100000.0 / 3300, i / (NS - 1.0)), C = 1e11 * pow(2, j);
      c[i * NB + j] = (adaptive_cand){.run = (size_t)(i * NB + j),
                                      .params = n,
                                      .tokens = C / (6 * n),
                                      .flops = C,
                                      .budget = C,
                                      .group = (size_t)(i * NB + NB - 1),
                                      .decay = j == NB - 1 ? 1 : 0.2};
    }
}

/* the observed loss of candidate k: the law with 1% noise, fixed per candidate */
static double observed[NC];

static void observe_all(uint64_t seed) {
  adaptive_cand c[NC];
  make_candidates(c);
  rng_state = seed;
  for (int k = 0; k < NC; k++)
    observed[k] = true_loss(c[k].params, c[k].tokens) * exp(0.01 * normal());
}

static void add_point(fit_point *pts, int *n, const adaptive_cand *c) {
  pts[*n] = (fit_point){.params = c->params,
                        .tokens = c->tokens,
                        .flops = c->flops,
                        .loss = observed[c->run],
                        .batch_size = NAN,
                        .steps = NAN,
                        .lr = NAN,
                        .group = -1};
  (*n)++;
}

/* The candidates set[0..k) (set NULL: the first k) done, their points
 * added in that order; the number of points. */
static int mark_done(const adaptive_cand *c, const size_t *set, size_t k, adaptive_cand_state *st,
                     fit_point *pts) {
  int np = 0;
  for (size_t i = 0; i < k; i++) {
    size_t j = set ? set[i] : i;
    st[j] = ADAPT_DONE;
    add_point(pts, &np, &c[j]);
  }
  return np;
}

static spec_adaptive question(double precision, double compute) {
  return (spec_adaptive){.present = 1,
                         .question = SPEC_Q_N_OPT,
                         .flops = C_STAR,
                         .precision = precision,
                         .compute = compute,
                         .initial = 9,
                         .round = 4,
                         .bootstrap = 200,
                         .seed = 7};
}

/* the first round: space-filling over the budgets up to the geometric middle */
static void test_initial(void) {
  adaptive_cand c[NC];
  make_candidates(c);
  size_t pick[NC];
  size_t k = adaptive_initial(c, NC, 9, pick);
  CHECK_INT_EQ(k, 9);
  int sizes[NS] = {0}, budgets[NB] = {0};
  for (size_t i = 0; i < k; i++) {
    CHECK(c[pick[i]].budget <= sqrt(1e11 * 3.2e12));
    sizes[pick[i] / NB]++;
    budgets[pick[i] % NB]++;
    for (size_t j = 0; j < i; j++)
      CHECK(pick[i] != pick[j]);
  }
  /* the extremes of both axes are covered */
  CHECK(sizes[0] > 0 && sizes[NS - 1] > 0);
  CHECK(budgets[0] > 0 && budgets[2] > 0);
  /* the same again */
  size_t again[NC];
  CHECK_INT_EQ(adaptive_initial(c, NC, 9, again), 9);
  CHECK(!memcmp(pick, again, sizeof(size_t) * 9));
  /* the cost of a set: a group's longest whole, the others their decay */
  size_t set[3] = {NB - 1, 0, 1}; /* size 0 at the largest budget and two branches */
  CHECK_NEAR(adaptive_cost(c, set, 3), 3.2e12 + 0.2 * (1e11 + 2e11), 0, 1e-12);
  size_t alone[2] = {0, 1}; /* no trunk in the set: the longer one trains whole */
  CHECK_NEAR(adaptive_cost(c, alone, 2), 2e11 + 0.2 * 1e11, 0, 1e-12);
}

typedef struct loop_out {
  double first_width, final_width, lo, hi, spent;
  int rounds;
  adaptive_status status;
} loop_out;

/* The loop of rounds; fail: the first pick of round 1 fails (never seen,
 * never taken again). */
static loop_out run_loop(const spec_adaptive *a, int fail) {
  adaptive_cand c[NC];
  make_candidates(c);
  adaptive_cand_state st[NC] = {0};
  fit_point pts[NC];
  int np = 0;
  size_t pick[NC];
  size_t k = adaptive_initial(c, NC, a->initial, pick);
  for (size_t i = 0; i < k; i++) {
    st[pick[i]] = ADAPT_DONE;
    add_point(pts, &np, &c[pick[i]]);
  }
  loop_out o = {.first_width = NAN, .spent = adaptive_cost(c, pick, k)};
  size_t failed = NC;
  for (int round = 1; round < 30; round++) {
    adaptive_result r;
    CHECK_INT_EQ(adaptive_decide(a, c, NC, st, pts, np, o.spent, 2, &r), 0);
    if (round == 1) {
      o.first_width = r.width;
      CHECK(r.fitted);
      CHECK_INT_EQ(r.status, ADAPT_ROUND);
      /* deterministic: the same inputs, the same round */
      adaptive_result r2;
      CHECK_INT_EQ(adaptive_decide(a, c, NC, st, pts, np, o.spent, 1, &r2), 0);
      CHECK_INT_EQ(r2.npicks, r.npicks);
      for (size_t i = 0; i < r.npicks && i < r2.npicks; i++)
        CHECK_INT_EQ(r2.picks[i].cand, r.picks[i].cand);
      CHECK(r2.width == r.width && r2.answer == r.answer);
      adaptive_result_free(&r2);
    }
    o.final_width = r.width;
    o.lo = r.lo;
    o.hi = r.hi;
    o.status = r.status;
    if (r.status == ADAPT_ROUND) {
      CHECK(r.npicks >= 1 && r.npicks <= (size_t)a->round);
      CHECK(o.spent + r.cost <= a->compute * (1 + 1e-9));
      CHECK(r.pred_width <= r.width + 1e-12);
      for (size_t i = 0; i < r.npicks; i++) {
        size_t j = r.picks[i].cand;
        CHECK_INT_EQ(st[j], ADAPT_FREE);
        CHECK(j != failed);
        if (fail && round == 1 && i == 0) {
          st[j] = ADAPT_FAILED;
          failed = j;
          continue;
        }
        st[j] = ADAPT_DONE;
        add_point(pts, &np, &c[j]);
      }
      o.spent += r.cost;
      o.rounds = round;
      printf("  round %d: width %.3f (N_opt %.4g [%.4g, %.4g]), %zu runs for %.3g FLOPs, "
             "predicted %.3f; spent %.3g\n",
             round, r.width, r.answer, r.lo, r.hi, r.npicks, r.cost, r.pred_width, o.spent);
    } else {
      printf("  stop (%d): width %.3f, N_opt %.4g [%.4g, %.4g], more %.3g FLOPs, best %.3f: %s\n",
             r.status, r.width, r.answer, r.lo, r.hi, r.more_flops, r.best_width, r.reason);
    }
    adaptive_result_free(&r);
    if (o.status != ADAPT_ROUND)
      break;
  }
  return o;
}

/* the interval from a fit of the given candidates */
static double width_of(const spec_adaptive *a, const size_t *set, size_t k) {
  adaptive_cand c[NC];
  make_candidates(c);
  adaptive_cand_state st[NC] = {0};
  fit_point pts[NC];
  int np = mark_done(c, set, k, st, pts);
  spec_adaptive b = *a;
  b.precision = 1e-4; /* never reached: the width is what is wanted */
  adaptive_result r;
  CHECK_INT_EQ(adaptive_decide(&b, c, NC, st, pts, np, 0, 2, &r), 0);
  double w = r.fitted ? r.width : INFINITY;
  adaptive_result_free(&r);
  return w;
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* What the loop's tests start from: seed 12345's observations, the
 * candidates in c and all of them in all; the whole grid's cost, half of
 * which is their compute. */
static double observed_grid(adaptive_cand *c, size_t *all) {
  observe_all(12345);
  make_candidates(c);
  for (size_t i = 0; i < NC; i++)
    all[i] = i;
  return adaptive_cost(c, all, NC);
}

static void test_loop(void) {
  adaptive_cand c[NC];
  size_t all[NC];
  double grid_cost = observed_grid(c, all);
  spec_adaptive a = question(0.10, grid_cost / 2);
  double truth = true_n_opt(C_STAR);
  printf("the loop, compute %.3g (half the grid's %.3g), true N_opt %.4g:\n", a.compute, grid_cost,
         truth);
  loop_out o = run_loop(&a, 0);
  CHECK(o.rounds >= 2);
  CHECK(o.status == ADAPT_REACHED || o.status == ADAPT_SPENT || o.status == ADAPT_EXHAUSTED);
  CHECK(o.spent <= a.compute * (1 + 1e-9));
  /* the interval shrank, to one that holds the truth */
  CHECK(o.final_width < 0.5 * o.first_width);
  CHECK(o.lo <= truth && truth <= o.hi);
  if (o.status == ADAPT_REACHED)
    CHECK(o.final_width <= a.precision);

  /* the chosen runs narrow the answer more than random runs of the same
   * compute: the median of 7 random designs (each with the first round,
   * then random candidates until the adaptive's compute) */
  size_t first[NC];
  size_t k0 = adaptive_initial(c, NC, a.initial, first);
  double widths[7];
  for (int t = 0; t < 7; t++) {
    size_t set[NC], k = k0;
    memcpy(set, first, k0 * sizeof *set);
    unsigned char in[NC] = {0};
    for (size_t i = 0; i < k0; i++)
      in[first[i]] = 1;
    rng_state = 1000 + (uint64_t)t;
    for (int tries = 0; tries < 1000 && k < NC; tries++) {
      size_t j = (size_t)(uniform() * NC) % NC;
      if (in[j])
        continue;
      set[k] = j;
      if (adaptive_cost(c, set, k + 1) > o.spent)
        continue;
      in[j] = 1;
      k++;
    }
    widths[t] = width_of(&a, set, k);
  }
  qsort(widths, 7, sizeof *widths, cmp_d);
  printf("  random designs of the same compute: median width %.3f (%.3f to %.3f); adaptive %.3f\n",
         widths[3], widths[0], widths[6], o.final_width);
  CHECK(o.final_width < widths[3]);
  /* and the whole grid, for the record (twice the compute) */
  printf("  the whole grid (%.3g FLOPs): width %.3f\n", grid_cost, width_of(&a, all, NC));
}

/* the other criterion (reweighting the resamples by simulated outcomes):
 * the same loop's invariants, and a narrower interval at the end */
static void test_reweight(void) {
  adaptive_cand c[NC];
  size_t all[NC];
  spec_adaptive a = question(0.10, observed_grid(c, all) / 2);
  a.criterion = SPEC_CRIT_REWEIGHT;
  printf("the loop with the reweighting criterion:\n");
  loop_out o = run_loop(&a, 0);
  CHECK(o.rounds >= 2);
  CHECK(o.spent <= a.compute * (1 + 1e-9));
  CHECK(o.final_width < 0.5 * o.first_width);
}

/* a failed run is replaced: never taken again, and the loop goes on */
static void test_failed(void) {
  adaptive_cand c[NC];
  size_t all[NC];
  spec_adaptive a = question(0.10, observed_grid(c, all) / 2);
  printf("the loop with round 1's first run failed:\n");
  loop_out o = run_loop(&a, 1);
  CHECK(o.rounds >= 2);
  CHECK(o.status != ADAPT_WAITING);
}

/* the stops: precision met at once, compute spent, a run still active */
static void test_stops(void) {
  observe_all(12345);
  adaptive_cand c[NC];
  make_candidates(c);
  adaptive_cand_state st[NC] = {0};
  fit_point pts[NC];
  int np = mark_done(c, NULL, NC, st, pts);
  st[NC - 1] = ADAPT_FREE; /* one free candidate */
  np--;
  adaptive_result r;
  spec_adaptive loose = question(5.0, 1e14);
  CHECK_INT_EQ(adaptive_decide(&loose, c, NC, st, pts, np, 0, 2, &r), 0);
  CHECK_INT_EQ(r.status, ADAPT_REACHED);
  CHECK_INT_EQ(r.npicks, 0);
  adaptive_result_free(&r);
  spec_adaptive tight = question(1e-4, 1e13);
  CHECK_INT_EQ(adaptive_decide(&tight, c, NC, st, pts, np, 1e13, 2, &r), 0);
  CHECK_INT_EQ(r.status, ADAPT_SPENT);
  CHECK(strstr(r.reason, "spent") != NULL);
  /* what more would buy: the free candidate cannot reach 1e-4 */
  CHECK(isnan(r.more_flops));
  CHECK(r.best_width > 1e-4);
  adaptive_result_free(&r);
  st[NC - 1] = ADAPT_ACTIVE;
  CHECK_INT_EQ(adaptive_decide(&tight, c, NC, st, pts, np, 0, 2, &r), 0);
  CHECK_INT_EQ(r.status, ADAPT_WAITING);
  adaptive_result_free(&r);
  /* too few points to fit: a space-filling round */
  adaptive_cand_state few[NC] = {0};
  few[0] = few[NB - 1] = ADAPT_DONE;
  np = 0;
  add_point(pts, &np, &c[0]);
  add_point(pts, &np, &c[NB - 1]);
  CHECK_INT_EQ(adaptive_decide(&tight, c, NC, few, pts, np, 0, 2, &r), 0);
  CHECK_INT_EQ(r.status, ADAPT_ROUND);
  CHECK(!r.fitted);
  CHECK_INT_EQ(r.npicks, (size_t)tight.round);
  CHECK(strstr(r.reason, "space-filling") != NULL);
  for (size_t i = 0; i < r.npicks; i++)
    CHECK(r.picks[i].cand != 0 && r.picks[i].cand != NB - 1);
  adaptive_result_free(&r);
}

static const char *SPEC_HEAD =
    "{\"name\": \"a\", \"method\": \"isoflop\", \"base\": {\"model\": {\"seq_len\": 64}, "
    "\"data\": {\"synthetic\": {\"letters\": 26, \"words\": 1024, \"min_len\": 2, \"max_len\": 8, "
    "\"zipf\": 1.4, \"seed\": 1}}, \"train\": {\"micro_batch_size\": 16, "
    "\"schedule\": \"wsd\"}}, \"isoflop\": {\"flops\": {\"from\": 1e11, \"to\": 3.2e12, "
    "\"points\": 6}, \"params\": [3300, 7300, 12800, 28400, 56600, 100000], \"flops_count\": "
    "\"exact\"}, \"batch_rule\": {\"min_steps\": 500}, \"resources\": {\"cpus\": 1}, "
    "\"throughput_flops\": 3e10";

static int parse_with(const char *adaptive, spec **s, spec_problems *pr) {
  char text[4096];
  snprintf(text, sizeof text, "%s, \"adaptive\": %s}", SPEC_HEAD, adaptive);
  return spec_parse(text, "a.json", s, pr);
}

/* parse_with(adaptive) refused with SS_EINVAL, its problems in *pr (the
 * caller frees them) */
static int refused(const char *adaptive, spec_problems *pr) {
  spec *s = NULL;
  *pr = (spec_problems){0};
  int rc = parse_with(adaptive, &s, pr);
  spec_free(s);
  return rc == SS_EINVAL;
}

static int problem_at(const spec_problems *pr, const char *path, const char *needle) {
  for (size_t i = 0; i < pr->n; i++)
    if (!strcmp(pr->items[i].path, path) && strstr(pr->items[i].message, needle))
      return 1;
  for (size_t i = 0; i < pr->n; i++)
    fprintf(stderr, "    %s: %s\n", pr->items[i].path, pr->items[i].message);
  return 0;
}

static void test_spec(void) {
  spec *s = NULL;
  spec_problems pr = {0};
  CHECK_INT_EQ(parse_with("{\"flops\": 1.28e13, \"compute\": 1.2e13}", &s, &pr), 0);
  if (s) {
    CHECK(s->adaptive.present);
    CHECK_INT_EQ(s->adaptive.question, SPEC_Q_N_OPT);
    CHECK_NEAR(s->adaptive.precision, 0.25, 0, 0);
    CHECK_INT_EQ(s->adaptive.initial, 9);
    plan *p = NULL;
    CHECK_INT_EQ(plan_spec(s, &p, &pr), 0);
    if (p) {
      /* the first round only, with its branches; the candidates kept */
      CHECK_INT_EQ(p->n, 9);
      CHECK(p->candidates != NULL && p->candidates->n == 36);
      CHECK(p->adaptive_initial_flops < p->adaptive_grid_flops / 5);
      size_t branches = 0;
      for (size_t i = 0; i < p->n; i++) {
        const plan_run *r = &p->runs[i];
        CHECK_INT_EQ(r->index, (int)i);
        if (r->branch_of < 0)
          continue;
        branches++;
        const plan_run *t = &p->runs[r->branch_of];
        CHECK(t->tokens > r->tokens && t->nonembedding_params == r->nonembedding_params);
        CHECK(r->branch_step > 0 && r->branch_step < r->steps);
      }
      CHECK(branches >= 1);
      CHECK_INT_EQ(branches, p->n_branches);
    }
    plan_free(p);
  }
  spec_free(s);
  spec_problems_free(&pr);

  /* refused, with a problem at every path given */
  static const struct {
    const char *adaptive;
    const char *path[2], *needle[2];
  } cases[] = {
      {"{\"question\": \"loss\", \"flops\": 1e13, \"compute\": 1e13}",
       {"$.adaptive.params", "$.adaptive.flops"},
       {"expected the non-embedding parameters", "only with question \"n_opt\""}},
      {"{\"flops\": 1e13}", {"$.adaptive.compute"}, {"FLOPs the study may train"}},
      {"{\"flops\": 1e13, \"compute\": 1e13, \"initial\": 3, \"precision\": 0}",
       {"$.adaptive.initial", "$.adaptive.precision"},
       {"found 3", "half-width"}},
      {"{\"flops\": 1e13, \"compute\": 1e13, \"rounds\": 3}", {"$.adaptive.rounds"}, {""}},
      {"{\"flops\": 1e13, \"compute\": 1e13, \"criterion\": \"bayes\"}",
       {"$.adaptive.criterion"},
       {"bayes"}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    CHECK(refused(cases[c].adaptive, &pr));
    for (size_t k = 0; k < 2 && cases[c].path[k]; k++)
      CHECK(problem_at(&pr, cases[c].path[k], cases[c].needle[k]));
    spec_problems_free(&pr);
  }
  pr = (spec_problems){0};
  CHECK_INT_EQ(
      parse_with("{\"flops\": 1e13, \"compute\": 1e13, \"criterion\": \"reweight\"}", &s, &pr), 0);
  if (s)
    CHECK_INT_EQ(s->adaptive.criterion, SPEC_CRIT_REWEIGHT);
  spec_free(s);
  spec_problems_free(&pr);
}

int main(void) {
  test_initial();
  test_stops();
  test_spec();
  test_loop();
  test_failed();
  test_reweight();
  CHECK_DONE();
}

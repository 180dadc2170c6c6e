/* What more compute would buy, by the adaptive design's own criterion
 * (sweeps/adaptive.h adaptive_forecast; docs/study.md, "The adaptive design
 * against the grid"): the candidates of SPEC's isoflop plan (widen its
 * budgets to ask about ones not trained), the points of CSV (params, tokens,
 * flops, loss: what a study trained; the candidates at those N and D count
 * as trained), and the greedy conditioning over every other candidate:
 * after each pick, the FLOPs so far and the width of the question's 95%
 * interval it predicts.
 *   adaptive_more SPEC.json POINTS.csv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sweeps/adaptive.h"
#include "sweeps/fit.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: adaptive_more SPEC.json POINTS.csv\n");
    return 2;
  }
  spec *s = NULL;
  plan *p = NULL;
  spec_problems pr = {0};
  if (plan_load(argv[1], &s, &p, &pr) != 0 || !p->candidates) {
    char *t = spec_problems_format(&pr, argv[1]);
    fprintf(stderr, "%s", t && *t ? t : "adaptive_more: the spec has no \"adaptive\" section\n");
    return 2;
  }
  fit_point *pts;
  int np;
  char err[512];
  if (fit_read_csv(argv[2], &pts, &np, err, sizeof err) != 0) {
    fprintf(stderr, "adaptive_more: %s\n", err);
    return 2;
  }
  adaptive_cand *c;
  size_t n;
  if (adaptive_candidates(p->candidates, &c, &n))
    return 1;
  adaptive_cand_state *st = calloc(n, sizeof *st);
  adaptive_step *path = calloc(n, sizeof *path);
  size_t trained = 0;
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < np; k++)
      if (fabs(pts[k].params - c[i].params) < 0.5 && fabs(pts[k].tokens - c[i].tokens) < 0.5) {
        st[i] = ADAPT_DONE;
        trained++;
        break;
      }
  size_t m;
  double now;
  int rc = adaptive_forecast(&s->adaptive, c, n, st, pts, np, 0, path, &m, &now, err, sizeof err);
  if (rc) {
    fprintf(stderr, "adaptive_more: %s\n", err);
    return 1;
  }
  char q[160];
  adaptive_question_text(&s->adaptive, q, sizeof q);
  printf("%s\n%d points (%zu of %zu candidates trained); the width now: %.3g\n\n", q, np, trained,
         n, now);
  printf("| after | N | D | budget | FLOPs more | predicted width |\n|---:|---:|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < m; i++)
    printf("| %zu | %.3g | %.3g | %.3g | %.3g | %.3g |\n", i + 1, c[path[i].cand].params,
           c[path[i].cand].tokens, c[path[i].cand].budget, path[i].flops, path[i].width);
  return 0;
}

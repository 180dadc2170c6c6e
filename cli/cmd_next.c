/* scalesweep next: the next compute budget of a sweep, designed from its
 * fits (GET /api/sweeps/{id}/next; --submit: POST, the runs added to the
 * sweep). A table for people, --json for programs. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/err.h"

static const char usage[] =
    "usage: scalesweep next SWEEP_ID --flops C [--points M] [--submit] [--json]\n"
    "                       [--url URL] [--state DIR] [--token-file F]\n"
    "  proposes the runs of a new compute budget C (FLOPs) for sweep SWEEP_ID from its\n"
    "  fits: M model sizes (default 5) centred on the fitted N_opt(C), spread to cover its\n"
    "  95% interval, batch size and learning rate from the sweep's fitted rules (or its\n"
    "  spec's), each run's predicted final loss with a 95% prediction interval;\n"
    "  --submit adds those runs to the sweep (the fits then take them in, and the page\n"
    "  shows predicted against measured)\n";

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* "1.234 [1.200, 1.270]": v and its interval ci (when it has one), each
 * number as %.4f (loss) or %.3g (counts) */
static void with_interval(char *b, size_t n, int loss, double v, json_t *ci) {
  double lo = json_number_value(json_array_get(ci, 0)),
         hi = json_number_value(json_array_get(ci, 1));
  if (json_array_size(ci) != 2)
    snprintf(b, n, loss ? "%.4f" : "%.3g", v);
  else
    snprintf(b, n, loss ? "%.4f [%.4f, %.4f]" : "%.3g [%.3g, %.3g]", v, lo, hi);
}

static void print_design(json_t *d, long long sweep) {
  char a[128], b[128];
  json_t *no = json_object_get(d, "n_opt"), *lo = json_object_get(d, "loss_at_n_opt");
  with_interval(a, sizeof a, 0, num(no, "value"), json_object_get(no, "ci95"));
  with_interval(b, sizeof b, 1, num(lo, "value"), json_object_get(lo, "ci95"));
  json_t *fit = json_object_get(d, "fit"), *c = json_object_get(d, "centre");
  printf("sweep %lld, next budget %.3g FLOPs (%.1fx its largest, %.3g)\n", sweep, num(d, "flops"),
         num(d, "flops") / num(d, "largest_budget"), num(d, "largest_budget"));
  printf("  from the Chinchilla fit of %.0f runs (alpha %.3f, beta %.3f, E %.3f; %.0f bootstrap "
         "resamples)\n",
         num(fit, "n_points"), num(fit, "alpha"), num(fit, "beta"), num(fit, "E"),
         num(fit, "bootstrap"));
  printf("  N_opt %s, D_opt %.3g, loss at N_opt %s\n", a, num(d, "d_opt"), b);
  json_t *rules = json_object_get(d, "rules"), *noise = json_object_get(d, "noise");
  json_t *rb = json_object_get(rules, "batch");
  printf("  %.0f sizes over x%.3g either way of N_opt; batch size from %s, learning rate from "
         "%s; a run's scatter %.2f%% (from the %s)\n",
         num(c, "points"), num(c, "span"), json_string_value(json_object_get(rb, "from")),
         json_string_value(json_object_get(json_object_get(rules, "lr"), "from")),
         100 * num(noise, "sd"), json_string_value(json_object_get(noise, "from")));
  if (json_is_number(json_object_get(rb, "at_flops")))
    printf("  a grid of WSD branches: each size also at the sweep's smallest budget, %.3g FLOPs, "
           "a branch of its run at %.3g, with that budget's batch size and learning rate, as "
           "the sweep's sizes train\n",
           num(rb, "at_flops"), num(d, "flops"));
  printf("  %3s %8s %5s %10s %10s %6s %9s %9s  %s\n", "#", "shape", "heads", "N", "D", "B", "lr",
         "C", "predicted loss [95%]");
  size_t i;
  json_t *r;
  json_array_foreach(json_object_get(d, "runs"), i, r) {
    char shape[32];
    snprintf(shape, sizeof shape, "%.0fx%.0f", num(r, "n_layer"), num(r, "d_model"));
    with_interval(b, sizeof b, 1, num(r, "predicted_loss"), json_object_get(r, "ci95"));
    printf("  %3zu %8s %5.0f %10.3g %10.3g %6.0f %9.3g %9.3g  %s\n", i, shape, num(r, "n_head"),
           num(r, "nonembedding_params"), num(r, "tokens"), num(r, "batch_size"), num(r, "lr"),
           num(r, "flops"), b);
  }
  json_array_foreach(json_object_get(d, "warnings"), i, r) {
    printf("  warning: %s\n", json_string_value(r));
  }
}

/* What the command line asks of next, read and checked. */
typedef struct next_args {
  const char *url, *state, *token_file;
  int json, submit;
  long long id;
  double flops;
  long points; /* 0: the server's default */
} next_args;

/* The sweep id, --flops and --points, checked: -1 to go on, else a usage
 * error's exit code. */
static int check_next_args(const char *arg, const char *flops_s, const char *points_s,
                           next_args *n) {
  char *end;
  n->id = arg ? strtoll(arg, &end, 10) : 0;
  if (!arg || *end || n->id <= 0)
    return cli_usage_error("next", NULL, "expected a positive sweep id, found '%s'",
                           arg ? arg : "nothing");
  n->flops = flops_s ? strtod(flops_s, &end) : NAN;
  if (!flops_s || *end || !(n->flops > 0) || !isfinite(n->flops))
    return cli_usage_error("next", NULL,
                           "--flops: expected the new budget in FLOPs above 0 (3e13), found "
                           "'%s'",
                           flops_s ? flops_s : "nothing");
  n->points = points_s ? strtol(points_s, &end, 10) : 0;
  if (points_s && (*end || n->points < 1 || n->points > 1000))
    return cli_usage_error("next", NULL,
                           "--points: expected a whole number of model sizes, "
                           "found '%s'",
                           points_s);
  return -1;
}

/* Reads argv into n: -1 to go on, else the exit code (--help, or a usage
 * error said on stderr). */
static int read_next_args(int argc, char **argv, next_args *n) {
  const char *flops_s = NULL, *points_s = NULL, *arg = NULL;
  const cli_opt opts[] = {CLI_API_OPTS(n),
                          {"--submit", NULL, &n->submit},
                          {"--flops", &flops_s, NULL},
                          {"--points", &points_s, NULL}};
  int rc = cli_args_read(argc, argv, "next", opts, sizeof opts / sizeof *opts, &arg, 1, NULL, usage);
  if (rc >= 0)
    return rc;
  return check_next_args(arg, flops_s, points_s, n);
}

/* The design: POSTed with --submit (the runs added), else asked for with
 * GET. The answer parsed, its text in *raw; NULL with the exit code in
 * *rc. */
static json_t *request_design(const next_args *n, int *rc, char **raw) {
  char path[160], body[128];
  if (n->submit) {
    snprintf(path, sizeof path, "/api/sweeps/%lld/next", n->id);
    int k = snprintf(body, sizeof body, "{\"flops\":%.17g", n->flops);
    snprintf(body + k, sizeof body - (size_t)k, n->points ? ",\"points\":%ld}" : "}", n->points);
    return cli_call(n->url, n->state, n->token_file, "POST", path, body, strlen(body), rc, raw);
  }
  /* no '+' in the query (it would be read as a space): 1e+17 as 1e17 */
  char c[40], *w = c;
  snprintf(c, sizeof c, "%.17g", n->flops);
  for (const char *q = c; *q; q++)
    if (*q != '+')
      *w++ = *q;
  *w = 0;
  int k = snprintf(path, sizeof path, "/api/sweeps/%lld/next?flops=%s", n->id, c);
  if (n->points)
    snprintf(path + k, sizeof path - (size_t)k, "&points=%ld", n->points);
  return cli_call(n->url, n->state, n->token_file, "GET", path, NULL, 0, rc, raw);
}

int cmd_next(int argc, char **argv) {
  next_args n = {0};
  int rc = read_next_args(argc, argv, &n);
  if (rc >= 0)
    return rc;
  char *raw = NULL;
  json_t *j = request_design(&n, &rc, &raw);
  if (!j) {
    free(raw);
    return rc;
  }
  if (n.json) {
    printf("%s\n", raw);
  } else if (n.submit) {
    print_design(json_object_get(j, "design"), n.id);
    double added = num(j, "added");
    if (added > 0)
      printf("%.0f run(s) added to sweep %lld (scalesweep status %lld)\n", added, n.id, n.id);
    else
      printf("sweep %lld has these runs already: nothing added\n", n.id);
  } else {
    print_design(j, n.id);
    printf("(scalesweep next %lld --flops %.3g --submit adds these runs to the sweep)\n", n.id,
           n.flops);
  }
  free(raw);
  json_decref(j);
  return 0;
}

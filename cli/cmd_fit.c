/* scalesweep fit: fits a scaling law to a CSV table of points (the fitting
 * library, sweeps/fit.h) and prints a table or the JSON object. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/adaptive_text.h"
#include "cli/client.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "sweeps/fit.h"

#define DEFAULT_BOOTSTRAP_CHINCHILLA 1000

static const char usage_text[] =
    "usage: scalesweep fit --points FILE.csv\n"
    "                      --law chinchilla|kaplan|isoflop|batch|bcrit|bopt|curve\n"
    "                      [--bootstrap N] [--seed S] [--threads T] [--target-flops C]\n"
    "                      [--target-steps S] [--no-irreducible] [--method M] [--full-grid]\n"
    "                      [--boot-by-run] [--json]\n"
    "       scalesweep fit SWEEP_ID [--law L] [--json] [--url URL] [--state DIR]\n"
    "                                  (the fits the scheduler made of a sweep)\n"
    "\n"
    "Fits a scaling law to the points of a CSV file whose header row names its\n"
    "columns among params, tokens, flops, loss, batch_size, steps, lr, run (any\n"
    "order; other columns are ignored; tokens = flops / (6 params) when tokens is\n"
    "missing; rows with the same run are resampled together by the bootstrap).\n"
    "\n"
    "  chinchilla  L = E + A/N^alpha + B/D^beta (Approach 3), needs params, tokens\n"
    "              (or flops) and loss; prints the compute-optimal allocation\n"
    "  kaplan      L(X) = E + (X_c/X)^alpha_X for each of params, tokens, flops given\n"
    "  isoflop     per-budget parabolas in ln N, then N_opt(C), D_opt(C) (Approach 2)\n"
    "  batch       S = S_min + E_min/B from a batch ladder (batch_size, steps)\n"
    "  bcrit       the same per branch point of a ladder by branching (tokens: the\n"
    "              branch point's D, batch_size, steps from it to loss, the\n"
    "              target), then B_crit against D and against the loss\n"
    "  bopt        B_opt(C), eta_opt(C) and B_opt(D) from the runs within --near-best\n"
    "              of each compute budget's best loss (flops, tokens, batch_size,\n"
    "              loss, and lr for eta_opt; batch_size in tokens to compare with\n"
    "              DeepSeek's published 0.292 C^0.3271)\n"
    "  curve       L(S) = L_inf + (S_c/S)^alpha_S from one run's learning curve\n"
    "              (steps, loss; points after warmup), to predict a later loss\n"
    "\n"
    "  --bootstrap N     resamples for standard errors and 95% intervals (default\n"
    "                    1000 for chinchilla, bopt and curve, 0 for the other laws)\n"
    "  --seed S          bootstrap seed (default 1)\n"
    "  --threads T       threads (default: all cores)\n"
    "  --target-flops C  chinchilla: also N_opt, D_opt and the loss at compute C\n"
    "  --target-steps S  curve: also the loss predicted at optimizer step S\n"
    "  --no-irreducible  kaplan: fix E = 0 (Kaplan et al.'s form)\n"
    "  --near-best R     bopt: near-optimal runs are within R of the best loss\n"
    "                    (relative; default 0.01)\n"
    "  --holdout         chinchilla: also the extrapolation check (refit without the\n"
    "                    largest compute budget, predict its runs; JSON: extrapolation)\n"
    "  --method M        chinchilla's minimiser: varpro (default: variable projection,\n"
    "                    the prefactors solved for each exponent pair, the exponents\n"
    "                    searched) or bfgs (BFGS from the best of a 4,500-start grid)\n"
    "  --full-grid       chinchilla: BFGS from all 4,500 grid starts instead of the\n"
    "                    screened best (slow; the reference both are tested on)\n"
    "  --boot-by-run     chinchilla, isoflop: resample runs as independent points even\n"
    "                    when seeds replicate a cell (N, D); default: by cell (cells,\n"
    "                    then each cell's runs, with replacement)\n"
    "  --json            print one JSON object instead of the table\n"
    "\n"
    "A fit that did not converge is printed with converged: no and a warning.\n"
    "Exit codes: 0 fitted, 1 run-time failure, 2 bad usage or invalid input.\n";

static int parse_count(const char *opt, const char *s, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < 0 || v > max)
    return cli_usage_error("fit", NULL, "%s: expected an integer in 0..%ld, got '%s'", opt, max, s);
  *out = v;
  return 0;
}

static int parse_positive(const char *opt, const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !isfinite(v) || !(v > 0))
    return cli_usage_error("fit", NULL, "%s: expected a positive number, got '%s'", opt, s);
  *out = v;
  return 0;
}

/* ---- the table ---- */

static void interval(const fit_param *p, char *buf, size_t len) {
  if (isfinite(p->ci_lo) && isfinite(p->ci_hi))
    snprintf(buf, len, "[%.6g, %.6g]", p->ci_lo, p->ci_hi);
  else
    snprintf(buf, len, "-");
}

static void row(const fit_param *p, const char *label) {
  char se[32] = "-", ci[80];
  if (isfinite(p->stderr_))
    snprintf(se, sizeof se, "%.4g", p->stderr_);
  interval(p, ci, sizeof ci);
  printf("  %-26s %14.6g %12s   %s\n", label ? label : p->name, p->value, se, ci);
}

static void header(const char *title) {
  printf("\n  %-26s %14s %12s   %s\n", title, "value", "std. error", "95% interval");
}

static const fit_param *derived(const fit_result *r, const char *name) {
  return fit_result_get(r, name);
}

static void print_chinchilla_allocation(const fit_result *r, double target) {
  static const char *const names[] = {"a", "b", "G"};
  static const char *const labels[] = {"a = beta/(alpha+beta)", "b = alpha/(alpha+beta)", "G"};
  header("allocation (C = 6 N D)");
  for (int i = 0; i < 3; i++) {
    const fit_param *p = derived(r, names[i]);
    if (p)
      row(p, labels[i]);
  }
  printf("  N_opt(C) = G (C/6)^a, D_opt(C) = (C/6)^b / G\n");
  if (target > 0) {
    char title[64];
    snprintf(title, sizeof title, "at C = %.4g FLOPs", target);
    header(title);
    static const char *const at[] = {"N_opt", "D_opt", "loss_at_target"};
    static const char *const atl[] = {"N_opt (parameters)", "D_opt (tokens)", "loss"};
    for (int i = 0; i < 3; i++) {
      const fit_param *p = derived(r, at[i]);
      if (p)
        row(p, atl[i]);
    }
    const fit_param *n = derived(r, "N_opt"), *d = derived(r, "D_opt");
    if (n && d)
      printf("  %-26s %14.6g\n", "D_opt / N_opt", d->value / n->value);
  }
}

static void print_curve(const fit_result *r, double target) {
  const fit_param *sd = derived(r, "noise_sd"), *rho = derived(r, "noise_rho");
  if (sd && rho)
    printf("  noise (ln L, AR(1)): SD %.4g, lag-1 correlation %.3f\n", sd->value, rho->value);
  const fit_param *p = derived(r, "loss_at_target");
  if (p && target > 0) {
    char title[64];
    snprintf(title, sizeof title, "at S = %.6g steps", target);
    header(title);
    row(p, "loss");
  }
}

static void print_budgets(const fit_result *r) {
  if (!strcmp(r->law, "bopt")) {
    printf("\n  %12s %5s %5s %14s %12s %12s %10s\n", "budget C", "runs", "near", "B_opt", "eta_opt",
           "D", "best loss");
    for (int i = 0; i < r->nbudgets; i++) {
      const fit_budget *b = &r->budgets[i];
      printf("  %12.4g %5d %5d %14.6g %12.4g %12.4g %10.6g%s\n", b->flops, b->n_points, b->n_near,
             b->b_opt, b->lr_opt, b->d_opt, b->loss, b->usable ? "" : "  (one run: not used)");
    }
    return;
  }
  printf("\n  %12s %7s %14s %14s %10s  %s\n", "budget C", "points", "N*", "D*", "loss", "usable");
  int ci = 0, rep = 0;
  for (int i = 0; i < r->nbudgets; i++) {
    const fit_budget *b = &r->budgets[i];
    printf("  %12.4g %7d %14.6g %14.6g %10.6g  %s\n", b->flops, b->n_points, b->n_opt, b->d_opt,
           b->loss, b->usable ? "yes" : "no (no interior minimum)");
    ci |= isfinite(b->n_opt_lo) && isfinite(b->n_opt_hi);
    rep |= b->n_cells > 0 && b->n_cells < b->n_points;
  }
  if (!ci && !rep)
    return;
  /* the vertices' bootstrap intervals and, with seeds, the replicates */
  printf("\n  %12s %29s %6s %14s\n", "budget C", "N* 95% interval", "sizes", "seed SD of L");
  for (int i = 0; i < r->nbudgets; i++) {
    const fit_budget *b = &r->budgets[i];
    char iv[40] = "", sd[24] = "";
    if (isfinite(b->n_opt_lo) && isfinite(b->n_opt_hi))
      snprintf(iv, sizeof iv, "[%.4g, %.4g]", b->n_opt_lo, b->n_opt_hi);
    if (isfinite(b->seed_sd))
      snprintf(sd, sizeof sd, "%.4g", b->seed_sd);
    printf("  %12.4g %29s %6d %14s\n", b->flops, iv, b->n_cells, sd);
  }
}

/* Seeds: the pooled run-to-run noise over replicated cells (fit_seeds). */
static void print_seeds(const fit_result *r, const fit_options *opt) {
  const fit_seeds *s = &r->seeds;
  if (s->cells <= 0)
    return;
  printf("\n  seeds       SD of ln L %.4g, 95%% interval [%.4g, %.4g]\n", s->sd, s->lo, s->hi);
  printf("              pooled over %d runs in %d replicated cells (df %d)\n", s->runs, s->cells,
         s->df);
  if (opt->bootstrap > 0)
    printf("              bootstrap %s\n",
           opt->boot_by_run ? "by run (replicates as independent points)"
                            : "by cell: cells, then the runs within each, with replacement");
}

static void print_table(const fit_result *r, const char *path, const fit_options *opt) {
  printf("%s fit of %d points from %s", r->law, r->n_points, path);
  if (opt->bootstrap > 0)
    printf(" (%d bootstrap resamples, seed %" PRIu64 ")", opt->bootstrap, opt->seed);
  printf("\n");
  header("parameter");
  for (int i = 0; i < r->nparams; i++)
    row(&r->params[i], NULL);
  if (!strcmp(r->law, "chinchilla")) {
    print_chinchilla_allocation(r, opt->target_flops);
  } else if (!strcmp(r->law, "curve")) {
    print_curve(r, opt->target_steps);
  } else if (r->nderived) {
    header("derived");
    for (int i = 0; i < r->nderived; i++)
      row(&r->derived[i], NULL);
  }
  if (r->nbudgets)
    print_budgets(r);
  print_seeds(r, opt);
  printf("\n  objective   %.10g\n", r->objective);
  printf("  converged   %s\n", r->converged ? "yes" : "no (the values are the best point found)");
  if (r->residuals && r->n_points > 0) {
    double ss = 0, worst = 0;
    int at = 0;
    for (int i = 0; i < r->n_points; i++) {
      ss += r->residuals[i] * r->residuals[i];
      if (fabs(r->residuals[i]) > worst)
        worst = fabs(r->residuals[i]), at = i;
    }
    printf("  residuals   RMS %.4g, max |r| %.4g (data row %d)%s\n", sqrt(ss / r->n_points), worst,
           at + 1,
           !strcmp(r->law, "chinchilla") || !strcmp(r->law, "curve") ? "; r = ln L_predicted - ln L"
                                                                     : "");
  }
  if (!r->nwarnings)
    printf("  warnings    none\n");
  for (int i = 0; i < r->nwarnings; i++)
    printf("  %s %s\n", i ? "           " : "warnings   ", r->warnings[i]);
}

/* ---- the command ---- */

typedef int (*law_fn)(const fit_point *, int, const fit_options *, fit_result *, char *, size_t);

static const struct {
  const char *name;
  law_fn fit;
} laws[] = {
    {"chinchilla", fit_chinchilla}, {"kaplan", fit_kaplan}, {"isoflop", fit_isoflop},
    {"batch", fit_batch},           {"bcrit", fit_bcrit},   {"bopt", fit_bopt},
    {"curve", fit_curve},
};

/* A learning curve: steps and loss at every point, no column that another
 * law needs besides. */
static int only_curve(const fit_point *p, int n) {
  for (int i = 0; i < n; i++)
    if (isnan(p[i].steps) || !isnan(p[i].params) || !isnan(p[i].tokens) || !isnan(p[i].flops) ||
        !isnan(p[i].batch_size))
      return 0;
  return n > 0;
}

/* scalesweep fit SWEEP: the fits the scheduler made when the sweep's runs
 * finished (GET /api/sweeps/{id}/fit), all laws or --law's. */
static int fit_stored(const char *sweep, const char *law, int json, const char *url,
                      const char *state, const char *token_file) {
  char *end;
  long long id = strtoll(sweep, &end, 10);
  if (*end || id <= 0)
    return cli_usage_error("fit", NULL,
                           "expected a sweep id (a positive integer) or --points, got '%s'", sweep);
  cli_target t;
  int rc = cli_target_find(&t, url, state, token_file);
  if (rc)
    return rc;
  char path[64];
  snprintf(path, sizeof path, "/api/sweeps/%lld/fit", id);
  int status;
  char *resp;
  if (cli_request(&t, "GET", path, NULL, 0, &status, &resp) != 0)
    return SS_EXIT_FAILURE;
  json_error_t je;
  json_t *all = json_loads(resp, JSON_DECODE_INT_AS_REAL, &je);
  free(resp);
  if (status != 200 || !json_is_object(all)) {
    const char *m = json_string_value(json_object_get(json_object_get(all, "error"), "message"));
    fprintf(stderr, "scalesweep fit: sweep %lld: %s\n", id, m ? m : "no answer");
    json_decref(all);
    return status == 404 ? SS_EXIT_USAGE : SS_EXIT_FAILURE;
  }
  /* the adaptive design's rounds: after the laws, or alone (--law adaptive) */
  json_t *ad = cli_get_adaptive(&t, id);
  if (ad && (!law || !strcmp(law, "adaptive")))
    json_object_set(all, "adaptive", ad);
  json_t *pick = law ? json_object_get(all, law) : all;
  if (!pick || !json_object_size(pick)) {
    fprintf(stderr,
            "scalesweep fit: sweep %lld has no %s fit yet (its runs are still "
            "running, or too few succeeded for the law)\n",
            id, law ? law : "");
    json_decref(all);
    return SS_EXIT_FAILURE;
  }
  if (json) {
    char *text = json_dumps(pick, JSON_COMPACT | JSON_REAL_PRECISION(17));
    printf("%s\n", text);
    free(text);
  } else if (law) {
    if (!strcmp(law, "adaptive"))
      cli_print_adaptive(stdout, pick, "");
    else
      cli_print_fit(stdout, law, pick);
  } else {
    const char *k;
    json_t *v;
    json_object_foreach(all, k, v) {
      if (strcmp(k, "adaptive") != 0)
        cli_print_fit(stdout, k, v);
    }
    cli_print_adaptive(stdout, ad, "");
  }
  json_decref(ad);
  json_decref(all);
  return SS_EXIT_OK;
}

/* What the command line asks of fit; the strings point into argv. */
typedef struct fit_args {
  const char *points, *law, *sweep, *url, *state, *token_file;
  fit_options opt;
  int json, holdout;
} fit_args;

/* The options without a value ("--json"), by name (nlen bytes of a):
 * 1 when a is one of them and set, 0 when it is none, or a usage error's
 * exit code in *rc when it was given a value. */
static int read_fit_flag(const char *a, size_t nlen, int has_value, fit_args *f, int *rc) {
#define IS(name) (nlen == strlen(name) && !strncmp(a, name, nlen))
  if (!(IS("--json") || IS("--no-irreducible") || IS("--full-grid") || IS("--holdout") ||
        IS("--boot-by-run")))
    return 0;
  if (has_value)
    *rc = cli_usage_error("fit", NULL, "%.*s takes no value", (int)nlen, a);
  else if (IS("--json"))
    f->json = 1;
  else if (IS("--holdout"))
    f->holdout = 1;
  else if (IS("--no-irreducible"))
    f->opt.fit_irreducible = 0;
  else if (IS("--boot-by-run"))
    f->opt.boot_by_run = 1;
  else
    f->opt.full_grid = 1;
  return 1;
#undef IS
}

/* One option with its value val: 0, or a usage error's exit code. name is
 * one of the value options (read_fit_args checked it). */
static int set_fit_value(const char *name, const char *val, fit_args *f) {
  int rc = 0;
  long v = 0;
  fit_options *opt = &f->opt;
  if (!strcmp(name, "--points")) {
    f->points = val;
  } else if (!strcmp(name, "--url") || !strcmp(name, "--state") || !strcmp(name, "--token-file")) {
    *(!strcmp(name, "--url")     ? &f->url
      : !strcmp(name, "--state") ? &f->state
                                 : &f->token_file) = val;
  } else if (!strcmp(name, "--law")) {
    f->law = val;
  } else if (!strcmp(name, "--method")) {
    if (!strcmp(val, "varpro"))
      opt->chin_method = FIT_CHIN_VARPRO;
    else if (!strcmp(val, "bfgs"))
      opt->chin_method = FIT_CHIN_BFGS;
    else
      return cli_usage_error("fit", NULL, "--method: expected varpro or bfgs, got '%s'", val);
  } else if (!strcmp(name, "--bootstrap")) {
    if (!(rc = parse_count("--bootstrap", val, 1000000, &v)))
      opt->bootstrap = (int)v;
  } else if (!strcmp(name, "--seed")) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(val, &end, 10);
    if (!*val || *val == '-' || *end || errno)
      return cli_usage_error("fit", NULL, "--seed: expected a non-negative integer, got '%s'", val);
    opt->seed = s;
  } else if (!strcmp(name, "--threads")) {
    if (!(rc = parse_count("--threads", val, 4096, &v)))
      opt->threads = (int)v;
  } else if (!strcmp(name, "--target-steps")) {
    rc = parse_positive("--target-steps", val, &opt->target_steps);
  } else if (!strcmp(name, "--near-best")) {
    rc = parse_positive("--near-best", val, &opt->near_best_rtol);
  } else {
    rc = parse_positive("--target-flops", val, &opt->target_flops);
  }
  return rc;
}

/* Reads argv into f ("--name VALUE" and "--name=VALUE" both): -1 to go
 * on, else the exit code (--help, or a usage error said on stderr). */
static int read_fit_args(int argc, char **argv, fit_args *f) {
  static const char *const value_opts[] = {
      "--points",       "--law",       "--bootstrap", "--seed",  "--threads",    "--target-flops",
      "--target-steps", "--near-best", "--url",       "--state", "--token-file", "--method"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '='), *val = NULL;
    size_t nlen = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
    if (cli_is_help(a)) {
      fputs(usage_text, stdout);
      return SS_EXIT_OK;
    }
    if (a[0] != '-' || !a[1]) {
      if (f->sweep)
        return cli_usage_error("fit", NULL, "unexpected argument '%s' after '%s'", a, f->sweep);
      f->sweep = a;
      continue;
    }
    int rc = 0;
    if (read_fit_flag(a, nlen, eq != NULL, f, &rc)) {
      if (rc)
        return rc;
      continue;
    }
    const char *name = NULL;
    for (size_t k = 0; k < sizeof value_opts / sizeof *value_opts; k++)
      if (nlen == strlen(value_opts[k]) && !strncmp(a, value_opts[k], nlen))
        name = value_opts[k];
    if (!name)
      return cli_usage_error("fit", NULL, "unknown option '%.*s'", (int)nlen, a);
    if (eq)
      val = eq + 1;
    else if (i + 1 < argc)
      val = argv[++i];
    else
      return cli_usage_error("fit", NULL, "%s needs a value", a);
    if ((rc = set_fit_value(name, val, f)) != 0)
      return rc;
  }
  return -1;
}

/* The fit of a CSV file: its law's function, once the options agree with
 * each other; NULL with *rc the usage error's exit code. Sets the default
 * bootstrap of the law. */
static law_fn check_fit_args(fit_args *f, int *rc) {
  *rc = SS_EXIT_USAGE;
  if (!f->points) {
    *rc = cli_usage_error("fit", NULL, "--points FILE.csv is required");
    return NULL;
  }
  if (!f->law) {
    *rc = cli_usage_error("fit", NULL,
                          "--law is required: chinchilla, kaplan, isoflop, batch, bcrit, bopt or "
                          "curve");
    return NULL;
  }
  law_fn fit = NULL;
  for (size_t i = 0; i < sizeof laws / sizeof *laws; i++)
    if (!strcmp(f->law, laws[i].name))
      fit = laws[i].fit;
  if (!fit) {
    *rc = cli_usage_error(
        "fit", NULL,
        "--law: expected chinchilla, kaplan, isoflop, batch, bcrit, bopt or curve, got '%s'",
        f->law);
    return NULL;
  }
  if (f->holdout && strcmp(f->law, "chinchilla")) {
    *rc = cli_usage_error(
        "fit", NULL, "--holdout is the Chinchilla law's extrapolation check (--law chinchilla)");
    return NULL;
  }
  if (f->opt.bootstrap < 0)
    f->opt.bootstrap =
        !strcmp(f->law, "chinchilla") || !strcmp(f->law, "bopt") || !strcmp(f->law, "curve")
            ? DEFAULT_BOOTSTRAP_CHINCHILLA
            : 0;
  *rc = 0;
  return fit;
}

/* Reads the points and fits them into res, and with --holdout the
 * extrapolation check into ex (*have_ex set): 0, or the exit code with
 * the reason said on stderr and nothing left to free. */
static int fit_points(const fit_args *f, law_fn fit, fit_result *res, fit_result *ex,
                      int *have_ex) {
  char err[512];
  fit_point *pts = NULL;
  int n = 0;
  int rc = fit_read_csv(f->points, &pts, &n, err, sizeof err);
  if (rc) {
    fprintf(stderr, "scalesweep fit: %s\n", err);
    return err_exit_code(rc);
  }
  if (strcmp(f->law, "curve") && only_curve(pts, n)) {
    fprintf(stderr,
            "scalesweep fit: %s: the points have only steps and loss, one run's learning "
            "curve; the %s law needs model or batch columns (params, tokens, flops, "
            "batch_size): use --law curve\n",
            f->points, f->law);
    free(pts);
    return SS_EXIT_USAGE;
  }
  fit_result_init(res, f->law);
  rc = fit(pts, n, &f->opt, res, err, sizeof err);
  /* chinchilla --holdout: the extrapolation check, without a bootstrap */
  if (!rc && f->holdout) {
    fit_options o2 = f->opt;
    o2.bootstrap = 0;
    int erc = fit_extrapolation_check(pts, n, &o2, ex, err, sizeof err);
    if (erc) {
      fprintf(stderr, "scalesweep fit: %s: %s\n", f->points, err);
      fit_result_free(ex);
      fit_result_free(res);
      free(pts);
      return err_exit_code(erc);
    }
    *have_ex = 1;
  }
  free(pts);
  if (rc) {
    fprintf(stderr, "scalesweep fit: %s: %s\n", f->points, err);
    fit_result_free(res);
    return err_exit_code(rc);
  }
  return 0;
}

/* The fit as one JSON line, the extrapolation check's refit (ex, or NULL)
 * as its "extrapolation": 0, or SS_EXIT_FAILURE said on stderr. */
static int print_fit_json(const fit_result *res, const fit_result *ex) {
  char *s = fit_result_to_json(res);
  if (s && ex) {
    char *e = fit_result_to_json(ex);
    json_t *o = json_loads(s, 0, NULL), *eo = e ? json_loads(e, 0, NULL) : NULL;
    free(s);
    free(e);
    s = NULL;
    if (o && eo) {
      json_object_set_new(o, "extrapolation", eo);
      s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    } else {
      json_decref(eo);
    }
    json_decref(o);
  }
  if (!s) {
    fprintf(stderr, "scalesweep fit: out of memory rendering the JSON\n");
    return SS_EXIT_FAILURE;
  }
  printf("%s\n", s);
  free(s);
  return 0;
}

/* The extrapolation check's refit, after the fit's table. */
static void print_extrapolation(const fit_result *ex) {
  printf("\nextrapolation check (the largest budget held out):\n");
  header("refit parameter");
  for (int i = 0; i < ex->nparams; i++)
    row(&ex->params[i], NULL);
  for (int i = 0; i < ex->nderived; i++)
    if (!strncmp(ex->derived[i].name, "holdout_", 8))
      row(&ex->derived[i], NULL);
  for (int i = 0; i < ex->nwarnings; i++)
    printf("  warning: %s\n", ex->warnings[i]);
}

int cmd_fit(int argc, char **argv) {
  fit_args f = {.opt = {.bootstrap = -1, .seed = 1, .fit_irreducible = 1}};
  int rc = read_fit_args(argc, argv, &f);
  if (rc >= 0)
    return rc;
  if (f.sweep && f.points)
    return cli_usage_error("fit", NULL, "give either a sweep id or --points FILE.csv, not both");
  if (f.sweep)
    return fit_stored(f.sweep, f.law, f.json, f.url, f.state, f.token_file);
  law_fn fit = check_fit_args(&f, &rc);
  if (!fit)
    return rc;
  fit_result res, ex;
  int have_ex = 0;
  if ((rc = fit_points(&f, fit, &res, &ex, &have_ex)) != 0)
    return rc;
  if (f.json) {
    rc = print_fit_json(&res, have_ex ? &ex : NULL);
  } else {
    print_table(&res, f.points, &f.opt);
    if (have_ex)
      print_extrapolation(&ex);
  }
  if (have_ex)
    fit_result_free(&ex);
  fit_result_free(&res);
  if (rc)
    return rc;
  return fflush(stdout) ? SS_EXIT_FAILURE : SS_EXIT_OK;
}

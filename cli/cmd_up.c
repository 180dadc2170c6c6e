/* scalesweep up: everything on one machine. A private PostgreSQL under the
 * state directory (unless --database), the scheduler and one local worker
 * as child processes, supervised here until Ctrl-C (or, with --wait, until
 * the submitted sweep is done). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/adaptive_text.h"
#include "cli/client.h"
#include "cli/progress.h"
#include "cli/commands.h"
#include "common/err.h"
#include "common/fileio.h"
#include "store/pgserver.h"
#include "sweeps/fit_report.h"
#include "sweeps/spec.h"

static const char usage[] =
    "usage: scalesweep up [--state DIR] [--sweep FILE] [--wait] [--listen HOST:PORT]\n"
    "                     [--database URL] [--cpu-slots N] [--data-dir DIR]\n"
    "                     [--trainer NAME=COMMAND ...]\n"
    "  --state     where the database, tokens, logs and checkpoints live (./.scalesweep)\n"
    "  --sweep     submit this sweep spec once everything is up (a spec submitted\n"
    "              before to this state: that sweep, which goes on where it stopped)\n"
    "  --wait      wait for the sweep to finish, print its result, then stop (exit 0;\n"
    "              1 when the sweep failed: a run failed that it does not replace; 130 when\n"
    "              interrupted: the same command goes on);\n"
    "              meanwhile a progress line: runs done of total, the running runs'\n"
    "              latest loss, compute spent, time left (rewritten in place on a\n"
    "              terminal, a line per change otherwise)\n"
    "  --listen    the page and API (default 127.0.0.1:8080)\n"
    "  --database  use this PostgreSQL instead of a private one\n"
    "  --cpu-slots CPU runs the worker trains at once (default: with --sweep, this\n"
    "              machine's cores over the threads a run of the spec takes, so a\n"
    "              spec of 1-thread runs trains a run per core; else 1)\n"
    "  --data-dir  where a spec's token shards may lie (default: the current directory)\n"
    "  --trainer   a training program the local worker runs for runs whose config\n"
    "              says \"trainer\": NAME (repeatable; docs/trainers.md)\n";

/* The default --cpu-slots with --sweep: the cores this process may use over
 * the threads one rank of the spec's CPU runs takes (resources.cpus), and
 * at least its ranks: a spec of 1-thread runs trains as many side by side
 * as there are cores. Small runs lose more to thread synchronisation than
 * they gain from a second thread; the quick start's 26 runs end with the
 * same losses, to the last bit, on 1 thread as on 2 (docs/study.md).
 * 0: leave the worker's default (a GPU spec, or one that does not parse:
 * the submission reports why). */
static int default_cpu_slots(const char *sweep) {
  spec *s = NULL;
  spec_problems pr = {0};
  int slots = 0;
  if (spec_load(sweep, &s, &pr) == 0 && s->cpus > 0) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    slots = n > s->cpus ? (int)(n / s->cpus) : 1;
    if (slots < s->ranks)
      slots = s->ranks;
  }
  spec_free(s);
  spec_problems_free(&pr);
  return slots;
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { stop_requested = sig; }

static int ensure_token(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) == 0)
    return 0;
  unsigned char raw[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
    snprintf(err, errlen, "/dev/urandom: %s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return SS_EIO;
  }
  close(fd);
  char hex[65];
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, hex, 64) != 64 || close(fd) != 0) {
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return SS_EIO;
  }
  return 0;
}

/* Starts SELF ARGS... with stdout and stderr appended to log. */
static pid_t spawn(char *const argv[], const char *log) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  signal(SIGINT, SIG_IGN); /* Ctrl-C reaches us; we stop the children in order */
  execv("/proc/self/exe", argv);
  _exit(127);
}

static void stop_child(pid_t pid, const char *name, int grace_s) {
  if (pid <= 0)
    return;
  kill(pid, SIGTERM);
  for (int i = 0; i < grace_s * 10; i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return;
    usleep(100000);
  }
  fprintf(stderr, "scalesweep up: %s did not stop in %d s; killing it\n", name, grace_s);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static int read_ports(const char *path, int *http_port, int *workers_port) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  if (!j)
    return -1;
  *http_port = (int)json_integer_value(json_object_get(j, "http_port"));
  *workers_port = (int)json_integer_value(json_object_get(j, "workers_port"));
  json_decref(j);
  return *http_port > 0 && *workers_port > 0 ? 0 : -1;
}

/* ---- the study's result ----------------------------------------------- */

/* json_number_value's reading of a number the fits lack: 0 */
static double or0(double v) { return isnan(v) ? 0 : v; }

/* Prints "NAME = V [LO, HI]" (or without the interval, or n/a). */
static void put_row(const fit_report_row *w) {
  if (!w)
    return;
  if (isnan(w->value))
    printf("%s = n/a", w->label);
  else if (isnan(w->lo))
    printf("%s = %.4g", w->label, w->value);
  else
    printf("%s = %.4g [%.4g, %.4g]", w->label, w->value, w->lo, w->hi);
  if (w->group == FIT_REPORT_STAB_ISO || w->group == FIT_REPORT_STAB_LAW) {
    if (isnan(w->every)) /* the full fit's value, for comparison */
      printf(" (every budget: n/a)");
    else
      printf(" (every budget: %.4g)", w->every);
  }
}

/* "X  Y": two rows of group g */
static void put_pair(const fit_report *r, fit_report_group g, const char *x, const char *y) {
  put_row(fit_report_find(r, g, x));
  printf("  ");
  put_row(fit_report_find(r, g, y));
}

/* the rows of group g, each after " " or ", "; by target loss, highest
 * first, when they have one */
static void put_list(const fit_report *r, fit_report_group g) {
  char done[FIT_REPORT_MAX_ROWS] = {0};
  for (int n = 0;; n++) {
    int best = -1;
    for (int i = 0; i < r->nrows; i++)
      if (r->rows[i].group == g && !done[i] && (best < 0 || r->rows[i].at > r->rows[best].at))
        best = i;
    if (best < 0)
      return;
    done[best] = 1;
    printf("%s ", n ? "," : "");
    put_row(&r->rows[best]);
  }
}

/* L(N, D) with its intervals, E against the corpus's floor, and the
 * compute-optimal exponents from the law and from the IsoFLOP minima. */
static void print_law(const fit_report *r) {
  if (r->has_law) {
    printf("  L(N, D) = E + A/N^alpha + B/D^beta (Approach 3, %.0f runs; 95%% bootstrap "
           "intervals):\n    ",
           r->law_runs);
    put_row(fit_report_find(r, FIT_REPORT_LAW, "E"));
    printf(" nats/token\n");
    if (r->has_corpus) { /* the synthetic corpus's truth */
      printf("      the corpus: entropy rate %.4f, window floor %.4f (the best loss on windows "
             "of %.0f tokens); E - floor = ",
             or0(r->entropy_rate), or0(r->window_floor), r->seq_len);
      if (isnan(r->floor_gap))
        printf("n/a\n");
      else
        printf("%+.4f\n", r->floor_gap);
    }
    printf("    ");
    put_pair(r, FIT_REPORT_LAW, "A", "alpha");
    printf("\n    ");
    put_pair(r, FIT_REPORT_LAW, "B", "beta");
    printf("\n  compute-optimal N_opt(C) ~ C^a, D_opt(C) ~ C^b:\n    from L(N, D):        ");
    put_pair(r, FIT_REPORT_OPT_LAW, "a", "b");
    printf("\n");
  }
  if (r->has_iso) {
    printf("    from IsoFLOP minima: ");
    put_pair(r, FIT_REPORT_OPT_ISO, "a", "b");
    printf("  (%d of %d budgets with an interior minimum)\n", r->iso_usable, r->iso_budgets);
  }
}

/* The critical batch size: from the ladder and the noise scale, and by
 * branching at each branch point. */
static void print_bcrit(const fit_report *r) {
  if (r->has_batch) {
    printf("  critical batch size (tokens):\n    from the ladder:");
    put_list(r, FIT_REPORT_BCRIT);
    printf("\n    from the gradient noise scale: ");
    put_row(fit_report_find(r, FIT_REPORT_BNOISE, "B_noise"));
    printf(" (median over the ladder)\n");
  }
  if (r->has_branch) {
    printf("  critical batch size by branching (tokens), at each branch point D:\n");
    int idx[FIT_REPORT_MAX_ROWS];
    for (int k = 0, n = fit_report_branch_order(r, idx); k < n; k++) {
      const fit_report_row *w = &r->rows[idx[k]], *noise = fit_report_branch_noise(r, w->at);
      printf("    D = %.4g: ", w->at);
      put_row(w);
      if (noise) {
        printf("; the trunk's ");
        put_row(noise);
      }
      printf("\n");
    }
    printf("    B_crit ~ D^gamma_D, ~ L^(-1/alpha_B): ");
    put_pair(r, FIT_REPORT_BRANCH_LAW, "gamma_D", "alpha_B");
    printf("\n");
  }
}

/* The extrapolation check (without the largest budget) and the stability
 * check (without the smallest). */
static void print_checks(const fit_report *r) {
  if (r->has_extrap)
    printf("  extrapolation: fitted without the largest budget (C = %.3g), L(N, D) predicts "
           "its runs' mean loss %.4f; measured %.4f (mean relative error %.2f%%)\n",
           or0(r->held_out_flops), or0(r->predicted_loss), or0(r->measured_loss),
           100 * or0(r->rel_err));
  if (r->has_stab_iso || r->has_stab_law)
    printf("  stability: fitted without the smallest budget (C = %.3g):\n",
           or0(r->has_stab_iso ? r->stab_iso_flops : r->stab_law_flops));
  if (r->has_stab_iso) {
    printf("    from IsoFLOP minima: ");
    put_pair(r, FIT_REPORT_STAB_ISO, "a", "b");
    printf("  (%.0f budgets with an interior minimum)\n", r->stab_iso_usable);
  }
  if (r->has_stab_law) {
    printf("    from L(N, D):       ");
    if (r->has_stab_iso && or0(r->stab_law_flops) != or0(r->stab_iso_flops))
      printf("(without C = %.3g) ",
             or0(r->stab_law_flops)); /* its smallest run is not an isoflop one */
    put_list(r, FIT_REPORT_STAB_LAW);
    printf("\n");
  }
}

/* What the researcher came for, after the fits in full (the rows of
 * sweeps/fit_report.h): L(N, D) with its intervals and E next to the
 * corpus's true irreducible loss, the compute-optimal exponents by both
 * approaches, the critical batch size from the ladder and from the noise
 * scale, the extrapolation check and the stability check.
 * wall_s < 0: unknown (the sweep was submitted by an earlier `up`). */
static void print_result(long long id, json_t *fits, double wall_s) {
  fit_report r;
  fit_report_build(fits, &r);
  if (wall_s >= 0)
    printf("\nresult of sweep %lld (%.0fm%02.0fs from submission to the last fit):\n", id,
           floor(wall_s / 60), fmod(wall_s, 60));
  else /* a sweep submitted by an earlier `up` */
    printf("\nresult of sweep %lld:\n", id);
  print_law(&r);
  print_bcrit(&r);
  print_checks(&r);
}

/* The result's last line for a sweep whose learning rate was tuned on a
 * muP proxy (its lr_tune decision in GET /api/sweeps/{id}): the rate the
 * study trained at and why, in the result block (indented) so that a
 * printout shows which rate its laws come from. */
static void print_tuned_lr(const cli_target *t, long long id) {
  char path[64];
  snprintf(path, sizeof path, "/api/sweeps/%lld", id);
  json_t *sw = cli_get_json(t, path);
  if (!sw)
    return;
  json_t *tune = json_object_get(sw, "lr_tune"), *rates = json_object_get(tune, "rates"), *x;
  const char *st = json_string_value(json_object_get(tune, "status"));
  if (st && !strcmp(st, "decided")) {
    double lo = INFINITY, hi = -INFINITY;
    size_t i;
    json_array_foreach(rates, i, x) {
      double lr = json_number_value(json_object_get(x, "lr"));
      lo = lr < lo ? lr : lo;
      hi = lr > hi ? lr : hi;
    }
    printf("  learning rate: %.6g for every run, tuned on the muP proxy (the lowest final "
           "validation loss of %zu rates from %.3g to %.3g%s; scalesweep status %lld)\n",
           json_number_value(json_object_get(tune, "lr")), json_array_size(rates), lo, hi,
           json_is_string(json_object_get(tune, "at_edge")) ? ", at the grid's edge" : "", id);
  }
  json_decref(sw);
}

/* (Fits come back through jsonb, which writes 1e129 as 130 digits: parsed
 * as reals so they do not overflow Jansson's integers.) */
/* Waits (up to 2 minutes) for the refit that has seen every successful run
 * (expected points), then prints the fitted laws. */
/* law "chinchilla": complete when its n_points reach expected; "bcrit" (a
 * sweep of a branched batch ladder alone): when its "runs" do */
static void print_fits(const cli_target *t, long long id, const char *law_done, int expected,
                       time_t t0) {
  char path[64];
  snprintf(path, sizeof path, "/api/sweeps/%lld/fit", id);
  json_t *fits = NULL;
  for (int i = 0; i < 240 && !stop_requested; i++) {
    int status;
    char *resp;
    if (cli_request(t, "GET", path, NULL, 0, &status, &resp) == 0 && status == 200) {
      json_error_t je;
      json_t *j = json_loads(resp, JSON_DECODE_INT_AS_REAL, &je);
      /* complete when the latest fit of law_done has seen the last run */
      json_t *c = json_object_get(j, law_done);
      if (c && json_number_value(json_object_get(
                   c, strcmp(law_done, "bcrit") ? "n_points" : "runs")) >= expected) {
        fits = j;
        free(resp);
        break;
      }
      json_decref(j);
    }
    free(resp);
    usleep(500000);
  }
  if (!fits) {
    if (!stop_requested)
      printf("the fit did not finish within 2 minutes; see `scalesweep fit %lld` later\n", id);
    return;
  }
  printf("fits (values with 95%% %s; scalesweep fit %lld --json):\n",
         json_object_get(fits, "bcrit") ? "intervals: bootstrap, t-intervals for bcrit"
                                        : "bootstrap intervals",
         id);
  const char *law;
  json_t *fit;
  json_object_foreach(fits, law, fit) cli_print_fit(stdout, law, fit);
  print_result(id, fits, t0 ? difftime(time(NULL), t0) : -1);
  print_tuned_lr(t, id);
  json_t *ad = cli_get_adaptive(t, id);
  cli_print_adaptive(stdout, ad, "  ");
  json_decref(ad);
  json_decref(fits);
}

/* Succeeded runs that the laws fit (batch-ladder runs, lr tune runs and
 * reproductions are not), counted from
 * the sweep's pages of succeeded runs. */
static int count_fit_points(const cli_target *t, long long id, int *bcrit) {
  int n = 0;
  *bcrit = 0;
  for (long long offset = 0;;) {
    char path[128];
    snprintf(path, sizeof path, "/api/sweeps/%lld/runs?status=succeeded&limit=1000&offset=%lld", id,
             offset);
    int status;
    char *resp = NULL;
    if (cli_request(t, "GET", path, NULL, 0, &status, &resp) != 0 || status != 200) {
      free(resp);
      return n;
    }
    json_t *j = json_loads(resp, 0, NULL);
    free(resp);
    json_t *page = json_object_get(j, "runs"), *r;
    size_t i;
    json_array_foreach(page, i, r) {
      const char *part = json_string_value(json_object_get(r, "part"));
      n += !(part &&
             (!strcmp(part, "batch") || !strcmp(part, "bcrit") || !strcmp(part, "lr_tune"))) &&
           json_is_null(json_object_get(r, "reproduces"));
      *bcrit += part && !strcmp(part, "bcrit");
    }
    size_t got = json_array_size(page);
    offset += (long long)got;
    int done = !got || offset >= (long long)json_number_value(json_object_get(j, "runs_total"));
    json_decref(j);
    if (done)
      return n;
  }
}

/* Polls the sweep until nothing is queued or running; prints a summary.
 * t0: when it was submitted, 0 when by an earlier `up`. Returns 0, 1 when a
 * run failed, 128 + the signal when interrupted. */
static int wait_for_sweep(const cli_target *t, long long id, time_t t0) {
  cli_progress pr;
  cli_progress_init(&pr, stdout);
  for (;;) {
    if (stop_requested) { /* interrupted: 130 for Ctrl-C, as a shell reports it */
      cli_progress_end(&pr);
      return 128 + stop_requested;
    }
    if (cli_progress_poll(&pr, t, id) == 1) {
      cli_progress_end(&pr);
      printf("sweep %lld finished: %lld of %lld runs succeeded, %lld failed\n", id, pr.succeeded,
             pr.total, pr.failed);
      int bcrit, fit_points = count_fit_points(t, id, &bcrit);
      if (fit_points >= 7) /* the Chinchilla law needs its 5 parameters + 2 */
        print_fits(t, id, "chinchilla", fit_points, t0);
      else if (bcrit >= 5) /* a trunk and 4 rungs: one branch point's ladder */
        print_fits(t, id, "bcrit", bcrit, t0);
      else
        printf("too few successful runs (%d) to fit the laws\n", fit_points);
      return stop_requested ? 128 + stop_requested : pr.sweep_failed ? SS_EXIT_FAILURE : 0;
    }
    sleep(pr.tty ? 1 : 2);
  }
}

enum { MAX_TRAINERS = 16 };

/* What the command line asks of up; the strings point into argv, or into
 * slots_arg for the default --cpu-slots. */
typedef struct up_args {
  const char *state, *sweep, *listen, *database, *cpu_slots, *data_dir;
  int wait;
  const char *trainers[MAX_TRAINERS];
  int ntrainers;
  char slots_arg[16];
} up_args;

/* Reads argv into a and checks it: -1 to go on, else the exit code
 * (--help, or a usage error said on stderr). */
static int parse_up_args(int argc, char **argv, up_args *a) {
  const cli_opt opts[] = {{"--wait", NULL, &a->wait},         {"--state", &a->state, NULL},
                          {"--sweep", &a->sweep, NULL},       {"--listen", &a->listen, NULL},
                          {"--database", &a->database, NULL}, {"--cpu-slots", &a->cpu_slots, NULL},
                          {"--data-dir", &a->data_dir, NULL}};
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) {
      printf("%s", usage);
      return 0;
    }
    if (!strcmp(argv[i], "--trainer") && i + 1 < argc) {
      if (a->ntrainers == MAX_TRAINERS) {
        fprintf(stderr, "scalesweep up: --trainer: at most %d\n", MAX_TRAINERS);
        return SS_EXIT_USAGE;
      }
      a->trainers[a->ntrainers++] = argv[++i];
      continue;
    }
    if (!cli_opt_read(argc, argv, &i, opts, sizeof opts / sizeof *opts)) {
      fprintf(stderr, "scalesweep up: unexpected argument '%s'\n%s", argv[i], usage);
      return SS_EXIT_USAGE;
    }
  }
  if (a->wait && !a->sweep) {
    fprintf(stderr, "scalesweep up: --wait needs --sweep\n");
    return SS_EXIT_USAGE;
  }
  if (a->sweep && access(a->sweep, R_OK) != 0) {
    fprintf(stderr, "scalesweep up: --sweep %s: %s\n", a->sweep, strerror(errno));
    return SS_EXIT_USAGE;
  }
  if (!a->cpu_slots && a->sweep) {
    int n = default_cpu_slots(a->sweep);
    if (n > 0) {
      snprintf(a->slots_arg, sizeof a->slots_arg, "%d", n);
      a->cpu_slots = a->slots_arg;
    }
  }
  return -1;
}

/* The files of the state directory that the children are given. */
typedef struct up_paths {
  char tok[4096], apitok[4096], ready[4096], ckpt[4096], wdir[4096];
} up_paths;

/* Creates the state directory and its tokens (kept when they exist):
 * 0, or SS_EXIT_FAILURE said on stderr. */
static int prepare_state(const char *state, up_paths *p) {
  char err[2048];
  if (fio_mkdirs(state, 0755) != 0) {
    fprintf(stderr, "scalesweep up: %s: %s\n", state, strerror(errno));
    return SS_EXIT_FAILURE;
  }
  snprintf(p->tok, sizeof p->tok, "%s/cluster.token", state);
  snprintf(p->apitok, sizeof p->apitok, "%s/api.token", state);
  snprintf(p->ready, sizeof p->ready, "%s/scheduler.json", state);
  snprintf(p->ckpt, sizeof p->ckpt, "%s/checkpoints", state);
  snprintf(p->wdir, sizeof p->wdir, "%s/worker", state);
  if (ensure_token(p->tok, err, sizeof err) || ensure_token(p->apitok, err, sizeof err)) {
    fprintf(stderr, "scalesweep up: %s\n", err);
    return SS_EXIT_FAILURE;
  }
  return 0;
}

/* STATE/database: the connection string for psql and other SQL clients
 * ("psql \"$(cat STATE/database)\""); 0600, a URL may hold a password. A
 * failure is said and let be: up runs without it. */
static void write_database_file(const char *state, const char *url) {
  char dbfile[4200];
  snprintf(dbfile, sizeof dbfile, "%s/database", state);
  int dfd = open(dbfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int dok = dfd >= 0 && fchmod(dfd, 0600) == 0 && dprintf(dfd, "%s\n", url) > 0;
  if (dfd >= 0 && close(dfd) != 0)
    dok = 0;
  if (!dok)
    fprintf(stderr,
            "scalesweep up: %s: cannot write: %s (psql will not find the database "
            "there)\n",
            dbfile, strerror(errno));
}

/* The database's URL in url: --database's, or a private PostgreSQL's
 * started under the state directory. 0, or SS_EXIT_FAILURE said on stderr. */
static int open_database(const up_args *a, char *url, size_t urllen) {
  if (a->database) {
    snprintf(url, urllen, "%s", a->database);
  } else {
    char err[2048];
    fprintf(stderr, "scalesweep up: starting PostgreSQL under %s/pg\n", a->state);
    if (pgs_start(a->state, url, urllen, err, sizeof err) != 0) {
      fprintf(stderr, "scalesweep up: %s\n", err);
      return SS_EXIT_FAILURE;
    }
  }
  write_database_file(a->state, url);
  return 0;
}

static void install_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Spawns the scheduler and waits (30 s) for the ports in its ready file:
 * 0, or SS_EXIT_FAILURE said on stderr (*pid then -1 when it stopped). */
static int start_scheduler(const up_args *a, const up_paths *p, char *url, pid_t *pid,
                           int *http_port, int *workers_port) {
  char log[4096];
  unlink(p->ready);
  snprintf(log, sizeof log, "%s/scheduler.log", a->state);
  char *sargv[] = {"scalesweep",
                   "scheduler",
                   "--database",
                   url,
                   "--token-file",
                   (char *)p->tok,
                   "--api-token-file",
                   (char *)p->apitok,
                   "--listen",
                   (char *)a->listen,
                   "--workers",
                   "127.0.0.1:0",
                   "--checkpoints",
                   (char *)p->ckpt,
                   "--ready-file",
                   (char *)p->ready,
                   "--data-dir",
                   (char *)a->data_dir,
                   NULL};
  *pid = spawn(sargv, log);
  for (int i = 0; i < 300 && read_ports(p->ready, http_port, workers_port) != 0; i++) {
    if (waitpid(*pid, NULL, WNOHANG) == *pid || stop_requested) {
      fprintf(stderr, "scalesweep up: the scheduler stopped; see %s\n", log);
      *pid = -1;
      return SS_EXIT_FAILURE;
    }
    usleep(100000);
  }
  if (!*http_port) {
    fprintf(stderr, "scalesweep up: the scheduler did not come up in 30 s; see %s\n", log);
    return SS_EXIT_FAILURE;
  }
  return 0;
}

/* Spawns the local worker against the scheduler's workers port and says
 * that everything is up; its pid. */
static pid_t start_worker(const up_args *a, const up_paths *p, int http_port, int workers_port) {
  char addr[64], log[4096];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", workers_port);
  snprintf(log, sizeof log, "%s/worker.log", a->state);
  char *wargv[16 + 2 * MAX_TRAINERS] = {"scalesweep", "worker",       "--scheduler",
                                        addr,         "--token-file", (char *)p->tok,
                                        "--work-dir", (char *)p->wdir};
  int wn = 8;
  for (int t = 0; t < a->ntrainers; t++) {
    wargv[wn++] = "--trainer";
    wargv[wn++] = (char *)a->trainers[t];
  }
  if (a->cpu_slots) {
    wargv[wn++] = "--cpu-slots";
    wargv[wn++] = (char *)a->cpu_slots;
  }
  wargv[wn] = NULL;
  pid_t pid = spawn(wargv, log);
  /* the slot count only where up chose or was given it: else the worker
   * decides (1 on a CPU host, 0 beside GPUs) and its log says which */
  printf("scalesweep is up: http://127.0.0.1:%d/  (state %s; logs scheduler.log, "
         "worker.log%s%s%s)\n",
         http_port, a->state, a->cpu_slots ? "; " : "", a->cpu_slots ? a->cpu_slots : "",
         !a->cpu_slots               ? ""
         : strcmp(a->cpu_slots, "1") ? " CPU runs at a time"
                                     : " CPU run at a time");
  fflush(stdout);
  return pid;
}

/* Serving is not ready until the scheduler reaches its database: waits
 * (30 s) for /healthz. 0, or SS_EXIT_FAILURE said on stderr. */
static int wait_healthy(const cli_target *t, const char *state) {
  for (int i = 0; i < 300; i++) {
    int status = 0;
    char *resp = NULL;
    if (cli_request(t, "GET", "/healthz", NULL, 0, &status, &resp) == 0 && status == 200) {
      free(resp);
      return 0;
    }
    free(resp);
    if (stop_requested || i == 299) {
      fprintf(stderr,
              "scalesweep up: the scheduler did not reach its database; see %s/"
              "scheduler.log\n",
              state);
      return SS_EXIT_FAILURE;
    }
    usleep(100000);
  }
  return 0;
}

/* Until Ctrl-C, or until a child exits (said on stderr, its pid then -1,
 * and SS_EXIT_FAILURE). */
static int supervise(pid_t *sched_pid, pid_t *worker_pid, const char *state) {
  while (!stop_requested) {
    if (waitpid(*sched_pid, NULL, WNOHANG) == *sched_pid) {
      fprintf(stderr, "scalesweep up: the scheduler exited; see %s/scheduler.log\n", state);
      *sched_pid = -1;
      return SS_EXIT_FAILURE;
    }
    if (*worker_pid > 0 && waitpid(*worker_pid, NULL, WNOHANG) == *worker_pid) {
      fprintf(stderr, "scalesweep up: the worker exited; see %s/worker.log\n", state);
      *worker_pid = -1;
      return SS_EXIT_FAILURE;
    }
    usleep(200000);
  }
  return 0;
}

/* Everything is up: submits --sweep, then waits for it (--wait) or
 * supervises the children until Ctrl-C. The exit code. */
static int serve(const up_args *a, const cli_target *t, pid_t *sched_pid, pid_t *worker_pid) {
  time_t t0 = time(NULL);
  long long id = 0;
  int earlier = 0, rc = 0;
  if (a->sweep)
    rc = cli_submit(a->sweep, NULL, a->state, NULL, 0, &id, &earlier);
  if (!rc && a->wait)
    return wait_for_sweep(t, id, earlier ? 0 : t0);
  if (!rc)
    rc = supervise(sched_pid, worker_pid, a->state);
  return rc;
}

int cmd_up(int argc, char **argv) {
  up_args a = {.state = "./.scalesweep", .listen = "127.0.0.1:8080", .data_dir = "."};
  int rc = parse_up_args(argc, argv, &a);
  if (rc >= 0)
    return rc;
  up_paths p;
  if ((rc = prepare_state(a.state, &p)) != 0)
    return rc;
  char url[1024];
  int private_pg = !a.database;
  if ((rc = open_database(&a, url, sizeof url)) != 0)
    return rc;
  install_stop_signals();
  pid_t sched_pid = -1, worker_pid = -1;
  int http_port = 0, workers_port = 0;
  rc = start_scheduler(&a, &p, url, &sched_pid, &http_port, &workers_port);
  if (!rc)
    worker_pid = start_worker(&a, &p, http_port, workers_port);
  cli_target t;
  if (!rc)
    rc = cli_target_find(&t, NULL, a.state, NULL);
  if (!rc)
    rc = wait_healthy(&t, a.state);
  if (!rc)
    rc = serve(&a, &t, &sched_pid, &worker_pid);
  fprintf(stderr, "scalesweep up: stopping\n");
  stop_child(worker_pid, "the worker", 20);
  stop_child(sched_pid, "the scheduler", 10);
  char err[2048];
  if (private_pg && pgs_stop(a.state, err, sizeof err) != 0)
    fprintf(stderr, "scalesweep up: %s\n", err);
  return rc;
}

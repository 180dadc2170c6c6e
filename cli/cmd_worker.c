/* scalesweep worker --scheduler HOST:PORT --token-file F [--gpus 0,1]
 *                   [--cpu-slots N] [--work-dir DIR] [--name NAME] */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "worker/worker.h"

#define MAX_GPUS 256
#define MAX_DATA_DIRS 16
#define MAX_TRAINERS 16

static void usage(FILE *f) {
  fprintf(f, "usage: scalesweep worker --scheduler HOST:PORT --token-file F [--gpus 0,1]\n"
             "                         [--cpu-slots N] [--work-dir DIR] [--name NAME]\n"
             "                         [--data-dir DIR ...] [--trainer NAME=COMMAND ...]\n"
             "\n"
             "Runs the agent of one GPU (or CPU) host: connects to the scheduler's worker\n"
             "port, runs every run assigned to it as a `scalesweep train` process and\n"
             "streams its metrics back; reconnects forever. Stops on Ctrl-C or SIGTERM\n"
             "(running trainers checkpoint first).\n"
             "  --scheduler HOST:PORT  the scheduler's worker address\n"
             "  --token-file F         the cluster token (or SCALESWEEP_WORKER_TOKEN)\n"
             "  --gpus LIST            GPU indices to offer, as nvidia-smi numbers them\n"
             "                         (default: every GPU found; 'none': no GPU)\n"
             "  --cpu-slots N          CPU runs at a time (default: 1 without GPUs, else 0)\n"
             "  --work-dir DIR         run configs and logs (default ./.scalesweep/worker)\n"
             "  --data-dir DIR         trainers read token shards only under DIR, of the\n"
             "                         directories the scheduler allows (repeatable;\n"
             "                         default: all of the scheduler's)\n"
             "  --trainer NAME=COMMAND a training program this worker runs for runs whose\n"
             "                         config says \"trainer\": NAME (repeatable; the\n"
             "                         built-in \"builtin\" is always offered; COMMAND is a\n"
             "                         program and its arguments, split as a shell would;\n"
             "                         docs/trainers.md says what it is given and must print)\n"
             "  --trainers-file F      more NAME=COMMAND declarations, one per line ('#' comments)\n"
             "  --hang-timeout S       a trainer that prints no line for S seconds has hung:\n"
             "                         killed, its attempt failed (default 1800; 0: never)\n"
             "  --name NAME            the worker's name (default HOSTNAME:PID)\n"
             "  --bin PATH             the scalesweep binary that trains (default: this one)\n"
             "  --heartbeat S          heartbeat interval in seconds (default: the scheduler's)\n"
             "  --kill-grace S         seconds from SIGTERM to SIGKILL on cancel (default 10)\n"
             "Exit codes: 0 stopped cleanly, 1 failed at run time, 2 bad usage.\n");
}

/* "0,1,3" -> indices; "none" or "" -> no GPU. */
static int parse_gpus(const char *s, int *out, int *n) {
  *n = 0;
  if (!*s || !strcmp(s, "none"))
    return 0;
  const char *p = s;
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || *p == '-' || *p == '+' || errno || v > INT_MAX || (*end && *end != ','))
      return cli_usage_error("worker", NULL,
                             "--gpus %s: expected comma-separated GPU indices such as 0,1", s);
    if (*n == MAX_GPUS)
      return cli_usage_error("worker", NULL, "--gpus %s: more than %d GPUs", s, MAX_GPUS);
    out[(*n)++] = (int)v;
    if (!*end)
      return 0;
    p = end + 1;
  }
}

static int parse_seconds(const char *opt, const char *s, double *out) {
  char *end;
  double d = strtod(s, &end);
  if (!*s || *end || !isfinite(d) || d <= 0 || d > 86400)
    return cli_usage_error("worker", NULL, "%s %s: expected a number of seconds in (0, 86400]", opt,
                           s);
  *out = d;
  return 0;
}

/* --cpu-slots and --hang-timeout: 0, or a usage error's exit code. */
static int parse_cpu_slots(const char *v, wrk_options *o) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!*v || *end || errno || n < 0 || n > 4096)
    return cli_usage_error("worker", NULL, "--cpu-slots %s: expected an integer in 0..4096", v);
  o->cpu_slots = (int)n;
  return 0;
}

static int parse_hang_timeout(const char *v, wrk_options *o) {
  char *end;
  double t = strtod(v, &end);
  if (!*v || *end || !isfinite(t) || t < 0 || t > 30 * 86400.0)
    return cli_usage_error("worker", NULL,
                           "--hang-timeout %s: expected seconds in [0, 2592000] (0: never)", v);
  o->hang_timeout_s = t == 0 ? -1 : t;
  return 0;
}

/* The repeatable options' values: they outlive the parse, in o. */
static int gpus[MAX_GPUS];
static const char *data_dirs[MAX_DATA_DIRS];
static const char *trainers[MAX_TRAINERS];

/* Option a (its name the first nlen bytes) with value v into o: 0, or a
 * usage error's exit code. */
static int set_worker_option(const char *a, size_t nlen, const char *v, wrk_options *o) {
#define IS(name) (nlen == strlen(name) && !strncmp(a, name, nlen))
  if (IS("--scheduler")) {
    o->scheduler = v;
  } else if (IS("--token-file")) {
    o->token_file = v;
  } else if (IS("--gpus")) {
    int rc = parse_gpus(v, gpus, &o->n_gpus);
    if (rc)
      return rc;
    o->gpus = gpus;
  } else if (IS("--cpu-slots")) {
    return parse_cpu_slots(v, o);
  } else if (IS("--work-dir")) {
    o->work_dir = v;
  } else if (IS("--name")) {
    o->name = v;
  } else if (IS("--data-dir")) {
    if (o->n_data_dirs == MAX_DATA_DIRS)
      return cli_usage_error("worker", NULL, "--data-dir %s: at most %d", v, MAX_DATA_DIRS);
    data_dirs[o->n_data_dirs++] = v;
    o->data_dirs = data_dirs;
  } else if (IS("--trainer")) {
    if (o->n_trainers == MAX_TRAINERS)
      return cli_usage_error("worker", NULL, "--trainer %s: at most %d", v, MAX_TRAINERS);
    trainers[o->n_trainers++] = v;
    o->trainers = trainers;
  } else if (IS("--trainers-file")) {
    o->trainers_file = v;
  } else if (IS("--hang-timeout")) {
    return parse_hang_timeout(v, o);
  } else if (IS("--bin")) {
    o->binary = v;
  } else if (IS("--heartbeat")) {
    if (parse_seconds("--heartbeat", v, &o->heartbeat_s))
      return SS_EXIT_USAGE;
  } else if (IS("--kill-grace")) {
    double s = 0;
    if (parse_seconds("--kill-grace", v, &s))
      return SS_EXIT_USAGE;
    o->kill_grace_ms = (int)ceil(s * 1000);
  } else {
    return cli_usage_error("worker", NULL, "unknown option '%.*s'", (int)nlen, a);
  }
#undef IS
  return 0;
}

/* Reads argv ("--name VALUE" or "--name=VALUE") into o: -1 to go on, else
 * the exit code (--help, or a usage error said on stderr). */
static int read_worker_args(int argc, char **argv, wrk_options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      usage(stdout);
      return SS_EXIT_OK;
    }
    if (strncmp(a, "--", 2))
      return cli_usage_error("worker", NULL, "unexpected argument '%s'", a);
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const char *v;
    if (eq) {
      v = eq + 1;
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return cli_usage_error("worker", NULL, "%s needs a value", a);
    }
    int rc = set_worker_option(a, nlen, v, o);
    if (rc)
      return rc;
  }
  return -1;
}

int cmd_worker(int argc, char **argv) {
  wrk_options o;
  wrk_options_init(&o);
  int rc = read_worker_args(argc, argv, &o);
  if (rc >= 0)
    return rc;
  if (!o.scheduler)
    return cli_usage_error("worker", NULL, "--scheduler HOST:PORT is required");
  if (!o.token_file) {
    o.token = getenv("SCALESWEEP_WORKER_TOKEN");
    if (!o.token || !*o.token)
      return cli_usage_error("worker", NULL,
                             "--token-file is required (or set SCALESWEEP_WORKER_TOKEN)");
  }
  rc = wrk_run(&o);
  return err_exit_code(rc);
}

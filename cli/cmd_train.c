/* scalesweep train --config run.json [--checkpoint-dir DIR] [--resume DIR]
 *                  [--data-dir DIR ... | --no-data-dirs] */
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/blas_pin.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "common/err.h"
#include "runcfg/memory.h"
#include "runcfg/runcfg.h"
#include "trainer/train.h"

#define TRAIN_MAX_DATA_DIRS 16
#define TRAIN_MAX_KEEP_STEPS 256

/* --keep-steps S,...: ascending steps >= 1; the count, or -1 (said on stderr) */
static int parse_steps(const char *v, int64_t *out, int max) {
  int n = 0;
  const char *p = v;
  while (*p) {
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (end == p || errno || x < 1 || (*end && *end != ',') || n == max || (n && x <= out[n - 1])) {
      fprintf(stderr,
              "scalesweep train: --keep-steps '%s': at character %d: expected ascending steps "
              ">= 1 separated by commas (at most %d)\n",
              v, (int)(p - v) + 1, max);
      return -1;
    }
    out[n++] = x;
    p = *end ? end + 1 : end;
  }
  return n;
}

/* --print-memory: runcfg/memory.h's estimate as one JSON line, in bytes */
static int print_memory_of(const rcfg *cfg) {
  rcfg_mem m = rcfg_memory_host(cfg);
  char text[256];
  rcfg_memory_text(&m, text, sizeof text);
  printf("{\"event\":\"memory\",\"of\":\"%s\",\"params\":%.0f,\"grads\":%.0f,"
         "\"optimizer\":%.0f,\"activations\":%.0f,\"other\":%.0f,\"total\":%.0f,"
         "\"text\":\"%s\"}\n",
         strcmp(cfg->backend, "cuda") == 0 ? "gpu" : "host", m.params, m.grads, m.optimizer,
         m.activations, m.other, m.total, text);
  return SS_EXIT_OK;
}

static void usage(FILE *f) {
  fprintf(f, "usage: scalesweep train --config RUN.json [--checkpoint-dir DIR]\n"
             "                        [--resume DIR [--resume-max-step N]]\n"
             "                        [--print-config | --print-memory]\n"
             "                        [--branch-from FILE] [--keep-steps S,...]\n"
             "                        [--data-dir DIR ... | --no-data-dirs]\n"
             "\n"
             "Trains one GPT from a run config (a partial config is completed with\n"
             "defaults) and prints JSON lines: config, step, eval, checkpoint, done, error.\n"
             "  --config FILE    the run config ('-' reads stdin)\n"
             "  --checkpoint-dir DIR  write checkpoints under DIR instead of the config's\n"
             "                   checkpoint.dir (the config, and its hash, stay as given)\n"
             "  --resume DIR     continue from DIR/checkpoint.bin, bit for bit\n"
             "  --resume-max-step N  from the newest checkpoint (checkpoint.bin or the one\n"
             "                   before it) at step N or earlier; none: start afresh\n"
             "  --branch-from FILE  a \"wsd\" run: start (when nothing is resumed) from\n"
             "                   FILE, a checkpoint of a longer wsd run with the same config\n"
             "                   but train.tokens, taken within both runs' stable phase; the\n"
             "                   result is the same, bit for bit, as training from scratch\n"
             "  --keep-steps S,...  keep a checkpoint after each of these steps, in\n"
             "                   branch-S/ under the checkpoint directory (branch points)\n"
             "  --data-dir DIR   read token shards only from under DIR (repeatable): a\n"
             "                   wildcard in a directory component, or a match that\n"
             "                   resolves elsewhere (symlinks included), is refused with\n"
             "                   exit 2. Without it: any file you can read\n"
             "  --no-data-dirs   refuse every token shard (synthetic data still works);\n"
             "                   what a worker passes when it was allowed no directory\n"
             "  --print-config   print the resolved config and exit\n"
             "  --print-memory   print the memory the run needs of one GPU (a CUDA run:\n"
             "                   each rank's) or of the host (a CPU run: all its ranks),\n"
             "                   the estimate the planner and the worker check, and exit\n"
             "With \"world_size\": N > 1 it runs the N data-parallel ranks on this host, as\n"
             "processes that it stops together (a rank that dies stops the rest), rank 0's\n"
             "lines on stdout. A run spread over hosts, this host's part of it:\n"
             "  --ranks R,...    the ranks to run here (rank 0 listens on --dist's port)\n"
             "  --rank R         one rank, in this process (0 listens, the others connect)\n"
             "  --dist HOST:PORT where rank 0 listens; the ranks share a secret through\n"
             "                   $SCALESWEEP_DIST_SECRET\n"
             "  --dist-timeout S the longest wait for another rank (default 600)\n"
             "Exit codes: 0 done, 1 failed at run time, 2 invalid input,\n"
             "128+N stopped by signal N (SIGTERM: 143, after writing a checkpoint "
             "when\ncheckpoint.dir is set).\n");
}

/* What the command line asks of train; the strings point into argv. */
typedef struct train_args {
  const char *config, *resume, *ckdir, *dist, *ranks, *branch, *keep;
  long long rank, listen_fd, dist_timeout, max_step;
  int quiet, print_only, print_memory, no_data_dirs, ndirs;
  const char *dirs[TRAIN_MAX_DATA_DIRS];
} train_args;

/* The options cli_opt_read does not cover: those whose value is checked
 * here, and the launcher's. Returns 1 when argv[*i] was one of them (*i
 * then on its value), with *rc set to an exit code for a bad value (said
 * on stderr); 0 when it was none of them or lacks its value. */
static int read_train_opt(int argc, char **argv, int *i, train_args *a, int *rc) {
  const char *arg = argv[*i];
  if (!strcmp(arg, "--data-dir") && *i + 1 < argc) {
    const char *v = argv[++*i];
    struct stat st;
    if (!*v || stat(v, &st) != 0 || !S_ISDIR(st.st_mode) || a->ndirs == TRAIN_MAX_DATA_DIRS) {
      fprintf(stderr, "scalesweep train: --data-dir '%s': %s\n", v,
              a->ndirs == TRAIN_MAX_DATA_DIRS ? "too many (at most 16)" : "expected a directory");
      *rc = SS_EXIT_USAGE;
      return 1;
    }
    a->dirs[a->ndirs++] = v;
  } else if ((!strcmp(arg, "--rank") || !strcmp(arg, "--dist-listen-fd") ||
              !strcmp(arg, "--dist-timeout")) &&
             *i + 1 < argc) {
    char *end;
    const char *v = argv[++*i];
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < 0 || x > 1 << 20) {
      fprintf(stderr, "scalesweep train: %s '%s': expected an integer >= 0\n", arg, v);
      *rc = SS_EXIT_USAGE;
      return 1;
    }
    *(!strcmp(arg, "--rank")           ? &a->rank
      : !strcmp(arg, "--dist-timeout") ? &a->dist_timeout
                                       : &a->listen_fd) = x;
  } else if (!strcmp(arg, "--dist") && *i + 1 < argc) {
    a->dist = argv[++*i];
  } else if (!strcmp(arg, "--ranks") && *i + 1 < argc) {
    a->ranks = argv[++*i];
  } else if (!strcmp(arg, "--dist-quiet")) {
    a->quiet = 1; /* the launcher's: another rank of this host prints the run's lines */
  } else if (!strcmp(arg, "--resume-max-step") && *i + 1 < argc) {
    char *end;
    const char *v = argv[++*i];
    errno = 0;
    a->max_step = strtoll(v, &end, 10);
    if (!*v || *end || errno || a->max_step < 0) {
      fprintf(stderr, "scalesweep train: --resume-max-step '%s': expected an integer >= 0\n", v);
      *rc = SS_EXIT_USAGE;
      return 1;
    }
  } else {
    return 0;
  }
  return 1;
}

/* Reads argv into a: -1 to go on, else the exit code (--help, or a usage
 * error already said on stderr). */
static int parse_train_args(int argc, char **argv, train_args *a) {
  const cli_opt options[] = {{"--config", &a->config, NULL},
                             {"--checkpoint-dir", &a->ckdir, NULL},
                             {"--resume", &a->resume, NULL},
                             {"--branch-from", &a->branch, NULL},
                             {"--keep-steps", &a->keep, NULL},
                             {"--print-config", NULL, &a->print_only},
                             {"--print-memory", NULL, &a->print_memory},
                             {"--no-data-dirs", NULL, &a->no_data_dirs}};
  for (int i = 1; i < argc; i++) {
    int rc = -1;
    if (cli_is_help(argv[i])) {
      usage(stdout);
      return SS_EXIT_OK;
    }
    if (cli_opt_read(argc, argv, &i, options, sizeof options / sizeof *options))
      continue;
    if (read_train_opt(argc, argv, &i, a, &rc)) {
      if (rc >= 0)
        return rc;
      continue;
    }
    fprintf(stderr, "scalesweep train: unexpected argument '%s'%s\n", argv[i],
            (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--resume") ||
             !strcmp(argv[i], "--checkpoint-dir") || !strcmp(argv[i], "--resume-max-step") ||
             !strcmp(argv[i], "--data-dir"))
                ? " (it needs a value)"
                : "");
    usage(stderr);
    return SS_EXIT_USAGE;
  }
  if (!a->config) {
    fprintf(stderr, "scalesweep train: --config is required\n");
    usage(stderr);
    return SS_EXIT_USAGE;
  }
  return -1;
}

/* The options that only count for a run that trains: 0, or
 * SS_EXIT_USAGE said on stderr. Sets *nkeep. */
static int check_train_args(const train_args *a, int64_t *keep_steps, int *nkeep) {
  if (a->max_step >= 0 && !a->resume) {
    fprintf(stderr, "scalesweep train: --resume-max-step needs --resume DIR\n");
    return SS_EXIT_USAGE;
  }
  if (a->keep && (*nkeep = parse_steps(a->keep, keep_steps, TRAIN_MAX_KEEP_STEPS)) < 0)
    return SS_EXIT_USAGE;
  if (a->branch && !*a->branch) {
    fprintf(stderr, "scalesweep train: --branch-from: expected a checkpoint file, found ''\n");
    return SS_EXIT_USAGE;
  }
  if (a->ckdir && !*a->ckdir) {
    fprintf(stderr, "scalesweep train: --checkpoint-dir: expected a directory, found ''\n");
    return SS_EXIT_USAGE;
  }
  if (a->no_data_dirs && a->ndirs) {
    fprintf(stderr, "scalesweep train: --no-data-dirs and --data-dir: expected one or the other\n");
    return SS_EXIT_USAGE;
  }
  return 0;
}

/* This process's rank trains: its exit code. */
static int train_rank(rcfg *cfg, const train_args *a, const int64_t *keep_steps, int nkeep,
                      char *err, size_t errlen) {
  if (a->quiet && !freopen("/dev/null", "w", stdout)) /* another rank speaks for the run */
    return SS_EXIT_FAILURE;
  trn_train_opts opts = {
      .resume_dir = a->resume,
      .resume_max_step = (int64_t)a->max_step,
      .checkpoint_dir = a->ckdir,
      .branch_from = a->branch,
      .keep_steps = keep_steps,
      .nkeep_steps = nkeep,
      .confine_data = a->no_data_dirs || a->ndirs > 0,
      .data_dirs = a->dirs,
      .ndata_dirs = a->ndirs,
      .rank = a->rank < 0 ? 0 : (int)a->rank,
      .local_rank = getenv("SCALESWEEP_LOCAL_RANK") ? atoi(getenv("SCALESWEEP_LOCAL_RANK")) : 0,
      .dist_addr = a->dist,
      .dist_listen_fd = (int)a->listen_fd,
      .dist_secret = getenv("SCALESWEEP_DIST_SECRET"),
      .dist_timeout_ms = (int)a->dist_timeout * 1000};
  int rc = trn_train(cfg, &opts, stdout, err, errlen);
  if (rc && a->rank > 0)
    fprintf(stderr, "scalesweep train: rank %lld: %s\n", a->rank, err);
  else if (rc)
    fprintf(stderr, "scalesweep train: %s\n", err);
  if (rc == SS_ETERM)
    return 128 + trn_train_stop_signal();
  return err_exit_code(rc);
}

int cmd_train(int argc, char **argv) {
  train_args a = {.rank = -1, .listen_fd = -1, .dist_timeout = 600, .max_step = -1};
  int rc = parse_train_args(argc, argv, &a);
  if (rc >= 0)
    return rc;
  static char err[8192];
  rcfg cfg;
  rc = rcfg_load(!strcmp(a.config, "-") ? "/dev/stdin" : a.config, &cfg, err, sizeof err);
  if (rc) {
    fprintf(stderr, "%s\n", err);
    return err_exit_code(rc);
  }
  if (a.print_only) {
    char *s = rcfg_to_json(&cfg);
    printf("%s\n", s);
    free(s);
    return SS_EXIT_OK;
  }
  if (a.print_memory)
    return print_memory_of(&cfg);
  if (strcmp(cfg.trainer, "builtin") != 0) {
    fprintf(stderr,
            "%s: $.trainer: found \"%s\", expected \"builtin\" or no key: scalesweep train is "
            "the built-in trainer; a worker runs the trainer \"%s\" with the command its "
            "operator declared (--trainer %s=COMMAND; docs/trainers.md)\n",
            a.config, cfg.trainer, cfg.trainer, cfg.trainer);
    return SS_EXIT_USAGE;
  }
  trn_train_install_signals();
  int64_t keep_steps[TRAIN_MAX_KEEP_STEPS];
  int nkeep = 0;
  if ((rc = check_train_args(&a, keep_steps, &nkeep)) != 0)
    return rc;
  if ((rc = cli_blas_pin(&cfg, argc, argv, a.config)) != 0)
    return rc;
  if (cfg.world_size > 1 && a.rank < 0) /* the launcher of this host's ranks */
    return cli_train_launch(argc, argv, &cfg, a.config, a.ranks, a.dist);
  if (a.rank >= cfg.world_size || (a.rank > 0 && !a.dist) ||
      (a.rank == 0 && !a.dist && a.listen_fd < 0)) {
    fprintf(stderr,
            "scalesweep train: --rank %lld: expected a rank below world_size %d, with --dist "
            "HOST:PORT\n",
            a.rank, cfg.world_size);
    return SS_EXIT_USAGE;
  }
  return train_rank(&cfg, &a, keep_steps, nkeep, err, sizeof err);
}

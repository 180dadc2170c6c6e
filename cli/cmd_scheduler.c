/* scalesweep scheduler: the daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/err.h"
#include "scheduler/sched.h"

static const char usage[] =
    "usage: scalesweep scheduler --database URL --token-file F [--api-token-file F2]\n"
    "                            [--listen HOST:PORT] [--workers HOST:PORT]\n"
    "                            [--checkpoints DIR] [--lease-seconds N] [--ready-file F]\n"
    "                            [--closed-reads] [--data-dir DIR ...] [--predict-seconds N]\n"
    "                            [--reserve-after-seconds N]\n"
    "  --listen       the HTTP API and page (default 127.0.0.1:8080)\n"
    "  --workers      the worker port (default 127.0.0.1:8081)\n"
    "  --token-file   the cluster token: workers authenticate with it\n"
    "  --api-token-file  the token API changes need (default: the cluster token)\n"
    "  --closed-reads reads need the API token too\n"
    "  --predict-seconds  how often running runs' final losses are predicted from their\n"
    "                 curves and checked against the sweep's fit (default 15; 0: never)\n"
    "  --reserve-after-seconds  a multi-GPU run that has waited this long gets the worker\n"
    "                 it will run on kept from smaller runs until it fits (default 300)\n"
    "  --data-dir     a directory a spec's token shards may lie under (repeatable; without\n"
    "                 one, specs must use the synthetic corpus)\n";

int cmd_scheduler(int argc, char **argv) {
  sched_options o;
  sched_options_default(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("%s", usage);
      return 0;
    } else if (!strcmp(a, "--closed-reads")) {
      o.open_reads = 0;
      continue;
    }
    if (!v) {
      fprintf(stderr, "scalesweep scheduler: %s needs a value\n%s", a, usage);
      return SS_EXIT_USAGE;
    }
    i++;
    if (!strcmp(a, "--database"))
      o.database = v;
    else if (!strcmp(a, "--listen"))
      o.listen = v;
    else if (!strcmp(a, "--workers"))
      o.workers = v;
    else if (!strcmp(a, "--token-file"))
      o.token_file = v;
    else if (!strcmp(a, "--api-token-file"))
      o.api_token_file = v;
    else if (!strcmp(a, "--checkpoints"))
      o.checkpoint_root = v;
    else if (!strcmp(a, "--ready-file"))
      o.ready_file = v;
    else if (!strcmp(a, "--reserve-after-seconds")) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 0 || n > 604800) {
        fprintf(stderr, "scalesweep scheduler: --reserve-after-seconds %s: expected 0 to 604800\n",
                v);
        return SS_EXIT_USAGE;
      }
      o.reserve_after_s = (int)n;
    } else if (!strcmp(a, "--predict-seconds")) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 0 || n > 86400) {
        fprintf(stderr, "scalesweep scheduler: --predict-seconds %s: expected 0 to 86400\n", v);
        return SS_EXIT_USAGE;
      }
      o.predict_s = (int)n;
    } else if (!strcmp(a, "--data-dir")) {
      char *real = realpath(v, NULL); /* lives as long as the process */
      if (!real || o.ndata_dirs == SCHED_MAX_DATA_DIRS) {
        fprintf(stderr, "scalesweep scheduler: --data-dir %s: %s\n", v,
                real ? "too many (at most 16)" : "no such directory");
        free(real);
        return SS_EXIT_USAGE;
      }
      o.data_dirs[o.ndata_dirs++] = real;
    } else if (!strcmp(a, "--lease-seconds")) {
      o.lease_s = atoi(v);
      if (o.lease_s < 2) {
        fprintf(stderr, "scalesweep scheduler: --lease-seconds %s: expected >= 2\n", v);
        return SS_EXIT_USAGE;
      }
      if (o.heartbeat_s * 3 > o.lease_s)
        o.heartbeat_s = o.lease_s / 3 > 0 ? o.lease_s / 3 : 1;
    } else {
      fprintf(stderr, "scalesweep scheduler: unknown option '%s'\n%s", a, usage);
      return SS_EXIT_USAGE;
    }
  }
  if (!o.database || !o.token_file) {
    fprintf(stderr, "scalesweep scheduler: --database and --token-file are required\n%s", usage);
    return SS_EXIT_USAGE;
  }
  char err[2048];
  int rc = sched_run(&o, err, sizeof err);
  if (rc) {
    fprintf(stderr, "scalesweep scheduler: %s\n", err);
    return err_exit_code(rc) == SS_EXIT_USAGE ? SS_EXIT_USAGE : SS_EXIT_FAILURE;
  }
  return 0;
}

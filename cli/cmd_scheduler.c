/* scalesweep scheduler: the daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "scheduler/sched.h"

static const char usage[] =
    "usage: scalesweep scheduler --database URL --token-file F [--api-token-file F2]\n"
    "                            [--listen HOST:PORT] [--workers HOST:PORT]\n"
    "                            [--checkpoints DIR] [--lease-seconds N] [--ready-file F]\n"
    "                            [--closed-reads] [--data-dir DIR ...] [--predict-seconds N]\n"
    "                            [--reserve-after-seconds N] [--retry-after-seconds N]\n"
    "                            [--auth-block-seconds N] [--share-half-life-seconds N]\n"
    "                            [--open-metrics] [--http-connections N] [--http-reserve N]\n"
    "                            [--max-streams N] [--max-streams-per-address N]\n"
    "                            [--header-timeout-seconds N]\n"
    "                            [--db-read-connections N] [--read-timeout-ms N]\n"
    "                            [--slurm PARTITION [--slurm-address HOST:PORT]\n"
    "                             [--slurm-max-nodes N] [--slurm-gpus-per-node N]\n"
    "                             [--slurm-cpu-slots N] [--slurm-idle-seconds N]\n"
    "                             [--slurm-interval-seconds N] [--slurm-max-minutes N]\n"
    "                             [--slurm-option OPT ...]]\n"
    "  --listen       the HTTP API and page (default 127.0.0.1:8080)\n"
    "  --workers      the worker port (default 127.0.0.1:8081)\n"
    "  --token-file   the cluster token: workers authenticate with it\n"
    "  --api-token-file  the token API changes need (default: the cluster token)\n"
    "  --closed-reads reads need the API token too, /metrics included (a Prometheus\n"
    "                 scrape can send it as a bearer token); /healthz stays open: it says\n"
    "                 only {\"ok\":true} or {\"ok\":false} (database down)\n"
    "  --open-metrics /metrics needs no token even with --closed-reads\n"
    "  --predict-seconds  how often running runs' final losses are predicted from their\n"
    "                 curves and checked against the sweep's fit (default 15; 0: never)\n"
    "  --reserve-after-seconds  a multi-GPU run that has waited this long gets the worker\n"
    "                 it will run on kept from smaller runs until it fits (default 300)\n"
    "  --share-half-life-seconds  fair share: placement serves people by their past\n"
    "                 device-seconds, halved every this long (default 604800, 7 days)\n"
    "  --retry-after-seconds  a run whose attempt failed waits this long before its next\n"
    "                 attempt, twice as long after its second failure, and so on, at most an\n"
    "                 hour (default 10; 0: at once); a lost worker's runs start again at once\n"
    "  --data-dir     a directory a spec's token shards may lie under (repeatable; without\n"
    "                 one, specs must use the synthetic corpus)\n"
    "  --http-connections  HTTP connection slots, a hard ceiling (default 1024; the\n"
    "                 open file limit is raised to fit them, or they are lowered)\n"
    "  --http-reserve the last slots, kept for requests with the API token and /healthz:\n"
    "                 once only these are left, others get 503 (default 1/16 of the slots)\n"
    "  --max-streams  event streams (/api/events) in total (default half the slots)\n"
    "  --max-streams-per-address  event streams from one client address (default 8);\n"
    "                 one over a limit gets 429 or 503 with Retry-After\n"
    "  --header-timeout-seconds  a new connection, or a keep-alive one from its\n"
    "                 request's first byte, that has not sent a whole request by then is\n"
    "                 closed (default 10)\n"
    "  --db-read-connections  database connections for reads (the API, the page, refits),\n"
    "                 apart from the one workers' messages use (default 2, at most 16)\n"
    "  --read-timeout-ms  the longest a read may run or wait for a connection before it\n"
    "                 answers 503 (default 5000; 0: no limit)\n"
    "  --auth-block-seconds  after 5 wrong worker tokens from one address, its wrong tokens\n"
    "                 are refused for the rest of this many seconds (default 60; a right\n"
    "                 token is always welcome)\n"
    "  --slurm PARTITION  elastic workers: when queued runs exceed what the connected workers\n"
    "                 and the jobs on their way can take, sbatch a job of workers on this\n"
    "                 partition sized to them (nodes, --gres=gpu:N, a time limit from the\n"
    "                 plan's estimate); scancel a job whose workers are all idle, or that is\n"
    "                 still pending when nothing waits. The token file and --checkpoints\n"
    "                 must be on a filesystem the nodes share (README, \"Elastic workers\")\n"
    "  --slurm-address  the worker port as the nodes reach it (default: --workers' host, or\n"
    "                 this host's name when it listens on every address)\n"
    "  --slurm-max-nodes  nodes of all its jobs together (default 4)\n"
    "  --slurm-gpus-per-node  GPUs per node of a GPU job (default 0: GPU runs get no job)\n"
    "  --slurm-cpu-slots  CPU runs at a time on each worker of a CPU job (default 1)\n"
    "  --slurm-idle-seconds  a job whose workers have all been idle this long is cancelled\n"
    "                 (default 120)\n"
    "  --slurm-interval-seconds  between looks at the queue and squeue (default 10)\n"
    "  --slurm-max-minutes  a job's time limit at most (default 1440)\n"
    "  --slurm-option OPT  one more sbatch option, as it is (repeatable; e.g.\n"
    "                 --slurm-option --account=lab --slurm-option --output=/shared/%j.out)\n";

/* The options with a plain value: 1 when a is one (stored in o), 0 when it
 * is not, -1 (after a message) when its value is out of range. */
static int value_option(sched_options *o, const char *a, const char *v) {
  /* options that take a path or an address as it is */
  const struct {
    const char *name;
    const char **to;
  } text[] = {{"--database", &o->database},
              {"--listen", &o->listen},
              {"--workers", &o->workers},
              {"--token-file", &o->token_file},
              {"--api-token-file", &o->api_token_file},
              {"--checkpoints", &o->checkpoint_root},
              {"--ready-file", &o->ready_file},
              {"--slurm", &o->slurm_partition},
              {"--slurm-address", &o->slurm_address}};
  /* whole numbers in [min, max] */
  const struct {
    const char *name;
    int *to;
    long max;
    long min;
  } secs[] = {{"--reserve-after-seconds", &o->reserve_after_s, 604800, 0},
              {"--share-half-life-seconds", &o->share_half_life_s, 315360000, 60},
              {"--retry-after-seconds", &o->retry_after_s, 3600, 0},
              {"--predict-seconds", &o->predict_s, 86400, 0},
              {"--db-read-connections", &o->db_read_connections, 16, 1},
              {"--read-timeout-ms", &o->read_timeout_ms, 3600000, 0},
              {"--http-connections", &o->http_connections, 1000000, 1},
              {"--http-reserve", &o->http_reserve, 1000000, 1},
              {"--max-streams", &o->max_streams, 1000000, 1},
              {"--max-streams-per-address", &o->max_streams_per_addr, 1000000, 1},
              {"--header-timeout-seconds", &o->header_timeout_s, 3600, 1},
              {"--auth-block-seconds", &o->auth_block_s, 86400, 1},
              {"--slurm-max-nodes", &o->slurm_max_nodes, 4096, 1},
              {"--slurm-gpus-per-node", &o->slurm_gpus_per_node, 64, 0},
              {"--slurm-cpu-slots", &o->slurm_cpu_slots, 4096, 1},
              {"--slurm-idle-seconds", &o->slurm_idle_s, 86400, 1},
              {"--slurm-interval-seconds", &o->slurm_interval_s, 3600, 1},
              {"--slurm-max-minutes", &o->slurm_max_minutes, 525600, 10}};
  int known = 0;
  for (size_t k = 0; k < sizeof text / sizeof *text && !known; k++)
    if (!strcmp(a, text[k].name)) {
      *text[k].to = v;
      known = 1;
    }
  for (size_t k = 0; k < sizeof secs / sizeof *secs && !known; k++)
    if (!strcmp(a, secs[k].name)) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < secs[k].min || n > secs[k].max) {
        fprintf(stderr, "scalesweep scheduler: %s %s: expected %ld to %ld\n", a, v, secs[k].min,
                secs[k].max);
        return -1;
      }
      *secs[k].to = (int)n;
      known = 1;
    }
  return known;
}

int cmd_scheduler(int argc, char **argv) {
  sched_options o;
  sched_options_default(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(a)) {
      printf("%s", usage);
      return 0;
    } else if (!strcmp(a, "--closed-reads")) {
      o.open_reads = 0;
      continue;
    } else if (!strcmp(a, "--open-metrics")) {
      o.open_metrics = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "scalesweep scheduler: %s needs a value\n%s", a, usage);
      return SS_EXIT_USAGE;
    }
    i++;
    int known = value_option(&o, a, v);
    if (known < 0)
      return SS_EXIT_USAGE;
    if (known)
      continue;
    if (!strcmp(a, "--slurm-option")) {
      if (o.nslurm_options == SCHED_MAX_SLURM_OPTIONS || v[0] != '-') {
        fprintf(stderr, "scalesweep scheduler: --slurm-option %s: %s\n", v,
                v[0] != '-' ? "expected an sbatch option (starting with -), e.g. --account=lab"
                            : "too many (at most 16)");
        return SS_EXIT_USAGE;
      }
      o.slurm_options[o.nslurm_options++] = v;
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

/* scalesweep launch [--world-size N] [--ranks LIST --dist HOST:PORT] -- COMMAND [ARG...]
 *
 * A declared trainer's ranks (docs/trainers.md): one process of COMMAND per
 * rank of this host, each with the environment torch.distributed reads with
 * init_method="env://" (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), as torchrun would give it. The worker runs a
 * declared trainer through it; a user can too, to try a trainer by hand. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "common/err.h"

#define LAUNCH_RANKS_MAX 1024

static void usage(FILE *f) {
  fprintf(f,
          "usage: scalesweep launch [--world-size N] [--ranks LIST --dist HOST:PORT] -- COMMAND "
          "[ARG...]\n"
          "\n"
          "Runs COMMAND once per rank of a data-parallel run, each with torchrun's environment\n"
          "(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as a\n"
          "worker runs a declared trainer (docs/trainers.md). Rank 0's stdout is this\n"
          "program's; the other ranks' stdout goes to stderr. SIGTERM and SIGINT go to every\n"
          "rank; when one rank fails the others get SIGTERM, and SIGKILL 10 s later.\n"
          "  --world-size N     the run's ranks (default 1)\n"
          "  --ranks LIST       this host's ranks of a run spread over hosts (\"2,3\"),\n"
          "                     with --dist, rank 0's HOST:PORT (default: all, on 127.0.0.1\n"
          "                     and a free port)\n"
          "Exit code: the first rank to fail (128+N for signal N; the others are stopped),\n"
          "else 0; 2 for bad usage.\n");
}

/* a free TCP port on 127.0.0.1 (rank 0 binds it a moment later: torchrun's
 * way too), or 0 */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
      !getsockname(fd, (struct sockaddr *)&a, &len))
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

/* "HOST:PORT" or "[V6]:PORT" into host and port; -1 when malformed */
static int split_dist(const char *dist, char *host, size_t n, char *port, size_t pn) {
  const char *colon = strrchr(dist, ':');
  if (!colon || colon == dist || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1))
    return -1;
  long p = strtol(colon + 1, NULL, 10);
  if (p <= 0 || p > 65535)
    return -1;
  const char *h = dist;
  size_t hl = (size_t)(colon - dist);
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']')
    h++, hl -= 2;
  if (hl == 0 || hl >= n)
    return -1;
  snprintf(host, n, "%.*s", (int)hl, h);
  snprintf(port, pn, "%ld", p);
  return 0;
}

/* What the command line asks of launch: the ranks to run here marked in
 * mark, rank 0's address, and the command after "--". */
typedef struct launch_args {
  long world;
  const char *ranks, *dist;
  char **cmd;
  char mark[LAUNCH_RANKS_MAX];
  char host[256], port[16];
} launch_args;

/* The options before "--": -1 to go on (l->cmd then set), else the exit
 * code (--help, or a usage error said on stderr). */
static int read_launch_options(int argc, char **argv, launch_args *l) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      usage(stdout);
      return SS_EXIT_OK;
    }
    if (!strcmp(a, "--"))
      break;
    if (i + 1 >= argc)
      return cli_usage_error("launch", NULL, "%s: expected an option and its value, then -- COMMAND", a);
    if (!strcmp(a, "--world-size")) {
      char *end;
      l->world = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || l->world < 1 || l->world > LAUNCH_RANKS_MAX)
        return cli_usage_error("launch", NULL, "--world-size %s: expected an integer in 1..%d",
                               argv[i], LAUNCH_RANKS_MAX);
    } else if (!strcmp(a, "--ranks")) {
      l->ranks = argv[++i];
    } else if (!strcmp(a, "--dist")) {
      l->dist = argv[++i];
    } else {
      return cli_usage_error("launch", NULL, "unknown option '%s'", a);
    }
  }
  if (i + 1 >= argc)
    return cli_usage_error("launch", NULL, "expected -- COMMAND [ARG...] after the options");
  l->cmd = argv + i + 1;
  return -1;
}

/* This host's ranks into l->mark and rank 0's HOST:PORT into l->host and
 * l->port (a free local port for a run all here): -1 to go on, else the
 * exit code said on stderr. */
static int resolve_ranks(launch_args *l) {
  if (!!l->ranks != !!l->dist)
    return cli_usage_error("launch", NULL,
                           "--ranks and --dist go together (this host's ranks of a run spread "
                           "over hosts, and rank 0's HOST:PORT)");
  memset(l->mark, l->ranks ? 0 : 1, (size_t)l->world);
  if (l->ranks && cli_launch_parse_ranks(l->ranks, (int)l->world, l->mark) < 0)
    return cli_usage_error("launch", NULL,
                           "--ranks %s: expected distinct ranks below the world size %ld, "
                           "comma-separated",
                           l->ranks, l->world);
  snprintf(l->host, sizeof l->host, "127.0.0.1");
  if (l->dist && split_dist(l->dist, l->host, sizeof l->host, l->port, sizeof l->port))
    return cli_usage_error("launch", NULL, "--dist %s: expected HOST:PORT", l->dist);
  if (!l->dist) {
    int p = l->world > 1 ? free_port() : 29500; /* one rank: nobody connects to it */
    if (p <= 0) {
      fprintf(stderr, "scalesweep launch: no free port on 127.0.0.1: %s\n", strerror(errno));
      return SS_EXIT_FAILURE;
    }
    snprintf(l->port, sizeof l->port, "%d", p);
  }
  return -1;
}

/* In rank r's child: torchrun's environment (local: its place among this
 * host's here ranks), then the command. Does not return. */
static _Noreturn void exec_rank(const launch_args *l, int r, int local, int here) {
  char rank_s[16], local_s[16], world_s[24], here_s[16];
  snprintf(rank_s, sizeof rank_s, "%d", r);
  snprintf(local_s, sizeof local_s, "%d", local);
  snprintf(world_s, sizeof world_s, "%ld", l->world);
  snprintf(here_s, sizeof here_s, "%d", here);
  setenv("RANK", rank_s, 1);
  setenv("LOCAL_RANK", local_s, 1);
  setenv("WORLD_SIZE", world_s, 1);
  setenv("LOCAL_WORLD_SIZE", here_s, 1);
  setenv("MASTER_ADDR", l->host, 1);
  setenv("MASTER_PORT", l->port, 1);
  /* only rank 0's lines are the run's: any other rank's go to the log */
  if (r != 0 && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    _exit(SS_EXIT_FAILURE);
  execvp(l->cmd[0], l->cmd);
  fprintf(stderr, "scalesweep launch: rank %d: cannot start %s: %s\n", r, l->cmd[0],
          strerror(errno));
  _exit(127);
}

int cmd_launch(int argc, char **argv) {
  launch_args l = {.world = 1};
  int rc = read_launch_options(argc, argv, &l);
  if (rc < 0)
    rc = resolve_ranks(&l);
  if (rc >= 0)
    return rc;
  int here = 0, first = -1;
  for (int r = 0; r < l.world; r++)
    if (l.mark[r]) {
      here++;
      first = first < 0 ? r : first;
    }
  fflush(stdout);
  cli_launch_begin((int)l.world);
  int local = 0;
  for (int r = 0; r < l.world; r++) {
    if (!l.mark[r])
      continue;
    pid_t pid = cli_launch_fork(r);
    if (pid == 0)
      exec_rank(&l, r, local, here);
    if (pid < 0) {
      fprintf(stderr, "scalesweep launch: rank %d: fork: %s\n", r, strerror(errno));
      l.mark[r] = 0;
      break;
    }
    local++;
  }
  int code = cli_launch_wait("scalesweep launch", (int)l.world, l.mark, first, 1);
  return local < here && code == 0 ? SS_EXIT_FAILURE : code;
}

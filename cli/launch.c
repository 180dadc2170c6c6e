/* The local launcher of a data-parallel run's ranks (launch.h). */
#include "cli/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/token.h"

#define LAUNCH_MAX 1024
#define LAUNCH_GRACE_MS 10000 /* after a rank failed, before the rest are killed */

static pid_t pids[LAUNCH_MAX];
static int npids;
static pid_t launcher;
static struct sigaction old_term, old_int;

/* passes SIGTERM/SIGINT on to every rank (kill is async-signal-safe) */
static void forward(int sig) {
  for (int i = 0; i < npids; i++)
    if (pids[i] > 0)
      kill(pids[i], sig);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_launch_begin(int world) {
  struct sigaction sa = {.sa_handler = forward};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  launcher = getpid();
  npids = world; /* forward() skips the ranks not started (yet) */
}

pid_t cli_launch_fork(int rank) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no rank outlives its launcher */
    if (getppid() != launcher)
      _exit(128 + SIGKILL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    return 0;
  }
  if (pid > 0)
    pids[rank] = pid;
  return pid;
}

static int exit_code_of(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int cli_launch_wait(const char *who, int world, const char *mark, int first, int stop_others) {
  static int codes[LAUNCH_MAX];
  int left = 0, first_bad = -1;
  for (int r = 0; r < world; r++)
    left += mark[r] && pids[r] > 0;
  int64_t kill_at = 0;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, kill_at ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid < 0)
      break;
    if (pid == 0) {
      if (now_ms() >= kill_at)
        forward(SIGKILL);
      usleep(20000);
      continue;
    }
    int r = 0;
    while (r < world && pids[r] != pid)
      r++;
    if (r == world)
      continue;
    pids[r] = 0;
    left--;
    codes[r] = exit_code_of(st);
    if (codes[r] != 0) {
      if (WIFSIGNALED(st))
        fprintf(stderr, "%s: rank %d was killed by signal %d\n", who, r, WTERMSIG(st));
      else
        fprintf(stderr, "%s: rank %d exited with code %d\n", who, r, codes[r]);
      if (first_bad < 0)
        first_bad = r;
      if (!kill_at && left > 0) {
        if (stop_others) /* they may wait for the failed one forever */
          forward(SIGTERM);
        kill_at = now_ms() + LAUNCH_GRACE_MS;
      }
    }
  }
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old_int, NULL);
  if (first_bad < 0)
    return SS_EXIT_OK;
  if (stop_others) /* the others' codes are this launcher's SIGTERM's */
    return codes[first_bad];
  return codes[first] != 0 ? codes[first] : codes[first_bad];
}

/* a listening socket on 127.0.0.1 (port 0: any) or, for a run spread over
 * hosts, every address; its port; -1 on failure */
static int listener(int *port, int everywhere) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1; /* inherited by rank 0 */
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)*port),
                          .sin_addr.s_addr = htonl(everywhere ? INADDR_ANY : INADDR_LOOPBACK)};
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, LAUNCH_MAX) ||
      getsockname(fd, (struct sockaddr *)&a, &len)) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

/* a config that can be read once (stdin, a pipe): its resolved form in a
 * file the ranks can read */
static int stdin_config(const rcfg *cfg, char *path, size_t len) {
  const char *tmp = getenv("TMPDIR");
  snprintf(path, len, "%s/scalesweep-config.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  char *text = rcfg_to_json(cfg);
  int ok = fd >= 0 && text && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  free(text);
  if (fd >= 0)
    close(fd);
  if (!ok && fd >= 0)
    unlink(path);
  return ok ? 0 : -1;
}

int cli_launch_parse_ranks(const char *list, int world, char *mark) {
  int n = 0;
  for (const char *p = list; *p;) {
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p || r < 0 || r >= world || mark[r] || (*end && *end != ','))
      return -1;
    mark[r] = 1;
    n++;
    p = *end ? end + 1 : end;
  }
  return n;
}

/* The launch's arguments against the config: world_size, --ranks into
 * mark (all when none), and for a run spread over hosts --dist's port in
 * *port and the secret in the environment. 0, or SS_EXIT_USAGE said on
 * stderr. */
static int check_launch(const rcfg *cfg, const char *ranks, const char *dist, char *mark,
                        int *port) {
  int world = cfg->world_size;
  if (world > LAUNCH_MAX) {
    fprintf(stderr, "scalesweep train: world_size %d: at most %d ranks\n", world, LAUNCH_MAX);
    return SS_EXIT_USAGE;
  }
  memset(mark, !ranks, LAUNCH_MAX);
  int here = ranks ? cli_launch_parse_ranks(ranks, world, mark) : 1;
  if (here < 0)
    fprintf(stderr,
            "scalesweep train: --ranks %s: expected distinct ranks below world_size %d, "
            "comma-separated\n",
            ranks, world);
  if (here <= 0)
    return SS_EXIT_USAGE;
  const char *secret_env = getenv("SCALESWEEP_DIST_SECRET");
  if (ranks && (!dist || !secret_env || !*secret_env)) {
    fprintf(stderr, "scalesweep train: --ranks: a run spread over hosts needs --dist HOST:PORT "
                    "(rank 0's) and the run's secret in $SCALESWEEP_DIST_SECRET\n");
    return SS_EXIT_USAGE;
  }
  if (ranks) { /* rank 0 here listens on --dist's port, on every address */
    const char *colon = strrchr(dist, ':');
    *port = colon ? atoi(colon + 1) : 0;
    if (*port <= 0 || *port > 65535) {
      fprintf(stderr, "scalesweep train: --dist %s: expected HOST:PORT\n", dist);
      return SS_EXIT_USAGE;
    }
  }
  return 0;
}

/* What the ranks need before they start: the config in a file they can
 * read (cfg_path, "" when --config's is one), a fresh secret for a run all
 * here, and rank 0's listening socket (*lfd, when rank 0 is here). 0, or
 * SS_EXIT_FAILURE said on stderr. */
static int prepare_ranks(const rcfg *cfg, const char *config, const char *ranks, const char *mark,
                         char *cfg_path, size_t pathlen, int *port, int *lfd) {
  struct stat sb; /* stdin or a pipe can be read once: the ranks read a copy */
  int once = !strcmp(config, "-") || stat(config, &sb) != 0 || !S_ISREG(sb.st_mode);
  if (once && stdin_config(cfg, cfg_path, pathlen) != 0) {
    fprintf(stderr, "scalesweep train: cannot keep the config from stdin: %s\n", strerror(errno));
    return SS_EXIT_FAILURE;
  }
  char secret[33];
  if (!ranks && token_random_hex(secret, 16) != 0) {
    fprintf(stderr, "scalesweep train: getrandom: %s\n", strerror(errno));
    return SS_EXIT_FAILURE;
  }
  if (mark[0] && (*lfd = listener(port, ranks != NULL)) < 0) {
    fprintf(stderr, "scalesweep train: cannot listen on port %d for the ranks: %s\n", *port,
            strerror(errno));
    return SS_EXIT_FAILURE;
  }
  if (!ranks)
    setenv("SCALESWEEP_DIST_SECRET", secret, 1);
  return 0;
}

/* In rank r's child: its place among this host's ranks (its GPU of the
 * visible ones) in the environment, then `scalesweep train` with args.
 * Does not return. */
static _Noreturn void exec_train_rank(int r, const char *mark, int lfd, char **args) {
  char local[16];
  int here = 0;
  for (int q = 0; q < r; q++)
    here += mark[q];
  snprintf(local, sizeof local, "%d", here);
  setenv("SCALESWEEP_LOCAL_RANK", local, 1);
  if (r != 0 && lfd >= 0)
    close(lfd);
  execv("/proc/self/exe", args);
  fprintf(stderr, "scalesweep train: rank %d: cannot start: %s\n", r, strerror(errno));
  _exit(SS_EXIT_FAILURE);
}

/* Forks the marked ranks, each with this argv (the config from stdin
 * replaced by its file, cfg_path) and its place in the run; returns the
 * first of them. */
static int start_ranks(int argc, char **argv, int world, const char *mark, const char *cfg_path,
                       const char *ranks, const char *dist, int port, int lfd) {
  char **args = calloc((size_t)argc + 10, sizeof *args);
  char rank_s[16], addr[300], fd_s[16];
  snprintf(addr, sizeof addr, "%s", ranks ? dist : "");
  if (!ranks)
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(fd_s, sizeof fd_s, "%d", lfd);
  int n = 0;
  args[n++] = "scalesweep";
  for (int i = 0; i < argc; i++)
    args[n++] =
        i > 0 && cfg_path[0] && !strcmp(argv[i - 1], "--config") ? (char *)cfg_path : argv[i];
  int base = n;

  cli_launch_begin(world);
  int first = 0;
  while (!mark[first])
    first++;
  for (int r = 0; r < world; r++) {
    if (!mark[r])
      continue;
    n = base;
    snprintf(rank_s, sizeof rank_s, "%d", r);
    args[n++] = "--rank";
    args[n++] = rank_s;
    args[n++] = "--dist";
    args[n++] = addr;
    if (r == 0) {
      args[n++] = "--dist-listen-fd";
      args[n++] = fd_s;
    }
    if (r != first) /* the lowest rank here prints the run's lines */
      args[n++] = "--dist-quiet";
    args[n] = NULL;
    if (cli_launch_fork(r) == 0)
      exec_train_rank(r, mark, lfd, args);
  }
  if (lfd >= 0)
    close(lfd);
  free(args);
  return first;
}

int cli_train_launch(int argc, char **argv, const rcfg *cfg, const char *config, const char *ranks,
                     const char *dist) {
  int world = cfg->world_size, port = 0, lfd = -1;
  static char mark[LAUNCH_MAX];
  int rc = check_launch(cfg, ranks, dist, mark, &port);
  if (rc)
    return rc;
  char cfg_path[4096] = "";
  if ((rc = prepare_ranks(cfg, config, ranks, mark, cfg_path, sizeof cfg_path, &port, &lfd)) != 0)
    return rc;
  int first = start_ranks(argc, argv, world, mark, cfg_path, ranks, dist, port, lfd);
  /* the ranks see a failed one at once; stragglers are killed */
  int code = cli_launch_wait("scalesweep train", world, mark, first, 0);
  if (cfg_path[0])
    unlink(cfg_path);
  return code;
}

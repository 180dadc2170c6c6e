/* Running PostgreSQL's programs for `scalesweep up`'s private server
 * (pgserver.h, store/internal.h).
 *
 * initdb, pg_ctl and pg_config run as child processes (fork + execve) with
 * their output captured for error messages. Each child starts a new session
 * (so the server, which pg_ctl starts from it, never sees the terminal's
 * signals), closes every inherited descriptor but stdin/out/err, resets
 * its signal mask and dispositions, and, when we are root, switches to the
 * server's user before exec. Only async-signal-safe calls run between fork
 * and exec: everything else (user lookup, groups, paths, environment) is
 * prepared before the fork. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"

extern char **environ;

int store__path_fmt(char *dst, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, PATH_MAX, fmt, ap);
  va_end(ap);
  return n < 0 || n >= PATH_MAX ? SS_ERANGE : 0;
}

int store__exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- child processes ---------------------------------------------------- */

int store__pg_env(store__pgs *p) {
  size_t n = 0;
  while (environ[n])
    n++;
  p->env = calloc(n + 2, sizeof *p->env);
  if (!p->env)
    return SS_ENOMEM;
  size_t j = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "LC_", 3) && strncmp(environ[i], "LANG", 4))
      p->env[j++] = environ[i];
  p->env[j++] = "LC_ALL=C";
  p->env[j] = NULL;
  return 0;
}

static void child_fail(const char *what, const char *arg) {
  static const char prefix[] = "scalesweep: ";
  ssize_t ignored = write(2, prefix, sizeof prefix - 1);
  ignored = write(2, what, strlen(what));
  ignored = write(2, arg, strlen(arg));
  ignored = write(2, "\n", 1);
  (void)ignored;
  _exit(127);
}

int store__pg_run(const store__pgs *p, char *const argv[], const char *cwd, char *out,
                  size_t outlen) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return SS_EIO;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return SS_EIO;
  }
  if (pid == 0) {
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
      _exit(127);
    if (close_range(3, ~0U, 0) != 0)
      for (int fd = 3; fd < 4096; fd++)
        close(fd);
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
      sigaction(sigs[i], &dfl, NULL);
    if (p->as_user && (setgroups((size_t)p->ngroups, p->groups) != 0 || setgid(p->gid) != 0 ||
                       setuid(p->uid) != 0))
      child_fail("cannot switch to user ", p->user);
    if (chdir(cwd) != 0 && chdir("/") != 0)
      _exit(127);
    execve(argv[0], argv, p->env);
    child_fail("cannot execute ", argv[0]);
  }
  close(fds[1]);
  size_t len = 0;
  char sink[512];
  for (;;) {
    char *dst = len + 1 < outlen ? out + len : sink;
    size_t room = len + 1 < outlen ? outlen - 1 - len : sizeof sink;
    ssize_t n = read(fds[0], dst, room);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    if (dst != sink)
      len += (size_t)n;
  }
  if (outlen)
    out[len < outlen ? len : outlen - 1] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return SS_EIO;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* ---- finding things ----------------------------------------------------- */

static int has_server_bins(const char *dir) {
  static const char *const bins[] = {"initdb", "pg_ctl", "postgres"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof bins / sizeof *bins; i++)
    if (store__path_fmt(path, "%s/%s", dir, bins[i]) || access(path, X_OK) != 0)
      return 0;
  return 1;
}

int store__pg_find_bindir(store__pgs *p, const char *major, char *err, size_t errlen) {
  const char *env = getenv("SCALESWEEP_PG_BINDIR");
  if (env && *env) {
    if (!has_server_bins(env)) {
      err_setf(err, errlen, "SCALESWEEP_PG_BINDIR=%s has no initdb, pg_ctl and postgres", env);
      return SS_ENOENT;
    }
    return store__path_fmt(p->bindir, "%s", env);
  }
  if (*major && !store__path_fmt(p->bindir, "/usr/lib/postgresql/%s/bin", major) &&
      has_server_bins(p->bindir))
    return 0;
  /* pg_config, looked up in PATH */
  const char *path = getenv("PATH");
  char buf[PATH_MAX];
  for (const char *s = path ? path : "/usr/bin:/bin"; *s;) {
    size_t n = strcspn(s, ":");
    if (n > 0 && !store__path_fmt(buf, "%.*s/pg_config", (int)n, s) && access(buf, X_OK) == 0) {
      char out[PATH_MAX];
      char *argv[] = {buf, "--bindir", NULL};
      if (store__pg_run(p, argv, "/", out, sizeof out) == 0) {
        out[strcspn(out, "\n")] = '\0';
        if (has_server_bins(out))
          return store__path_fmt(p->bindir, "%s", out);
      }
      break;
    }
    s += n + (s[n] == ':');
  }
  /* the newest /usr/lib/postgresql/N/bin */
  glob_t g;
  int best = -1;
  if (glob("/usr/lib/postgresql/*/bin", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      int v = atoi(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"));
      if (v > best && has_server_bins(g.gl_pathv[i]) &&
          !store__path_fmt(p->bindir, "%s", g.gl_pathv[i]))
        best = v;
    }
    globfree(&g);
  }
  if (best >= 0)
    return 0;
  err_setf(err, errlen,
           "PostgreSQL server programs (initdb, pg_ctl, postgres) not found: install the "
           "postgresql package, set SCALESWEEP_PG_BINDIR, or give --database URL");
  return SS_ENOENT;
}

void store__pg_read_major(const store__pgs *p, char *major, size_t n) {
  char path[PATH_MAX];
  major[0] = '\0';
  if (store__path_fmt(path, "%s/PG_VERSION", p->data))
    return;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  if (!fgets(major, (int)n, f))
    major[0] = '\0';
  major[strcspn(major, "\r\n")] = '\0';
  fclose(f);
}

int store__pg_choose_user(store__pgs *p, char *err, size_t errlen) {
  p->as_user = geteuid() == 0;
  if (!p->as_user)
    return 0;
  struct stat st;
  struct passwd *pw = NULL;
  const char *name = NULL;
  if (stat(p->data, &st) == 0 && st.st_uid != 0) {
    pw = getpwuid(st.st_uid);
    if (!pw) {
      p->uid = st.st_uid;
      p->gid = st.st_gid;
      snprintf(p->user, sizeof p->user, "uid %u", (unsigned)st.st_uid);
      p->groups[0] = st.st_gid;
      p->ngroups = 1;
      return 0;
    }
  } else {
    name = getenv("SCALESWEEP_PG_USER");
    if (!name || !*name)
      name = "postgres";
    pw = getpwnam(name);
    if (!pw) {
      err_setf(err, errlen,
               "running as root: PostgreSQL refuses to run as root and would run as user '%s', "
               "which does not exist; create it or set SCALESWEEP_PG_USER to an unprivileged "
               "user",
               name);
      return SS_EINVAL;
    }
    if (pw->pw_uid == 0) {
      err_setf(err, errlen,
               "running as root: SCALESWEEP_PG_USER=%s is root, and PostgreSQL refuses to run "
               "as root; name an unprivileged user",
               name);
      return SS_EINVAL;
    }
  }
  p->uid = pw->pw_uid;
  p->gid = pw->pw_gid;
  snprintf(p->user, sizeof p->user, "%s", pw->pw_name);
  int n = STORE__PG_MAX_GROUPS;
  if (getgrouplist(pw->pw_name, pw->pw_gid, p->groups, &n) < 0)
    n = STORE__PG_MAX_GROUPS;
  p->ngroups = n;
  return 0;
}

int store__pg_read_pidfile(const store__pgs *p, char *port, size_t portlen, char *sock,
                           size_t socklen) {
  char path[PATH_MAX], line[PATH_MAX];
  if (store__path_fmt(path, "%s/postmaster.pid", p->data))
    return SS_ERANGE;
  FILE *f = fopen(path, "r");
  if (!f)
    return SS_ENOENT;
  int rc = SS_ECORRUPT;
  for (int i = 1; fgets(line, sizeof line, f); i++) {
    line[strcspn(line, "\r\n")] = '\0';
    size_t len = strlen(line);
    if (i == 4 && len < portlen && strspn(line, "0123456789") == len)
      memcpy(port, line, len + 1);
    if (i == 5 && len < socklen) {
      memcpy(sock, line, len + 1);
      rc = *port && *sock ? 0 : SS_ECORRUPT;
      break;
    }
  }
  fclose(f);
  return rc;
}

/* ---- files and directories ---------------------------------------------- */

int store__pg_own_dir(const store__pgs *p, const char *path, char *err, size_t errlen) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    err_setf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return SS_EIO;
  }
  if ((p->as_user && chown(path, p->uid, p->gid) != 0) || chmod(path, 0700) != 0) {
    err_setf(err, errlen, "cannot set the owner and mode of %s: %s", path, strerror(errno));
    return SS_EIO;
  }
  return 0;
}

int store__pg_write_file(const store__pgs *p, const char *dir, const char *name, int flags,
                         const char *text, char *err, size_t errlen) {
  char path[PATH_MAX];
  if (store__path_fmt(path, "%s/%s", dir, name))
    return SS_ERANGE;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0600);
  size_t len = strlen(text);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len ||
      (p->as_user && fchown(fd, p->uid, p->gid) != 0) || close(fd) != 0) {
    err_setf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return SS_EIO;
  }
  return 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int store__rmtree(const char *path) {
  return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT ? -1 : 0;
}

void store__pg_log_tail(const store__pgs *p, char *out, size_t n) {
  out[0] = '\0';
  FILE *f = fopen(p->log, "r");
  if (!f)
    return;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    long from = size > (long)n - 1 ? size - (long)n + 1 : 0;
    if (fseek(f, from, SEEK_SET) == 0) {
      size_t got = fread(out, 1, n - 1, f);
      out[got] = '\0';
    }
  }
  fclose(f);
  char *nl = strchr(out, '\n');
  if (nl && out[0] && nl[1])
    memmove(out, nl + 1, strlen(nl + 1) + 1);
}

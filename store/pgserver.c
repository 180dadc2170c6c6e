/* The private PostgreSQL of `scalesweep up` (pgserver.h).
 *
 * initdb, pg_ctl and pg_config run as child processes (fork + execve) with
 * their output captured for error messages. Each child starts a new session
 * (so the server, which pg_ctl starts from it, never sees the terminal's
 * signals), closes every inherited descriptor but stdin/out/err, resets
 * its signal mask and dispositions, and, when we are root, switches to the
 * server's user before exec. Only async-signal-safe calls run between fork
 * and exec: everything else (user lookup, groups, paths, environment) is
 * prepared before the fork. */
#include "store/pgserver.h"

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
#include "common/fileio.h"

#define PGS_PORT "5432"
#define PGS_ROLE "scalesweep" /* bootstrap superuser */
#define PGS_DBNAME "scalesweep"
#define PGS_TMP_PREFIX "/tmp/scalesweep-pg-"
#define PGS_SOCKET_FILE "/.s.PGSQL." PGS_PORT
#define PGS_MAX_GROUPS 64
#define PGS_OUT_MAX 2048
#define PGS_READY_TIMEOUT_S 60
#define PGS_STALE_WAIT_S 30

extern char **environ;

typedef struct pgs {
  char pgdir[PATH_MAX]; /* STATE/pg */
  char data[PATH_MAX];  /* STATE/pg/data */
  char log[PATH_MAX];   /* STATE/pg/log */
  char bindir[PATH_MAX];
  int as_user; /* switch to uid/gid in children (we are root) */
  uid_t uid;
  gid_t gid;
  char user[64];
  gid_t groups[PGS_MAX_GROUPS];
  int ngroups;
  char **env; /* environ without locale settings, plus LC_ALL=C */
} pgs;

static int path_fmt(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* snprintf into a PATH_MAX buffer; 0, or SS_ERANGE when it does not fit. */
static int path_fmt(char *dst, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, PATH_MAX, fmt, ap);
  va_end(ap);
  return n < 0 || n >= PATH_MAX ? SS_ERANGE : 0;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* ---- child processes ---------------------------------------------------- */

static int build_env(pgs *p) {
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

/* Runs argv (argv[0] an absolute path) in cwd, as the server's user when
 * p->as_user; its stdout and stderr go to out (the first outlen - 1 bytes,
 * NUL-terminated). Returns its exit status (128 + N when killed by signal
 * N), or a negative SS_E* code when it could not be run. */
static int run(const pgs *p, char *const argv[], const char *cwd, char *out, size_t outlen) {
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
    if (path_fmt(path, "%s/%s", dir, bins[i]) || access(path, X_OK) != 0)
      return 0;
  return 1;
}

/* Sets p->bindir; major: the existing cluster's PG_VERSION, or "" */
static int find_bindir(pgs *p, const char *major, char *err, size_t errlen) {
  const char *env = getenv("SCALESWEEP_PG_BINDIR");
  if (env && *env) {
    if (!has_server_bins(env)) {
      err_setf(err, errlen, "SCALESWEEP_PG_BINDIR=%s has no initdb, pg_ctl and postgres", env);
      return SS_ENOENT;
    }
    return path_fmt(p->bindir, "%s", env);
  }
  if (*major && !path_fmt(p->bindir, "/usr/lib/postgresql/%s/bin", major) &&
      has_server_bins(p->bindir))
    return 0;
  /* pg_config, looked up in PATH */
  const char *path = getenv("PATH");
  char buf[PATH_MAX];
  for (const char *s = path ? path : "/usr/bin:/bin"; *s;) {
    size_t n = strcspn(s, ":");
    if (n > 0 && !path_fmt(buf, "%.*s/pg_config", (int)n, s) && access(buf, X_OK) == 0) {
      char out[PATH_MAX];
      char *argv[] = {buf, "--bindir", NULL};
      if (run(p, argv, "/", out, sizeof out) == 0) {
        out[strcspn(out, "\n")] = '\0';
        if (has_server_bins(out))
          return path_fmt(p->bindir, "%s", out);
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
      if (v > best && has_server_bins(g.gl_pathv[i]) && !path_fmt(p->bindir, "%s", g.gl_pathv[i]))
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

/* The cluster's major version ("15"), or "" when there is no cluster. */
static void read_major(const pgs *p, char *major, size_t n) {
  char path[PATH_MAX];
  major[0] = '\0';
  if (path_fmt(path, "%s/PG_VERSION", p->data))
    return;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  if (!fgets(major, (int)n, f))
    major[0] = '\0';
  major[strcspn(major, "\r\n")] = '\0';
  fclose(f);
}

/* Root runs nothing itself: the server's user is the existing cluster's
 * owner, else SCALESWEEP_PG_USER, else postgres. */
static int choose_user(pgs *p, char *err, size_t errlen) {
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
  int n = PGS_MAX_GROUPS;
  if (getgrouplist(pw->pw_name, pw->pw_gid, p->groups, &n) < 0)
    n = PGS_MAX_GROUPS;
  p->ngroups = n;
  return 0;
}

/* Reads postmaster.pid: line 4 the port, line 5 the first socket directory. */
static int read_pidfile(const pgs *p, char *port, size_t portlen, char *sock, size_t socklen) {
  char path[PATH_MAX], line[PATH_MAX];
  if (path_fmt(path, "%s/postmaster.pid", p->data))
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

/* A directory owned by the server's user, mode 0700. */
static int own_dir(const pgs *p, const char *path, char *err, size_t errlen) {
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

static int write_file(const pgs *p, const char *path, int flags, const char *text, char *err,
                      size_t errlen) {
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

static int rmtree(const char *path) {
  return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT ? -1 : 0;
}

/* The last few lines of the server log, for error messages. */
static void log_tail(const pgs *p, char *out, size_t n) {
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

/* libpq conninfo; the socket directory is quoted (it may hold spaces). */
static int conninfo(char *out, size_t n, const char *sock, const char *port, const char *dbname) {
  char quoted[PATH_MAX * 2];
  size_t j = 0;
  for (const char *s = sock; *s && j + 2 < sizeof quoted; s++) {
    if (*s == '\'' || *s == '\\')
      quoted[j++] = '\\';
    quoted[j++] = *s;
  }
  quoted[j] = '\0';
  int len = snprintf(out, n, "host='%s' port=%s user=" PGS_ROLE " dbname=%s", quoted, port, dbname);
  return len < 0 || (size_t)len >= n ? SS_ERANGE : 0;
}

/* ---- the steps ---------------------------------------------------------- */

/* Resolves the state directory and the paths under it; creates them when
 * create is set. */
static int setup(pgs *p, const char *state_dir, int create, char *err, size_t errlen) {
  char state[PATH_MAX];
  if (!state_dir || !*state_dir) {
    err_setf(err, errlen, "no state directory given");
    return SS_EINVAL;
  }
  if (path_fmt(state, "%s", state_dir)) {
    err_setf(err, errlen, "state directory path too long");
    return SS_ERANGE;
  }
  if (create && fio_mkdirs(state, 0700) != 0) {
    err_setf(err, errlen, "cannot create the state directory %s: %s", state_dir, strerror(errno));
    return SS_EIO;
  }
  char abs[PATH_MAX];
  if (!realpath(state, abs)) {
    err_setf(err, errlen, "state directory %s: %s", state_dir, strerror(errno));
    return errno == ENOENT ? SS_ENOENT : SS_EIO;
  }
  /* pg_ctl puts paths in double quotes in a shell command line. */
  if (strpbrk(abs, "\"$`\\\n")) {
    err_setf(err, errlen,
             "state directory %s: its path holds a character (\" $ ` \\ or a newline) that "
             "pg_ctl cannot quote; choose another directory",
             abs);
    return SS_EINVAL;
  }
  if (path_fmt(p->pgdir, "%s/pg", abs) || path_fmt(p->data, "%s/data", p->pgdir) ||
      path_fmt(p->log, "%s/log", p->pgdir)) {
    err_setf(err, errlen, "state directory path too long");
    return SS_ERANGE;
  }
  if (!create && !exists(p->data))
    return SS_ENOENT;
  int rc = choose_user(p, err, errlen);
  if (rc || !create)
    return rc;
  if (p->as_user) {
    /* The server's user must get through STATE to STATE/pg. */
    struct stat st;
    if (stat(abs, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & S_IXOTH))
      chmod(abs, (st.st_mode & 07777) | S_IXOTH);
  }
  rc = own_dir(p, p->pgdir, err, errlen);
  if (rc)
    return rc;
  if (p->as_user) {
    char *argv[] = {"/bin/sh", "-c",     "test -r \"$1\" && test -w \"$1\" && test -x \"$1\"",
                    "sh",      p->pgdir, NULL};
    char out[256];
    if (run(p, argv, "/", out, sizeof out) != 0) {
      err_setf(err, errlen,
               "running as root, PostgreSQL runs as user '%s', who cannot reach %s: every "
               "directory above it must be searchable by that user (chmod o+x), or choose "
               "another --state directory, or set SCALESWEEP_PG_USER",
               p->user, p->pgdir);
      return SS_EIO;
    }
  }
  return 0;
}

/* initdb into STATE/pg/data.initdb, then rename: a crash halfway leaves no
 * half-made cluster where STATE/pg/data is expected. */
static int init_cluster(pgs *p, char *err, size_t errlen) {
  char tmp[PATH_MAX], path[PATH_MAX];
  if (path_fmt(tmp, "%s/data.initdb", p->pgdir))
    return SS_ERANGE;
  if (exists(p->data)) {
    err_setf(err, errlen,
             "%s exists but holds no PostgreSQL cluster (no PG_VERSION); move it away and "
             "try again",
             p->data);
    return SS_EIO;
  }
  if (exists(tmp) && rmtree(tmp) != 0) {
    err_setf(err, errlen, "cannot remove the unfinished %s: %s", tmp, strerror(errno));
    return SS_EIO;
  }
  char initdb[PATH_MAX], out[PGS_OUT_MAX];
  if (path_fmt(initdb, "%s/initdb", p->bindir))
    return SS_ERANGE;
  char *argv[] = {initdb,  "-D",          tmp,  "-U",   PGS_ROLE, "-A",
                  "trust", "--no-locale", "-E", "UTF8", NULL};
  int rc = run(p, argv, p->pgdir, out, sizeof out);
  if (rc != 0) {
    err_setf(err, errlen, "initdb %s failed (exit %d): %s", tmp, rc, out);
    return SS_EIO;
  }
  rc = path_fmt(path, "%s/pg_hba.conf", tmp);
  if (!rc)
    rc = write_file(p, path, O_TRUNC,
                    "# scalesweep: connections through the Unix socket only (no TCP)\n"
                    "local all all trust\n",
                    err, errlen);
  if (!rc)
    rc = path_fmt(path, "%s/postgresql.conf", tmp);
  if (!rc)
    rc = write_file(p, path, O_APPEND,
                    "\n# scalesweep: where it listens, rewritten at every start\n"
                    "include_if_exists = 'scalesweep.conf'\n",
                    err, errlen);
  if (rc)
    return rc;
  if (rename(tmp, p->data) != 0) {
    err_setf(err, errlen, "cannot rename %s to %s: %s", tmp, p->data, strerror(errno));
    return SS_EIO;
  }
  return 0;
}

/* Chooses the socket directory and writes scalesweep.conf. */
static int configure(pgs *p, char *err, size_t errlen) {
  char sock[PATH_MAX], path[PATH_MAX];
  if (path_fmt(sock, "%s/socket", p->pgdir))
    return SS_ERANGE;
  /* Too long for sun_path, or a character unix_socket_directories would
   * split or unquote: use a short directory in /tmp. */
  if (strlen(sock) + strlen(PGS_SOCKET_FILE) >= sizeof((struct sockaddr_un *)0)->sun_path ||
      strpbrk(sock, ",'")) {
    snprintf(sock, sizeof sock, "%sXXXXXX", PGS_TMP_PREFIX);
    if (!mkdtemp(sock)) {
      err_setf(err, errlen, "cannot create a socket directory in /tmp: %s", strerror(errno));
      return SS_EIO;
    }
  }
  int rc = own_dir(p, sock, err, errlen);
  if (rc)
    return rc;
  char conf[PATH_MAX + 512];
  snprintf(conf, sizeof conf,
           "# Written by scalesweep at every start (scheduler/pgserver.c): no TCP, one\n"
           "# Unix socket that only the server's user (and root) may use.\n"
           "listen_addresses = ''\n"
           "port = " PGS_PORT "\n"
           "unix_socket_directories = '%s'\n"
           "unix_socket_permissions = 0700\n",
           sock);
  if (path_fmt(path, "%s/scalesweep.conf", p->data))
    return SS_ERANGE;
  return write_file(p, path, O_TRUNC, conf, err, errlen);
}

static int pg_ctl(const pgs *p, const char *const *args, char *out, size_t outlen) {
  char bin[PATH_MAX];
  char *argv[16];
  int n = 0;
  if (path_fmt(bin, "%s/pg_ctl", p->bindir))
    return SS_ERANGE;
  argv[n++] = bin;
  argv[n++] = "-D";
  argv[n++] = (char *)p->data;
  while (*args && n < 15)
    argv[n++] = (char *)*args++;
  argv[n] = NULL;
  return run(p, argv, p->pgdir, out, outlen);
}

/* Removes a socket directory that configure() made in /tmp, with the
 * socket and lock files a crashed server leaves there. */
static void remove_tmp_socket_dir(const char *sock, const char *port) {
  char path[PATH_MAX];
  if (strncmp(sock, PGS_TMP_PREFIX, strlen(PGS_TMP_PREFIX)) || !*port)
    return;
  if (!path_fmt(path, "%s/.s.PGSQL.%s", sock, port))
    unlink(path);
  if (!path_fmt(path, "%s/.s.PGSQL.%s.lock", sock, port))
    unlink(path);
  rmdir(sock);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int wait_ready(const char *admin, char *err, size_t errlen) {
  for (int i = 0; i < PGS_READY_TIMEOUT_S * 10; i++) {
    PGPing ping = PQping(admin);
    if (ping == PQPING_OK)
      return 0;
    if (ping == PQPING_NO_ATTEMPT) {
      err_setf(err, errlen, "bad connection parameters: %s", admin);
      return SS_EINVAL;
    }
    sleep_ms(100);
  }
  err_setf(err, errlen, "PostgreSQL does not accept connections after %d s (%s)",
           PGS_READY_TIMEOUT_S, admin);
  return SS_EIO;
}

static int create_database(const char *admin, char *err, size_t errlen) {
  PGconn *c = PQconnectdb(admin);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    err_setf(err, errlen, "cannot connect to the private PostgreSQL: %s",
             c ? PQerrorMessage(c) : "out of memory");
    PQfinish(c);
    return SS_EIO;
  }
  PQsetNoticeProcessor(c, quiet, NULL);
  const char *const name[] = {PGS_DBNAME};
  PGresult *r =
      PQexecParams(c, "SELECT 1 FROM pg_database WHERE datname = $1", 1, NULL, name, NULL, NULL, 0);
  int rc = 0;
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    err_setf(err, errlen, "listing databases: %s", PQresultErrorMessage(r));
    rc = SS_EIO;
  } else if (PQntuples(r) == 0) {
    PQclear(r);
    r = PQexec(c, "CREATE DATABASE " PGS_DBNAME);
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    /* 42P04 duplicate_database: another start created it just now */
    if (PQresultStatus(r) != PGRES_COMMAND_OK && !(state && !strcmp(state, "42P04"))) {
      err_setf(err, errlen, "CREATE DATABASE " PGS_DBNAME ": %s", PQresultErrorMessage(r));
      rc = SS_EIO;
    }
  }
  PQclear(r);
  PQfinish(c);
  return rc;
}

/* Whether the cluster's server runs and answers. pg_ctl status alone is
 * not enough: a postmaster killed with SIGKILL stays a zombie, which
 * pg_ctl counts as running, until it is reaped; its socket no longer
 * answers. So a server that pg_ctl reports but that does not answer is
 * waited for (PGS_STALE_WAIT_S) to be reaped, then started afresh. */
static int find_running(const pgs *p, int *running, char *err, size_t errlen) {
  static const char *const status_args[] = {"status", NULL};
  char out[PGS_OUT_MAX], port[16], sock[PATH_MAX], admin[PATH_MAX * 2 + 128];
  *running = 0;
  for (int waited = 0;; waited++) {
    if (pg_ctl(p, status_args, out, sizeof out) != 0)
      return 0;
    port[0] = sock[0] = '\0';
    if (!read_pidfile(p, port, sizeof port, sock, sizeof sock) &&
        !conninfo(admin, sizeof admin, sock, port, "postgres")) {
      PGPing ping = PQping(admin);
      if (ping == PQPING_OK || ping == PQPING_REJECT) {
        *running = 1;
        return 0;
      }
    }
    if (waited >= PGS_STALE_WAIT_S * 4) {
      err_setf(err, errlen,
               "pg_ctl reports a server running in %s, but it does not answer on %s; if no "
               "PostgreSQL runs there, remove %s/postmaster.pid",
               p->data, *sock ? sock : "its socket", p->data);
      return SS_EIO;
    }
    sleep_ms(250);
  }
}

static int start(pgs *p, const char *state_dir, char *url_out, size_t url_len, char *err,
                 size_t errlen) {
  int rc = build_env(p);
  if (!rc)
    rc = setup(p, state_dir, 1, err, errlen);
  if (rc)
    return rc;
  char major[32];
  read_major(p, major, sizeof major);
  rc = find_bindir(p, major, err, errlen);
  if (rc)
    return rc;
  if (!*major) {
    rc = init_cluster(p, err, errlen);
    if (rc)
      return rc;
  }
  char out[PGS_OUT_MAX];
  int running = 0;
  rc = find_running(p, &running, err, errlen);
  if (rc)
    return rc;
  if (!running) {
    char old_port[16] = "", old_sock[PATH_MAX] = "";
    if (!read_pidfile(p, old_port, sizeof old_port, old_sock, sizeof old_sock)) /* a crash */
      remove_tmp_socket_dir(old_sock, old_port);
    rc = configure(p, err, errlen);
    if (rc)
      return rc;
    const char *const start_args[] = {"-l", p->log, "-w", "-t", "300", "-s", "start", NULL};
    int st = pg_ctl(p, start_args, out, sizeof out);
    if (st != 0) {
      char tail[1024];
      log_tail(p, tail, sizeof tail);
      err_setf(err, errlen, "PostgreSQL did not start (pg_ctl exit %d): %s\n%s ends with:\n%s", st,
               out, p->log, tail);
      return SS_EIO;
    }
  }
  char port[16] = "", sock[PATH_MAX] = "", admin[PATH_MAX * 2 + 128];
  if (read_pidfile(p, port, sizeof port, sock, sizeof sock) != 0) {
    err_setf(err, errlen, "PostgreSQL is running but %s/postmaster.pid names no Unix socket",
             p->data);
    return SS_EIO;
  }
  if (conninfo(admin, sizeof admin, sock, port, "postgres"))
    return SS_ERANGE;
  rc = wait_ready(admin, err, errlen);
  if (!rc)
    rc = create_database(admin, err, errlen);
  if (!rc && conninfo(url_out, url_len, sock, port, PGS_DBNAME)) {
    err_setf(err, errlen, "the connection string does not fit in %zu bytes", url_len);
    rc = SS_ERANGE;
  }
  return rc;
}

int pgs_start(const char *state_dir, char *url_out, size_t url_len, char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (url_out && url_len)
    url_out[0] = '\0';
  pgs *p = calloc(1, sizeof *p);
  if (!p)
    return SS_ENOMEM;
  int rc = start(p, state_dir, url_out, url_len, err, errlen);
  free(p->env);
  free(p);
  return rc;
}

static int stop(pgs *p, const char *state_dir, char *err, size_t errlen) {
  int rc = build_env(p);
  if (!rc)
    rc = setup(p, state_dir, 0, err, errlen);
  if (rc == SS_ENOENT) {
    if (err && errlen)
      err[0] = '\0';
    return 0;
  }
  if (rc)
    return rc;
  char major[32];
  read_major(p, major, sizeof major);
  if (!*major)
    return 0;
  rc = find_bindir(p, major, err, errlen);
  if (rc)
    return rc;
  char port[16] = "", sock[PATH_MAX] = "", out[PGS_OUT_MAX];
  read_pidfile(p, port, sizeof port, sock, sizeof sock);
  static const char *const stop_args[] = {"-m", "fast", "-w", "-t", "300", "-s", "stop", NULL};
  int st = pg_ctl(p, stop_args, out, sizeof out);
  if (st != 0) {
    char ignored[PGS_OUT_MAX];
    static const char *const status_args[] = {"status", NULL};
    /* pg_ctl status: 3 when no server runs (a stale postmaster.pid included) */
    if (pg_ctl(p, status_args, ignored, sizeof ignored) != 3) {
      err_setf(err, errlen, "could not stop PostgreSQL in %s (pg_ctl exit %d): %s", p->data, st,
               out);
      return SS_EIO;
    }
  }
  remove_tmp_socket_dir(sock, port);
  return 0;
}

int pgs_stop(const char *state_dir, char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  pgs *p = calloc(1, sizeof *p);
  if (!p)
    return SS_ENOMEM;
  int rc = stop(p, state_dir, err, errlen);
  free(p->env);
  free(p);
  return rc;
}

/* The private PostgreSQL of `scalesweep up` (pgserver.h): the steps of a
 * start (state directory, initdb, configuration, pg_ctl start, the
 * database) and of a stop. The programs run through store/pgproc.c. */
#include "store/pgserver.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "store/internal.h"

#define PGS_PORT "5432"
#define PGS_ROLE "scalesweep" /* bootstrap superuser */
#define PGS_DBNAME "scalesweep"
#define PGS_TMP_PREFIX "/tmp/scalesweep-pg-"
#define PGS_SOCKET_FILE "/.s.PGSQL." PGS_PORT
#define PGS_OUT_MAX 2048
#define PGS_READY_TIMEOUT_S 60
#define PGS_STALE_WAIT_S 30

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
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
static int setup(store__pgs *p, const char *state_dir, int create, char *err, size_t errlen) {
  char state[PATH_MAX];
  if (!state_dir || !*state_dir) {
    err_setf(err, errlen, "no state directory given");
    return SS_EINVAL;
  }
  if (store__path_fmt(state, "%s", state_dir)) {
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
  if (store__path_fmt(p->pgdir, "%s/pg", abs) || store__path_fmt(p->data, "%s/data", p->pgdir) ||
      store__path_fmt(p->log, "%s/log", p->pgdir)) {
    err_setf(err, errlen, "state directory path too long");
    return SS_ERANGE;
  }
  if (!create && !store__exists(p->data))
    return SS_ENOENT;
  int rc = store__pg_choose_user(p, err, errlen);
  if (rc || !create)
    return rc;
  if (p->as_user) {
    /* The server's user must get through STATE to STATE/pg. */
    struct stat st;
    if (stat(abs, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & S_IXOTH))
      chmod(abs, (st.st_mode & 07777) | S_IXOTH);
  }
  rc = store__pg_own_dir(p, p->pgdir, err, errlen);
  if (rc)
    return rc;
  if (p->as_user) {
    char *argv[] = {"/bin/sh", "-c",     "test -r \"$1\" && test -w \"$1\" && test -x \"$1\"",
                    "sh",      p->pgdir, NULL};
    char out[256];
    if (store__pg_run(p, argv, "/", out, sizeof out) != 0) {
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
static int init_cluster(store__pgs *p, char *err, size_t errlen) {
  char tmp[PATH_MAX];
  if (store__path_fmt(tmp, "%s/data.initdb", p->pgdir))
    return SS_ERANGE;
  if (store__exists(p->data)) {
    err_setf(err, errlen,
             "%s exists but holds no PostgreSQL cluster (no PG_VERSION); move it away and "
             "try again",
             p->data);
    return SS_EIO;
  }
  if (store__exists(tmp) && store__rmtree(tmp) != 0) {
    err_setf(err, errlen, "cannot remove the unfinished %s: %s", tmp, strerror(errno));
    return SS_EIO;
  }
  char initdb[PATH_MAX], out[PGS_OUT_MAX];
  if (store__path_fmt(initdb, "%s/initdb", p->bindir))
    return SS_ERANGE;
  char *argv[] = {initdb,  "-D",          tmp,  "-U",   PGS_ROLE, "-A",
                  "trust", "--no-locale", "-E", "UTF8", NULL};
  int rc = store__pg_run(p, argv, p->pgdir, out, sizeof out);
  if (rc != 0) {
    err_setf(err, errlen, "initdb %s failed (exit %d): %s", tmp, rc, out);
    return SS_EIO;
  }
  rc = store__pg_write_file(p, tmp, "pg_hba.conf", O_TRUNC,
                            "# scalesweep: connections through the Unix socket only (no TCP)\n"
                            "local all all trust\n",
                            err, errlen);
  if (!rc)
    rc = store__pg_write_file(p, tmp, "postgresql.conf", O_APPEND,
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
static int configure(store__pgs *p, char *err, size_t errlen) {
  char sock[PATH_MAX];
  if (store__path_fmt(sock, "%s/socket", p->pgdir))
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
  int rc = store__pg_own_dir(p, sock, err, errlen);
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
  return store__pg_write_file(p, p->data, "scalesweep.conf", O_TRUNC, conf, err, errlen);
}

static int pg_ctl(const store__pgs *p, const char *const *args, char *out, size_t outlen) {
  char bin[PATH_MAX];
  char *argv[16];
  int n = 0;
  if (store__path_fmt(bin, "%s/pg_ctl", p->bindir))
    return SS_ERANGE;
  argv[n++] = bin;
  argv[n++] = "-D";
  argv[n++] = (char *)p->data;
  while (*args && n < 15)
    argv[n++] = (char *)*args++;
  argv[n] = NULL;
  return store__pg_run(p, argv, p->pgdir, out, outlen);
}

/* Removes a socket directory that configure() made in /tmp, with the
 * socket and lock files a crashed server leaves there. */
static void remove_tmp_socket_dir(const char *sock, const char *port) {
  char path[PATH_MAX];
  if (strncmp(sock, PGS_TMP_PREFIX, strlen(PGS_TMP_PREFIX)) || !*port)
    return;
  if (!store__path_fmt(path, "%s/.s.PGSQL.%s", sock, port))
    unlink(path);
  if (!store__path_fmt(path, "%s/.s.PGSQL.%s.lock", sock, port))
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
static int find_running(const store__pgs *p, int *running, char *err, size_t errlen) {
  static const char *const status_args[] = {"status", NULL};
  char out[PGS_OUT_MAX], port[16], sock[PATH_MAX], admin[PATH_MAX * 2 + 128];
  *running = 0;
  for (int waited = 0;; waited++) {
    if (pg_ctl(p, status_args, out, sizeof out) != 0)
      return 0;
    port[0] = sock[0] = '\0';
    if (!store__pg_read_pidfile(p, port, sizeof port, sock, sizeof sock) &&
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

static int start(store__pgs *p, const char *state_dir, char *url_out, size_t url_len, char *err,
                 size_t errlen) {
  int rc = store__pg_env(p);
  if (!rc)
    rc = setup(p, state_dir, 1, err, errlen);
  if (rc)
    return rc;
  char major[32];
  store__pg_read_major(p, major, sizeof major);
  rc = store__pg_find_bindir(p, major, err, errlen);
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
    if (!store__pg_read_pidfile(p, old_port, sizeof old_port, old_sock,
                                sizeof old_sock)) /* a crash */
      remove_tmp_socket_dir(old_sock, old_port);
    rc = configure(p, err, errlen);
    if (rc)
      return rc;
    const char *const start_args[] = {"-l", p->log, "-w", "-t", "300", "-s", "start", NULL};
    int st = pg_ctl(p, start_args, out, sizeof out);
    if (st != 0) {
      char tail[1024];
      store__pg_log_tail(p, tail, sizeof tail);
      err_setf(err, errlen, "PostgreSQL did not start (pg_ctl exit %d): %s\n%s ends with:\n%s", st,
               out, p->log, tail);
      return SS_EIO;
    }
  }
  char port[16] = "", sock[PATH_MAX] = "", admin[PATH_MAX * 2 + 128];
  if (store__pg_read_pidfile(p, port, sizeof port, sock, sizeof sock) != 0) {
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
  store__pgs *p = calloc(1, sizeof *p);
  if (!p)
    return SS_ENOMEM;
  int rc = start(p, state_dir, url_out, url_len, err, errlen);
  free(p->env);
  free(p);
  return rc;
}

static int stop(store__pgs *p, const char *state_dir, char *err, size_t errlen) {
  int rc = store__pg_env(p);
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
  store__pg_read_major(p, major, sizeof major);
  if (!*major)
    return 0;
  rc = store__pg_find_bindir(p, major, err, errlen);
  if (rc)
    return rc;
  char port[16] = "", sock[PATH_MAX] = "", out[PGS_OUT_MAX];
  store__pg_read_pidfile(p, port, sizeof port, sock, sizeof sock);
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
  store__pgs *p = calloc(1, sizeof *p);
  if (!p)
    return SS_ENOMEM;
  int rc = stop(p, state_dir, err, errlen);
  free(p->env);
  free(p);
  return rc;
}

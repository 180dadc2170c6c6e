/* store/pgserver.c and pgproc.c, the private server of `up`: a cluster
 * made, started, found running, stopped, restarted and recovered after a
 * crash, in a state directory and in one whose path is too long for a
 * socket. Run by tests/integration/run_with_pg.sh (skipped without
 * SCALESWEEP_TEST_DB, that is without PostgreSQL). */
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db_testlib.h"
#include "store/pgserver.h"

/* ---- the private server of `up` ------------------------------------------ */

/* The host='...' of a pgs_start conninfo (in place). */
static const char *socket_dir(char *url) {
  char *host = strstr(url, "host='");
  if (!host)
    return "";
  host += 6;
  char *end = strchr(host, '\'');
  if (end)
    *end = '\0';
  return host;
}

static void test_pgserver_dir(const char *state, int expect_tmp_socket) {
  char url[1024], url2[1024], err[2048];
  int rc = pgs_start(state, url, sizeof url, err, sizeof err);
  if (rc) {
    fprintf(stderr, "pgs_start: %s\n", err);
    check__failures++;
    return;
  }
  printf("pgs_start(%s): %s\n", state, url);
  CHECK(strstr(url, "user=scalesweep dbname=scalesweep") != NULL);
  CHECK((strstr(url, "host='/tmp/scalesweep-pg-") != NULL) == expect_tmp_socket);
  if (!expect_tmp_socket)
    CHECK(strstr(url, "/pg/socket'") != NULL);
  if (geteuid() == 0) {
    char pgdir[1100];
    struct stat st;
    snprintf(pgdir, sizeof pgdir, "%s/pg", state);
    const char *user = getenv("SCALESWEEP_PG_USER");
    struct passwd *pw = getpwnam(user && *user ? user : "postgres");
    CHECK(stat(pgdir, &st) == 0 && pw && st.st_uid == pw->pw_uid && st.st_uid != 0);
  }
  PGconn *c = dbt_connect(url);
  DBT_EXEC_OK(c, "CREATE TABLE kept (x integer)");
  DBT_EXEC_OK(c, "INSERT INTO kept VALUES (7)");
  PGresult *r = PQexec(c, "SHOW listen_addresses");
  CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && !strcmp(PQgetvalue(r, 0, 0), ""));
  PQclear(r);
  PQfinish(c);

  /* a second start while it runs finds it running */
  CHECK_INT_EQ(pgs_start(state, url2, sizeof url2, err, sizeof err), 0);
  CHECK(!strcmp(url, url2));
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0);
  CHECK(PQping(url) != PQPING_OK);

  /* a second start after a stop finds the data */
  rc = pgs_start(state, url2, sizeof url2, err, sizeof err);
  if (rc)
    fprintf(stderr, "pgs_start again: %s\n", err);
  CHECK_INT_EQ(rc, 0);
  c = dbt_connect(url2);
  CHECK_INT_EQ(dbt_count(c, "SELECT x FROM kept"), 7);
  PQfinish(c);

  /* a crash (SIGKILL) leaves a stale postmaster.pid: the next start
   * recovers the data */
  char pidfile[1100];
  snprintf(pidfile, sizeof pidfile, "%s/pg/data/postmaster.pid", state);
  FILE *f = fopen(pidfile, "r");
  long pid = 0;
  CHECK(f && fscanf(f, "%ld", &pid) == 1 && pid > 1);
  if (f)
    fclose(f);
  if (pid > 1)
    kill((pid_t)pid, SIGKILL);
  char crashed[1024];
  snprintf(crashed, sizeof crashed, "%s", url2);
  rc = pgs_start(state, url2, sizeof url2, err, sizeof err);
  if (rc)
    fprintf(stderr, "pgs_start after a crash: %s\n", err);
  CHECK_INT_EQ(rc, 0);
  /* the crashed server's /tmp socket directory is gone */
  if (expect_tmp_socket)
    CHECK(access(socket_dir(crashed), F_OK) != 0);
  c = dbt_connect(url2);
  CHECK_INT_EQ(dbt_count(c, "SELECT x FROM kept"), 7);
  PQfinish(c);
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0);
  CHECK_INT_EQ(pgs_stop(state, err, sizeof err), 0); /* not running: fine */
  /* the /tmp socket directory is gone */
  if (expect_tmp_socket)
    CHECK(access(socket_dir(url2), F_OK) != 0);
}

static void test_pgserver(void) {
  char dir[] = "/tmp/sspgs.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  /* as root, the server's user must get through it (pgs_start makes the
   * state directory itself searchable, not the directories above) */
  chmod(dir, 0711);
  char state[1024];
  snprintf(state, sizeof state, "%s/state", dir);
  test_pgserver_dir(state, 0);

  /* a path too long for a Unix socket: the socket goes to /tmp */
  snprintf(state, sizeof state,
           "%s/a-state-directory-with-a-rather-long-name/"
           "and-another-level-below-it-to-pass-the-limit",
           dir);
  test_pgserver_dir(state, 1);

  char err[256];
  CHECK_INT_EQ(pgs_stop("/nonexistent-state-dir", err, sizeof err), 0);
  dbt_rmtree(dir);
}

/* test_pgserver [NAME...]: runs the named tests only (all without arguments). */
DBT_MAIN({"pgserver", test_pgserver})

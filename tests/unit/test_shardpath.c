/* common/shardpath.c: shard patterns confined to the allowed directories.
 * A scratch tree:
 *   ROOT/data/train_0.bin train_1.bin   the allowed directory
 *   ROOT/data/sub/x.bin
 *   ROOT/data/link_out -> ROOT/outside/secret.bin   a file symlink leading out
 *   ROOT/data/dirlink -> ROOT/outside               a directory symlink leading out
 *   ROOT/datalink -> ROOT/data                      a symlinked data directory
 *   ROOT/database/y.bin                             shares a prefix with data
 *   ROOT/outside/secret.bin                         must never be reachable */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/err.h"
#include "common/shardpath.h"

static char root[4096], data[4200];

static const char *at(const char *rel) { return check_path(root, rel); }

static void put(const char *rel, const char *text) {
  FILE *f = fopen(at(rel), "w");
  if (!f) {
    perror(at(rel));
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

static void make_tree(void) {
  snprintf(data, sizeof data, "%s/data", root);
  const char *dirs[] = {"data", "data/sub", "database", "outside"};
  for (int i = 0; i < 4; i++)
    if (mkdir(at(dirs[i]), 0755)) {
      perror(at(dirs[i]));
      exit(1);
    }
  put("data/train_0.bin", "t0");
  put("data/train_1.bin", "t1");
  put("data/sub/x.bin", "x");
  put("database/y.bin", "y");
  put("outside/secret.bin", "SECRETBYTES");
  if (symlink(at("outside/secret.bin"), at("data/link_out")) ||
      symlink(at("outside"), at("data/dirlink")) || symlink(at("data"), at("datalink"))) {
    perror("symlink");
    exit(1);
  }
}

/* Refused with code want; the message says nothing of the secret file. */
static void refused(const char *pattern, const char *dir, int want, const char *says) {
  const char *dirs[] = {dir};
  char err[512] = "";
  spath_list l;
  int rc = spath_expand(pattern, dirs, 1, &l, err, sizeof err);
  if (rc != want || !strstr(err, says))
    fprintf(stderr, "pattern %s under %s: rc %d (want %d), '%s' (want '%s')\n", pattern, dir, rc,
            want, err, says);
  CHECK_INT_EQ(rc, want);
  CHECK(strstr(err, says) != NULL);
  CHECK(strstr(err, "SECRET") == NULL && strstr(err, "11") == NULL); /* bytes, size */
  CHECK(strstr(err, "secret") == NULL || strstr(pattern, "secret") != NULL);
  CHECK_INT_EQ(l.n, 0);
  spath_list_free(&l);
}

static void test_escapes(void) {
  /* glob's own ways back up: .[.] matches "..", shado[w] a file outside */
  refused(at("data/.[.]/outside/secret.bin"), data, SS_EINVAL, "directory component");
  refused(at("data/.[.]/.[.]/.[.]/etc/passwd"), data, SS_EINVAL, "directory component");
  refused("/etc/shado[w]", data, SS_EINVAL, "outside the allowed data directories");
  refused("/etc/passw?", data, SS_EINVAL, "outside the allowed data directories");
  refused(at("outside/secre[t].bin"), data, SS_EINVAL, "outside the allowed data directories");
  /* the last component a pattern matching ".." */
  refused(at("data/.[.]"), data, SS_EINVAL, "outside the allowed data directories");
  refused(at("data/sub/.[.]"), data, SS_EINVAL, "not a regular file"); /* resolves to data itself */
  refused(at("data/*/x.bin"), data, SS_EINVAL, "directory component");
  refused(at("data/su?/x.bin"), data, SS_EINVAL, "directory component");
  refused(at("data/s\\ub/x.bin"), data, SS_EINVAL, "directory component");
  refused(at("data/../outside/secret.bin"), data, SS_EINVAL, "'..' component");
  refused(at("data/./train_0.bin"), data, SS_EINVAL, "'.' component");
  refused(at("data/sub/"), data, SS_EINVAL, "ends with '/'");
  refused("", data, SS_EINVAL, "empty");
  /* a prefix of the text is not a parent directory */
  refused(at("database/y.bin"), data, SS_EINVAL, "outside the allowed data directories");
}

static void test_symlinks(void) {
  refused(at("data/link_out"), data, SS_EINVAL, "resolves outside the allowed data directories");
  refused(at("data/link_*"), data, SS_EINVAL, "resolves outside the allowed data directories");
  refused(at("data/dirlink/secret.bin"), data, SS_EINVAL, "outside the allowed data directories");
  refused(at("data/dirlink/*"), data, SS_EINVAL, "outside the allowed data directories");
}

/* Outside, an existing file and a missing one get the same answer. */
static void test_no_oracle(void) {
  const char *dirs[] = {data};
  char e1[512], e2[512], e3[512], e4[512];
  CHECK_INT_EQ(spath_check(at("outside/secret.bin"), dirs, 1, e1, sizeof e1), SS_EINVAL);
  CHECK_INT_EQ(spath_check(at("outside/nothing.bin"), dirs, 1, e2, sizeof e2), SS_EINVAL);
  CHECK_INT_EQ(spath_check(at("nowhere/nothing.bin"), dirs, 1, e3, sizeof e3), SS_EINVAL);
  CHECK_INT_EQ(spath_check(at("data/dirlink/nothing.bin"), dirs, 1, e4, sizeof e4), SS_EINVAL);
  CHECK(!strcmp(e1, e2) && !strcmp(e1, e3) && !strcmp(e1, e4));
}

static void test_matches(void) {
  const char *dirs[] = {data};
  char err[512] = "";
  spath_list l;
  CHECK_INT_EQ(spath_expand(at("data/train_*.bin"), dirs, 1, &l, err, sizeof err), 0);
  CHECK_INT_EQ(l.n, 2);
  if (l.n == 2) {
    CHECK(strstr(l.match[0], "train_0.bin") && strstr(l.match[1], "train_1.bin"));
    CHECK(l.resolved[0][0] == '/' && strstr(l.resolved[0], "/data/train_0.bin"));
  }
  spath_list_free(&l);
  /* a plain file name, and a pattern whose directory is a real subdirectory */
  CHECK_INT_EQ(spath_check(at("data/sub/x.bin"), dirs, 1, err, sizeof err), 0);
  /* none: a problem too */
  CHECK_INT_EQ(spath_check(at("data/nothing_*.bin"), dirs, 1, err, sizeof err), SS_ENOENT);
  CHECK(strstr(err, "no files match") != NULL);
  CHECK_INT_EQ(spath_check(at("data/nodir/x.bin"), dirs, 1, err, sizeof err), SS_ENOENT);
  /* several directories: the second allows it */
  const char *two[] = {at("outside/none"), at("database")};
  CHECK_INT_EQ(spath_check(at("database/y.bin"), two, 2, err, sizeof err), 0);
  /* a trailing slash or doubled slashes in the allowed directory change nothing */
  char slashy[4400];
  snprintf(slashy, sizeof slashy, "%s//", data);
  const char *sd[] = {slashy};
  CHECK_INT_EQ(spath_check(at("data/train_0.bin"), sd, 1, err, sizeof err), 0);
  /* a relative pattern is taken from the working directory */
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_INT_EQ(chdir(data), 0);
  CHECK_INT_EQ(spath_check("train_1.bin", dirs, 1, err, sizeof err), 0);
  CHECK_INT_EQ(spath_check("sub/x.bin", dirs, 1, err, sizeof err), 0);
  CHECK_INT_EQ(chdir(root), 0);
  CHECK_INT_EQ(spath_check("outside/secret.bin", dirs, 1, err, sizeof err), SS_EINVAL);
  CHECK_INT_EQ(chdir(cwd), 0);
}

/* The allowed directory itself a symlink: the pattern may name it either way. */
static void test_symlinked_dir(void) {
  const char *dirs[] = {at("datalink")};
  char err[512] = "";
  spath_list l;
  CHECK_INT_EQ(spath_expand(at("datalink/train_*.bin"), dirs, 1, &l, err, sizeof err), 0);
  CHECK_INT_EQ(l.n, 2);
  if (l.n == 2)
    CHECK(strstr(l.resolved[1], "/data/train_1.bin") != NULL);
  spath_list_free(&l);
  CHECK_INT_EQ(spath_check(at("data/train_0.bin"), dirs, 1, err, sizeof err), 0);
  CHECK_INT_EQ(spath_check(at("datalink/link_out"), dirs, 1, err, sizeof err), SS_EINVAL);
  CHECK_INT_EQ(spath_check(at("datalink/dirlink/secret.bin"), dirs, 1, err, sizeof err), SS_EINVAL);
}

static void test_modes(void) {
  char err[512] = "";
  /* no directories: every pattern refused */
  CHECK_INT_EQ(spath_check(at("data/train_0.bin"), NULL, 0, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "no data directories") != NULL);
  /* unconfined (direct CLI use): anything readable, a match still needed */
  spath_list l;
  CHECK_INT_EQ(spath_expand(at("outside/secret.bin"), NULL, SPATH_ANY, &l, err, sizeof err), 0);
  CHECK_INT_EQ(l.n, 1);
  spath_list_free(&l);
  CHECK_INT_EQ(spath_check(at("outside/none_*"), NULL, SPATH_ANY, err, sizeof err), SS_ENOENT);
  CHECK(spath_is_under("/data/x", "/data") && spath_is_under("/data", "/data"));
  CHECK(!spath_is_under("/database/x", "/data") && spath_is_under("/x", "/"));
}

static void test_fd(void) {
  const char *dirs[] = {data};
  int in = open(at("data/train_0.bin"), O_RDONLY), out = open(at("data/link_out"), O_RDONLY);
  CHECK(in >= 0 && out >= 0);
  CHECK_INT_EQ(spath_fd_under(in, dirs, 1), 1);
  CHECK_INT_EQ(spath_fd_under(out, dirs, 1), 0);
  close(in);
  close(out);
}

int main(void) {
  if (check_tmpdir(root, sizeof root, "test_shardpath"))
    return 1;
  char *real = realpath(root, NULL); /* $TMPDIR may itself be a symlink */
  snprintf(root, sizeof root, "%s", real);
  free(real);
  make_tree();
  test_escapes();
  test_symlinks();
  test_no_oracle();
  test_matches();
  test_symlinked_dir();
  test_modes();
  test_fd();
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", root);
  CHECK_DONE();
}

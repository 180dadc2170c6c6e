/* Token-shard patterns (common/shardpath.c): the input is a pattern, tried
 * against a small tree built once per process:
 *   ROOT/data/a.bin b.bin sub/c.bin     the allowed directory
 *   ROOT/data/link_out -> ROOT/outside/s.bin, ROOT/data/dirlink -> ROOT/outside
 *   ROOT/datalink -> ROOT/data, ROOT/database/d.bin, ROOT/outside/s.bin
 * The first byte picks what the rest is relative to: 'd' ROOT/data/, 'r'
 * ROOT/, 'l' ROOT/datalink/, anything else the rest as it is. The
 * invariant, whatever the input: an accepted pattern has matches, and each
 * one's realpath (recomputed here) is a regular file under ROOT/data, the
 * allowed directory's realpath; a refused one has none and a message. */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/shardpath.h"
#include "fuzz.h"

static char root[600], data_real[700];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

static void rm_tree(void) { nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void mk(const char *rel, int dir, const char *link_to) {
  char p[800], t[800];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  if (link_to) {
    snprintf(t, sizeof t, "%s/%s", root, link_to);
    if (symlink(t, p))
      abort();
  } else if (dir) {
    if (mkdir(p, 0755))
      abort();
  } else {
    FILE *f = fopen(p, "w");
    if (!f || fclose(f))
      abort();
  }
}

static void build_tree(void) {
  char *real = realpath(fuzz_dir(), NULL);
  if (!real)
    abort();
  snprintf(root, sizeof root, "%s/tree", real);
  free(real);
  if (mkdir(root, 0755))
    abort();
  atexit(rm_tree); /* before fuzz_dir's own cleanup, which removes only files */
  mk("data", 1, NULL);
  mk("data/sub", 1, NULL);
  mk("database", 1, NULL);
  mk("outside", 1, NULL);
  mk("data/a.bin", 0, NULL);
  mk("data/b.bin", 0, NULL);
  mk("data/sub/c.bin", 0, NULL);
  mk("database/d.bin", 0, NULL);
  mk("outside/s.bin", 0, NULL);
  mk("data/link_out", 0, "outside/s.bin");
  mk("data/dirlink", 0, "outside");
  mk("datalink", 0, "data");
  snprintf(data_real, sizeof data_real, "%s/data", root);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
  if (!root[0])
    build_tree();
  if (size == 0 || size > 8192)
    return 0;
  char *rest = fuzz_strndup(in + 1, size - 1); /* a NUL ends the pattern early */
  char *pattern = malloc(strlen(rest) + sizeof root + 16);
  if (!pattern)
    abort();
  const char *base = in[0] == 'd'   ? "/data/"
                     : in[0] == 'r' ? "/"
                     : in[0] == 'l' ? "/datalink/"
                                    : NULL;
  if (base)
    sprintf(pattern, "%s%s%s", root, base, rest);
  else
    strcpy(pattern, rest);
  free(rest);
  /* the allowed directory named both ways: as itself, and through its symlink */
  char via_link[700];
  snprintf(via_link, sizeof via_link, "%s/datalink", root);
  const char *dirs[2][1] = {{data_real}, {via_link}};
  for (int k = 0; k < 2; k++) {
    spath_list l;
    char err[512] = "";
    int rc = spath_expand(pattern, dirs[k], 1, &l, err, sizeof err);
    if (rc == 0) {
      if (l.n == 0)
        abort();
      for (size_t i = 0; i < l.n; i++) {
        char *r = realpath(l.match[i], NULL);
        struct stat st;
        if (!r || strcmp(r, l.resolved[i]) || !spath_is_under(r, data_real) || stat(r, &st) != 0 ||
            !S_ISREG(st.st_mode))
          abort();
        free(r);
      }
    } else if (l.n != 0 || !err[0]) {
      abort();
    }
    spath_list_free(&l);
  }
  free(pattern);
  return 0;
}

/* Shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): the libFuzzer entry
 * point each one defines, and a per-process scratch directory for the
 * readers that take a path (under $TMPDIR, else /dev/shm, else /tmp; removed
 * at exit). Each harness is one translation unit; the helpers are static inline so that
 * a harness that needs none of them compiles without warnings. */
#ifndef SS_TESTS_FUZZ_H
#define SS_TESTS_FUZZ_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz__dir[512];

static inline void fuzz__cleanup(void) {
  DIR *d = opendir(fuzz__dir);
  if (d) {
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", fuzz__dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(fuzz__dir);
}

/* The scratch directory, created on first use; aborts when it cannot be
 * (a harness that cannot write its input would test nothing). */
static inline const char *fuzz_dir(void) {
  if (fuzz__dir[0])
    return fuzz__dir;
  const char *base = getenv("TMPDIR");
  struct stat st;
  if (!base || !*base)
    base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
  snprintf(fuzz__dir, sizeof fuzz__dir, "%s/ssfuzz.XXXXXX", base);
  if (!mkdtemp(fuzz__dir)) {
    perror(fuzz__dir);
    abort();
  }
  atexit(fuzz__cleanup);
  return fuzz__dir;
}

/* Writes data to DIR/name (replacing it) and returns the path (static). */
static inline const char *fuzz_write_file(const char *name, const uint8_t *data, size_t size) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
  return path;
}

/* data as a NUL-terminated string (malloc'd; the caller frees). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    abort();
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

#endif

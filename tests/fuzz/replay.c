/* Replays inputs through one harness's LLVMFuzzerTestOneInput without
 * libFuzzer, so that the committed seed corpus and every reproducer of a
 * past finding run as ordinary tests under the gcc ASan+UBSan build:
 *
 *   fuzz_replay_NAME PATH...
 *
 * Each PATH is a file or a directory, whose regular files run in name
 * order. Each input gets a buffer of exactly its size (so an overread is
 * caught). A sanitizer report aborts; exit 1 when a path cannot be read or
 * no input was found. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb)
        free(buf);
      buf = nb;
    }
  }
  int bad = !buf || ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "%s: read error\n", path);
    free(buf);
    return -1;
  }
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact)
    abort();
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

int main(int argc, char **argv) {
  int inputs = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
      failed = 1;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failed |= run_file(argv[i]) != 0;
      inputs++;
      continue;
    }
    struct dirent **names;
    int n = scandir(argv[i], &names, NULL, alphasort);
    if (n < 0) {
      fprintf(stderr, "%s: cannot list: %s\n", argv[i], strerror(errno));
      failed = 1;
      continue;
    }
    for (int j = 0; j < n; j++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
      if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        failed |= run_file(path) != 0;
        inputs++;
      }
      free(names[j]);
    }
    free(names);
  }
  printf("%s: %d input(s) replayed\n", argv[0], inputs);
  if (inputs == 0) {
    fprintf(stderr, "%s: no inputs (expected corpus files)\n", argv[0]);
    return 1;
  }
  return failed;
}

#include "runcfg/shard.h"

#include <stdio.h>

int64_t rcfg_shard_tokens(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  int32_t h[3];
  int ok = fread(h, sizeof h[0], 3, f) == 3 && h[0] == RCFG_SHARD_MAGIC;
  fclose(f);
  return ok ? (int64_t)(uint32_t)h[2] : -1;
}

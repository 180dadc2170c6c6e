/* GPUs: what nvidia-smi lists, restricted by --gpus, and the
 * CUDA_VISIBLE_DEVICES of a run. */
#include "worker/gpu.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/err.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"

int wrk__gpu_offered(const wrk__worker *w, int index) {
  for (int i = 0; i < w->ngpus; i++)
    if (w->gpus[i].index == index)
      return 1;
  return 0;
}

/* nvidia-smi's CSV: "0, NVIDIA H200, 143771" (memory in MiB). No GPU when
 * it is missing or fails: a CPU host is fine. */
void wrk__gpu_discover(wrk__worker *w) {
  FILE *p = popen("nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits"
                  " 2>/dev/null",
                  "r");
  if (!p) {
    wrk__log("cannot run nvidia-smi: %s; no GPUs", strerror(errno));
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char *c1 = strchr(line, ','), *c2 = strrchr(line, ',');
    if (!c1 || c1 == c2)
      continue;
    *c1 = *c2 = '\0';
    char *end;
    long idx = strtol(line, &end, 10);
    if (end == line || idx < 0 || idx > INT_MAX)
      continue;
    char *name = c1 + 1;
    while (*name == ' ')
      name++;
    size_t nl = strlen(name);
    while (nl > 0 && name[nl - 1] == ' ')
      name[--nl] = '\0';
    long long mib = strtoll(c2 + 1, NULL, 10);
    wrk__gpu *g = realloc(w->gpus, (size_t)(w->ngpus + 1) * sizeof *g);
    if (!g)
      break;
    w->gpus = g;
    g += w->ngpus++;
    g->index = (int)idx;
    char *clean = wrk__utf8_clean(name, nl);
    snprintf(g->name, sizeof g->name, "%s", clean ? clean : "GPU");
    free(clean);
    g->memory_bytes = mib > 0 ? (int64_t)mib << 20 : 0;
  }
  int st = pclose(p);
  if (w->ngpus == 0)
    wrk__log("no GPUs found (nvidia-smi %s)", st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127
                                                  ? "not installed"
                                              : st != 0 ? "failed"
                                                        : "lists none");
}

int wrk__gpu_restrict(wrk__worker *w, const int *gpus, int ngpus) {
  if (!gpus)
    return 0;
  wrk__gpu *keep = calloc((size_t)ngpus + 1, sizeof *keep);
  if (!keep)
    return SS_ENOMEM;
  int n = 0;
  for (int i = 0; i < ngpus; i++) {
    int found = 0;
    for (int j = 0; j < w->ngpus && !found; j++)
      if (w->gpus[j].index == gpus[i]) {
        found = 1;
        int dup = 0;
        for (int k = 0; k < n; k++)
          dup |= keep[k].index == gpus[i];
        if (!dup)
          keep[n++] = w->gpus[j];
      }
    if (!found) {
      char have[256] = "none";
      if (w->ngpus)
        wrk__gpu_list(w, ", ", have, sizeof have);
      wrk__log("--gpus: GPU %d does not exist on this host (found: %s)", gpus[i], have);
      free(keep);
      return SS_EINVAL;
    }
  }
  free(w->gpus);
  w->gpus = keep;
  w->ngpus = n;
  return 0;
}

void wrk__gpu_list(const wrk__worker *w, const char *sep, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < w->ngpus && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? sep : "", w->gpus[i].index);
}

void wrk__gpu_visible(const wrk__run *r, char *buf, size_t len) {
  size_t off = (size_t)snprintf(buf, len, "CUDA_VISIBLE_DEVICES=");
  for (int i = 0; i < r->ngpus && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? "," : "", r->gpus[i]);
}

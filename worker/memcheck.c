/* An assignment the host cannot hold is refused before its trainer starts:
 * the run's memory (runcfg/memory.h, the trainer's own arithmetic) against
 * what this host has, so that the run fails with a reason the scheduler
 * records instead of meeting the OOM killer (which takes whatever process
 * it likes, perhaps another run's). */
#include "worker/memcheck.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "runcfg/memory.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/run.h"

/* MemAvailable (what can be allocated without swapping), else the free
 * physical pages; 0 when neither can be read. */
static double host_available(const char **what) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  if (kb) {
    *what = "MemAvailable in /proc/meminfo";
    return (double)kb * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  *what = "free physical memory";
  return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

int wrk__run_memory_refused(wrk__run *r, const char *config_text) {
  wrk__worker *w = r->w;
  rcfg cfg;
  char err[512];
  int ok =
      config_text && rcfg_parse(config_text, "the assigned config", &cfg, err, sizeof err) == 0;
  if (!ok) /* the trainer says what is wrong with it, in its own words */
    return 0;
  rcfg_mem m = rcfg_memory_host(&cfg); /* a CPU run's ranks share this host */
  char part[4096];
  int here = wrk__run_dist_ranks(r, part, sizeof part);
  if (here && r->ngpus == 0 && cfg.world_size > 1) { /* only this worker's ranks are here */
    double f = (double)here / cfg.world_size;
    m.params *= f, m.grads *= f, m.optimizer *= f, m.activations *= f, m.other *= f, m.total *= f;
  }
  double need = m.total, have = 0;
  const char *what = NULL;
  int gpu = -1;
  if (r->ngpus == 0) {
    have = host_available(&what);
  } else {
    for (int i = 0; i < r->ngpus; i++) /* one replica per GPU: the smallest decides */
      for (int j = 0; j < w->ngpus; j++)
        if (w->gpus[j].index == r->gpus[i] && w->gpus[j].memory_bytes > 0 &&
            (gpu < 0 || (double)w->gpus[j].memory_bytes < have)) {
          have = (double)w->gpus[j].memory_bytes;
          gpu = r->gpus[i];
        }
    what = "the memory nvidia-smi reports";
  }
  if (have <= 0 || need <= have)
    return 0;
  char needs[256], haves[32];
  rcfg_memory_text(&m, needs, sizeof needs);
  rcfg_bytes_text(have, haves, sizeof haves);
  char where[64];
  if (gpu >= 0)
    snprintf(where, sizeof where, "GPU %d", gpu);
  else
    snprintf(where, sizeof where, "this host");
  wrk__run_fail_start(r, SS_EXIT_USAGE,
                      "not started: the run needs %s, more than the %s %s has (%s); "
                      "HINT: a smaller model, seq_len or micro_batch_size, or a worker with "
                      "more memory",
                      needs, haves, where, what);
  return 1;
}

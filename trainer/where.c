/* Where a run trains (where.h). */
#include "trainer/where.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/version.h"
#include "kernels/kern.h"

/* /proc/cpuinfo's first "model name", or "unknown" */
static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon)
      continue;
    colon += 1 + (colon[1] == ' ');
    colon[strcspn(colon, "\n")] = 0;
    snprintf(out, n, "%s", colon);
    break;
  }
  fclose(f);
}

/* who chose OpenBLAS's kernels: "portable" (cli/blas_pin.h pinned them),
 * "OPENBLAS_CORETYPE" (set before scalesweep ran: the machine's owner), or
 * "openblas" (its own choice for this CPU) */
static const char *blas_core_by(void) {
  const char *owner = getenv("OPENBLAS_CORETYPE"), *pinned = getenv("SCALESWEEP_BLAS_PINNED");
  if (owner && pinned && !strcmp(owner, pinned))
    return "portable";
  return owner && *owner ? "OPENBLAS_CORETYPE" : "openblas";
}

static void version_text(int v, char *out, size_t n) {
  snprintf(out, n, "%d.%d", v / 1000, v % 1000 / 10);
}

/* cuBLAS's and NCCL's MAJOR * 10000 + MINOR * 100 + PATCH as "M.m.p" */
static void release_text(int v, char *out, size_t n) {
  snprintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

cJSON *trn_where(const rcfg *c, const kern_cuda_module *m, int device) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  char host[256] = "unknown", cpu[256];
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = 0;
  cpu_model(cpu, sizeof cpu);
  cJSON_AddStringToObject(o, "host", host);
  cJSON_AddStringToObject(o, "cpu", cpu);
  cJSON_AddStringToObject(o, "scalesweep", ss_version());
  cJSON_AddStringToObject(o, "backend", c->backend);
  cJSON_AddNumberToObject(o, "threads", c->threads);
  if (!m) {
    cJSON_AddStringToObject(o, "cpu_kernels", kern_cpu_level());
    cJSON_AddStringToObject(o, "blas_core", kern_cpu_blas_core());
    cJSON_AddStringToObject(o, "blas_core_by", blas_core_by());
    return o;
  }
  kern_cuda_device dev[64];
  char err[256], v[32];
  int n = m->devices(dev, 64, err, sizeof err);
  for (int i = 0; i < n; i++)
    if (dev[i].index == device) {
      char cc[16];
      snprintf(cc, sizeof cc, "%d.%d", dev[i].cc_major, dev[i].cc_minor);
      cJSON_AddStringToObject(o, "gpu", dev[i].name);
      cJSON_AddStringToObject(o, "compute_capability", cc);
    }
  kern_cuda_versions ver;
  m->versions(&ver);
  version_text(ver.runtime, v, sizeof v);
  cJSON_AddStringToObject(o, "cuda_runtime", v);
  version_text(ver.driver, v, sizeof v);
  cJSON_AddStringToObject(o, "cuda_driver", v);
  if (ver.cublas > 0) {
    release_text(ver.cublas, v, sizeof v);
    cJSON_AddStringToObject(o, "cublas", v);
  }
  int nccl = c->world_size > 1 && m->nccl && m->nccl->version ? m->nccl->version() : 0;
  if (nccl > 0) { /* only where data parallelism uses it */
    release_text(nccl, v, sizeof v);
    cJSON_AddStringToObject(o, "nccl", v);
  }
  return o;
}

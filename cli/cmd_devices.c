/* scalesweep devices [--json]: the backends this host can train on, as a
 * trainer finds them: the CPU, and CUDA through the CUDA module
 * (kernels/cuda_module.h) with each device's name, memory and compute
 * capability, or why CUDA cannot run here. The worker runs it at start (a
 * process of its own: the worker never loads the CUDA libraries) and offers
 * what it lists. Exit 0 whether or not CUDA is usable; 2 on bad usage. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "kernels/cuda_module.h"

enum { DEVICES_MAX = 64 };

static const char usage[] =
    "usage: scalesweep devices [--json]\n"
    "\n"
    "Lists the backends this host can train on: the CPU (its cores), and CUDA\n"
    "(each device's index, name, memory and compute capability) or why CUDA\n"
    "cannot run here (no module in this build, its libraries missing, no driver\n"
    "or no device). CUDA indices follow the PCI bus order, as nvidia-smi's.\n"
    "  --json   one JSON object: {\"cpu\": {...}, \"cuda\": {\"devices\": [...]} or\n"
    "           {\"error\": \"...\"}}\n";

static json_t *cuda_json(void) {
  char err[2048] = "";
  const kern_cuda_module *m = kern_cuda_load(err, sizeof err);
  if (!m)
    return json_pack("{s:s}", "error", err);
  kern_cuda_device dev[DEVICES_MAX];
  int n = m->devices(dev, DEVICES_MAX, err, sizeof err);
  if (n < 0)
    return json_pack("{s:s}", "error", err);
  kern_cuda_versions ver;
  m->versions(&ver);
  json_t *list = json_array();
  for (int i = 0; i < n; i++) {
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", dev[i].cc_major, dev[i].cc_minor);
    json_array_append_new(list,
                          json_pack("{s:i,s:s,s:I,s:s,s:s}", "index", dev[i].index, "name",
                                    dev[i].name, "memory_bytes", (json_int_t)dev[i].memory_bytes,
                                    "compute_capability", cc, "pci_bus_id", dev[i].pci_bus_id));
  }
  return json_pack("{s:o,s:i,s:i,s:i}", "devices", list, "runtime_version", ver.runtime,
                   "driver_version", ver.driver, "cublas_version", ver.cublas);
}

int cmd_devices(int argc, char **argv) {
  int as_json = 0;
  const cli_opt opts[] = {{"--json", NULL, &as_json}};
  int rc = cli_args_read(argc, argv, "devices", opts, 1, NULL, 0, NULL, usage);
  if (rc >= 0)
    return rc;
  /* CUDA ordinals in nvidia-smi's order, so that the worker's GPU indices
   * (nvidia-smi's) and CUDA_VISIBLE_DEVICES name the same devices */
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  json_t *cuda = cuda_json();
  if (as_json) {
    json_t *all = json_pack("{s:{s:I},s:o}", "cpu", "cores", (json_int_t)cores, "cuda", cuda);
    char *s = json_dumps(all, JSON_COMPACT);
    printf("%s\n", s ? s : "{}");
    free(s);
    json_decref(all);
    return SS_EXIT_OK;
  }
  printf("cpu: %ld core%s\n", cores, cores == 1 ? "" : "s");
  const char *error = json_string_value(json_object_get(cuda, "error"));
  if (error) {
    printf("cuda: unavailable: %s\n", error);
  } else {
    size_t i;
    json_t *d;
    int rt = (int)json_integer_value(json_object_get(cuda, "runtime_version"));
    int drv = (int)json_integer_value(json_object_get(cuda, "driver_version"));
    int blas = (int)json_integer_value(json_object_get(cuda, "cublas_version"));
    printf("cuda: runtime %d.%d, driver %d.%d, cuBLAS %d.%d.%d\n", rt / 1000, rt % 1000 / 10,
           drv / 1000, drv % 1000 / 10, blas / 10000, blas / 100 % 100, blas % 100);
    json_array_foreach(json_object_get(cuda, "devices"), i, d)
        printf("  %lld: %s, %.1f GiB, compute capability %s (%s)\n",
               (long long)json_integer_value(json_object_get(d, "index")),
               json_string_value(json_object_get(d, "name")),
               (double)json_integer_value(json_object_get(d, "memory_bytes")) / (1 << 30),
               json_string_value(json_object_get(d, "compute_capability")),
               json_string_value(json_object_get(d, "pci_bus_id")));
  }
  json_decref(cuda);
  return SS_EXIT_OK;
}

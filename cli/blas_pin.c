/* Pinning OpenBLAS's kernels for portable runs (blas_pin.h). */
#include "cli/blas_pin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/err.h"
#include "kernels/kern.h"

/* the resolved config in a memory file that the new process reads as
 * /proc/self/fd/N (the descriptor survives exec); 0, or -1 said on stderr */
static int config_in_memory(const rcfg *cfg, char *path, size_t n) {
  char *text = rcfg_to_json(cfg);
  int fd = text ? memfd_create("scalesweep-config", 0) : -1;
  size_t len = text ? strlen(text) : 0;
  if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
    fprintf(stderr,
            "scalesweep train: reproducible \"portable\": cannot keep the config "
            "read from stdin for the new process: %s\n",
            text ? strerror(errno) : "out of memory");
    free(text);
    return -1;
  }
  free(text);
  snprintf(path, n, "/proc/self/fd/%d", fd);
  return 0;
}

int cli_blas_pin(const rcfg *cfg, int argc, char **argv, const char *config) {
  if (cfg->reproducible != RCFG_REPRO_PORTABLE || strcmp(cfg->backend, "cpu") != 0)
    return 0;
  const char *owner = getenv("OPENBLAS_CORETYPE"), *pinned = getenv(CLI_BLAS_PINNED_ENV);
  if (pinned && owner && !strcmp(pinned, owner))
    return 0; /* pinned already: this is the new process, or one of its ranks */
  if (owner && *owner)
    return 0; /* the owner's choice wins; the environment says so */
  const char *want = kern_cpu_blas_portable_core();
  if (!want) {
    fprintf(stderr,
            "scalesweep train: reproducible \"portable\": this CPU lacks AVX2 or FMA, which "
            "OpenBLAS's %s kernels need; it runs its own (%s), so this run's numbers may "
            "differ from other CPUs' (its environment says so)\n",
            "Haswell", kern_cpu_blas_core());
    return 0;
  }
  if (setenv("OPENBLAS_CORETYPE", want, 1) || setenv(CLI_BLAS_PINNED_ENV, want, 1)) {
    fprintf(stderr, "scalesweep train: reproducible \"portable\": %s\n", strerror(errno));
    return SS_EXIT_FAILURE;
  }
  if (!strcasecmp(kern_cpu_blas_core(), want))
    return 0; /* OpenBLAS chose them itself; the ranks inherit the pin */
  char **args = calloc((size_t)argc + 2, sizeof *args); /* "scalesweep", argv, NULL */
  char path[64];
  if (!args) {
    fprintf(stderr, "scalesweep train: out of memory\n");
    return SS_EXIT_FAILURE;
  }
  args[0] = "scalesweep";
  for (int i = 0; i < argc; i++) {
    args[i + 1] = argv[i];
    if (!strcmp(config, "-") && i > 0 && !strcmp(argv[i - 1], "--config") &&
        !strcmp(argv[i], "-")) {
      if (config_in_memory(cfg, path, sizeof path)) {
        free(args);
        return SS_EXIT_FAILURE;
      }
      args[i + 1] = path;
    }
  }
  fflush(NULL);
  execv("/proc/self/exe", args);
  fprintf(stderr,
          "scalesweep train: reproducible \"portable\": cannot run itself again with "
          "OPENBLAS_CORETYPE=%s: %s\n",
          want, strerror(errno));
  free(args);
  return SS_EXIT_FAILURE;
}

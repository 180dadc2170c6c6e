/* "reproducible": "portable" (runcfg.h): a CPU run's OpenBLAS kernels
 * pinned to the set every supported CPU runs (kern_cpu_blas_portable_core),
 * so that its numbers do not follow the CPU it lands on. */
#ifndef SS_CLI_BLAS_PIN_H
#define SS_CLI_BLAS_PIN_H

#include "runcfg/runcfg.h"

/* The variable that marks kernels this project pinned (its value: the
 * kernel set), beside OPENBLAS_CORETYPE. */
#define CLI_BLAS_PINNED_ENV "SCALESWEEP_BLAS_PINNED"

/* OpenBLAS reads OPENBLAS_CORETYPE once, when it loads, so a portable CPU
 * run whose process runs other kernels runs itself again
 * (/proc/self/exe, "scalesweep" and argv: the train command's own, argv[0]
 * "train") with the variable set, and with
 * CLI_BLAS_PINNED_ENV, which the ranks it starts inherit. An
 * OPENBLAS_CORETYPE that was set before (the machine's owner's, who may
 * have set it because OpenBLAS misbehaves on that CPU) is kept; so are
 * OpenBLAS's own kernels on a CPU that cannot run the portable set (said on
 * stderr). The run's environment records which kernels ran and who chose
 * them (trainer/where.c). config: the --config argument; "-" (stdin, read
 * already) becomes a memory file holding the resolved config. Returns only
 * when this process should train: 0, or an exit code when the new process
 * could not be started (said on stderr). */
int cli_blas_pin(const rcfg *cfg, int argc, char **argv, const char *config);

#endif

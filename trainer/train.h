/* One training run: `scalesweep train`. Prints JSON lines (DESIGN.md
 * "Trainer output") to out and returns 0 or a negative SS_E* code:
 * SS_EINVAL/SS_ECORRUPT/SS_ENOENT for bad input (config, data, checkpoint),
 * SS_ENUMERIC when the loss stops being finite, SS_ETERM when stopped by
 * SIGTERM/SIGINT after writing a checkpoint. Every error is also printed as
 * an "error" event and copied into err. */
#ifndef SS_TRAINER_TRAIN_H
#define SS_TRAINER_TRAIN_H

#include <stdio.h>

#include "trainer/config.h"

/* resume_dir: continue from resume_dir/checkpoint.bin (NULL: fresh run; a
 * directory without a checkpoint starts fresh). resume_max_step >= 0: from
 * the newest of checkpoint.bin and checkpoint.prev.bin whose step is at most
 * that, else fresh (the worker passes the last step whose metrics the
 * scheduler has stored, so that no step's metrics go missing); < 0: the
 * newest. */
int trn_train(const trn_config *cfg, const char *resume_dir, int64_t resume_max_step, FILE *out,
              char *err, size_t errlen);

/* Installs the SIGTERM/SIGINT handlers that make trn_train checkpoint and
 * stop at the end of the current step. */
void trn_train_install_signals(void);

/* The signal that stopped the run (0 if none). */
int trn_train_stop_signal(void);

#endif

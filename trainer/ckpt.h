/* Checkpoints: everything a run needs to continue as if never stopped.
 *
 * One file, DIR/checkpoint.bin: a 256 x int32 header (magic, version, model
 * shape, optimizer kind, precision, lengths), the training state (step,
 * tokens, loss scaler, data position, noise-scale averages), the resolved
 * config JSON, the fp32 master weights, the optimizer state, and a trailing
 * FNV-1a 64 checksum of all that precedes it. Written to a temporary file,
 * fsync'ed and renamed, so a crash while writing leaves the previous
 * checkpoint intact. */
#ifndef SS_TRAINER_CKPT_H
#define SS_TRAINER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "runcfg/runcfg.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/noise.h"
#include "trainer/optim.h"

#define TRN_CKPT_MAGIC 0x53534b50 /* "PKSS" little-endian: scalesweep checkpoint */
#define TRN_CKPT_VERSION 1
#define TRN_CKPT_FILE "checkpoint.bin"
/* the checkpoint before it: a resume may need an older step than the newest
 * (the worker resumes at most from the last step whose metrics are stored) */
#define TRN_CKPT_PREV_FILE "checkpoint.prev.bin"

typedef struct trn_ckpt_state {
  int64_t step;          /* optimizer steps done */
  int64_t tokens;        /* training tokens consumed */
  double loss_scale;     /* fp16 dynamic loss scale (1 otherwise) */
  int64_t good_steps;    /* clean steps since the scale last changed */
  /* steps less the optimizer's updates: fp16 steps skipped for overflow (no
   * update); negative in a constant-rate branch that started from a smaller
   * batch's checkpoint, whose optimizer count goes on from that run's */
  int64_t skipped_steps;
  trn_loader_pos train_pos;
  int32_t carry; /* last token read: the first input of the next window */
  trn_noise noise;
} trn_ckpt_state;

/* trn_ckpt_save's answer when the filesystem is full (ENOSPC, EDQUOT) */
#define TRN_CKPT_NO_SPACE 1

/* Writes DIR/checkpoint.bin (DIR is created if missing), the one it replaces
 * becoming DIR/checkpoint.prev.bin; the final path is copied to path_out.
 * The new file is written and fsync'ed under a temporary name before the
 * older ones move, so at every moment a complete checkpoint is kept.
 * Returns 0; TRN_CKPT_NO_SPACE (err says where) when the filesystem is
 * full, with both kept checkpoints untouched, which a caller may treat as
 * "this checkpoint skipped"; or an SS_E* code. */
int trn_ckpt_save(const char *dir, const char *config_json, const trn_model *m, const trn_optim *o,
                  const trn_ckpt_state *st, char *path_out, size_t path_len, char *err,
                  size_t errlen);

/* Reads a checkpoint written for the same model, data, train, optimizer and
 * precision settings as config_json into m, o and st. A wrong magic,
 * version, size or checksum is SS_ECORRUPT; a checkpoint of another config
 * is SS_EINVAL; both name the file and what differs. */
/* The step a checkpoint holds, from its header alone (trn_ckpt_load checks
 * the rest). 0 or an SS_E* code with a message. */
int trn_ckpt_peek_step(const char *path, int64_t *step, char *err, size_t errlen);

int trn_ckpt_load(const char *path, const char *config_json, trn_model *m, trn_optim *o,
                  trn_ckpt_state *st, char *err, size_t errlen);

/* A branch point. cfg's schedule "wsd": trn_ckpt_load of a checkpoint
 * written by a run whose config differs from cfg (config_json its text)
 * only in train.tokens, at a step within both runs' stable phase
 * (rcfg_wsd_stable_steps), so that cfg trained from scratch would have
 * reached the same state. Schedule "constant" (a rung of a critical batch
 * size measurement, docs/sweeps.md "bcrit"): the configs may differ in
 * train.tokens, batch_size, micro_batch_size and lr; the checkpoint's tokens
 * must be past the (shared) warmup and a whole number of cfg's batches,
 * and st->step becomes that number (cfg's own steps), the optimizer's
 * count going on from the checkpoint's (st->skipped_steps). Anything else is
 * SS_EINVAL naming the file and what differs. */
int trn_ckpt_load_branch(const char *path, const rcfg *cfg, const char *config_json, trn_model *m,
                         trn_optim *o, trn_ckpt_state *st, char *err, size_t errlen);

#endif

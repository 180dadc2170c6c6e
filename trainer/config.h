/* The run config (DESIGN.md "Run config"): parsing, validation, defaults.
 *
 * A partial config is completed with every default; the resolved config,
 * printed back as JSON, alone reproduces the run. Validation errors name the
 * JSON path, the value found and what is allowed; malformed JSON names the
 * line and column. */
#ifndef SS_TRAINER_CONFIG_H
#define SS_TRAINER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "trainer/data.h"

typedef struct trn_config {
  struct {
    int n_layer, d_model, n_head, seq_len, vocab_size;
  } model;
  struct {
    char train[1024], val[1024]; /* shard globs; empty with synthetic */
    int synthetic;               /* 1: the built-in corpus */
    trn_synth_params synth;
  } data;
  struct {
    int batch_size, micro_batch_size;
    int64_t tokens;
    double lr, warmup_tokens, min_lr_ratio, weight_decay, grad_clip;
    char schedule[16]; /* "cosine" or "constant" */
    uint64_t seed;
  } train;
  struct {
    char name[16]; /* "adamw" or "adamw8bit" */
    double beta1, beta2, eps;
  } optimizer;
  kern_prec precision;
  struct {
    int recompute;
  } memory;
  struct {
    int64_t every_tokens, tokens;
  } eval;
  struct {
    char dir[1024];
    int64_t every_tokens;
  } checkpoint;
  char backend[8]; /* "cpu" or "cuda" */
  int world_size;
  int threads;
} trn_config;

/* Parses a JSON run config from text (name is the file name for messages),
 * fills defaults, validates. Returns 0, or SS_EINVAL with one message per
 * problem (newline separated) in err. */
int trn_config_parse(const char *text, const char *name, trn_config *cfg, char *err, size_t errlen);

/* Reads and parses a file; SS_ENOENT/SS_EIO when it cannot be read. */
int trn_config_load(const char *path, trn_config *cfg, char *err, size_t errlen);

/* The resolved config as a JSON object (malloc'd string, caller frees);
 * every key present, in a fixed order. */
char *trn_config_to_json(const trn_config *cfg);

/* "fp32", "bf16", "fp16" */
const char *trn_prec_name(kern_prec p);

#endif

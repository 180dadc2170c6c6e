/* The run config (docs/design.md#the-run-config): parsing, validation, defaults,
 * the canonical JSON text and its hash. The one owner of the run config:
 * the planner (sweeps/) and the trainer both resolve configs here, so a
 * planned config is exactly what `scalesweep train` runs.
 *
 * A partial config is completed with every default; the resolved config,
 * printed back as JSON, alone reproduces the run. Validation errors name the
 * JSON path, the value found and what is allowed; malformed JSON names the
 * line and column.
 *
 * The library links no kernels, no trainer, no libuv and no libpq; JSON is
 * cJSON (the trainer's). */
#ifndef SS_RUNCFG_RUNCFG_H
#define SS_RUNCFG_RUNCFG_H

#include <stddef.h>
#include <stdint.h>

#include "common/names.h"

/* Arithmetic precision of a run; the trainer maps it to its kernels' own. */
typedef enum rcfg_prec { RCFG_FP32 = 0, RCFG_BF16 = 1, RCFG_FP16 = 2 } rcfg_prec;

/* The synthetic Zipf lexicon's parameters (SCIENCE.md section 4). */
typedef struct rcfg_synth {
  int letters; /* K: tokens 1..K are letters, 0 is the separator */
  int words;   /* W: lexicon size */
  int min_len; /* word lengths drawn uniformly from [min_len, max_len] */
  int max_len;
  double zipf; /* s: p_k proportional to k^-s, k = 1..W */
  uint64_t seed;
} rcfg_synth;

/* model.family (docs/models.md) */
enum { RCFG_GPT2 = 0, RCFG_LLAMA = 1 };
/* model.parametrization: standard, or muP (Yang et al. 2022, trainer/mup.h) */
enum { RCFG_SP = 0, RCFG_MUP = 1 };

typedef struct rcfg {
  struct {
    int n_layer, d_model, n_head, seq_len, vocab_size;
    int family;          /* RCFG_GPT2 (default) or RCFG_LLAMA */
    int parametrization; /* RCFG_SP (default) or RCFG_MUP */
    int base_width;      /* mup: the proxy's d_model the rates were tuned at (else 0) */
    /* llama only (gpt2: 0): rotary base, SwiGLU hidden size = mlp_multiple_of
     * x ceil(mlp_ratio x d_model / mlp_multiple_of), output head tied to the
     * token embedding (gpt2: always), per-head RMSNorm of q and k */
    double rope_theta, mlp_ratio;
    int mlp_multiple_of, tie_embeddings, qk_norm;
  } model;
  struct {
    char train[1024], val[1024]; /* shard globs; empty with synthetic */
    int synthetic;               /* 1: the built-in corpus */
    rcfg_synth synth;
  } data;
  struct {
    int batch_size, micro_batch_size;
    int64_t tokens;
    double lr, warmup_tokens, min_lr_ratio, weight_decay, grad_clip;
    char schedule[16]; /* "cosine", "constant" or "wsd" */
    double decay_frac; /* wsd: the share of the steps that decay (else 0) */
    uint64_t seed;
  } train;
  struct {
    char name[16]; /* "adamw" or "adamw8bit" */
    double beta1, beta2, eps;
    int zero; /* 1: ZeRO stage 1, the state sharded over the world_size ranks */
  } optimizer;
  rcfg_prec precision;
  struct {
    int recompute;
  } memory;
  struct {
    int64_t every_tokens, tokens;
  } eval;
  struct {
    /* checkpoint.every_tokens > 0 needs a directory when the run trains,
     * not when it is parsed: the planner decides the interval and the
     * trainer may get the directory as a flag (--checkpoint-dir) */
    char dir[1024];
    int64_t every_tokens;
  } checkpoint;
  char backend[8]; /* "cpu" or "cuda" */
  /* data-parallel ranks: each takes batch_size / world_size sequences of a
   * step, micro_batch_size at a time (default batch_size / world_size) */
  int world_size;
  int threads;
  /* 1: fp32 matrix products in TF32 (backend cuda at precision fp32 only,
   * the default there; "tf32": false turns it off); 0 elsewhere */
  int tf32;
  /* the program that trains it, by the name its workers declare (docs/
   * trainers.md): "builtin" (`scalesweep train`, the default) or an
   * operator's name such as "torch" (common/names.h) */
  char trainer[SS_TRAINER_NAME_MAX + 1];
  /* "reproducible": RCFG_REPRO_MACHINE (the default) gives the same bits on
   * the same kind of CPU, with the BLAS kernels OpenBLAS picks for it;
   * RCFG_REPRO_PORTABLE pins OpenBLAS's kernels to one set every supported
   * x86-64 CPU runs (cli/blas_pin.h), so a CPU run gives the same bits on
   * every such CPU, at a cost where OpenBLAS would pick faster ones
   * (README, "Reproduce anywhere"). CPU runs only: a CUDA run's numbers
   * follow its GPU */
  int reproducible;
} rcfg;

enum { RCFG_REPRO_MACHINE = 0, RCFG_REPRO_PORTABLE = 1 };

/* One problem with a run config, its place as data: the JSON path of the
 * value ("$.train.micro_batch_size"), or for malformed JSON the line and
 * column (path ""); the message says what was found and what is expected.
 * A caller that maps the path onto its own file (the planner onto a spec's
 * layers) reads path, never the text. */
typedef struct rcfg_problem {
  char path[192];
  int line, col; /* malformed JSON only (1-based); else 0 */
  char message[512];
} rcfg_problem;

/* The problems of one parse, in the order the keys are checked: the first
 * RCFG_PROBLEMS_MAX kept, n counts them all (a config has fewer keys). */
#define RCFG_PROBLEMS_MAX 64
typedef struct rcfg_problems {
  rcfg_problem items[RCFG_PROBLEMS_MAX];
  int n;
} rcfg_problems;

/* Parses a JSON run config from text, fills defaults, validates. Returns 0,
 * or SS_EINVAL with every problem in *pr. */
int rcfg_parse_problems(const char *text, rcfg *cfg, rcfg_problems *pr);

/* The problems as text, one a line: "NAME: $.path: message", or
 * "NAME:LINE:COL: message" for malformed JSON (cut to errlen). */
void rcfg_problems_text(const rcfg_problems *pr, const char *name, char *err, size_t errlen);

/* rcfg_parse_problems with the problems as rcfg_problems_text (name is the
 * file name for messages). */
int rcfg_parse(const char *text, const char *name, rcfg *cfg, char *err, size_t errlen);

/* Reads and parses a file; SS_ENOENT/SS_EIO when it cannot be read. */
int rcfg_load(const char *path, rcfg *cfg, char *err, size_t errlen);

/* The resolved config as canonical JSON text (malloc'd, caller frees; NULL
 * when out of memory): every key present, in a fixed order, compact. */
char *rcfg_to_json(const rcfg *cfg);

/* The same as a cJSON tree (caller cJSON_Deletes; NULL when out of memory),
 * for a caller that embeds the config in a document of its own: what
 * parsing rcfg_to_json's text would give, without printing and parsing. */
struct cJSON *rcfg_to_tree(const rcfg *cfg);

/* The config's hash: the SHA-256, as 64 hex digits and a NUL, of
 * rcfg_to_json's text (what runs.config_hash stores). 0 or SS_ENOMEM. */
int rcfg_hash(const rcfg *cfg, char out[65]);

/* SHA-256 of text, 64 hex digits and a NUL: rcfg_hash of a config whose
 * rcfg_to_json is text, for a caller that keeps the text it hashes. */
void rcfg_hash_text(const char *text, char out[65]);

/* The schema's marking of each key of the canonical config (rcfg_schema):
 * what two runs that differ in it have in common. Runs whose configs agree
 * on every key that defines a trajectory train the same weights up to the
 * shorter one's stable steps (wsd), so one can start from the other's
 * checkpoint (sweeps/plan_branch.c groups them by rcfg_trajectory_key). */
typedef enum rcfg_traj {
  /* part of the trajectory: runs that differ in it never share weights
   * (the default of a key not in the schema) */
  RCFG_TRAJ_DEFINES = 0,
  /* differs along one trajectory: how far it goes and what is observed or
   * saved on the way (train.tokens, eval.*, checkpoint.*) */
  RCFG_TRAJ_ALONG,
  /* chosen per run by the planner's rules from its compute (batch size,
   * micro-batch, lr): a group of runs whose rules chose them shares the
   * smallest run's */
  RCFG_TRAJ_RULED,
  /* a default that follows train.tokens (the warmup, 5% of it): a group of
   * runs that left it to the default shares the smallest run's */
  RCFG_TRAJ_LENGTH_DEFAULT,
} rcfg_traj;

#define RCFG_SHARES(t) (1u << (t))

typedef struct rcfg_key {
  const char *path; /* dotted, below $: "train.tokens" */
  rcfg_traj traj;
} rcfg_key;

/* Every key of the canonical text with its marking; *n of them. */
const rcfg_key *rcfg_schema(size_t *n);

/* The marking of one dotted key; RCFG_TRAJ_DEFINES when it is not listed. */
rcfg_traj rcfg_key_traj(const char *path);

/* The trajectory key of c: its canonical text without the keys marked
 * RCFG_TRAJ_ALONG, nor those of a class in shared (RCFG_SHARES(t) bits:
 * the values the caller's group will share), each shared class named in
 * it. Equal keys: runs on one trajectory. malloc'd; NULL when out of
 * memory. */
char *rcfg_trajectory_key(const rcfg *c, unsigned shared);

/* "fp32", "bf16", "fp16" */
const char *rcfg_prec_name(rcfg_prec p);

/* Warmup-stable-decay (schedule "wsd"): the steps before the decay, the
 * warmup and the stable phase, steps - ceil(decay_frac * steps) with at
 * least one decay step. The learning rate of a step before then depends on
 * train.tokens not at all, so two wsd runs that differ only in tokens train
 * the same weights up to the smaller one's stable steps: a run can start
 * its decay from a longer run's checkpoint (docs/sweeps.md, "WSD
 * branches"). Other schedules: all their steps. */
int64_t rcfg_wsd_stable_steps(const rcfg *c);

#endif

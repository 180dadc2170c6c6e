/* Sweep specs (docs/design.md#sweep-specs, docs/sweeps.md): parsing and
 * validation.
 *
 * A spec is JSON (Jansson, duplicate keys refused). spec_parse checks every
 * key, type and range and reports every problem at once, each with its JSON
 * path ("$.isoflop.flops[2]"), the value found and what is allowed;
 * malformed JSON is reported as "FILE:line:column: ...". What can only be
 * known by planning (a model too small for one head, D below one batch, a
 * plan over max_hours) is checked by plan_spec (sweeps/plan.h), which reports
 * into the same problem list.
 *
 * Ownership: a spec owns its parsed JSON; every json_t pointer in it is
 * borrowed from that tree and lives as long as the spec. */
#ifndef SS_SWEEPS_SPEC_H
#define SS_SWEEPS_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "runcfg/flops.h"

/* ---- problems: where and what, collected, never fatal one by one ------- */

typedef struct spec_problem {
  char *path;    /* "$.grid.tokens[2]", or "FILE:line:column" for malformed JSON */
  char *message; /* what was found and what is allowed */
} spec_problem;

/* A hostile spec can hold hundreds of thousands of problems (every key of
 * a 1 MiB object unknown): every operation here is O(1) amortised per
 * problem, and what is shown to a person is capped. */
typedef struct spec_problems { /* zero-initialise; spec_problems_free releases */
  spec_problem *items;
  size_t n, cap;
  /* de-duplication: an open-addressing set of (hash, item index + 1);
   * internal to spec_json.c */
  struct spec__problem_slot *set;
  size_t set_cap;
} spec_problems;

/* Problems shown in full (the text, the API's list); the rest are counted. */
#define SPEC_PROBLEMS_LISTED 50

/* Appends one problem (printf-style message). An exact duplicate of one
 * already listed is dropped (one bad key in base would otherwise be reported
 * once per planned run); the check is a hash lookup, not a scan. */
void spec_problem_add(spec_problems *pr, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void spec_problems_free(spec_problems *pr);

/* The first SPEC_PROBLEMS_LISTED problems as text, one per line: "NAME:
 * PATH: MESSAGE" (NAME is the file name; a malformed-JSON problem is
 * "FILE:line:column: MESSAGE"), then, when there are more, one line "NAME:
 * ... and K more problem(s) not listed". malloc'd, caller frees. */
char *spec_problems_format(const spec_problems *pr, const char *name);

/* "3 problem(s)", or "40000 problem(s), the first 50 listed" when over the
 * cap: the count a message in front of spec_problems_format or
 * spec_problems_to_json gives. */
void spec_problems_summary(const spec_problems *pr, char *out, size_t n);

/* [{"path": ..., "message": ...}, ...], the first SPEC_PROBLEMS_LISTED, for
 * the HTTP API (new reference); pr->n is the total. */
json_t *spec_problems_to_json(const spec_problems *pr);

/* The HTTP API's 400 body for a spec with problems, compact JSON:
 * {"error": {"message": "LEAD: SUMMARY", "path": the first problem's,
 * "problems": spec_problems_to_json, "problems_total": pr->n}}. NULL out of
 * memory; malloc'd, caller frees. */
char *spec_problems_answer(const spec_problems *pr, const char *lead);

/* ---- walking a spec's tree ---------------------------------------------- */

/* Calls visit for every member of every object in the tree v, depth first,
 * a member before what it holds, with the member's JSON path
 * ("$.runs[2].data"; v's own path is `path`). For the keys that may appear at
 * any depth of a spec: "data" (token shards) and "checkpoint". visit may
 * replace members of `value`, not of the object that holds it. */
typedef void (*spec_visit_fn)(void *ud, const char *path, const char *key, json_t *value);
void spec_walk(json_t *v, const char *path, spec_visit_fn visit, void *ud);

/* ---- values: a number, a list, or a log-spaced range ------------------- */

/* The expanded values of one key (spec_values_path names element i). */
typedef struct spec_values {
  double *v; /* owned */
  size_t n;
  int range;  /* 1: from {"from", "to", "points"} */
  int scalar; /* 1: a single number, not a list */
  char path[96];
} spec_values;

/* Writes the JSON path of element i ("$.grid.tokens[2]"; for a range
 * "$.grid.tokens (point 3 of 7)"; for a single number "$.grid.tokens"). */
void spec_values_path(const spec_values *v, size_t i, char *out, size_t n);

/* ---- the spec --------------------------------------------------------- */

typedef enum spec_method { SPEC_GRID, SPEC_ISOFLOP, SPEC_BATCH, SPEC_RUNS } spec_method;

const char *spec_method_name(spec_method m);

/* Batch size per run, unless the spec fixes it (docs/sweeps.md "Batch and
 * learning-rate rule"): B_opt = coef * C^exponent tokens (DeepSeek LLM 2024:
 * 0.292, 0.3271), converted to sequences of seq_len, rounded to the nearest
 * power of two and kept in [min_batch, max_batch]; then halved until the run
 * makes at least min_steps optimizer steps (D / (B * seq_len) >= min_steps)
 * or reaches min_batch. */
typedef struct spec_batch_rule {
  double coef, exponent;
  double min_steps;
  int min_batch, max_batch; /* sequences */
} spec_batch_rule;

#define SPEC_BATCH_COEF 0.292
#define SPEC_BATCH_EXPONENT 0.3271
/* Measured on the synthetic corpus (SCIENCE.md section 4, the sweep issue):
 * at 6e11 FLOPs a 2-layer d=64 model reached 0.66 nats with 8-sequence
 * batches (~1,800 steps) and 0.87 with 32 (~450 steps): a few hundred steps
 * starve it. 1000 keeps every run of a small study above that. */
#define SPEC_BATCH_MIN_STEPS 1000.0
#define SPEC_BATCH_MIN 1
#define SPEC_BATCH_MAX 65536

/* Learning rate per run, unless the spec fixes it: eta = coef * C^exponent
 * (DeepSeek's eta_opt: 0.3118, -0.125), times sqrt(B / B_opt) when
 * sqrt_batch (Adam's square-root batch scaling: the step floor often leaves B
 * below B_opt), clamped to [min, max], rounded to 3 significant digits. */
typedef struct spec_lr_rule {
  double coef, exponent, min, max;
  int sqrt_batch;
} spec_lr_rule;

#define SPEC_LR_COEF 0.3118
#define SPEC_LR_EXPONENT (-0.125)
#define SPEC_LR_MIN 1e-4
#define SPEC_LR_MAX 1e-2

/* Estimated training throughput of one run when the spec gives none
 * (FLOP/s, SCIENCE.md's count): measured for this trainer on 2 CPU cores at
 * 1e4-1e6 parameters (12-70 GFLOP/s, most near 35), and about 10% of an
 * A100/H100's bf16 peak per GPU. */
#define SPEC_CPU_FLOPS 3e10
#define SPEC_GPU_FLOPS 1e14

/* $.resources.max_memory_gib when the spec gives none: the memory one run
 * may use, per GPU (an 80 GiB A100/H100) or, for CPU runs, on its host. */
#define SPEC_MAX_MEMORY_GIB 80.0

/* At most this many planned runs per spec. */
#define SPEC_MAX_RUNS 10000

/* The "batch" section: a batch-size ladder at fixed N and D. */
typedef struct spec_ladder {
  int present;
  int has_params;          /* 0: the shape comes from base.model */
  double params;           /* target N (non-embedding) */
  double tokens;           /* D */
  spec_values batch_size;  /* the ladder, sequences */
  spec_values target_loss; /* recorded for the critical-batch fit */
  spec_values seeds;
  /* "branch": the ladder by branching (docs/sweeps.md "Critical batch size
   * by branching"): one trunk at the smallest batch size trains D; from its
   * checkpoints at each of branch_at (tokens) every other batch size trains
   * branch_tokens more */
  int branched;
  spec_values branch_at;
  double branch_tokens;
} spec_ladder;

/* The "lr_tune" section (docs/sweeps.md "Tuning the learning rate on a muP
 * proxy"): under muP the best learning rate is the same at every width, so
 * it is tuned once on a proxy of width base.model.base_width (the shape
 * rule's aspect ratio and head size give its depth and heads) and the study
 * is planned at the best rate (sweeps/lr_tune.h). A submitted spec with it
 * stores the tune's runs only; the scheduler adds the study's once they
 * have ended. */
typedef struct spec_lr_tune {
  int present;
  spec_values lr;    /* the rates tried, at least SPEC_LR_TUNE_MIN_RATES */
  double tokens;     /* D of each tune run; 0: the default rule (plan_draft.c) */
  spec_values seeds; /* each rate once per seed (n = 0: once) */
  int width;         /* base.model.base_width: the proxy's d_model (0 when unset) */
} spec_lr_tune;

/* Rates an lr tune tries at least: a minimum inside the grid needs a rate
 * on each side of it. */
#define SPEC_LR_TUNE_MIN_RATES 3
/* The tune's default D: this many tokens per non-embedding parameter of the
 * proxy (Chinchilla's compute-optimal ratio), and at least the batch rule's
 * min_steps optimizer steps at the rule's batch size (plan_draft.c). */
#define SPEC_LR_TUNE_TOKENS_PER_PARAM 20.0

/* The "adaptive" section (docs/sweeps.md "An adaptive design";
 * sweeps/adaptive.h): beside an isoflop method, whose runs become the
 * candidates, the study states its question and the compute it may spend,
 * and trains rounds of runs chosen from the candidates instead of all of
 * them. A submitted spec with it stores the first round only; the
 * scheduler designs every later one. */
typedef enum spec_question { SPEC_Q_N_OPT = 0, SPEC_Q_LOSS = 1 } spec_question;
/* the criterion (sweeps/adaptive.h): the linear (Gaussian) conditioning
 * (the default), or reweighting the resamples by simulated outcomes */
typedef enum spec_criterion { SPEC_CRIT_LINEAR = 0, SPEC_CRIT_REWEIGHT = 1 } spec_criterion;

typedef struct spec_adaptive {
  int present;
  spec_question question; /* "n_opt" (the default) or "loss" */
  double flops;           /* n_opt: C* (by 6ND) at which N_opt and D_opt are asked */
  double params, tokens;  /* loss: the (N, D) whose loss is asked */
  double precision;       /* the 95% interval's half-width wanted, relative */
  double compute;         /* FLOPs the study may train (a branch counts its decay) */
  int initial;            /* candidates in the first round */
  int round;              /* candidates per later round, at most */
  int bootstrap;          /* resamples of the fit each round */
  uint64_t seed;          /* of the bootstrap and the simulated outcomes */
  spec_criterion criterion;
} spec_adaptive;

#define SPEC_ADAPTIVE_PRECISION_N_OPT 0.25 /* N_opt within +-25% */
#define SPEC_ADAPTIVE_PRECISION_LOSS 0.02  /* the loss within +-2% */
#define SPEC_ADAPTIVE_INITIAL 9
#define SPEC_ADAPTIVE_ROUND 4
#define SPEC_ADAPTIVE_BOOTSTRAP 200

/* Parses $.adaptive (spec_adaptive.c); called by spec_parse. */
void spec__parse_adaptive(spec_adaptive *a, json_t *root, int method, int lr_tune,
                          size_t candidates, spec_problems *pr);

typedef struct spec {
  json_t *root;     /* owned */
  char *file;       /* name given to spec_parse, for messages (owned) */
  const char *name; /* $.name */
  const char *description;
  spec_method method;
  json_t *base; /* $.base (an empty object when absent) */

  int gpus, cpus;        /* $.resources: exactly one is > 0 */
  int ranks;             /* $.resources.ranks: a CPU run's data-parallel ranks (1) */
  double max_memory_gib; /* $.resources.max_memory_gib, per GPU or CPU run */
  int priority, max_attempts;
  double max_hours;        /* 0: no limit */
  double throughput_flops; /* per run, FLOP/s */
  int parallel_runs;       /* runs the cluster trains at once (time estimate) */
  int branches;            /* 1 (default): wsd runs start from longer runs' checkpoints */

  double aspect_ratio; /* $.shape */
  int head_size;       /* 0: automatic */
  spec_batch_rule batch_rule;
  spec_lr_rule lr_rule;

  struct {
    spec_values params, tokens, batch_size, lr, seeds; /* n = 0 when absent */
  } grid;
  struct {
    spec_values flops, params, seeds; /* params: absolute sizes, or n = 0 */
    int centred;                      /* sizes around coef * C^exponent instead */
    double centre_coef, centre_exponent, centre_span;
    int centre_points;
    int exact; /* "flops_count": "exact": D = C / flops_per_token */
  } isoflop;
  spec_ladder batch;
  json_t *runs; /* $.runs (array of partial run configs) */
  spec_lr_tune lr_tune;
  spec_adaptive adaptive;

  /* base resolved by the run config parser (runcfg/) (train values neutralised): what
   * planning needs before any run exists */
  int seq_len, vocab_size;
  /* base's model (rcfg_shape_of): the family and its fields, which the
   * shape rule counts N in (n_layer, d_model, n_head as base has them) */
  rcfg_shape model;
  int base_sets_batch, base_sets_lr, base_sets_micro, base_micro;

  char digest[65]; /* SHA-256 of the canonical spec, hex */
} spec;

/* Parses and validates spec text. name is the file name used in messages.
 * Returns 0 and a new spec in *out, or SS_EINVAL (or SS_ENOMEM) with every
 * problem appended to pr and *out NULL. */
int spec_parse(const char *text, const char *name, spec **out, spec_problems *pr);

/* Reads a file and parses it; SS_ENOENT/SS_EIO (one problem naming the file)
 * when it cannot be read. */
int spec_load(const char *path, spec **out, spec_problems *pr);

void spec_free(spec *s);

/* Resolves a merged run config JSON through the run config parser (the
 * trainer's: runcfg/runcfg.h) and maps its problems onto spec paths: each
 * run config path ("$.model.d_model") is
 * reported under the first of layers[] that sets that key (layers[i] at
 * layer_paths[i], e.g. a run of $.runs, then $.base), or else under fallback
 * with context (a description of the planned run) in front of the message.
 * Returns the parser's code (0 or SS_EINVAL); on 0, *cfg is resolved. */
struct rcfg;
int spec_resolve_config(const json_t *merged, struct rcfg *cfg, const json_t *const *layers,
                        const char *const *layer_paths, int n_layers, const char *fallback,
                        const char *context, spec_problems *pr);

/* The canonical text the digest is taken over: keys sorted, compact, every
 * number as a double with 17 significant digits (so 1e12 and 1000000000000
 * agree). malloc'd. */
char *spec_canonical(const spec *s);

#endif

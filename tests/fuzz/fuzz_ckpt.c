/* Checkpoints: trn_ckpt_load and trn_ckpt_load_branch (a wsd branch's and a
 * constant-rate rung's) on the input written as a checkpoint file,
 * for the small run of CONFIG below (the seed corpus holds checkpoints
 * that `scalesweep train` wrote for it; tests/fuzz/make_seeds.sh). Each
 * input is loaded as it is and, since random bytes almost never carry a
 * valid FNV-1a trailer, once more with its trailer recomputed, so that the
 * fields behind the checksum are fuzzed too. A loaded state must be one
 * that training can continue from: its carried token in the vocabulary,
 * its data position set on the loader as a resumed run does. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "fuzz.h"
#include "trainer/ckpt.h"
#include "runcfg/runcfg.h"
#include "trainer/prepare.h"
#include "trainer/train.h"

#define CONFIG                                                                   \
  "{\"model\": {\"n_layer\": 1, \"d_model\": 8, \"n_head\": 2, \"seq_len\": 4}," \
  " \"data\": {\"synthetic\": {\"letters\": 4, \"words\": 16, \"min_len\": 1,"   \
  " \"max_len\": 3, \"seed\": 1}},"                                              \
  " \"train\": {\"batch_size\": 2, \"tokens\": 64, \"lr\": 0.01},"               \
  " \"eval\": {\"every_tokens\": 0, \"tokens\": 4}, \"precision\": \"bf16\", \"threads\": 1}"

/* a constant-rate rung of twice the batch (trn_ckpt_load_branch's other
 * kind): CONFIG's model and data */
#define RUNG_CONFIG                                                              \
  "{\"model\": {\"n_layer\": 1, \"d_model\": 8, \"n_head\": 2, \"seq_len\": 4}," \
  " \"data\": {\"synthetic\": {\"letters\": 4, \"words\": 16, \"min_len\": 1,"   \
  " \"max_len\": 3, \"seed\": 1}},"                                              \
  " \"train\": {\"batch_size\": 4, \"micro_batch_size\": 2, \"tokens\": 128,"    \
  " \"lr\": 0.02, \"schedule\": \"constant\", \"warmup_tokens\": 8},"            \
  " \"eval\": {\"every_tokens\": 0, \"tokens\": 4}, \"precision\": \"bf16\", \"threads\": 1}"

typedef struct run {
  rcfg cfg, rung;
  char *rung_json;
  char *config_json;
  kern_ctx k;
  trn_model m;
  trn_optim o;
  trn_lexicon *lx;
  trn_loader *train;
} run;

static run *setup(void) {
  static run r;
  static int ready;
  if (ready)
    return &r;
  char err[1024];
  if (rcfg_parse(CONFIG, "fuzz_ckpt", &r.cfg, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
  r.config_json = rcfg_to_json(&r.cfg);
  if (rcfg_parse(RUNG_CONFIG, "fuzz_ckpt", &r.rung, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
  r.rung_json = rcfg_to_json(&r.rung);
  kern_cpu_init(&r.k, trn_kern_prec(r.cfg.precision), r.cfg.threads);
  rcfg_shape s = rcfg_shape_of(&r.cfg);
  if (trn_model_init(&r.m, &r.k, &s, r.cfg.train.micro_batch_size, 0, 0) != 0 ||
      trn_optim_init(&r.o, &r.m, 0) != 0 ||
      trn_lexicon_new(&r.cfg.data.synth, &r.lx, err, sizeof err) != 0 ||
      trn_loader_open_synth(r.lx, trn_synth_train_seed(r.cfg.data.synth.seed), &r.train, err,
                            sizeof err) != 0) {
    fprintf(stderr, "fuzz_ckpt: setup failed: %s\n", err);
    abort();
  }
  ready = 1;
  return &r;
}

static void load(run *r, const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file(TRN_CKPT_FILE, data, size);
  trn_ckpt_state st;
  memset(&st, 0, sizeof st);
  char err[2048] = "";
  /* as a wsd branch point too: the stored config is parsed as a run config
   * (this run is no wsd run, so nothing is ever loaded this way) */
  int rc = trn_ckpt_load_branch(path, &r->cfg, r->config_json, &r->m, &r->o, &st, err, sizeof err);
  if (rc == 0 || (!err[0] && rc != SS_ENOMEM))
    abort(); /* a refusal names the file and what is wrong */
  /* as a constant-rate rung's start: accepted only at a whole number of its
   * batches, and then its steps count them */
  memset(&st, 0, sizeof st);
  err[0] = 0;
  rc = trn_ckpt_load_branch(path, &r->rung, r->rung_json, &r->m, &r->o, &st, err, sizeof err);
  if (rc != 0 && !err[0] && rc != SS_ENOMEM)
    abort();
  if (rc == 0 &&
      (st.step * 4 * 4 != st.tokens || st.carry < 0 || st.carry >= r->cfg.model.vocab_size))
    abort();
  memset(&st, 0, sizeof st);
  err[0] = 0;
  rc = trn_ckpt_load(path, r->config_json, &r->m, &r->o, &st, err, sizeof err);
  if (rc != 0) {
    if (!err[0] && rc != SS_ENOMEM)
      abort(); /* a refusal names the file and what is wrong */
    return;
  }
  if (st.carry < 0 || st.carry >= r->cfg.model.vocab_size)
    abort(); /* the next window's first input: an index into the embedding */
  if (trn_loader_set_pos(r->train, &st.train_pos) == 0) {
    int32_t tok[16];
    trn_loader_next(r->train, tok, 16);
    for (int i = 0; i < 16; i++)
      if (tok[i] < 0 || tok[i] >= r->cfg.model.vocab_size)
        abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run *r = setup();
  load(r, data, size);
  if (size < sizeof(uint64_t))
    return 0;
  uint8_t *fixed = malloc(size);
  if (!fixed)
    abort();
  memcpy(fixed, data, size);
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64, as ckpt.c */
  for (size_t i = 0; i + sizeof h < size; i++) {
    h ^= fixed[i];
    h *= 0x100000001b3ULL;
  }
  if (memcmp(fixed + size - sizeof h, &h, sizeof h) != 0) {
    memcpy(fixed + size - sizeof h, &h, sizeof h);
    load(r, fixed, size);
  }
  free(fixed);
  return 0;
}

/* The training loop. */
#include "trainer/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "common/err.h"
#include "common/shardpath.h"
#include "trainer/ckpt.h"
#include "runcfg/flops.h"
#include "runcfg/memory.h"
#include "trainer/data.h"
#include "trainer/emit.h"
#include "trainer/model.h"
#include "trainer/noise.h"
#include "trainer/optim.h"
#include "trainer/prepare.h"
#include "trainer/run.h"
#include "kernels/cuda_module.h"
#include "kernels/step_scale.h"
#include "trainer/opprof.h"
#include "trainer/where.h"

_Static_assert(RCFG_Q8_BLOCK == KERN_Q8_BLOCK, "runcfg/memory.c counts 8-bit optimizer blocks");

/* fp16 dynamic loss scaling (the usual GradScaler constants) */
#define SCALE_INIT 65536.0
#define SCALE_GROWTH_STEPS 2000
#define NOISE_EMA_DECAY 0.95

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

int trn_train_stop_signal(void) { return (int)stop_signal; }

void trn_train_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long long peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (long long)ru.ru_maxrss * 1024;
}

/* learning rate after `tokens` training tokens */
static double lr_at(const rcfg *c, double tokens) {
  double lr = c->train.lr;
  if (tokens < c->train.warmup_tokens)
    return lr * (tokens + 1.0) / (c->train.warmup_tokens + 1.0);
  if (strcmp(c->train.schedule, "constant") == 0)
    return lr;
  double mn = lr * c->train.min_lr_ratio;
  if (strcmp(c->train.schedule, "wsd") == 0) {
    /* stable until the decay, then 1 - sqrt down to min_lr_ratio at the
     * last step (Haegele et al. 2024); tokens are the step's first */
    double step_tokens = (double)c->train.batch_size * c->model.seq_len;
    double start = (double)rcfg_wsd_stable_steps(c) * step_tokens;
    double end = floor((double)c->train.tokens / step_tokens) * step_tokens;
    if (tokens < start)
      return lr;
    double p = (tokens + step_tokens - start) / (end - start);
    p = p > 1.0 ? 1.0 : p;
    return mn + (lr - mn) * (1.0 - sqrt(p));
  }
  double span = (double)c->train.tokens - c->train.warmup_tokens;
  double frac = span > 0 ? (tokens - c->train.warmup_tokens) / span : 1.0;
  frac = frac > 1.0 ? 1.0 : frac;
  return mn + 0.5 * (lr - mn) * (1.0 + cos(M_PI * frac));
}

/* has a multiple of every been crossed going from before to after? */
static int crossed(int64_t before, int64_t after, int64_t every) {
  return every > 0 && after / every > before / every;
}

static int open_data(run *r, char *err, size_t errlen) {
  const rcfg *c = r->cfg;
  if (c->data.synthetic) {
    int rc = trn_lexicon_new(&c->data.synth, &r->lex, err, errlen);
    if (rc)
      return rc;
    rc = trn_loader_open_synth(r->lex, trn_synth_train_seed(c->data.synth.seed), &r->train, err,
                               errlen);
    if (!rc)
      rc = trn_loader_open_synth(r->lex, trn_synth_val_seed(c->data.synth.seed), &r->val, err,
                                 errlen);
    return rc;
  }
  const char *keys[2] = {"$.data.train", "$.data.val"};
  const char *globs[2] = {c->data.train, c->data.val};
  trn_loader **dst[2] = {&r->train, &r->val};
  for (int i = 0; i < 2; i++) {
    char msg[2048];
    int rc = trn_loader_open_shards_in(globs[i], r->data_dirs, r->ndata_dirs, c->model.vocab_size,
                                       dst[i], msg, sizeof msg);
    if (rc) {
      snprintf(err, errlen, "%s: %s", keys[i], msg);
      return rc;
    }
  }
  return 0;
}

/* The token shards' identity for the config event: each one's split,
 * path and sha256. */
static cJSON *data_hashes(run *r) {
  cJSON *h = cJSON_CreateArray();
  trn_loader *ls[2] = {r->train, r->val};
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < trn_loader_nfiles(ls[j]); i++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "split", j ? "val" : "train");
      cJSON_AddStringToObject(e, "path", trn_loader_file(ls[j], i));
      cJSON_AddStringToObject(e, "sha256", trn_loader_file_sha256(ls[j], i));
      cJSON_AddItemToArray(h, e);
    }
  return h;
}

static void emit_config(run *r) {
  const rcfg *c = r->cfg;
  rcfg_shape s = rcfg_shape_of(c);
  cJSON *config = rcfg_to_tree(c); /* the tree r->config_json prints */
  /* where it runs (where.h): stored with the run, compared by reproduce */
  cJSON *env = trn_where(c, r->cuda, r->device);
  cJSON *hashes = r->lex ? NULL : data_hashes(r);
  char hex[17] = "";
  if (r->lex)
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)trn_lexicon_digest(r->lex));
  trn_val none = {0};
  TRN_EMIT(
      r->out, config, .config = config ? trn_j(config) : none, .config_hash = trn_s(r->config_hash),
      .checkpoint_dir = r->ckpt_dir_flag ? trn_s(r->ckpt_dir_flag) : none,
      .params = trn_d((double)rcfg_params(&s)),
      .nonembedding_params = trn_d((double)rcfg_nonembedding_params(&s)),
      .flops_per_token = trn_d(rcfg_flops_per_token(&s)),
      .optimizer_state_bytes = trn_d((double)r->optim.state_bytes),
      .activation_bytes = trn_d((double)trn_model_activation_bytes(&r->model)),
      .memory_bytes = trn_d(rcfg_memory(c).total), /* runcfg/memory.h */
      .b_noise_unit = trn_s("sequences"), .environment = env ? trn_j(env) : none,
      .val_tokens = trn_d((double)r->nval * c->model.seq_len),
      .lexicon_digest = r->lex ? trn_s(hex) : none,
      .entropy_rate = r->lex ? trn_d(trn_lexicon_entropy_rate(r->lex)) : none,
      .window_floor = r->lex ? trn_d(trn_lexicon_window_floor(r->lex, c->model.seq_len)) : none,
      .data_hashes = hashes ? trn_j(hashes) : none);
  cJSON_Delete(config);
  cJSON_Delete(env);
  cJSON_Delete(hashes);
}

/* mean loss over the fixed validation windows */
/* SCALESWEEP_COUNT_SYNCS=1 (tests): the calls through the backend's
 * interface that wait for it (to_host, sync, and sumsq and accumulate,
 * which return a sum to the host) are counted, and each step line says how
 * many the step made ("host_syncs"). */
static int count_syncs;
static long host_syncs;
static const kern_ops *real_ops;
static kern_ops counted_ops;

static void counted_to_host(kern_ctx *k, void *dst, const void *src, size_t bytes) {
  host_syncs++;
  real_ops->to_host(k, dst, src, bytes);
}
static void counted_sync(kern_ctx *k) {
  host_syncs++;
  real_ops->sync(k);
}
static double counted_sumsq(kern_ctx *k, const float *x, size_t n) {
  host_syncs++;
  return real_ops->sumsq(k, x, n);
}
static double counted_accumulate(kern_ctx *k, float *dst, const float *src, float s, size_t n,
                                 int init) {
  host_syncs++;
  return real_ops->accumulate(k, dst, src, s, n, init);
}

static void count_host_syncs(kern_ctx *k) {
  const char *e = getenv("SCALESWEEP_COUNT_SYNCS");
  if (!e || strcmp(e, "1") != 0)
    return;
  count_syncs = 1;
  real_ops = k->ops;
  counted_ops = *k->ops;
  counted_ops.to_host = counted_to_host;
  counted_ops.sync = counted_sync;
  counted_ops.sumsq = counted_sumsq;
  counted_ops.accumulate = counted_accumulate;
  k->ops = &counted_ops;
}

static double evaluate(run *r) {
  int T = r->cfg->model.seq_len, mb = r->model.B;
  double sum = 0.0;
  trn_opprof_pause(1); /* SCALESWEEP_PROFILE_OPS times training steps only */
  for (int i = 0; i < r->nval; i += mb) {
    int n = r->nval - i < mb ? r->nval - i : mb;
    const int32_t *x = r->val_tok + (size_t)i * T;
    sum += trn_model_forward(&r->model, n, x, x + 1) * n;
  }
  trn_opprof_pause(0);
  return sum / r->nval;
}

static int save_in(run *r, const char *dir, int branch, const trn_optim *opt,
                   const trn_ckpt_state *st, char *err, size_t errlen) {
  char path[4096];
  int rc = trn_ckpt_save(dir, r->config_json, &r->model, opt, st, path, sizeof path, err, errlen);
  if (rc == TRN_CKPT_NO_SPACE) {
    /* the run does not need this checkpoint to go on; the kept ones stay */
    fprintf(stderr,
            "scalesweep train: checkpoint at step %lld skipped: %s; training goes on, the "
            "previous checkpoints are kept\n",
            (long long)st->step, err);
    fflush(stderr);
    err[0] = 0;
    return 0;
  }
  if (rc)
    return rc;
  TRN_EMIT(r->out, checkpoint, .step = trn_d((double)st->step), .tokens = trn_d((double)st->tokens),
           .path = trn_s(path), .branch = branch ? trn_b(1) : (trn_val){0});
  return 0;
}

static int save(run *r, const trn_optim *opt, const trn_ckpt_state *st, char *err, size_t errlen) {
  return save_in(r, r->ckpt_dir, 0, opt, st, err, errlen);
}

/* a wsd branch point's checkpoint: its own directory, never rotated away */
static int save_branch(run *r, const trn_optim *opt, const trn_ckpt_state *st, char *err,
                       size_t errlen) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/branch-%lld", r->ckpt_dir, (long long)st->step);
  return save_in(r, dir, 1, opt, st, err, errlen);
}

/* The checkpoints to resume from (train.h), newest first: how many went
 * into paths/steps (0 when none fits), or an SS_E* code (with err) for a
 * file that is there but cannot be read (never skipped silently). A file
 * whose header is corrupt is left out, its path and why added to bad. */
static int list_checkpoints(const char *dir, int64_t max_step, char paths[2][4200],
                            int64_t steps[2], char bad[2][2048], int *nbad, char *err,
                            size_t errlen) {
  static const char *const files[2] = {TRN_CKPT_FILE, TRN_CKPT_PREV_FILE};
  int n = 0;
  for (int i = 0; i < 2; i++) {
    char p[4200];
    int64_t step;
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    int rc = trn_ckpt_peek_step(p, &step, err, errlen);
    if (rc == SS_ENOENT)
      continue;
    if (rc == SS_ECORRUPT) {
      snprintf(bad[(*nbad)++], sizeof bad[0], "%s", err);
      continue;
    }
    if (rc)
      return rc;
    if (max_step >= 0 && step > max_step) {
      fprintf(stderr,
              "scalesweep train: %s holds step %lld, after step %lld (the last one "
              "whose metrics are stored); not resumed from\n",
              p, (long long)step, (long long)max_step);
      continue;
    }
    int at = n && step > steps[0] ? 0 : n;
    if (at == 0 && n) {
      memcpy(paths[1], paths[0], sizeof paths[0]);
      steps[1] = steps[0];
    }
    snprintf(paths[at], sizeof paths[at], "%s", p);
    steps[at] = step;
    n++;
  }
  return n;
}

/* A checkpoint at path loaded into st: the loader moved to its data
 * position. 1, or an SS_E* code with err. */
static int loaded(run *r, const char *path, const trn_ckpt_state *st, char *err, size_t errlen) {
  int rc = trn_loader_set_pos(r->train, &st->train_pos);
  if (rc) {
    snprintf(err, errlen, "%s: data position %llu does not fit the training data", path,
             (unsigned long long)st->train_pos.offset);
    return rc;
  }
  return 1;
}

/* The wsd branch point (train.h's branch_from): 1 when loaded, or an SS_E*
 * code with err (a branch never starts from scratch silently: its worker
 * passes no branch point it cannot use). */
static int load_branch(run *r, trn_optim *o, trn_ckpt_state *st, char *err, size_t errlen) {
  int rc =
      trn_ckpt_load_branch(r->branch_from, r->cfg, r->config_json, &r->model, o, st, err, errlen);
  if (rc)
    return rc;
  return loaded(r, r->branch_from, st, err, errlen);
}

/* Loads the newest checkpoint of dir that is whole (train.h): 1 when one
 * was loaded, 0 when none fits (a fresh start), or an SS_E* code with err.
 * A checkpoint that fails its checks (checksum, size, header) is passed
 * over for the one before it, with a line naming the bad file, why, and the
 * one resumed from. When none is whole, a resume with max_step (the
 * worker's: a scheduled run must go on) starts from scratch, saying so; a
 * plain --resume (by hand) fails with SS_ECORRUPT naming the files, since
 * the user asked for that state. */
static int resume_from(run *r, trn_optim *o, trn_ckpt_state *st, char *err, size_t errlen) {
  const char *dir = r->resume_dir;
  int64_t max_step = r->resume_max_step;
  if (!dir) /* a branch's first attempt: nothing of its own yet */
    return load_branch(r, o, st, err, errlen);
  char paths[2][4200], bad[2][2048];
  int64_t steps[2];
  int nbad = 0;
  int n = list_checkpoints(dir, max_step, paths, steps, bad, &nbad, err, errlen);
  if (n < 0)
    return n;
  for (int i = 0; i < n; i++) {
    int rc = trn_ckpt_load(paths[i], r->config_json, &r->model, o, st, err, errlen);
    if (rc == SS_ECORRUPT) {
      snprintf(bad[nbad++], sizeof bad[0], "%s", err);
      continue;
    }
    if (rc)
      return rc;
    for (int b = 0; b < nbad; b++)
      fprintf(stderr, "scalesweep train: checkpoint %s; resuming from %s (step %lld)\n", bad[b],
              paths[i], (long long)steps[i]);
    return loaded(r, paths[i], st, err, errlen);
  }
  if (nbad && max_step < 0) {
    snprintf(err, errlen, "%s%s%s", bad[0], nbad > 1 ? "; " : "", nbad > 1 ? bad[1] : "");
    return SS_ECORRUPT;
  }
  for (int b = 0; b < nbad; b++)
    fprintf(stderr, "scalesweep train: checkpoint %s; no other checkpoint to resume from%s\n",
            bad[b],
            b + 1 == nbad
                ? (r->branch_from ? ": starting from the branch point" : ": starting from scratch")
                : "");
  return r->branch_from ? load_branch(r, o, st, err, errlen) : 0;
}

/* The run's sizes, fixed for its length. */
typedef struct shape {
  int T, mb, B;
  int nmicro, nlocal;  /* micro-batches of a step; this rank's (runcfg checks nmicro % world) */
  int64_t step_tokens; /* tokens of a step */
  int64_t steps;       /* the run's steps */
} shape;

/* One optimizer step, from its micro-batches to its line. */
typedef struct step_figs {
  double lr;
  float S;       /* the loss scale the backward ran at */
  double ctl[3]; /* the ranks' sums: loss, micro-batch gradient sumsq; ranks asked to stop */
  double gnorm2; /* the whole gradient's sum of squares (scaled by S^2) */
  double loss, gnorm;
  int skipped; /* fp16 overflow: no update */
  double dt;   /* the step's wall time */
} step_figs;

static shape shape_of(const run *r) {
  const rcfg *c = r->cfg;
  shape s = {c->model.seq_len, c->train.micro_batch_size, c->train.batch_size, 0, 0, 0, 0};
  s.nmicro = s.B / s.mb;
  s.nlocal = s.nmicro / r->world;
  s.step_tokens = (int64_t)s.B * s.T;
  s.steps = c->train.tokens / s.step_tokens;
  return s;
}

/* The training state to start from: a checkpoint (--resume, or a wsd
 * branch point), or fresh weights at the stream's start. 0, or an SS_E*
 * code with err. */
static int start_state(run *r, const char *resume_dir, int64_t resume_max_step, trn_ckpt_state *st,
                       char *err, size_t errlen) {
  const rcfg *c = r->cfg;
  memset(st, 0, sizeof *st);
  st->loss_scale = c->precision == RCFG_FP16 ? SCALE_INIT : 1.0;
  trn_noise_init(&st->noise, NOISE_EMA_DECAY);
  if (resume_dir) {
    struct stat sb;
    if (stat(resume_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      snprintf(err, errlen, "%s: --resume: not a directory", resume_dir);
      return SS_ENOENT;
    }
    r->resume_dir = resume_dir;
    r->resume_max_step = resume_max_step;
  }
  int resumed = 0;
  if (resume_dir || r->branch_from) {
    int rc = trn_dp_resume(r, st, resume_from, err, errlen);
    if (rc < 0)
      return rc;
    resumed = rc == 1; /* else no (usable) checkpoint: a fresh start */
  }
  if (!resumed) {
    trn_model_init_weights(&r->model, c->train.seed);
    trn_loader_next(r->train, &st->carry, 1);
  }
  return 0;
}

/* Forward and backward of the step's micro-batches at loss scale S: this
 * rank's share of them summed into the model's grads (through the
 * overlapped buckets for the last one, when the run overlaps), their
 * scalars into step_acc on the backend. */
static void forward_backward(run *r, const shape *sh, trn_ckpt_state *st, float S) {
  kern_ctx *k = &r->k;
  trn_model *m = &r->model;
  int mb = sh->mb, T = sh->T, nmicro = sh->nmicro, nlocal = sh->nlocal;
  int overlap = trn_dp_overlap(r);
  for (int i = 0; i < nmicro; i++) {
    /* the stream is cut into consecutive windows of T tokens whatever the
     * micro-batch size: each micro-batch takes mb*T new tokens and the
     * one before them (the carry) as its first input */
    r->batch[0] = st->carry;
    trn_loader_next(r->train, r->batch + 1, (size_t)mb * T);
    st->carry = r->batch[(size_t)mb * T];
    if (i / nlocal != r->rank) /* another rank's share: every rank reads the whole stream */
      continue;
    trn_model_forward_into(m, mb, r->batch, r->batch + 1, &m->step_acc[0], S);
    int buckets = overlap && i % nlocal == nlocal - 1; /* this rank's last of the step */
    if (buckets)
      trn_dp_buckets(r, 1.0f / nmicro, i % nlocal == 0);
    trn_model_backward(m, S);
    if (buckets)
      trn_dp_buckets_end(r); /* the buckets did the sum */
    else if (nmicro > 1)
      k->ops->axpy(k, m->grads, m->mgrads, 1.0f / nmicro, m->nparams, i % nlocal == 0);
    if (nmicro > 1) /* the micro-batch gradient's norm, for the noise scale */
      k->ops->sumsq_into(k, &m->step_acc[1], m->mgrads, m->nparams);
  }
}

/* The step's scalars to the host, summed over the ranks in rank order
 * (with whether any rank was asked to stop). On one rank the norm, the
 * clip and the fp16 overflow decision stay on the backend, and the update
 * goes ahead (or is skipped) before the step's one host read. */
static int reduce(run *r, const trn_ckpt_state *st, step_figs *f, char *err, size_t errlen) {
  const rcfg *c = r->cfg;
  kern_ctx *k = &r->k;
  trn_model *m = &r->model;
  double acc[3];
  if (r->world == 1) {
    int64_t opt_step = st->step + 1 - st->skipped_steps;
    k->ops->sumsq_into(k, &m->step_acc[2], m->grads, m->nparams);
    k->ops->step_scale(k, m->grad_scale, &m->step_acc[2], (double)f->S, c->train.grad_clip);
    trn_optim_step(&r->optim, m, f->lr, c->optimizer.beta1, c->optimizer.beta2, c->optimizer.eps,
                   c->train.weight_decay, 0.0f, m->grad_scale, (int)opt_step);
    k->ops->to_host(k, acc, m->step_acc, sizeof acc); /* the step's one host sync */
    f->gnorm2 = acc[2];
  } else {
    k->ops->to_host(k, acc, m->step_acc, 2 * sizeof(double));
  }
  f->ctl[0] = acc[0], f->ctl[1] = acc[1], f->ctl[2] = stop_signal ? 1.0 : 0.0;
  if (r->world > 1)
    return trn_dp_reduce(r, f->ctl, &f->gnorm2, err, errlen);
  return 0;
}

/* The step's loss and gradient norm checked, and what they decide: a loss
 * that is not finite stops the run; so does a gradient norm that is not,
 * unless fp16, where the update is skipped and the loss scale halved. Then
 * the noise scale, the update of a run over several ranks, and the loss
 * scale's growth. 0, or an SS_E* code with err. */
static int update(run *r, const shape *sh, trn_ckpt_state *st, step_figs *f, char *err,
                  size_t errlen) {
  const rcfg *c = r->cfg;
  double S = (double)f->S;
  f->loss = f->ctl[0] / sh->nmicro;
  if (!isfinite(f->loss)) {
    snprintf(err, errlen,
             "training loss is %g at step %lld (tokens %lld); stopping\nHINT: lower "
             "train.lr, keep train.grad_clip on, or use fp32/bf16; the last good "
             "checkpoint is kept",
             f->loss, (long long)st->step + 1, (long long)(st->tokens + sh->step_tokens));
    return SS_ENUMERIC;
  }
  f->skipped = 0;
  if (!isfinite(f->gnorm2)) {
    if (c->precision != RCFG_FP16) {
      snprintf(err, errlen, "gradient norm is not finite at step %lld; stopping",
               (long long)st->step + 1);
      return SS_ENUMERIC;
    }
    /* fp16 overflow: skip the update, halve the scale; the data is consumed */
    f->skipped = 1;
    st->loss_scale *= 0.5;
    st->good_steps = 0;
  }
  f->gnorm = sqrt(f->gnorm2) / S;
  if (f->skipped) {
    st->skipped_steps++;
    return 0;
  }
  if (sh->nmicro > 1)
    trn_noise_update(&st->noise, f->ctl[1] / sh->nmicro / (S * S), f->gnorm * f->gnorm, sh->mb,
                     sh->B);
  if (r->world > 1) {
    int64_t opt_step = st->step + 1 - st->skipped_steps;
    trn_optim_step(&r->optim, &r->model, f->lr, c->optimizer.beta1, c->optimizer.beta2,
                   c->optimizer.eps, c->train.weight_decay,
                   kern__step_scale(f->gnorm2, S, c->train.grad_clip), NULL, (int)opt_step);
    int rc = trn_dp_after_step(r, err, errlen);
    if (rc)
      return rc;
  }
  if (c->precision == RCFG_FP16 && ++st->good_steps >= SCALE_GROWTH_STEPS) {
    st->loss_scale *= 2.0;
    st->good_steps = 0;
  }
  return 0;
}

/* The step's line (common/events.h). */
static void report_step(run *r, const shape *sh, trn_ckpt_state *st, const step_figs *f) {
  double bn;
  int fp16 = r->cfg->precision == RCFG_FP16;
  trn_val none = {0};
  TRN_EMIT(
      r->out, step, .step = trn_i(st->step), .tokens = trn_i(st->tokens),
      .train_loss = trn_d(f->loss), .lr = trn_d(f->lr),
      .grad_norm = f->skipped ? trn_null() : trn_d(f->gnorm),
      .b_noise = trn_noise_value(&st->noise, &bn) == 0 ? trn_d(bn) : none,
      .loss_scale = fp16 ? trn_d(st->loss_scale) : none, .skipped = fp16 ? trn_b(f->skipped) : none,
      .host_syncs = count_syncs ? trn_i(host_syncs) : none,
      .tok_per_s = trn_d((double)sh->step_tokens / f->dt), .wall_s = trn_d(now() - r->started));
}

/* The validation loss after the state's step (rank 0's, shared: the
 * ranks' weights are the same) and its line. */
static int eval_step(run *r, const trn_ckpt_state *st, double *val_loss, char *err, size_t errlen) {
  *val_loss = r->rank == 0 ? evaluate(r) : 0.0;
  int rc = trn_dp_share(r, val_loss, err, errlen);
  if (rc)
    return rc;
  TRN_EMIT(r->out, eval, .step = trn_i(st->step), .tokens = trn_i(st->tokens),
           .val_loss = trn_d(*val_loss));
  return 0;
}

/* After a step that began at token `before`: the checkpoint every
 * checkpoint.every_tokens (and one before stopping), and a wsd branch
 * point's kept checkpoint at the steps asked for. 0, or an SS_E* code. */
static int save_points(run *r, trn_ckpt_state *st, int64_t before, int stopping, char *err,
                       size_t errlen) {
  int want_ckpt =
      crossed(before, st->tokens, r->cfg->checkpoint.every_tokens) || (stopping && r->ckpt_dir[0]);
  int keep = 0;
  for (int i = 0; i < r->nkeep_steps; i++)
    keep |= r->keep_steps[i] == st->step;
  if (want_ckpt || keep)
    trn_loader_get_pos(r->train, &st->train_pos);
  int rc = 0;
  if (keep)
    rc = trn_dp_save(r, st, save_branch, err, errlen);
  if (!rc && want_ckpt)
    rc = trn_dp_save(r, st, save, err, errlen);
  return rc;
}

/* One optimizer step: forward-backward, reduction, update, its line. */
static int train_step(run *r, const shape *sh, trn_ckpt_state *st, step_figs *f, char *err,
                      size_t errlen) {
  double t0 = now();
  trn_model *m = &r->model;
  f->lr = lr_at(r->cfg, (double)st->tokens);
  f->S = (float)st->loss_scale;
  /* the step's scalars stay on the backend (step_acc: loss, the
   * micro-batches' and the whole gradient's sums of squares) until the
   * step's one read in reduce */
  host_syncs = 0;
  r->k.ops->zero(&r->k, m->step_acc, 3 * sizeof(double));
  forward_backward(r, sh, st, f->S);
  int rc = reduce(r, st, f, err, errlen);
  if (!rc)
    rc = update(r, sh, st, f, err, errlen);
  if (rc)
    return rc;
  st->step++;
  st->tokens += sh->step_tokens;
  f->dt = now() - t0;
  report_step(r, sh, st, f);
  return 0;
}

/* The run's done line. */
static void report_done(run *r, const trn_ckpt_state *st, double val_loss, double wall_s) {
  rcfg_shape s = rcfg_shape_of(r->cfg);
  double fpt = rcfg_flops_per_token(&s);
  int dp = r->world > 1; /* per rank: with ZeRO-1 each holds its shard */
  trn_val none = {0};
  TRN_EMIT(r->out, done, .final_val_loss = trn_d(val_loss), .params = trn_i(rcfg_params(&s)),
           .nonembedding_params = trn_i(rcfg_nonembedding_params(&s)),
           .flops = trn_d(fpt * (double)st->tokens),
           .flops_6nd = trn_d(6.0 * (double)rcfg_nonembedding_params(&s) * (double)st->tokens),
           .tokens = trn_i(st->tokens), .steps = trn_i(st->step), .wall_s = trn_d(wall_s),
           .peak_rss_bytes = trn_i(peak_rss_bytes()),
           .peak_device_bytes = r->cuda ? trn_i((long long)r->cuda->peak_bytes(&r->k)) : none,
           .world_size = dp ? trn_i(r->world) : none,
           .optimizer_state_bytes = dp ? trn_i((long long)r->optim.state_bytes) : none,
           .grad_buckets = dp ? trn_i(r->buckets) : none);
}

/* The run stops after the step one of the ranks was asked to stop at. */
static int stopped(run *r, const trn_ckpt_state *st, char *err, size_t errlen) {
  if (!stop_signal) /* another rank had the signal: this one stops with it */
    stop_signal = SIGTERM;
  snprintf(err, errlen, "stopped by signal %d after step %lld%s", (int)stop_signal,
           (long long)st->step,
           r->ckpt_dir[0] ? "; resume with --resume and the checkpoint directory"
                          : " (no checkpoint.dir: nothing saved)");
  return SS_ETERM;
}

static int train_loop(run *r, const char *resume_dir, int64_t resume_max_step, char *err,
                      size_t errlen) {
  const rcfg *c = r->cfg;
  shape sh = shape_of(r);
  trn_ckpt_state st;
  int rc = start_state(r, resume_dir, resume_max_step, &st, err, errlen);
  if (rc)
    return rc;
  double t_start = now();
  long long prof_steps = 0; /* steps run here, and their wall time (SCALESWEEP_PROFILE_OPS) */
  double prof_s = 0.0;
  trn_opprof_pause(0);
  double val_loss = NAN;
  int64_t val_at = -1; /* step of the last evaluation */
  while (st.step < sh.steps) {
    int64_t before = st.tokens;
    step_figs f;
    if ((rc = train_step(r, &sh, &st, &f, err, errlen)) != 0)
      return rc;
    prof_steps++, prof_s += f.dt;
    if (crossed(before, st.tokens, c->eval.every_tokens) || st.step == sh.steps) {
      if ((rc = eval_step(r, &st, &val_loss, err, errlen)) != 0)
        return rc;
      val_at = st.step;
      if (!isfinite(val_loss)) {
        snprintf(err, errlen, "validation loss is %g at step %lld; stopping", val_loss,
                 (long long)st.step);
        return SS_ENUMERIC;
      }
    }
    /* a signal during the last step lets the run finish normally; the
     * ranks stop together, at the step one of them was asked to */
    int stopping = f.ctl[2] > 0 && st.step < sh.steps;
    if ((rc = save_points(r, &st, before, stopping, err, errlen)) != 0)
      return rc;
    if (stopping)
      return stopped(r, &st, err, errlen);
  }
  /* resumed from a checkpoint written after the last step's evaluation */
  if (val_at != st.step && (rc = eval_step(r, &st, &val_loss, err, errlen)) != 0)
    return rc;
  trn_opprof_report(stderr, prof_steps, prof_s);
  report_done(r, &st, val_loss, now() - t_start);
  return 0;
}

kern_prec trn_kern_prec(rcfg_prec p) {
  return p == RCFG_BF16 ? KERN_BF16 : p == RCFG_FP16 ? KERN_FP16 : KERN_FP32;
}

/* The options' checks that need no backend: a directory for the
 * checkpoints asked for. 0, or SS_EINVAL with err. */
static int check_dirs(const run *r, const rcfg *cfg, char *err, size_t errlen) {
  if (cfg->checkpoint.every_tokens > 0 && !r->ckpt_dir[0]) {
    snprintf(err, errlen,
             "$.checkpoint.dir: missing; checkpoint.every_tokens > 0 needs a directory\nHINT: "
             "set checkpoint.dir, or pass --checkpoint-dir DIR");
    return SS_EINVAL;
  }
  if (r->nkeep_steps > 0 && !r->ckpt_dir[0]) {
    snprintf(err, errlen,
             "--keep-steps: the branch points' checkpoints need a directory\nHINT: "
             "set checkpoint.dir, or pass --checkpoint-dir DIR");
    return SS_EINVAL;
  }
  return 0;
}

/* The kernels' backend: CUDA's module, loaded only here (a CPU run never
 * maps the CUDA libraries), or the CPU's. 0, or SS_EIO with err. */
static int open_backend(run *r, const trn_train_opts *opts, char *err, size_t errlen) {
  const rcfg *cfg = r->cfg;
  if (strcmp(cfg->backend, "cuda") != 0) {
    kern_cpu_init(&r->k, trn_kern_prec(cfg->precision), cfg->threads);
    return 0;
  }
  const kern_cuda_module *m = kern_cuda_load(err, errlen);
  if (!m)
    return SS_EIO;
  /* of the devices the worker leaves visible (CUDA_VISIBLE_DEVICES, the
   * run's GPUs), this rank's place among this host's ranks */
  if (m->init(&r->k, trn_kern_prec(cfg->precision), opts->local_rank, err, errlen) != 0)
    return SS_EIO;
  r->cuda = m;
  r->device = opts->local_rank;
  m->set_tf32(&r->k, cfg->tf32); /* resolved: on for fp32 unless "tf32": false */
  return 0;
}

/* The model, its optimizer (ZeRO-1: this rank's shard of the state), the
 * micro-batch buffer and the validation windows (evaluation reuses the
 * training micro-batch buffers, at least one window). 0, or SS_ENOMEM. */
static int alloc_model(run *r, char *err, size_t errlen) {
  const rcfg *cfg = r->cfg;
  rcfg_shape s = rcfg_shape_of(cfg);
  int mb = cfg->train.micro_batch_size, T = cfg->model.seq_len;
  r->nval = (int)(cfg->eval.tokens / T);
  int rc =
      trn_model_init(&r->model, &r->k, &s, mb, cfg->memory.recompute, cfg->train.batch_size > mb);
  int q8 = strcmp(cfg->optimizer.name, "adamw8bit") == 0;
  if (!rc && cfg->optimizer.zero) {
    trn_optim_shards(&r->model, r->world, r->shard);
    rc = trn_optim_init_shard(&r->optim, &r->model, q8, r->shard[r->rank], r->shard[r->rank + 1]);
  } else if (!rc) {
    rc = trn_optim_init(&r->optim, &r->model, q8);
  }
  r->batch = malloc(((size_t)mb * T + 1) * sizeof(int32_t));
  r->val_tok = malloc(((size_t)r->nval * T + 1) * sizeof(int32_t));
  if (rc || !r->batch || !r->val_tok) {
    snprintf(err, errlen,
             "out of memory allocating the model (%lld parameters, micro-batch "
             "%d x %d tokens)",
             (long long)rcfg_params(&s), mb, T);
    return SS_ENOMEM;
  }
  trn_loader_next(r->val, r->val_tok, (size_t)r->nval * T + 1);
  return 0;
}

static void free_run(run *r) {
  trn_dp_close(r);
  free(r->batch);
  free(r->val_tok);
  free(r->config_json);
  trn_optim_free(&r->optim);
  trn_model_free(&r->model);
  trn_loader_free(r->train);
  trn_loader_free(r->val);
  trn_lexicon_free(r->lex);
  if (r->cuda)
    r->cuda->close(&r->k);
}

int trn_train(const rcfg *cfg, const trn_train_opts *opts, FILE *out, char *err, size_t errlen) {
  run r;
  memset(&r, 0, sizeof r);
  r.started = now();
  r.cfg = cfg;
  r.out = out;
  r.ckpt_dir_flag = opts->checkpoint_dir;
  r.ckpt_dir = opts->checkpoint_dir ? opts->checkpoint_dir : cfg->checkpoint.dir;
  r.branch_from = opts->branch_from;
  r.keep_steps = opts->keep_steps;
  r.nkeep_steps = opts->nkeep_steps;
  r.data_dirs = opts->data_dirs;
  r.ndata_dirs = opts->confine_data ? (opts->ndata_dirs > 0 ? opts->ndata_dirs : 0) : SPATH_ANY;
  r.world = cfg->world_size;
  r.rank = opts->rank > 0 ? opts->rank : 0;
  err[0] = 0;
  int rc = check_dirs(&r, cfg, err, errlen);
  if (!rc)
    rc = open_backend(&r, opts, err, errlen);
  if (rc)
    goto done;
  count_host_syncs(&r.k);
  trn_opprof_install(&r.k);
  r.config_json = rcfg_to_json(cfg);
  if (r.config_json) /* the text printed once: the hash is of it */
    rcfg_hash_text(r.config_json, r.config_hash);
  if (!r.config_json) {
    snprintf(err, errlen, "out of memory printing the run config");
    rc = SS_ENOMEM;
    goto done;
  }
  if ((rc = open_data(&r, err, errlen)) != 0 || (rc = alloc_model(&r, err, errlen)) != 0)
    goto done;
  emit_config(&r);
  if ((rc = trn_dp_open(&r, opts, err, errlen)) != 0)
    goto done;
  rc = train_loop(&r, opts->resume_dir, opts->resume_max_step, err, errlen);

done:
  if (rc)
    TRN_EMIT(out, error, .message = trn_s(err));
  free_run(&r);
  return rc;
}

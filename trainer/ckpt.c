#include "trainer/ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "runcfg/runcfg.h"

#define HDR_INTS 256

enum {
  H_MAGIC,
  H_VERSION,
  H_LAYERS,
  H_DMODEL,
  H_HEADS,
  H_SEQ,
  H_VOCAB,
  H_Q8,
  H_PREC,
  H_CONFIG_LEN
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

#define FNV_INIT 0xcbf29ce484222325ULL

/* The serialised training state: fixed-width fields in a fixed order. */
typedef struct state_rec {
  int64_t step, tokens, good_steps, skipped_steps, noise_n;
  double loss_scale, noise_decay, noise_g2, noise_s;
  uint64_t rng[4], offset;
  int32_t word, in_word, carry, pad;
  uint64_t nparams, optim_bytes;
} state_rec;

/* Writes through f and folds the bytes into the running checksum h. */
static void put(fio_atomic *f, const void *p, size_t n, uint64_t *h) {
  *h = fnv1a(*h, p, n);
  fio_atomic_write(f, p, n);
}

/* A full filesystem: nothing was changed (the kept checkpoints stay). */
static int no_space(const char *path, int e, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s", path, strerror(e));
  return TRN_CKPT_NO_SPACE;
}

/* A write to path that failed with errno e: a full filesystem's own code
 * (no_space), else "path: what: reason" and SS_EIO. */
static int write_failed(const char *path, const char *what, int e, char *err, size_t errlen) {
  if (e == ENOSPC || e == EDQUOT)
    return no_space(path, e, err, errlen);
  snprintf(err, errlen, "%s: %s: %s", path, what, strerror(e));
  return SS_EIO;
}

/* Temporary files of this directory's earlier writers (a trainer killed
 * while writing): they would hold space a full disk needs. A checkpoint
 * directory belongs to one run, and a run has one live trainer. */
static void remove_stale_temps(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  static const char prefix[] = TRN_CKPT_FILE ".tmp.";
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, sizeof prefix - 1) != 0)
      continue;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
}

/* The header's ints: what the file is, the model's shape, and how long
 * the config that follows the state is. */
static void fill_header(int32_t *hdr, const trn_model *m, const trn_optim *o, size_t clen) {
  hdr[H_MAGIC] = TRN_CKPT_MAGIC;
  hdr[H_VERSION] = TRN_CKPT_VERSION;
  hdr[H_LAYERS] = m->shape.n_layer;
  hdr[H_DMODEL] = m->shape.d_model;
  hdr[H_HEADS] = m->shape.n_head;
  hdr[H_SEQ] = m->shape.seq_len;
  hdr[H_VOCAB] = m->shape.vocab_size;
  hdr[H_Q8] = o->q8;
  hdr[H_PREC] = m->k->prec;
  hdr[H_CONFIG_LEN] = (int32_t)clen;
}

static void rec_from_state(state_rec *r, const trn_ckpt_state *st, const trn_model *m,
                           const trn_optim *o) {
  memset(r, 0, sizeof *r);
  r->step = st->step;
  r->tokens = st->tokens;
  r->good_steps = st->good_steps;
  r->skipped_steps = st->skipped_steps;
  r->loss_scale = st->loss_scale;
  r->noise_decay = st->noise.decay;
  r->noise_g2 = st->noise.ema_g2;
  r->noise_s = st->noise.ema_s;
  r->noise_n = st->noise.n;
  memcpy(r->rng, st->train_pos.rng, sizeof r->rng);
  r->offset = st->train_pos.offset;
  r->word = st->train_pos.word;
  r->in_word = st->train_pos.in_word;
  r->carry = st->carry;
  r->nparams = m->nparams;
  r->optim_bytes = o->state_bytes;
}

/* The file's body in its order: header, state, config, parameters,
 * optimizer state, then the checksum of all of them. buf holds the larger
 * of the parameters and the optimizer state. */
static void write_body(fio_atomic *f, const char *config_json, const trn_model *m,
                       const trn_optim *o, const trn_ckpt_state *st, char *buf) {
  int32_t hdr[HDR_INTS] = {0};
  size_t clen = strlen(config_json);
  fill_header(hdr, m, o, clen);
  state_rec r;
  rec_from_state(&r, st, m, o);
  size_t pbytes = m->nparams * sizeof(float);
  uint64_t h = FNV_INIT;
  put(f, hdr, sizeof hdr, &h);
  put(f, &r, sizeof r, &h);
  put(f, config_json, clen, &h);
  m->k->ops->to_host(m->k, buf, m->params, pbytes);
  put(f, buf, pbytes, &h);
  trn_optim_save(o, buf);
  put(f, buf, o->state_bytes, &h);
  uint64_t trailer = h;
  fio_atomic_write(f, &trailer, sizeof trailer);
}

/* Makes the written file the newest checkpoint, the newest so far the
 * previous one; or aborts it on a failed write. */
static int keep_written(fio_atomic *f, const char *dir, const char *path, char *err,
                        size_t errlen) {
  /* the new file is whole and on disk before the older ones move: a full
   * disk (ENOSPC at write or at fsync) or a crash leaves both kept ones */
  if (!f->failed && fsync(f->fd) != 0) {
    f->failed = 1;
    f->err = errno;
  }
  if (f->failed) {
    int e = f->err;
    fio_atomic_abort(f);
    return write_failed(path, "write failed", e, err, errlen);
  }
  /* the newest becomes the previous one; a crash before the commit leaves
   * only that, which a resume finds */
  char prev[4200];
  snprintf(prev, sizeof prev, "%s/%s", dir, TRN_CKPT_PREV_FILE);
  if (rename(path, prev) != 0 && errno != ENOENT) {
    snprintf(err, errlen, "%s: cannot keep it as %s: %s", path, prev, strerror(errno));
    fio_atomic_abort(f);
    return SS_EIO;
  }
  return fio_atomic_commit(f, err, errlen);
}

int trn_ckpt_save(const char *dir, const char *config_json, const trn_model *m, const trn_optim *o,
                  const trn_ckpt_state *st, char *path_out, size_t path_len, char *err,
                  size_t errlen) {
  if (fio_mkdirs(dir, 0755) != 0)
    return write_failed(dir, "cannot create checkpoint directory", errno, err, errlen);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, TRN_CKPT_FILE);
  size_t pbytes = m->nparams * sizeof(float);
  char *buf = malloc(pbytes > o->state_bytes ? pbytes : o->state_bytes);
  if (!buf)
    return SS_ENOMEM;
  remove_stale_temps(dir);
  fio_atomic f;
  int rc = fio_atomic_open(&f, path, err, errlen);
  if (rc) {
    free(buf);
    return errno == ENOSPC || errno == EDQUOT ? no_space(path, errno, err, errlen) : rc;
  }
  write_body(&f, config_json, m, o, st, buf);
  free(buf);
  if ((rc = keep_written(&f, dir, path, err, errlen)) != 0)
    return rc;
  snprintf(path_out, path_len, "%s", path);
  return 0;
}

/* Finds the first place where two JSON values differ: writes its path
 * (such as $.train.lr) and both values; returns 1 when they differ. */
static int first_diff(const cJSON *a, const cJSON *b, const char *path, char *out, size_t outlen) {
  if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
    const cJSON *c;
    cJSON_ArrayForEach(c, a) {
      char sub[512];
      snprintf(sub, sizeof sub, "%s.%s", path, c->string);
      if (first_diff(c, cJSON_GetObjectItemCaseSensitive(b, c->string), sub, out, outlen))
        return 1;
    }
    cJSON_ArrayForEach(c, b) {
      if (!cJSON_GetObjectItemCaseSensitive(a, c->string)) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.%s", path, c->string);
        return first_diff(NULL, c, sub, out, outlen);
      }
    }
    return 0;
  }
  if (a && b && cJSON_Compare(a, b, 1))
    return 0;
  char *as = a ? cJSON_PrintUnformatted(a) : NULL, *bs = b ? cJSON_PrintUnformatted(b) : NULL;
  snprintf(out, outlen, "%s: checkpoint has %s, config has %s", path, as ? as : "nothing",
           bs ? bs : "nothing");
  free(as);
  free(bs);
  return 1;
}

/* The config sections that must match for a checkpoint to resume (threads,
 * world_size, optimizer.zero and the checkpoint settings may change;
 * results then differ at most in the summation order). */
/* Drops from train the keys a branch may change (trn_ckpt_load_branch), as
 * runcfg's schema marks them, so the planner's grouping and this check
 * cannot disagree: a wsd branch its tokens (RCFG_TRAJ_ALONG); a
 * constant-rate branch (a critical batch size rung) also its batch size,
 * micro-batch size and rate (RCFG_TRAJ_RULED). The other compared sections
 * hold no such key. */
static void drop_branch_free(cJSON *train, int branch) {
  unsigned free_traj = branch == 2 ? RCFG_SHARES(RCFG_TRAJ_ALONG) | RCFG_SHARES(RCFG_TRAJ_RULED)
                       : branch    ? RCFG_SHARES(RCFG_TRAJ_ALONG)
                                   : 0;
  cJSON *it = train ? train->child : NULL;
  while (free_traj && it) {
    cJSON *next = it->next;
    char path[96];
    snprintf(path, sizeof path, "train.%s", it->string ? it->string : "");
    if (free_traj & RCFG_SHARES(rcfg_key_traj(path)))
      cJSON_Delete(cJSON_DetachItemViaPointer(train, it));
    it = next;
  }
}

static int same_run(const char *path, const char *a_json, const char *b_json, int branch, char *err,
                    size_t errlen) {
  static const char *const keys[] = {"model", "data", "train", "optimizer", "precision"};
  cJSON *a = cJSON_Parse(a_json), *b = cJSON_Parse(b_json);
  int rc = 0;
  drop_branch_free(cJSON_GetObjectItemCaseSensitive(a, "train"), branch);
  drop_branch_free(cJSON_GetObjectItemCaseSensitive(b, "train"), branch);
  /* ZeRO-1 shards the state, it does not change it: the checkpoint holds it
   * whole, and resumes sharded or not */
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(a, "optimizer"), "zero");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "optimizer"), "zero");
  if (!a || !b) {
    snprintf(err, errlen, "%s: the config stored in the checkpoint is not valid JSON", path);
    rc = SS_ECORRUPT;
  }
  for (size_t i = 0; !rc && i < sizeof keys / sizeof *keys; i++) {
    char where[64], diff[1024];
    snprintf(where, sizeof where, "$.%s", keys[i]);
    if (first_diff(cJSON_GetObjectItemCaseSensitive(a, keys[i]),
                   cJSON_GetObjectItemCaseSensitive(b, keys[i]), where, diff, sizeof diff)) {
      snprintf(err, errlen,
               branch == 2 ? "%s: written by a run with another config: %s\nHINT: a constant-rate "
                             "branch differs from the run it starts from only in train.tokens, "
                             "batch_size, micro_batch_size and lr"
               : branch    ? "%s: written by a run with another config: %s\nHINT: a branch starts "
                             "from a wsd run that differs from it only in train.tokens"
                           : "%s: written by a run with another config: %s\nHINT: resume with the "
                             "config that wrote the checkpoint",
               path, diff);
      rc = SS_EINVAL;
    }
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  return rc;
}

/* The header's magic number and version, each with its hint: 0, or
 * SS_ECORRUPT with the message in err. */
static int check_id(const char *path, const int32_t *hdr, char *err, size_t errlen) {
  static const struct {
    int at; /* index of the header's int32 */
    const char *what;
    int32_t want;
    const char *hint;
  } id[] = {
      {H_MAGIC, "magic number", TRN_CKPT_MAGIC,
       "not a scalesweep checkpoint (a token shard or another program's file?)"},
      {H_VERSION, "version", TRN_CKPT_VERSION, "written by another scalesweep version"},
  };
  for (size_t i = 0; i < sizeof id / sizeof id[0]; i++)
    if (hdr[id[i].at] != id[i].want) {
      snprintf(err, errlen, "%s: byte %zu: %s is %d, expected %d\nHINT: %s", path,
               (size_t)id[i].at * sizeof *hdr, id[i].what, hdr[id[i].at], id[i].want, id[i].hint);
      return SS_ECORRUPT;
    }
  return 0;
}

int trn_ckpt_peek_step(const char *path, int64_t *step, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open checkpoint: %s", path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  int32_t hdr[HDR_INTS];
  state_rec r;
  int ok = fread(hdr, sizeof hdr, 1, f) == 1 && fread(&r, sizeof r, 1, f) == 1;
  fclose(f);
  /* the same messages as trn_ckpt_load's */
  if (!ok) {
    snprintf(err, errlen, "%s: truncated: a checkpoint has at least %zu bytes", path,
             sizeof hdr + sizeof r + sizeof(uint64_t));
    return SS_ECORRUPT;
  }
  int rc = check_id(path, hdr, err, errlen);
  if (rc)
    return rc;
  *step = r.step;
  return 0;
}

/* A checkpoint read whole, with its header and state copied out (the
 * buffer's alignment is the file's); clen is set once the header checks. */
typedef struct ckpt_file {
  char *buf;
  long size;
  int32_t hdr[HDR_INTS];
  state_rec r;
  size_t clen;
} ckpt_file;

/* The bytes before the parameters and after them, in every checkpoint. */
#define FIXED_BYTES (sizeof(int32_t) * HDR_INTS + sizeof(state_rec) + sizeof(uint64_t))

static int read_whole(const char *path, ckpt_file *cf, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open checkpoint: %s", path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = size > 0 ? malloc((size_t)size) : NULL;
  if (size > 0 && !buf) {
    fclose(f);
    return SS_ENOMEM;
  }
  size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
  fclose(f);
  if (size < 0 || got != (size_t)size || (size_t)size < FIXED_BYTES) {
    snprintf(err, errlen, "%s: truncated: %ld bytes, a checkpoint has at least %zu", path, size,
             FIXED_BYTES);
    free(buf);
    return SS_ECORRUPT;
  }
  cf->buf = buf;
  cf->size = size;
  memcpy(cf->hdr, buf, sizeof cf->hdr);
  memcpy(&cf->r, buf + sizeof cf->hdr, sizeof cf->r);
  return 0;
}

/* The file is what its header says it is: the magic number and version,
 * the size its lengths add up to, and the checksum. */
static int check_layout(const char *path, ckpt_file *cf, char *err, size_t errlen) {
  int rc = check_id(path, cf->hdr, err, errlen);
  if (rc)
    return rc;
  cf->clen = (size_t)(uint32_t)cf->hdr[H_CONFIG_LEN];
  const state_rec *r = &cf->r;
  /* the lengths the file declares: a forged one must not wrap the sum
   * around to the file's size (then the config copy read past it) */
  size_t want;
  int wraps = __builtin_mul_overflow(r->nparams, sizeof(float), &want) ||
              __builtin_add_overflow(want, r->optim_bytes, &want) ||
              __builtin_add_overflow(want, FIXED_BYTES + cf->clen, &want);
  if (wraps) {
    snprintf(err, errlen,
             "%s: size is %ld bytes, its header describes %llu parameters and %llu optimizer "
             "bytes, more than any file holds (corrupt)",
             path, cf->size, (unsigned long long)r->nparams, (unsigned long long)r->optim_bytes);
    return SS_ECORRUPT;
  }
  if ((size_t)cf->size != want) {
    snprintf(err, errlen, "%s: size is %ld bytes, its header describes %zu (truncated?)", path,
             cf->size, want);
    return SS_ECORRUPT;
  }
  uint64_t stored;
  memcpy(&stored, cf->buf + cf->size - sizeof stored, sizeof stored);
  if (fnv1a(FNV_INIT, cf->buf, (size_t)cf->size - sizeof stored) != stored) {
    snprintf(err, errlen, "%s: checksum mismatch: the file is corrupt", path);
    return SS_ECORRUPT;
  }
  return 0;
}

/* The config the checkpoint's run had, as a string the caller frees;
 * NULL when out of memory. */
static char *stored_config(const ckpt_file *cf) {
  char *cjson = malloc(cf->clen + 1);
  if (cjson) {
    memcpy(cjson, cf->buf + sizeof cf->hdr + sizeof cf->r, cf->clen);
    cjson[cf->clen] = 0;
  }
  return cjson;
}

/* same_run's branch argument: 0 a resume, 1 a wsd branch, 2 a
 * constant-rate one. */
static int branch_kind(const rcfg *branch) {
  return !branch ? 0 : strcmp(branch->train.schedule, "constant") == 0 ? 2 : 1;
}

/* A critical batch size rung: the same stream from the checkpoint's
 * tokens on, at its own batch size and rate, both past the warmup (which
 * the configs share: it is counted in tokens). */
static int check_rebatch(const char *path, const rcfg *branch, const state_rec *r, char *err,
                         size_t errlen) {
  int64_t bt = (int64_t)branch->train.batch_size * branch->model.seq_len;
  if ((double)r->tokens < branch->train.warmup_tokens) {
    snprintf(err, errlen,
             "%s: holds %lld tokens, inside the warmup ($.train.warmup_tokens %.0f): a "
             "constant-rate branch starts after it",
             path, (long long)r->tokens, branch->train.warmup_tokens);
    return SS_EINVAL;
  }
  if (r->tokens % bt != 0) {
    snprintf(err, errlen,
             "%s: holds %lld tokens, not a whole number of this run's batches ($.train."
             "batch_size %d x seq_len %d = %lld tokens)\nHINT: branch at a multiple of the "
             "batch",
             path, (long long)r->tokens, branch->train.batch_size, branch->model.seq_len,
             (long long)bt);
    return SS_EINVAL;
  }
  return 0;
}

/* A wsd branch: both runs still in their stable phase at the checkpoint's
 * step, so their learning rates, and so their weights, agree up to it. */
static int check_stable(const char *path, const rcfg *branch, const rcfg *parent,
                        const state_rec *r, char *err, size_t errlen) {
  int64_t own = rcfg_wsd_stable_steps(branch), theirs = rcfg_wsd_stable_steps(parent);
  if (r->step > own || r->step > theirs) {
    snprintf(err, errlen,
             "%s: holds step %lld, after the stable phase of %s (%lld steps): the learning "
             "rates differ before it\nHINT: branch from a checkpoint at or before step %lld",
             path, (long long)r->step, r->step > own ? "this run" : "the run that wrote it",
             (long long)(r->step > own ? own : theirs), (long long)(own < theirs ? own : theirs));
    return SS_EINVAL;
  }
  return 0;
}

/* Whether the run branch may start from this checkpoint of the run whose
 * config is cjson; *rebatch is set for a constant-rate branch, whose steps
 * count in its own batches. */
static int check_branch(const char *path, const rcfg *branch, const char *cjson, const state_rec *r,
                        int *rebatch, char *err, size_t errlen) {
  rcfg parent;
  char perr[512];
  if (rcfg_parse(cjson, path, &parent, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "%s: the config stored in the checkpoint is not a valid run config: %s",
             path, perr);
    return SS_ECORRUPT;
  }
  if (strcmp(branch->train.schedule, "constant") == 0) {
    int rc = check_rebatch(path, branch, r, err, errlen);
    *rebatch = rc == 0;
    return rc;
  }
  if (strcmp(branch->train.schedule, "wsd") != 0) {
    snprintf(err, errlen,
             "%s: $.train.schedule: found \"%s\", expected \"wsd\" or \"constant\": only a "
             "warmup-stable-decay or constant-rate run can start from another run's checkpoint",
             path, branch->train.schedule);
    return SS_EINVAL;
  }
  return check_stable(path, branch, &parent, r, err, errlen);
}

/* The state's sizes fit the model and optimizer built for this run. */
static int check_fits(const char *path, const state_rec *r, const trn_model *m, const trn_optim *o,
                      char *err, size_t errlen) {
  if (r->nparams != m->nparams || r->optim_bytes != o->state_bytes) {
    snprintf(err, errlen,
             "%s: holds %llu parameters and %llu optimizer bytes, expected %zu "
             "and %zu",
             path, (unsigned long long)r->nparams, (unsigned long long)r->optim_bytes, m->nparams,
             o->state_bytes);
    return SS_ECORRUPT;
  }
  if (r->carry < 0 || r->carry >= m->shape.vocab_size) {
    /* the next window's first input indexes the embedding */
    snprintf(err, errlen,
             "%s: the carried token is %d, expected one below vocab_size %d "
             "(corrupt)",
             path, r->carry, m->shape.vocab_size);
    return SS_ECORRUPT;
  }
  return 0;
}

static void state_from_rec(trn_ckpt_state *st, const state_rec *r) {
  st->step = r->step;
  st->tokens = r->tokens;
  st->good_steps = r->good_steps;
  st->skipped_steps = r->skipped_steps;
  st->loss_scale = r->loss_scale;
  st->noise.decay = r->noise_decay;
  st->noise.ema_g2 = r->noise_g2;
  st->noise.ema_s = r->noise_s;
  st->noise.n = r->noise_n;
  memcpy(st->train_pos.rng, r->rng, sizeof r->rng);
  st->train_pos.offset = r->offset;
  st->train_pos.word = r->word;
  st->train_pos.in_word = r->in_word;
  st->carry = r->carry;
}

/* Copies a checked checkpoint into the model, the optimizer and st;
 * rebatch is the constant-rate branch that counts its own steps, or NULL. */
static void restore(const ckpt_file *cf, const rcfg *rebatch, trn_model *m, trn_optim *o,
                    trn_ckpt_state *st) {
  size_t pbytes = m->nparams * sizeof(float);
  const char *p = cf->buf + sizeof cf->hdr + sizeof cf->r + cf->clen;
  m->k->ops->from_host(m->k, m->params, p, pbytes);
  trn_model_sync_low(m);
  trn_optim_load(o, p + pbytes);
  state_from_rec(st, &cf->r);
  if (rebatch) {
    /* its own steps: as many of its batches as the tokens make; the
     * optimizer's count (its bias correction, whose moments were averaged
     * over the other run's updates) goes on from the other run's, so the
     * offset between them may be negative */
    st->step = cf->r.tokens / ((int64_t)rebatch->train.batch_size * rebatch->model.seq_len);
    st->skipped_steps = st->step - (cf->r.step - cf->r.skipped_steps);
  }
}

/* trn_ckpt_load, or with branch set trn_ckpt_load_branch's check (the
 * stable steps of both runs: branch for the caller's, the file's own) */
static int load(const char *path, const char *config_json, const rcfg *branch, trn_model *m,
                trn_optim *o, trn_ckpt_state *st, char *err, size_t errlen) {
  ckpt_file cf;
  int rc = read_whole(path, &cf, err, errlen);
  if (rc)
    return rc;
  rc = check_layout(path, &cf, err, errlen);
  char *cjson = rc ? NULL : stored_config(&cf);
  if (!rc && !cjson)
    rc = SS_ENOMEM;
  if (!rc)
    rc = same_run(path, cjson, config_json, branch_kind(branch), err, errlen);
  int rebatch = 0;
  if (!rc && branch)
    rc = check_branch(path, branch, cjson, &cf.r, &rebatch, err, errlen);
  if (!rc)
    rc = check_fits(path, &cf.r, m, o, err, errlen);
  if (!rc)
    restore(&cf, rebatch ? branch : NULL, m, o, st);
  free(cjson);
  free(cf.buf);
  return rc;
}

int trn_ckpt_load(const char *path, const char *config_json, trn_model *m, trn_optim *o,
                  trn_ckpt_state *st, char *err, size_t errlen) {
  return load(path, config_json, NULL, m, o, st, err, errlen);
}

int trn_ckpt_load_branch(const char *path, const rcfg *cfg, const char *config_json, trn_model *m,
                         trn_optim *o, trn_ckpt_state *st, char *err, size_t errlen) {
  return load(path, config_json, cfg, m, o, st, err, errlen);
}

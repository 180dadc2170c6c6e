#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "trainer/data.h"
#include "trainer/prepare.h"

#define MAX_SHARDS 1000000 /* names stay 6 digits, so they sort by number */

static int make_dirs(const char *dir, char *err, size_t errlen) {
  if (!*dir) {
    snprintf(err, errlen, "output directory: empty name");
    return SS_EINVAL;
  }
  char *d = strdup(dir);
  if (!d) {
    snprintf(err, errlen, "%s: out of memory", dir);
    return SS_ENOMEM;
  }
  for (char *s = d + 1;; s++) {
    if (*s != '/' && *s != 0)
      continue;
    char c = *s;
    *s = 0;
    if (mkdir(d, 0777) < 0 && errno != EEXIST) {
      int e = errno;
      snprintf(err, errlen, "%s: cannot create directory: %s", d, strerror(e));
      free(d);
      return e == ENOENT ? SS_ENOENT : SS_EIO;
    }
    *s = c;
    if (c == 0)
      break;
  }
  free(d);
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: exists and is not a directory", dir);
    return SS_EINVAL;
  }
  return 0;
}

static int shard_path(char *buf, size_t n, const char *out_dir, const char *split, int i, char *err,
                      size_t errlen) {
  int w = snprintf(buf, n, TRN_SHARD_PATH_FMT, out_dir, split, i);
  if (w < 0 || (size_t)w >= n) {
    snprintf(err, errlen, "%s: output directory name too long", out_dir);
    return SS_EINVAL;
  }
  return 0;
}

/* Unlinks split_NNNNNN.bin for NNNNNN = from, from + 1, ... up to the first
 * one missing: the shards of an earlier run that this one did not rewrite. */
static int remove_stale(const char *out_dir, const char *split, int from, char *err,
                        size_t errlen) {
  char path[4096];
  for (int i = from;; i++) {
    int rc = shard_path(path, sizeof path, out_dir, split, i, err, errlen);
    if (rc)
      return rc;
    if (unlink(path) < 0) {
      if (errno == ENOENT)
        return 0;
      snprintf(err, errlen, "%s: cannot remove this stale shard: %s", path, strerror(errno));
      return SS_EIO;
    }
  }
}

/* The input files read one after another as one byte stream. Sizes are
 * taken up front (they fix the split); a file that then yields fewer bytes
 * is an error. */
typedef struct byte_source {
  const char *const *inputs;
  uint64_t *sizes;
  int n;
  int cur;
  FILE *f;
  uint64_t left; /* bytes still to read from inputs[cur] */
} byte_source;

static int source_measure(byte_source *src, uint64_t *total, char *err, size_t errlen) {
  *total = 0;
  for (int i = 0; i < src->n; i++) {
    struct stat st;
    if (stat(src->inputs[i], &st) < 0) {
      int e = errno;
      snprintf(err, errlen, "%s: %s", src->inputs[i], strerror(e));
      return e == ENOENT ? SS_ENOENT : SS_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
      snprintf(err, errlen, "%s: not a regular file", src->inputs[i]);
      return SS_EINVAL;
    }
    src->sizes[i] = (uint64_t)st.st_size;
    *total += src->sizes[i];
  }
  return 0;
}

static int source_read(byte_source *src, uint16_t *dst, size_t n, char *err, size_t errlen) {
  unsigned char buf[1 << 16];
  while (n > 0) {
    if (!src->f) {
      src->f = fopen(src->inputs[src->cur], "rb");
      if (!src->f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", src->inputs[src->cur], strerror(e));
        return e == ENOENT ? SS_ENOENT : SS_EIO;
      }
      src->left = src->sizes[src->cur];
    }
    size_t want = n < sizeof buf ? n : sizeof buf;
    if (want > src->left)
      want = (size_t)src->left;
    if (want > 0) {
      size_t got = fread(buf, 1, want, src->f);
      if (got != want) {
        snprintf(err, errlen,
                 "%s: read failed %llu bytes before the end measured at the "
                 "start (%s)",
                 src->inputs[src->cur], (unsigned long long)src->left,
                 ferror(src->f) ? strerror(errno) : "file shrank");
        return SS_EIO;
      }
      for (size_t i = 0; i < got; i++)
        dst[i] = buf[i];
      dst += got;
      n -= got;
      src->left -= got;
    }
    if (src->left == 0) {
      fclose(src->f);
      src->f = NULL;
      src->cur++;
    }
  }
  return 0;
}

static int write_split(byte_source *src, const char *out_dir, const char *split, uint64_t ntok,
                       size_t shard_tokens, uint16_t *buf, int *nshards, char *err, size_t errlen) {
  char path[4096];
  int i = 0;
  for (; ntok > 0; i++) {
    size_t m = ntok < shard_tokens ? (size_t)ntok : shard_tokens;
    int rc = source_read(src, buf, m, err, errlen);
    if (!rc)
      rc = shard_path(path, sizeof path, out_dir, split, i, err, errlen);
    if (!rc)
      rc = trn_shard_write(path, buf, m, err, errlen);
    if (rc)
      return rc;
    ntok -= m;
  }
  *nshards = i;
  return remove_stale(out_dir, split, i, err, errlen);
}

int trn_data_prepare(const char *out_dir, const char *const *inputs, int ninputs,
                     double val_fraction, size_t shard_tokens, trn_data_summary *summary, char *err,
                     size_t errlen) {
  if (ninputs < 1) {
    snprintf(err, errlen, "no input files, expected at least one");
    return SS_EINVAL;
  }
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    snprintf(err, errlen, "val_fraction: %g, expected 0 <= fraction < 1", val_fraction);
    return SS_EINVAL;
  }
  if (shard_tokens < 1 || shard_tokens > INT32_MAX) {
    snprintf(err, errlen, "shard_tokens: %zu, expected 1..%d", shard_tokens, INT32_MAX);
    return SS_EINVAL;
  }
  byte_source src = {.inputs = inputs, .n = ninputs};
  src.sizes = calloc((size_t)ninputs, sizeof *src.sizes);
  if (!src.sizes) {
    snprintf(err, errlen, "out of memory");
    return SS_ENOMEM;
  }
  uint64_t total;
  int rc = source_measure(&src, &total, err, errlen);
  uint64_t nval = (uint64_t)floor(val_fraction * (double)total + 0.5);
  uint64_t ntrain = total - nval;
  if (!rc && ntrain == 0) {
    snprintf(err, errlen,
             "the inputs hold %llu bytes, leaving no training tokens at "
             "val_fraction %g",
             (unsigned long long)total, val_fraction);
    rc = SS_EINVAL;
  }
  if (!rc && (ntrain - 1) / shard_tokens + 1 > MAX_SHARDS) {
    snprintf(err, errlen,
             "shard_tokens: %zu cuts %llu training tokens into more than %d "
             "shards; expected at least %llu",
             shard_tokens, (unsigned long long)ntrain, MAX_SHARDS,
             (unsigned long long)((ntrain - 1) / MAX_SHARDS + 1));
    rc = SS_EINVAL;
  }
  uint64_t largest = ntrain > nval ? ntrain : nval;
  size_t bufn = largest < shard_tokens ? (size_t)largest : shard_tokens;
  uint16_t *buf = rc ? NULL : malloc(bufn * sizeof *buf);
  if (!rc && !buf) {
    snprintf(err, errlen, "shard buffer of %zu tokens: out of memory", bufn);
    rc = SS_ENOMEM;
  }
  trn_data_summary s = {.train_tokens = ntrain, .val_tokens = nval};
  if (!rc)
    rc = make_dirs(out_dir, err, errlen);
  if (!rc)
    rc = write_split(&src, out_dir, "train", ntrain, shard_tokens, buf, &s.train_shards, err,
                     errlen);
  if (!rc)
    rc = write_split(&src, out_dir, "val", nval, shard_tokens, buf, &s.val_shards, err, errlen);
  if (src.f)
    fclose(src.f);
  free(src.sizes);
  free(buf);
  if (!rc && summary)
    *summary = s;
  return rc;
}

static int write_synth_split(const trn_lexicon *lx, const char *out_dir, const char *split,
                             uint64_t ntok, uint64_t seed, char *err, size_t errlen) {
  char path[4096];
  int rc = shard_path(path, sizeof path, out_dir, split, 0, err, errlen);
  if (rc)
    return rc;
  trn_loader *l;
  if ((rc = trn_loader_open_synth(lx, seed, &l, err, errlen)) != 0)
    return rc;
  uint16_t *tok = malloc((size_t)ntok * sizeof *tok);
  if (!tok) {
    trn_loader_free(l);
    snprintf(err, errlen, "%s: %llu tokens: out of memory", path, (unsigned long long)ntok);
    return SS_ENOMEM;
  }
  int32_t chunk[4096];
  for (size_t done = 0; done < ntok;) {
    size_t m = ntok - done < 4096 ? (size_t)(ntok - done) : 4096;
    trn_loader_next(l, chunk, m);
    for (size_t i = 0; i < m; i++)
      tok[done + i] = (uint16_t)chunk[i];
    done += m;
  }
  trn_loader_free(l);
  rc = trn_shard_write(path, tok, (size_t)ntok, err, errlen);
  free(tok);
  return rc ? rc : remove_stale(out_dir, split, 1, err, errlen);
}

int trn_data_synth(const char *out_dir, const trn_synth_params *p, uint64_t train_tokens,
                   uint64_t val_tokens, uint64_t train_seed, uint64_t val_seed,
                   trn_data_summary *summary, char *err, size_t errlen) {
  if (train_tokens < 1 || train_tokens > INT32_MAX) {
    snprintf(err, errlen, "train_tokens: %llu, expected 1..%d", (unsigned long long)train_tokens,
             INT32_MAX);
    return SS_EINVAL;
  }
  if (val_tokens < 1 || val_tokens > INT32_MAX) {
    snprintf(err, errlen, "val_tokens: %llu, expected 1..%d", (unsigned long long)val_tokens,
             INT32_MAX);
    return SS_EINVAL;
  }
  trn_lexicon *lx;
  int rc = trn_lexicon_new(p, &lx, err, errlen);
  if (rc)
    return rc;
  rc = make_dirs(out_dir, err, errlen);
  if (!rc)
    rc = write_synth_split(lx, out_dir, "train", train_tokens, train_seed, err, errlen);
  if (!rc)
    rc = write_synth_split(lx, out_dir, "val", val_tokens, val_seed, err, errlen);
  trn_lexicon_free(lx);
  if (!rc && summary)
    *summary = (trn_data_summary){
        .train_tokens = train_tokens, .val_tokens = val_tokens, .train_shards = 1, .val_shards = 1};
  return rc;
}

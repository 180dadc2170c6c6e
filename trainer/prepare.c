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
#include "trainer/rng.h"

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

/* A stretch of one input: its bytes [off, off + len). */
typedef struct segment {
  int file;
  uint64_t off;
  uint64_t len;
} segment;

/* The inputs read as one byte stream, segment after segment: whole files
 * in order, or the pieces of trn_data_prepare_chunks in their drawn order.
 * Sizes are taken up front (they fix the split); a file that then yields
 * fewer bytes is an error. */
typedef struct byte_source {
  const char *const *inputs;
  uint64_t *sizes;
  int n;
  segment *segs;
  size_t nseg, cap;
  size_t cur;
  FILE *f;
  int open_file;  /* the input f reads, -1 for none */
  uint64_t left;  /* bytes still to read from segs[cur], once positioned */
  int positioned; /* f is at segs[cur]'s next byte */
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

static int shrank(const byte_source *src, int file, uint64_t at, FILE *f, char *err,
                  size_t errlen) {
  snprintf(err, errlen, "%s: read failed at byte %llu of the %llu measured at the start (%s)",
           src->inputs[file], (unsigned long long)at, (unsigned long long)src->sizes[file],
           ferror(f) ? strerror(errno) : "file shrank");
  return SS_EIO;
}

static int source_open(byte_source *src, int file, char *err, size_t errlen) {
  if (src->f && src->open_file == file)
    return 0;
  if (src->f)
    fclose(src->f);
  src->open_file = -1;
  src->f = fopen(src->inputs[file], "rb");
  if (!src->f) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open: %s", src->inputs[file], strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  src->open_file = file;
  return 0;
}

static int source_read(byte_source *src, uint16_t *dst, size_t n, char *err, size_t errlen) {
  unsigned char buf[1 << 16];
  while (n > 0) {
    const segment *g = &src->segs[src->cur];
    if (!src->positioned) {
      int rc = source_open(src, g->file, err, errlen);
      if (rc)
        return rc;
      if (fseeko(src->f, (off_t)g->off, SEEK_SET) != 0) {
        snprintf(err, errlen, "%s: cannot seek to byte %llu: %s", src->inputs[g->file],
                 (unsigned long long)g->off, strerror(errno));
        return SS_EIO;
      }
      src->left = g->len;
      src->positioned = 1;
    }
    size_t want = n < sizeof buf ? n : sizeof buf;
    if (want > src->left)
      want = (size_t)src->left;
    if (want > 0) {
      size_t got = fread(buf, 1, want, src->f);
      if (got != want)
        return shrank(src, g->file, g->off + g->len - src->left + got, src->f, err, errlen);
      for (size_t i = 0; i < got; i++)
        dst[i] = buf[i];
      dst += got;
      n -= got;
      src->left -= got;
    }
    if (src->left == 0) {
      src->cur++;
      src->positioned = 0;
    }
  }
  return 0;
}

static int push_piece(byte_source *src, segment g, char *err, size_t errlen) {
  if (src->nseg == src->cap) {
    size_t nc = src->cap ? 2 * src->cap : 1024;
    segment *ns = realloc(src->segs, nc * sizeof *ns);
    if (!ns) {
      snprintf(err, errlen, "%s: the index of its pieces: out of memory", src->inputs[g.file]);
      return SS_ENOMEM;
    }
    src->segs = ns;
    src->cap = nc;
  }
  src->segs[src->nseg++] = g;
  return 0;
}

/* Cuts input `file` into pieces of at least chunk bytes, each ending just
 * after a newline (or at 8 * chunk bytes where a line runs on, or at the
 * end of the file), appended to src's segments. */
static int cut_pieces(byte_source *src, int file, uint64_t chunk, char *err, size_t errlen) {
  int rc = source_open(src, file, err, errlen);
  if (rc)
    return rc;
  unsigned char buf[1 << 16];
  uint64_t size = src->sizes[file], pos = 0, start = 0;
  while (pos < size) {
    size_t want = size - pos < sizeof buf ? (size_t)(size - pos) : sizeof buf;
    size_t got = fread(buf, 1, want, src->f);
    if (got != want)
      return shrank(src, file, pos + got, src->f, err, errlen);
    for (size_t i = 0; i < got; i++) {
      uint64_t len = pos + i + 1 - start; /* the piece, if it ends after this byte */
      if ((buf[i] == '\n' && len >= chunk) || len >= 8 * chunk) {
        if ((rc = push_piece(src, (segment){file, start, len}, err, errlen)))
          return rc;
        start += len;
      }
    }
    pos += got;
  }
  if (start < size)
    rc = push_piece(src, (segment){file, start, size - start}, err, errlen);
  return rc;
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
  return trn_data_prepare_chunks(out_dir, inputs, ninputs, 0, 0, val_fraction, shard_tokens,
                                 summary, err, errlen);
}

int trn_data_prepare_chunks(const char *out_dir, const char *const *inputs, int ninputs,
                            uint64_t chunk_bytes, uint64_t seed, double val_fraction,
                            size_t shard_tokens, trn_data_summary *summary, char *err,
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
  byte_source src = {.inputs = inputs, .n = ninputs, .open_file = -1};
  src.sizes = calloc((size_t)ninputs, sizeof *src.sizes);
  if (!src.sizes) {
    snprintf(err, errlen, "out of memory");
    return SS_ENOMEM;
  }
  uint64_t total;
  int rc = source_measure(&src, &total, err, errlen);
  for (int i = 0; !rc && i < ninputs; i++) /* whole files in order, or their pieces */
    rc = chunk_bytes ? cut_pieces(&src, i, chunk_bytes, err, errlen)
                     : push_piece(&src, (segment){i, 0, src.sizes[i]}, err, errlen);
  if (!rc && chunk_bytes > 0) { /* Fisher-Yates with the trainer's generator */
    uint64_t st[4];
    trn_rng_seed(st, seed);
    for (size_t i = src.nseg; i > 1; i--) {
      size_t j = (size_t)(trn_rng_next(st) % (uint64_t)i);
      segment t = src.segs[i - 1];
      src.segs[i - 1] = src.segs[j];
      src.segs[j] = t;
    }
  }
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
  free(src.segs);
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

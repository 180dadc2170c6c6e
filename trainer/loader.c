#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/shardpath.h"
#include "trainer/data.h"
#include "trainer/rng.h"

#define HEADER_BYTES (TRN_SHARD_HEADER_INTS * 4)

typedef struct shard {
  char *path;
  const uint8_t *map; /* the whole file, read-only */
  size_t size;
  uint64_t ntokens;
  uint64_t start; /* global offset of its first token */
  char sha256[65];
} shard;

enum { KIND_SHARDS, KIND_SYNTH };

struct trn_loader {
  int kind;
  /* shards */
  shard *files;
  int nfiles;
  uint64_t total;
  int cur;          /* file holding the next token */
  uint64_t in_file; /* its index in that file */
  /* synthetic */
  const trn_lexicon *lx;
  double *cdf; /* (nwords) cumulative p_k, last entry exactly 1 */
  int nwords;
  /* both: offset, and for synthetic the rest of the position */
  trn_loader_pos pos;
};

static uint32_t get_le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void hex(const unsigned char *md, unsigned n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (unsigned i = 0; i < n; i++) {
    out[2 * i] = digits[md[i] >> 4];
    out[2 * i + 1] = digits[md[i] & 15];
  }
  out[2 * n] = 0;
}

/* Opens f->path (as `real`, its resolved form) and maps the whole file
 * into f->map. Confined to dirs (ndirs != SPATH_ANY), the open file must
 * still lie under them (a component swapped for a symlink since the path
 * check is caught here) before anything is said about it. */
static int map_shard(shard *f, const char *real, const char *const *dirs, int ndirs, char *err,
                     size_t errlen) {
  int confined = ndirs != SPATH_ANY;
  int fd = open(real, O_RDONLY | O_CLOEXEC | (confined ? O_NOFOLLOW : 0));
  if (fd < 0) {
    int e = errno;
    if (confined)
      snprintf(err, errlen, "%s: cannot open (it changed since it was matched?)", f->path);
    else
      snprintf(err, errlen, "%s: cannot open: %s", f->path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  if (confined && spath_fd_under(fd, dirs, ndirs) == 0) {
    snprintf(err, errlen, "%s: resolves outside the allowed data directories", f->path);
    close(fd);
    return SS_EINVAL;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    snprintf(err, errlen, "%s: cannot stat: %s", f->path, strerror(errno));
    close(fd);
    return SS_EIO;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", f->path);
    close(fd);
    return SS_EINVAL;
  }
  if (st.st_size < HEADER_BYTES) {
    snprintf(err, errlen,
             "%s: truncated: file has %lld bytes, shorter than the %d-byte "
             "header (not an llm.c token shard?)",
             f->path, (long long)st.st_size, HEADER_BYTES);
    close(fd);
    return SS_ECORRUPT;
  }
  f->size = (size_t)st.st_size;
  void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED) {
    snprintf(err, errlen, "%s: cannot map: %s", f->path, strerror(e));
    return SS_EIO;
  }
  f->map = map;
  return 0;
}

/* The mapped shard's header: magic number, version, and a token count
 * that matches the file's size; sets f->ntokens. */
static int check_shard_header(shard *f, char *err, size_t errlen) {
  static const struct {
    size_t at; /* byte offset of the little-endian uint32 */
    const char *what;
    uint32_t want;
    const char *hint;
  } id[] = {
      {0, "magic number", TRN_SHARD_MAGIC, "not an llm.c token shard?"},
      {4, "version", TRN_SHARD_VERSION, "a shard format this build does not read"},
  };
  for (size_t i = 0; i < sizeof id / sizeof id[0]; i++) {
    uint32_t got = get_le32(f->map + id[i].at);
    if (got != id[i].want) {
      snprintf(err, errlen, "%s: byte %zu: %s is %u, expected %u (%s)", f->path, id[i].at,
               id[i].what, got, id[i].want, id[i].hint);
      return SS_ECORRUPT;
    }
  }
  int32_t count = (int32_t)get_le32(f->map + 8);
  if (count < 0) {
    snprintf(err, errlen, "%s: byte 8: token count is %d, expected >= 0", f->path, count);
    return SS_ECORRUPT;
  }
  uint64_t want = 2 * (uint64_t)count;
  uint64_t have = f->size - HEADER_BYTES;
  if (have != want) {
    snprintf(err, errlen,
             "%s: %s: header says %d tokens (%llu bytes after the %d-byte "
             "header), file has %llu",
             f->path, have < want ? "truncated" : "trailing bytes", count, (unsigned long long)want,
             HEADER_BYTES, (unsigned long long)have);
    return SS_ECORRUPT;
  }
  f->ntokens = (uint64_t)count;
  return 0;
}

/* Every token below vocab_size (all are when it exceeds what 16 bits hold). */
static int check_shard_tokens(const shard *f, int vocab_size, char *err, size_t errlen) {
  const uint8_t *t = f->map + HEADER_BYTES;
  for (uint64_t i = 0; vocab_size <= UINT16_MAX && i < f->ntokens; i++) {
    unsigned v = (unsigned)t[2 * i] | (unsigned)t[2 * i + 1] << 8;
    if ((long)v >= (long)vocab_size) {
      snprintf(err, errlen, "%s: token %llu (byte %llu) is %u, expected < vocab_size %d", f->path,
               (unsigned long long)i, (unsigned long long)(HEADER_BYTES + 2 * i), v, vocab_size);
      return SS_EINVAL;
    }
  }
  return 0;
}

/* Maps f->path (opened as `real`, its resolved form, under dirs unless
 * ndirs is SPATH_ANY), checks the header, the size and every token, and
 * records the file's SHA-256. */
static int open_shard(shard *f, const char *real, const char *const *dirs, int ndirs,
                      int vocab_size, char *err, size_t errlen) {
  int rc = map_shard(f, real, dirs, ndirs, err, errlen);
  if (!rc)
    rc = check_shard_header(f, err, errlen);
  if (!rc)
    rc = check_shard_tokens(f, vocab_size, err, errlen);
  if (rc)
    return rc;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  if (!EVP_Digest(f->map, f->size, md, &mdlen, EVP_sha256(), NULL)) {
    snprintf(err, errlen, "%s: SHA-256 failed (OpenSSL)", f->path);
    return SS_EIO;
  }
  hex(md, mdlen, f->sha256);
  return 0;
}

int trn_loader_open_shards(const char *glob_pattern, int vocab_size, trn_loader **out, char *err,
                           size_t errlen) {
  return trn_loader_open_shards_in(glob_pattern, NULL, SPATH_ANY, vocab_size, out, err, errlen);
}

int trn_loader_open_shards_in(const char *glob_pattern, const char *const *dirs, int ndirs,
                              int vocab_size, trn_loader **out, char *err, size_t errlen) {
  *out = NULL;
  if (vocab_size < 1) {
    snprintf(err, errlen, "vocab_size: %d, expected >= 1", vocab_size);
    return SS_EINVAL;
  }
  spath_list g;
  char why[512];
  int rc = spath_expand(glob_pattern, dirs, ndirs, &g, why, sizeof why);
  if (rc) {
    snprintf(err, errlen, "'%s': %s", glob_pattern, why);
    spath_list_free(&g);
    return rc;
  }
  trn_loader *l = calloc(1, sizeof *l);
  if (l)
    l->files = calloc(g.n, sizeof *l->files);
  if (!l || !l->files) {
    free(l);
    spath_list_free(&g);
    snprintf(err, errlen, "'%s': out of memory", glob_pattern);
    return SS_ENOMEM;
  }
  l->kind = KIND_SHARDS;
  for (size_t i = 0; i < g.n && rc == 0; i++) {
    shard *f = &l->files[l->nfiles++];
    f->path = strdup(g.match[i]);
    if (!f->path) {
      snprintf(err, errlen, "%s: out of memory", g.match[i]);
      rc = SS_ENOMEM;
      break;
    }
    rc = open_shard(f, g.resolved[i], dirs, ndirs, vocab_size, err, errlen);
    f->start = l->total;
    l->total += f->ntokens;
  }
  if (rc == 0 && l->total == 0) {
    snprintf(err, errlen, "'%s': the %d matching shard(s) hold no tokens", glob_pattern, l->nfiles);
    rc = SS_EINVAL;
  }
  spath_list_free(&g);
  if (rc) {
    trn_loader_free(l);
    return rc;
  }
  trn_loader_pos start = {.word = -1};
  trn_loader_set_pos(l, &start);
  *out = l;
  return 0;
}

int trn_loader_open_synth(const trn_lexicon *lx, uint64_t stream_seed, trn_loader **out, char *err,
                          size_t errlen) {
  *out = NULL;
  trn_loader *l = calloc(1, sizeof *l);
  int w = trn_lexicon_nwords(lx);
  if (l)
    l->cdf = malloc((size_t)w * sizeof *l->cdf);
  if (!l || !l->cdf) {
    free(l);
    snprintf(err, errlen, "synthetic loader over %d words: out of memory", w);
    return SS_ENOMEM;
  }
  l->kind = KIND_SYNTH;
  l->lx = lx;
  l->nwords = w;
  double c = 0;
  for (int k = 0; k < w; k++) {
    c += trn_lexicon_prob(lx, k);
    l->cdf[k] = c;
  }
  l->cdf[w - 1] = 1.0;
  trn_rng_seed(l->pos.rng, stream_seed);
  l->pos.word = -1;
  *out = l;
  return 0;
}

void trn_loader_free(trn_loader *l) {
  if (!l)
    return;
  for (int i = 0; i < l->nfiles; i++) {
    if (l->files[i].map)
      munmap((void *)l->files[i].map, l->files[i].size);
    free(l->files[i].path);
  }
  free(l->files);
  free(l->cdf);
  free(l);
}

/* The first k with u < cdf[k]; u < 1 = cdf[nwords - 1] guarantees one. */
static int draw_word(const trn_loader *l, double u) {
  int lo = 0, hi = l->nwords - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (u < l->cdf[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

static void next_synth(trn_loader *l, int32_t *out, size_t n) {
  trn_loader_pos *p = &l->pos;
  for (size_t i = 0; i < n; i++) {
    if (p->word < 0) {
      p->word = draw_word(l, trn_rng_uniform(p->rng));
      p->in_word = 0;
    }
    if (p->in_word < trn_lexicon_len(l->lx, p->word)) {
      out[i] = trn_lexicon_word(l->lx, p->word)[p->in_word++];
    } else {
      out[i] = 0;
      p->word = -1;
      p->in_word = 0;
    }
  }
  p->offset += n;
}

static void next_shards(trn_loader *l, int32_t *out, size_t n) {
  while (n > 0) {
    const shard *f = &l->files[l->cur];
    uint64_t avail = f->ntokens - l->in_file;
    size_t take = avail < n ? (size_t)avail : n;
    const uint8_t *t = f->map + HEADER_BYTES + 2 * l->in_file;
    for (size_t i = 0; i < take; i++)
      out[i] = (int32_t)((unsigned)t[2 * i] | (unsigned)t[2 * i + 1] << 8);
    out += take;
    n -= take;
    l->in_file += take;
    l->pos.offset += take;
    while (l->in_file == l->files[l->cur].ntokens) {
      l->in_file = 0;
      if (++l->cur == l->nfiles) {
        l->cur = 0;
        l->pos.offset = 0;
      }
    }
  }
}

void trn_loader_next(trn_loader *l, int32_t *out, size_t n) {
  if (l->kind == KIND_SYNTH)
    next_synth(l, out, n);
  else
    next_shards(l, out, n);
}

void trn_loader_get_pos(const trn_loader *l, trn_loader_pos *pos) { *pos = l->pos; }

static int set_pos_shards(trn_loader *l, const trn_loader_pos *pos) {
  if (pos->offset >= l->total)
    return SS_ECORRUPT;
  int lo = 0, hi = l->nfiles - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (l->files[mid].start <= pos->offset)
      lo = mid;
    else
      hi = mid - 1;
  }
  while (l->files[lo].ntokens == 0 || pos->offset - l->files[lo].start >= l->files[lo].ntokens)
    lo++;
  l->cur = lo;
  l->in_file = pos->offset - l->files[lo].start;
  memset(&l->pos, 0, sizeof l->pos);
  l->pos.offset = pos->offset;
  l->pos.word = -1;
  return 0;
}

static int set_pos_synth(trn_loader *l, const trn_loader_pos *pos) {
  if (pos->word < -1 || pos->word >= l->nwords)
    return SS_ECORRUPT;
  if (pos->word >= 0 && (pos->in_word < 0 || pos->in_word > trn_lexicon_len(l->lx, pos->word)))
    return SS_ECORRUPT;
  if (!(pos->rng[0] | pos->rng[1] | pos->rng[2] | pos->rng[3]))
    return SS_ECORRUPT;
  l->pos = *pos;
  if (l->pos.word < 0)
    l->pos.in_word = 0;
  return 0;
}

int trn_loader_set_pos(trn_loader *l, const trn_loader_pos *pos) {
  return l->kind == KIND_SYNTH ? set_pos_synth(l, pos) : set_pos_shards(l, pos);
}

int trn_loader_nfiles(const trn_loader *l) { return l->nfiles; }

const char *trn_loader_file(const trn_loader *l, int i) {
  return i >= 0 && i < l->nfiles ? l->files[i].path : NULL;
}

const char *trn_loader_file_sha256(const trn_loader *l, int i) {
  return i >= 0 && i < l->nfiles ? l->files[i].sha256 : NULL;
}

uint64_t trn_loader_ntokens(const trn_loader *l) { return l->total; }

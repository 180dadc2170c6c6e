/* Token shards, the synthetic Zipf lexicon and the loaders (trainer/data.h,
 * trainer/prepare.h). */
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/err.h"
#include "trainer/data.h"
#include "trainer/prepare.h"
#include "trainer/rng.h"

static char tmpdir[256];
static char err[1024];

static const char *tmp_path(const char *name) { return check_path(tmpdir, name); }

static void patch_le32(const char *path, long at, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  int fd = open(path, O_WRONLY);
  CHECK(fd >= 0 && pwrite(fd, b, 4, at) == 4);
  close(fd);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void cleanup(void) { nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- shards ------------------------------------------------------------ */

static void test_shard_round_trip(void) {
  uint16_t tok[3] = {1, 2, 3};
  const char *path = tmp_path("tiny_000.bin");
  CHECK_INT_EQ(trn_shard_write(path, tok, 3, err, sizeof err), 0);
  CHECK(access(tmp_path("tiny_000.bin.tmp"), F_OK) != 0);
  trn_loader *l;
  CHECK_INT_EQ(trn_loader_open_shards(path, 256, &l, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_nfiles(l), 1);
  CHECK(strcmp(trn_loader_file(l, 0), path) == 0);
  CHECK_INT_EQ(trn_loader_ntokens(l), 3);
  /* sha256sum of the 1030-byte file: header (20240520, 1, 3, zeros) then
   * 01 00 02 00 03 00, computed independently with Python's hashlib. */
  static const char sha[] = "3ebd50e28771e617e8271cc6803f9db84c65c9486ef3d1c828c5481d5702543c";
  CHECK(strcmp(trn_loader_file_sha256(l, 0), sha) == 0);
  int32_t out[7];
  trn_loader_next(l, out, 7);
  int32_t want[7] = {1, 2, 3, 1, 2, 3, 1};
  CHECK(memcmp(out, want, sizeof out) == 0);
  trn_loader_free(l);

  enum { N = 70000 };
  uint16_t *big = malloc(N * sizeof *big);
  for (int i = 0; i < N; i++)
    big[i] = (uint16_t)(i * 7919u);
  path = tmp_path("big.bin");
  CHECK_INT_EQ(trn_shard_write(path, big, N, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_open_shards(path, 65536, &l, err, sizeof err), 0);
  int32_t *got = malloc(N * sizeof *got);
  trn_loader_next(l, got, N);
  int same = 1;
  for (int i = 0; i < N; i++)
    same &= got[i] == big[i];
  CHECK(same);
  trn_loader_free(l);
  free(got);
  free(big);
}

static int open_fails(const char *pattern, int vocab, int code, const char *needle) {
  trn_loader *l = NULL;
  int rc = trn_loader_open_shards(pattern, vocab, &l, err, sizeof err);
  CHECK_INT_EQ(rc, code);
  CHECK(l == NULL);
  if (!strstr(err, needle)) {
    fprintf(stderr, "message lacks '%s': %s\n", needle, err);
    return 0;
  }
  return rc == code;
}

static void test_shard_errors(void) {
  uint16_t tok[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const char *p = tmp_path("bad.bin");

  CHECK_INT_EQ(trn_shard_write(p, tok, 10, err, sizeof err), 0);
  patch_le32(p, 0, 12345);
  CHECK(open_fails(p, 256, SS_ECORRUPT, p));
  CHECK(strstr(err, "byte 0") && strstr(err, "12345") && strstr(err, "20240520"));

  CHECK_INT_EQ(trn_shard_write(p, tok, 10, err, sizeof err), 0);
  patch_le32(p, 4, 7);
  CHECK(open_fails(p, 256, SS_ECORRUPT, p));
  CHECK(strstr(err, "byte 4") && strstr(err, "version is 7"));

  CHECK_INT_EQ(trn_shard_write(p, tok, 10, err, sizeof err), 0);
  CHECK(truncate(p, 1024 + 15) == 0);
  CHECK(open_fails(p, 256, SS_ECORRUPT, p));
  CHECK(strstr(err, "truncated") && strstr(err, "10 tokens") && strstr(err, "has 15"));

  CHECK(truncate(p, 100) == 0);
  CHECK(open_fails(p, 256, SS_ECORRUPT, p));

  CHECK_INT_EQ(trn_shard_write(p, tok, 10, err, sizeof err), 0);
  CHECK(truncate(p, 1024 + 22) == 0);
  CHECK(open_fails(p, 256, SS_ECORRUPT, p));

  CHECK_INT_EQ(trn_shard_write(p, tok, 10, err, sizeof err), 0);
  CHECK(open_fails(p, 8, SS_EINVAL, p));
  CHECK(strstr(err, "token 8") && strstr(err, "< vocab_size 8"));

  const char *none = tmp_path("nothing_here_*.bin");
  CHECK(open_fails(none, 256, SS_ENOENT, none));
}

/* Two shards (5 and 3 tokens, plus an empty one between them): positions
 * saved mid-file, at a boundary and after wrapping restore the same stream. */
static void test_shard_positions(void) {
  uint16_t a[5] = {10, 11, 12, 13, 14}, c[3] = {20, 21, 22};
  CHECK_INT_EQ(trn_shard_write(tmp_path("pos_0.bin"), a, 5, err, sizeof err), 0);
  CHECK_INT_EQ(trn_shard_write(tmp_path("pos_1.bin"), NULL, 0, err, sizeof err), 0);
  CHECK_INT_EQ(trn_shard_write(tmp_path("pos_2.bin"), c, 3, err, sizeof err), 0);
  trn_loader *l;
  CHECK_INT_EQ(trn_loader_open_shards(tmp_path("pos_*.bin"), 256, &l, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_nfiles(l), 3);
  CHECK_INT_EQ(trn_loader_ntokens(l), 8);
  int32_t seq[8] = {10, 11, 12, 13, 14, 20, 21, 22};
  int32_t got[40];
  trn_loader_next(l, got, 40);
  int ok = 1;
  for (int i = 0; i < 40; i++)
    ok &= got[i] == seq[i % 8];
  CHECK(ok);

  for (int skip = 0; skip < 20; skip++) {
    trn_loader_pos pos, pos2;
    trn_loader_set_pos(l, &(trn_loader_pos){.word = -1});
    trn_loader_next(l, got, (size_t)skip);
    trn_loader_get_pos(l, &pos);
    CHECK_INT_EQ(pos.offset, skip % 8);
    int32_t first[19], again[19];
    trn_loader_next(l, first, 19);
    CHECK_INT_EQ(trn_loader_set_pos(l, &pos), 0);
    trn_loader_next(l, again, 19);
    CHECK(memcmp(first, again, sizeof first) == 0);
    trn_loader_get_pos(l, &pos2);
    CHECK_INT_EQ(pos2.offset, (skip + 19) % 8);
    for (int i = 0; i < 19; i++)
      ok &= first[i] == seq[(skip + i) % 8];
    CHECK(ok);
  }
  trn_loader_pos past = {.offset = 8, .word = -1};
  CHECK_INT_EQ(trn_loader_set_pos(l, &past), SS_ECORRUPT);
  trn_loader_free(l);
}

/* ---- the lexicon ------------------------------------------------------- */

static trn_lexicon *lexicon(int letters, int words, int min_len, int max_len, double zipf,
                            uint64_t seed) {
  trn_synth_params p = {letters, words, min_len, max_len, zipf, seed};
  trn_lexicon *lx = NULL;
  int rc = trn_lexicon_new(&p, &lx, err, sizeof err);
  if (rc)
    fprintf(stderr, "trn_lexicon_new: %s\n", err);
  CHECK(lx != NULL);
  return lx;
}

static int lexicon_rc(int letters, int words, int min_len, int max_len, double zipf) {
  trn_synth_params p = {letters, words, min_len, max_len, zipf, 1};
  trn_lexicon *lx = NULL;
  int rc = trn_lexicon_new(&p, &lx, err, sizeof err);
  trn_lexicon_free(lx);
  return rc;
}

static void test_lexicon_params(void) {
  /* 2 letters, length 2: 4 possible words; 3 words need 6. */
  CHECK_INT_EQ(lexicon_rc(2, 3, 2, 2, 1.0), SS_EINVAL);
  CHECK(strstr(err, "words: 3") && strstr(err, "only 4") && strstr(err, "least 6"));
  CHECK_INT_EQ(lexicon_rc(2, 2, 2, 2, 1.0), 0);
  /* 26 letters, lengths 2..2: 676 possible; 339 words need 678. */
  CHECK_INT_EQ(lexicon_rc(26, 339, 2, 2, 1.0), SS_EINVAL);
  CHECK(strstr(err, "676"));
  CHECK_INT_EQ(lexicon_rc(26, 338, 2, 2, 1.0), 0);
  /* 255^64 possible words must not overflow the count. */
  CHECK_INT_EQ(lexicon_rc(255, 1000, 1, 64, 1.0), 0);
  CHECK_INT_EQ(lexicon_rc(0, 10, 2, 8, 1.0), SS_EINVAL);
  CHECK(strstr(err, "letters"));
  CHECK_INT_EQ(lexicon_rc(256, 10, 2, 8, 1.0), SS_EINVAL);
  CHECK_INT_EQ(lexicon_rc(26, 0, 2, 8, 1.0), SS_EINVAL);
  CHECK(strstr(err, "words"));
  CHECK_INT_EQ(lexicon_rc(26, 10, 0, 8, 1.0), SS_EINVAL);
  CHECK(strstr(err, "min_len"));
  CHECK_INT_EQ(lexicon_rc(26, 10, 5, 4, 1.0), SS_EINVAL);
  CHECK(strstr(err, "max_len"));
  CHECK_INT_EQ(lexicon_rc(26, 10, 2, 65, 1.0), SS_EINVAL);
  CHECK_INT_EQ(lexicon_rc(26, 10, 2, 8, 0.0), SS_EINVAL);
  CHECK(strstr(err, "zipf"));
  CHECK_INT_EQ(lexicon_rc(26, 10, 2, 8, NAN), SS_EINVAL);
}

static void test_lexicon_shape(void) {
  trn_lexicon *lx = lexicon(3, 40, 1, 4, 1.3, 5);
  if (!lx)
    return;
  double sum = 0;
  int ok = 1;
  for (int k = 0; k < 40; k++) {
    int len = trn_lexicon_len(lx, k);
    const uint8_t *w = trn_lexicon_word(lx, k);
    ok &= len >= 1 && len <= 4;
    for (int i = 0; i < len; i++)
      ok &= w[i] >= 1 && w[i] <= 3;
    for (int j = 0; j < k; j++)
      ok &=
          !(trn_lexicon_len(lx, j) == len && memcmp(trn_lexicon_word(lx, j), w, (size_t)len) == 0);
    if (k > 0)
      ok &= trn_lexicon_prob(lx, k) < trn_lexicon_prob(lx, k - 1);
    sum += trn_lexicon_prob(lx, k);
  }
  CHECK(ok);
  CHECK_NEAR(sum, 1.0, 1e-14, 0);
  CHECK_NEAR(trn_lexicon_prob(lx, 1) / trn_lexicon_prob(lx, 0), pow(2, -1.3), 0, 1e-14);
  trn_lexicon_free(lx);
}

static void test_lexicon_determinism(void) {
  trn_lexicon *a = lexicon(26, 2000, 2, 8, 1.2, 1);
  trn_lexicon *b = lexicon(26, 2000, 2, 8, 1.2, 1);
  trn_lexicon *c = lexicon(26, 2000, 2, 8, 1.2, 2);
  if (a && b && c) {
    CHECK(trn_lexicon_digest(a) == trn_lexicon_digest(b));
    CHECK(trn_lexicon_digest(a) != trn_lexicon_digest(c));
    int same = 1;
    for (int k = 0; k < 2000; k++)
      same &= trn_lexicon_len(a, k) == trn_lexicon_len(b, k) &&
              memcmp(trn_lexicon_word(a, k), trn_lexicon_word(b, k),
                     (size_t)trn_lexicon_len(a, k)) == 0;
    CHECK(same);
  }
  trn_lexicon_free(a);
  trn_lexicon_free(b);
  trn_lexicon_free(c);
}

/* ---- block entropy by brute force --------------------------------------
 *
 * Every path of the stationary stream that fills n tokens: a start word k
 * and offset j (probability p_k / Z), then whole words (p_k each), cut at n
 * tokens. Equal blocks from different paths are merged before taking the
 * entropy. This shares nothing with synth.c's recursion but the lexicon. */

typedef struct bf {
  const trn_lexicon *lx;
  int n;
  unsigned char *blocks; /* (count, n) */
  double *prob;
  size_t count, cap;
} bf;

static int bf_n;

static int bf_cmp(const void *a, const void *b) { return memcmp(a, b, (size_t)bf_n); }

static void bf_walk(bf *s, unsigned char *buf, int pos, double prob) {
  if (pos >= s->n) {
    if (s->count == s->cap) {
      s->cap = s->cap ? 2 * s->cap : 1024;
      s->blocks = realloc(s->blocks, s->cap * (size_t)(s->n + 8));
    }
    unsigned char *rec = s->blocks + s->count++ * (size_t)(s->n + 8);
    memcpy(rec, buf, (size_t)s->n);
    memcpy(rec + s->n, &prob, sizeof prob);
    return;
  }
  for (int k = 0; k < trn_lexicon_nwords(s->lx); k++) {
    int len = trn_lexicon_len(s->lx, k), p = pos;
    const uint8_t *w = trn_lexicon_word(s->lx, k);
    for (int i = 0; i <= len && p < s->n; i++)
      buf[p++] = i < len ? w[i] : 0;
    bf_walk(s, buf, p, prob * trn_lexicon_prob(s->lx, k));
  }
}

static double bf_block_entropy(const trn_lexicon *lx, int n) {
  bf s = {.lx = lx, .n = n};
  unsigned char buf[64];
  double z = 0;
  for (int k = 0; k < trn_lexicon_nwords(lx); k++)
    z += trn_lexicon_prob(lx, k) * (trn_lexicon_len(lx, k) + 1);
  for (int k = 0; k < trn_lexicon_nwords(lx); k++) {
    int len = trn_lexicon_len(lx, k);
    const uint8_t *w = trn_lexicon_word(lx, k);
    for (int j = 0; j <= len; j++) {
      int p = 0;
      for (int i = j; i <= len && p < n; i++)
        buf[p++] = i < len ? w[i] : 0;
      bf_walk(&s, buf, p, trn_lexicon_prob(lx, k) / z);
    }
  }
  /* Sorting records whose first n bytes are the block groups equal blocks. */
  bf_n = n;
  size_t rec = (size_t)n + 8;
  qsort(s.blocks, s.count, rec, bf_cmp);
  double h = 0, g = 0, total = 0;
  for (size_t i = 0; i < s.count; i++) {
    double p;
    memcpy(&p, s.blocks + i * rec + n, sizeof p);
    total += p;
    if (i > 0 && memcmp(s.blocks + i * rec, s.blocks + (i - 1) * rec, (size_t)n) != 0) {
      h -= g * log(g);
      g = 0;
    }
    g += p;
  }
  h -= g * log(g);
  CHECK_NEAR(total, 1.0, 1e-13, 0);
  free(s.blocks);
  return h;
}

static void test_window_floor_brute_force(void) {
  struct {
    int letters, words, min_len, max_len;
    double zipf;
    uint64_t seed;
  } cases[] = {{3, 5, 1, 3, 1.1, 3}, {2, 6, 1, 3, 0.8, 9}, {2, 4, 2, 4, 1.5, 4}};
  int ns[] = {1, 2, 3, 4, 5, 7, 10, 12};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    trn_lexicon *lx = lexicon(cases[c].letters, cases[c].words, cases[c].min_len, cases[c].max_len,
                              cases[c].zipf, cases[c].seed);
    if (!lx)
      continue;
    double h1 = bf_block_entropy(lx, 1);
    for (size_t i = 1; i < sizeof ns / sizeof ns[0]; i++) {
      int t = ns[i] - 1;
      double want = (bf_block_entropy(lx, ns[i]) - h1) / t;
      /* Both sides are sums of a few thousand terms of size <= 10 nats in
       * doubles: agreement to 1e-12 leaves room only for rounding. */
      CHECK_NEAR(trn_lexicon_window_floor(lx, t), want, 1e-12, 0);
    }
    CHECK(isnan(trn_lexicon_window_floor(lx, 0)));
    trn_lexicon_free(lx);
  }
}

static void test_window_floor_limit(void) {
  trn_lexicon *lx = lexicon(26, 4096, 2, 8, 1.2, 1);
  if (!lx)
    return;
  double h = trn_lexicon_entropy_rate(lx);
  double f64 = trn_lexicon_window_floor(lx, 64);
  double f256 = trn_lexicon_window_floor(lx, 256);
  double f1024 = trn_lexicon_window_floor(lx, 1024);
  CHECK(f64 > f256 && f256 > f1024 && f1024 > h);
  /* H_n - n h tends to a constant (the excess entropy) once n is many word
   * lengths, so the floor's excess over h falls as 1/T: 4x longer windows,
   * a quarter of the excess, to well within 1%. */
  CHECK_NEAR((f256 - h) * 256, (f64 - h) * 64, 0, 0.01);
  CHECK_NEAR((f1024 - h) * 1024, (f256 - h) * 256, 0, 0.01);
  trn_lexicon_free(lx);
}

/* ---- the synthetic stream ---------------------------------------------- */

static void test_synth_positions(void) {
  trn_lexicon *lx = lexicon(26, 500, 2, 8, 1.1, 11);
  if (!lx)
    return;
  trn_loader *l, *m;
  CHECK_INT_EQ(trn_loader_open_synth(lx, 42, &l, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_open_synth(lx, 42, &m, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_nfiles(l), 0);
  CHECK_INT_EQ(trn_loader_ntokens(l), 0);
  int32_t a[5000], b[5000];
  /* Position saved after every odd number of tokens, so most saves fall
   * inside a word, some at a separator. */
  int ok = 1;
  uint64_t drawn = 0;
  for (int step = 1; step < 400; step += 2) {
    trn_loader_pos pos;
    trn_loader_next(l, a, (size_t)step);
    drawn += (uint64_t)step;
    trn_loader_get_pos(l, &pos);
    ok &= pos.offset == drawn;
    trn_loader_next(l, a, 97);
    CHECK_INT_EQ(trn_loader_set_pos(m, &pos), 0);
    trn_loader_next(m, b, 97);
    ok &= memcmp(a, b, 97 * sizeof *a) == 0;
    CHECK_INT_EQ(trn_loader_set_pos(l, &pos), 0);
    trn_loader_next(l, b, 97);
    ok &= memcmp(a, b, 97 * sizeof *a) == 0;
    drawn += 97;
  }
  CHECK(ok);
  /* Reading in pieces equals reading at once. */
  trn_loader *x, *y;
  trn_loader_open_synth(lx, 7, &x, err, sizeof err);
  trn_loader_open_synth(lx, 7, &y, err, sizeof err);
  trn_loader_next(x, a, 5000);
  for (size_t done = 0, piece = 1; done < 5000; done += piece, piece = piece * 3 % 17 + 1)
    trn_loader_next(y, b + done, done + piece > 5000 ? 5000 - done : piece);
  CHECK(memcmp(a, b, sizeof a) == 0);
  trn_loader_free(y);
  trn_loader_open_synth(lx, 8, &y, err, sizeof err);
  trn_loader_next(y, b, 5000);
  CHECK(memcmp(a, b, sizeof a) != 0);

  trn_loader_pos bad;
  trn_loader_get_pos(x, &bad);
  bad.word = 500;
  CHECK_INT_EQ(trn_loader_set_pos(x, &bad), SS_ECORRUPT);
  bad.word = 0;
  bad.in_word = trn_lexicon_len(lx, 0) + 1;
  CHECK_INT_EQ(trn_loader_set_pos(x, &bad), SS_ECORRUPT);
  trn_loader_free(x);
  trn_loader_free(y);
  trn_loader_free(l);
  trn_loader_free(m);
  trn_lexicon_free(lx);
}

/* A hash set of the lexicon's words, to map decoded stream words back to
 * their ranks. */
typedef struct word_index {
  int *slot; /* open addressing, word + 1 */
  size_t mask;
} word_index;

static size_t word_hash(const int32_t *w, int len) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < len; i++)
    h = (h ^ (uint64_t)w[i]) * 1099511628211ULL;
  return (size_t)h;
}

static int word_find(const word_index *ix, const trn_lexicon *lx, const int32_t *w, int len,
                     int insert_k) {
  for (size_t s = word_hash(w, len) & ix->mask;; s = (s + 1) & ix->mask) {
    if (ix->slot[s] == 0) {
      if (insert_k >= 0)
        ix->slot[s] = insert_k + 1;
      return -1;
    }
    int k = ix->slot[s] - 1;
    const uint8_t *lw = trn_lexicon_word(lx, k);
    int same = trn_lexicon_len(lx, k) == len;
    for (int i = 0; same && i < len; i++)
      same = lw[i] == w[i];
    if (same)
      return k;
  }
}

static void test_synth_statistics(void) {
  enum { W = 3000, NTOK = 4000000 };
  trn_lexicon *lx = lexicon(26, W, 2, 6, 1.1, 7);
  if (!lx)
    return;
  word_index ix = {calloc(8192, sizeof(int)), 8191};
  for (int k = 0; k < W; k++) {
    int32_t w[8];
    for (int i = 0; i < trn_lexicon_len(lx, k); i++)
      w[i] = trn_lexicon_word(lx, k)[i];
    word_find(&ix, lx, w, trn_lexicon_len(lx, k), k);
  }
  trn_loader *l;
  trn_loader_open_synth(lx, 2024, &l, err, sizeof err);
  int32_t *t = malloc(NTOK * sizeof *t);
  trn_loader_next(l, t, NTOK);
  trn_loader_free(l);

  long *count = calloc(W, sizeof *count);
  long nwords = 0, unknown = 0, ntok = 0;
  double sum_loss = 0, sum_res2 = 0, h = trn_lexicon_entropy_rate(lx);
  /* The stream starts at a word boundary; the last, unfinished word is
   * dropped. */
  for (int start = 0, i = 0; i < NTOK; i++) {
    if (t[i] != 0)
      continue;
    int k = word_find(&ix, lx, t + start, i - start, -1);
    if (k < 0) {
      unknown++;
    } else {
      double loss = -log(trn_lexicon_prob(lx, k)), len1 = i - start + 1;
      count[k]++;
      nwords++;
      ntok += i - start + 1;
      sum_loss += loss;
      sum_res2 += (loss - h * len1) * (loss - h * len1);
    }
    start = i + 1;
  }
  CHECK_INT_EQ(unknown, 0);

  /* Pearson chi-square over words with expected count >= 20 plus one bin
   * for the rest. The statistic is ~chi2(df) for a correct sampler; its SD
   * is sqrt(2 df), so df + 6 SD fails a correct sampler with probability
   * ~1e-7 (and the seed is fixed), while a mis-ranked or off-by-one CDF
   * gives a statistic in the tens of thousands. */
  double chi2 = 0, rest_e = 0;
  long rest_o = 0;
  int bins = 0;
  for (int k = 0; k < W; k++) {
    double e = nwords * trn_lexicon_prob(lx, k);
    if (e >= 20) {
      chi2 += (count[k] - e) * (count[k] - e) / e;
      bins++;
    } else {
      rest_e += e;
      rest_o += count[k];
    }
  }
  if (rest_e > 0) {
    chi2 += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
    bins++;
  }
  int df = bins - 1;
  printf("word frequencies: chi-square %.1f on %d df (%ld words)\n", chi2, df, nwords);
  CHECK(bins > 1000);
  CHECK(chi2 < df + 6 * sqrt(2.0 * df));
  /* The top word alone: a binomial count, within 5 SD. */
  double p0 = trn_lexicon_prob(lx, 0);
  CHECK_NEAR(count[0], nwords * p0, 5 * sqrt(nwords * p0 * (1 - p0)), 0);

  /* Direct estimate of the entropy rate: sum of -ln p(word) over the
   * sample's tokens. It is a ratio of means; by the delta method its error
   * is mean(loss - h (len + 1)) / mean(len + 1), with standard error
   * sd(loss - h (len + 1)) / sqrt(n) / mean(len + 1). Allow 5 SE, and check
   * the SE is small enough (< 0.5% of h) for the comparison to mean
   * something. */
  double est = sum_loss / ntok;
  double mean_len1 = (double)ntok / nwords;
  double se = sqrt(sum_res2 / nwords) / sqrt((double)nwords) / mean_len1;
  printf("entropy rate: formula %.6f, sample %.6f (SE %.6f)\n", h, est, se);
  CHECK(se < 0.005 * h);
  CHECK_NEAR(est, h, 5 * se, 0);
  /* ... and the formula itself, against the lexicon's own p and lengths. */
  double hw = 0, ml = 0;
  for (int k = 0; k < W; k++) {
    double p = trn_lexicon_prob(lx, k);
    hw -= p * log(p);
    ml += p * (trn_lexicon_len(lx, k) + 1);
  }
  CHECK_NEAR(h, hw / ml, 0, 1e-13);

  free(count);
  free(t);
  free(ix.slot);
  trn_lexicon_free(lx);
}

/* ---- writing datasets -------------------------------------------------- */

static void write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(text, 1, n, f) == n);
  if (f)
    fclose(f);
}

static void test_prepare(void) {
  char a[600], b[401];
  for (int i = 0; i < 600; i++)
    a[i] = (char)(32 + i % 90);
  for (int i = 0; i < 401; i++)
    b[i] = (char)(200 + i % 50);
  write_file(tmp_path("a.txt"), a, sizeof a);
  write_file(tmp_path("b.txt"), b, sizeof b);
  const char *out = tmp_path("prep/nested");
  /* A stale shard from an earlier, larger run must go. */
  CHECK_INT_EQ(trn_data_prepare(out, (const char *const[]){tmp_path("a.txt")}, 1, 0.5, 50, NULL,
                                err, sizeof err),
               0);
  const char *in[2] = {tmp_path("a.txt"), tmp_path("b.txt")};
  trn_data_summary s;
  CHECK_INT_EQ(trn_data_prepare(out, in, 2, 0.1, 400, &s, err, sizeof err), 0);
  /* 1001 bytes: round(100.1) = 100 validation, 901 training. */
  CHECK_INT_EQ(s.train_tokens, 901);
  CHECK_INT_EQ(s.val_tokens, 100);
  CHECK_INT_EQ(s.train_shards, 3);
  CHECK_INT_EQ(s.val_shards, 1);
  char pat[600];
  snprintf(pat, sizeof pat, "%s/train_*.bin", out);
  trn_loader *l;
  CHECK_INT_EQ(trn_loader_open_shards(pat, 256, &l, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_nfiles(l), 3);
  CHECK_INT_EQ(trn_loader_ntokens(l), 901);
  int32_t t[1001];
  trn_loader_next(l, t, 901);
  trn_loader_free(l);
  snprintf(pat, sizeof pat, "%s/val_*.bin", out);
  CHECK_INT_EQ(trn_loader_open_shards(pat, 256, &l, err, sizeof err), 0);
  CHECK_INT_EQ(trn_loader_ntokens(l), 100);
  trn_loader_next(l, t + 901, 100);
  trn_loader_free(l);
  int ok = 1;
  for (int i = 0; i < 1001; i++)
    ok &= t[i] == (unsigned char)(i < 600 ? a[i] : b[i - 600]);
  CHECK(ok);

  CHECK_INT_EQ(trn_data_prepare(out, (const char *const[]){tmp_path("no.txt")}, 1, 0.1, 400, NULL,
                                err, sizeof err),
               SS_ENOENT);
  CHECK(strstr(err, "no.txt"));
  CHECK_INT_EQ(trn_data_prepare(out, in, 2, 1.0, 400, NULL, err, sizeof err), SS_EINVAL);
  CHECK(strstr(err, "val_fraction"));
}

/* Reads back a prepared dataset's tokens, train then val, as bytes. */
static size_t read_prepared(const char *out, unsigned char *dst, size_t cap) {
  size_t n = 0;
  const char *split[2] = {"train", "val"};
  for (int k = 0; k < 2; k++) {
    char pat[600];
    snprintf(pat, sizeof pat, "%s/%s_*.bin", out, split[k]);
    trn_loader *l;
    if (trn_loader_open_shards(pat, 256, &l, err, sizeof err) != 0)
      continue;
    size_t m = (size_t)trn_loader_ntokens(l);
    int32_t *t = malloc(m * sizeof *t);
    CHECK(t && n + m <= cap);
    if (t && n + m <= cap) {
      trn_loader_next(l, t, m);
      for (size_t i = 0; i < m; i++)
        dst[n++] = (unsigned char)t[i];
    }
    free(t);
    trn_loader_free(l);
  }
  return n;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of text[0..n) (each with its newline), sorted: a multiset. */
static size_t sorted_lines(const unsigned char *text, size_t n, char **lines, size_t cap) {
  size_t k = 0, start = 0;
  for (size_t i = 0; i <= n && k < cap; i++)
    if (i == n ? i > start : text[i] == '\n') {
      size_t end = i < n ? i + 1 : i;
      lines[k] = strndup((const char *)text + start, end - start);
      k++;
      start = end;
    }
  qsort(lines, k, sizeof *lines, cmp_str);
  return k;
}

/* --chunk-bytes: pieces of at least B bytes that end at a line's end, from
 * every file, in an order drawn from the seed; the same bytes and lines. */
static void test_prepare_chunks(void) {
  enum { NA = 3000, NB = 2000, NC = 900 };
  static unsigned char a[NA], b[NB], c[NC];
  /* lines of 5 to 40 bytes: a's letters a-z, b's A-Z; c is one line that
   * runs on (no newline), so it is cut every 8 B bytes */
  uint64_t st[4];
  trn_rng_seed(st, 7);
  unsigned char *f[2] = {a, b};
  size_t len[2] = {NA, NB};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < len[k];) {
      size_t L = 5 + trn_rng_next(st) % 36;
      for (size_t j = 0; j + 1 < L && i < len[k]; j++)
        f[k][i++] = (unsigned char)((k ? 'A' : 'a') + trn_rng_next(st) % 26);
      if (i < len[k])
        f[k][i++] = '\n';
    }
  a[NA - 1] = b[NB - 1] = '\n'; /* whole lines: the last one ends too */
  memset(c, '#', sizeof c);
  write_file(tmp_path("ca.txt"), (char *)a, NA);
  write_file(tmp_path("cb.txt"), (char *)b, NB);
  write_file(tmp_path("cc.txt"), (char *)c, NC);
  static char paths[3][512]; /* tmp_path's buffers rotate */
  snprintf(paths[0], sizeof paths[0], "%s", tmp_path("ca.txt"));
  snprintf(paths[1], sizeof paths[1], "%s", tmp_path("cb.txt"));
  snprintf(paths[2], sizeof paths[2], "%s", tmp_path("cc.txt"));
  const char *in[3] = {paths[0], paths[1], paths[2]};
  static unsigned char x[NA + NB + NC], y[NA + NB + NC], z[NA + NB + NC], w[NA + NB + NC];
  trn_data_summary s;
  CHECK_INT_EQ(
      trn_data_prepare_chunks(tmp_path("ch1"), in, 3, 64, 5, 0.1, 1000, &s, err, sizeof err), 0);
  CHECK_INT_EQ(s.train_tokens + s.val_tokens, NA + NB + NC);
  size_t nx = read_prepared(tmp_path("ch1"), x, sizeof x);
  CHECK_INT_EQ(nx, NA + NB + NC);
  /* the same seed: the same bytes; another: another order, the same lines */
  CHECK_INT_EQ(
      trn_data_prepare_chunks(tmp_path("ch2"), in, 3, 64, 5, 0.1, 1000, NULL, err, sizeof err), 0);
  CHECK_INT_EQ(read_prepared(tmp_path("ch2"), y, sizeof y), nx);
  CHECK(memcmp(x, y, nx) == 0);
  CHECK_INT_EQ(
      trn_data_prepare_chunks(tmp_path("ch3"), in, 3, 64, 6, 0.1, 1000, NULL, err, sizeof err), 0);
  CHECK_INT_EQ(read_prepared(tmp_path("ch3"), z, sizeof z), nx);
  CHECK(memcmp(x, z, nx) != 0);
  /* chunk 0: the files whole, in order, as trn_data_prepare */
  CHECK_INT_EQ(
      trn_data_prepare_chunks(tmp_path("ch4"), in, 3, 0, 5, 0.1, 1000, NULL, err, sizeof err), 0);
  CHECK_INT_EQ(read_prepared(tmp_path("ch4"), w, sizeof w), nx);
  CHECK(memcmp(w, a, NA) == 0 && memcmp(w + NA, b, NB) == 0 && memcmp(w + NA + NB, c, NC) == 0);

  /* the lines of a and b come out whole (the same multiset); c's 900 bytes
   * come in runs of 8 * 64 = 512 and 388 */
  static char *l1[NA + NB], *l2[NA + NB];
  static unsigned char ab[NA + NB], xab[NA + NB + NC];
  memcpy(ab, a, NA);
  memcpy(ab + NA, b, NB);
  size_t nab = 0, runs[4] = {0}, nruns = 0;
  for (size_t i = 0; i < nx;) {
    if (x[i] != '#') {
      xab[nab++] = x[i++];
      continue;
    }
    size_t j = i;
    while (j < nx && x[j] == '#')
      j++;
    if (nruns < 4)
      runs[nruns] = j - i;
    nruns++;
    i = j;
  }
  CHECK_INT_EQ(nab, NA + NB);
  CHECK_INT_EQ(nruns, 2);
  CHECK((runs[0] == 512 && runs[1] == 388) || (runs[0] == 388 && runs[1] == 512));
  size_t k1 = sorted_lines(ab, NA + NB, l1, NA + NB), k2 = sorted_lines(xab, nab, l2, NA + NB);
  CHECK_INT_EQ(k1, k2);
  int same = k1 == k2;
  for (size_t i = 0; same && i < k1; i++)
    same = strcmp(l1[i], l2[i]) == 0;
  CHECK(same);
  /* the pieces mix the files: a's and b's letters alternate many times */
  size_t switches = 0;
  int prev = -1;
  for (size_t i = 0; i < nab; i++)
    if (xab[i] != '\n') {
      int lower = xab[i] >= 'a';
      switches += prev >= 0 && lower != prev;
      prev = lower;
    }
  CHECK(switches >= 20);
  for (size_t i = 0; i < k1; i++)
    free(l1[i]);
  for (size_t i = 0; i < k2; i++)
    free(l2[i]);
}

static void test_synth_dataset(void) {
  trn_synth_params p = {26, 300, 2, 8, 1.2, 3};
  const char *out = tmp_path("syn");
  trn_data_summary s;
  CHECK_INT_EQ(trn_data_synth(out, &p, 3000, 500, 11, 12, &s, err, sizeof err), 0);
  CHECK_INT_EQ(s.train_tokens, 3000);
  trn_lexicon *lx = lexicon(26, 300, 2, 8, 1.2, 3);
  const char *split[2] = {"train", "val"};
  uint64_t seed[2] = {11, 12};
  size_t n[2] = {3000, 500};
  for (int i = 0; i < 2 && lx; i++) {
    char path[600];
    snprintf(path, sizeof path, TRN_SHARD_PATH_FMT, out, split[i], 0);
    trn_loader *f, *g;
    CHECK_INT_EQ(trn_loader_open_shards(path, 27, &f, err, sizeof err), 0);
    CHECK_INT_EQ(trn_loader_ntokens(f), n[i]);
    trn_loader_open_synth(lx, seed[i], &g, err, sizeof err);
    int32_t a[3000], b[3000];
    trn_loader_next(f, a, n[i]);
    trn_loader_next(g, b, n[i]);
    CHECK(memcmp(a, b, n[i] * sizeof *a) == 0);
    trn_loader_free(f);
    trn_loader_free(g);
  }
  trn_lexicon_free(lx);
}

int main(void) {
  if (check_tmpdir(tmpdir, sizeof tmpdir, "test_data"))
    return 1;
  test_shard_round_trip();
  test_shard_errors();
  test_shard_positions();
  test_lexicon_params();
  test_lexicon_shape();
  test_lexicon_determinism();
  test_window_floor_brute_force();
  test_window_floor_limit();
  test_synth_positions();
  test_synth_statistics();
  test_prepare();
  test_prepare_chunks();
  test_synth_dataset();
  cleanup();
  CHECK_DONE();
}

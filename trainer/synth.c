#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "trainer/data.h"
#include "trainer/rng.h"

#define TRN_LEXICON_MAX_WORDS (1 << 24)
#define TRN_LEXICON_MAX_LEN 64

struct trn_lexicon {
  int letters;
  int nwords;
  int min_len;
  int max_len;
  int stride;    /* max_len + 1 */
  uint8_t *text; /* (nwords, stride): letters of word k, then 0, then 0s */
  int *len;      /* (nwords) */
  double *p;     /* (nwords) */
  double entropy_rate;
  uint64_t digest;
};

/* Neumaier's compensated sum: probabilities span many orders of magnitude
 * (Zipf tails) and the window floor subtracts two large block entropies. */
typedef struct ksum {
  double s, c;
} ksum;

static void ksum_add(ksum *k, double x) {
  double t = k->s + x;
  if (fabs(k->s) >= fabs(x))
    k->c += (k->s - t) + x;
  else
    k->c += (x - t) + k->s;
  k->s = t;
}

static double ksum_get(const ksum *k) { return k->s + k->c; }

static double neg_plogp(double p) { return p > 0 ? -p * log(p) : 0.0; }

static uint64_t fnv1a(uint64_t h, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static int check_params(const trn_synth_params *p, char *err, size_t errlen) {
  if (p->letters < 1 || p->letters > 255) {
    snprintf(err, errlen,
             "letters: %d, expected 1..255 (tokens 1..letters are letters, 0 "
             "the separator, all in uint16 shards)",
             p->letters);
    return SS_EINVAL;
  }
  if (p->words < 1 || p->words > TRN_LEXICON_MAX_WORDS) {
    snprintf(err, errlen, "words: %d, expected 1..%d", p->words, TRN_LEXICON_MAX_WORDS);
    return SS_EINVAL;
  }
  if (p->min_len < 1 || p->min_len > TRN_LEXICON_MAX_LEN) {
    snprintf(err, errlen, "min_len: %d, expected 1..%d", p->min_len, TRN_LEXICON_MAX_LEN);
    return SS_EINVAL;
  }
  if (p->max_len < p->min_len || p->max_len > TRN_LEXICON_MAX_LEN) {
    snprintf(err, errlen, "max_len: %d, expected min_len (%d)..%d", p->max_len, p->min_len,
             TRN_LEXICON_MAX_LEN);
    return SS_EINVAL;
  }
  if (!(p->zipf > 0) || !isfinite(p->zipf)) {
    snprintf(err, errlen, "zipf: %g, expected a finite number > 0", p->zipf);
    return SS_EINVAL;
  }
  /* Redrawing duplicates must stay cheap, so at most half of the possible
   * words may be taken. The count saturates at the bound it is checked
   * against; it is exact whenever the check fails. */
  uint64_t need = 2 * (uint64_t)p->words, have = 0, per_len = 1;
  for (int l = 1; l <= p->max_len && have < need; l++) {
    per_len = per_len > need / (uint64_t)p->letters ? need : per_len * (uint64_t)p->letters;
    if (l >= p->min_len)
      have = have + per_len > need ? need : have + per_len;
  }
  if (have < need) {
    snprintf(err, errlen,
             "words: %d needs at least %llu possible distinct words (twice "
             "as many), but letters=%d with lengths %d..%d allow only %llu; "
             "raise letters or max_len, or lower words",
             p->words, (unsigned long long)need, p->letters, p->min_len, p->max_len,
             (unsigned long long)have);
    return SS_EINVAL;
  }
  return 0;
}

/* Draws word k, redrawing (length and letters both) until it differs from
 * words 0..k-1. table is an open-addressing set of word index + 1. */
static void draw_word(trn_lexicon *lx, int k, uint64_t s[4], uint32_t *table, size_t mask) {
  uint8_t *w = lx->text + (size_t)k * lx->stride;
  int span = lx->max_len - lx->min_len + 1;
  for (;;) {
    int len = lx->min_len + (int)(trn_rng_uniform(s) * span);
    memset(w, 0, (size_t)lx->stride);
    for (int i = 0; i < len; i++)
      w[i] = (uint8_t)(1 + (int)(trn_rng_uniform(s) * lx->letters));
    size_t slot = fnv1a(0xcbf29ce484222325ULL, w, (size_t)len) & mask;
    int dup = 0;
    while (table[slot]) {
      int j = (int)table[slot] - 1;
      if (lx->len[j] == len && memcmp(lx->text + (size_t)j * lx->stride, w, (size_t)len) == 0) {
        dup = 1;
        break;
      }
      slot = (slot + 1) & mask;
    }
    if (!dup) {
      table[slot] = (uint32_t)k + 1;
      lx->len[k] = len;
      return;
    }
  }
}

int trn_lexicon_new(const trn_synth_params *p, trn_lexicon **out, char *err, size_t errlen) {
  *out = NULL;
  int rc = check_params(p, err, errlen);
  if (rc)
    return rc;
  size_t w = (size_t)p->words;
  size_t tsize = 1;
  while (tsize < 2 * w)
    tsize <<= 1;
  trn_lexicon *lx = calloc(1, sizeof *lx);
  uint32_t *table = calloc(tsize, sizeof *table);
  if (lx) {
    lx->stride = p->max_len + 1;
    lx->text = malloc(w * (size_t)lx->stride);
    lx->len = malloc(w * sizeof *lx->len);
    lx->p = malloc(w * sizeof *lx->p);
  }
  if (!lx || !table || !lx->text || !lx->len || !lx->p) {
    free(table);
    trn_lexicon_free(lx);
    snprintf(err, errlen, "lexicon of %d words: out of memory", p->words);
    return SS_ENOMEM;
  }
  lx->letters = p->letters;
  lx->nwords = p->words;
  lx->min_len = p->min_len;
  lx->max_len = p->max_len;

  uint64_t s[4];
  trn_rng_seed(s, p->seed);
  for (int k = 0; k < p->words; k++)
    draw_word(lx, k, s, table, tsize - 1);
  free(table);

  ksum norm = {0, 0};
  for (int k = p->words - 1; k >= 0; k--) {
    lx->p[k] = pow((double)k + 1, -p->zipf);
    ksum_add(&norm, lx->p[k]);
  }
  double z = ksum_get(&norm);
  ksum hw = {0, 0}, mlen = {0, 0};
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int k = 0; k < p->words; k++) {
    lx->p[k] /= z;
    ksum_add(&hw, neg_plogp(lx->p[k]));
    ksum_add(&mlen, lx->p[k] * (lx->len[k] + 1));
    h = fnv1a(h, lx->text + (size_t)k * lx->stride, (size_t)lx->len[k] + 1);
  }
  lx->entropy_rate = ksum_get(&hw) / ksum_get(&mlen);
  lx->digest = h;
  *out = lx;
  return 0;
}

void trn_lexicon_free(trn_lexicon *lx) {
  if (!lx)
    return;
  free(lx->text);
  free(lx->len);
  free(lx->p);
  free(lx);
}

int trn_lexicon_nwords(const trn_lexicon *lx) { return lx->nwords; }

double trn_lexicon_prob(const trn_lexicon *lx, int k) { return lx->p[k]; }

int trn_lexicon_len(const trn_lexicon *lx, int k) { return lx->len[k]; }

const uint8_t *trn_lexicon_word(const trn_lexicon *lx, int k) {
  return lx->text + (size_t)k * lx->stride;
}

double trn_lexicon_entropy_rate(const trn_lexicon *lx) { return lx->entropy_rate; }

uint64_t trn_lexicon_digest(const trn_lexicon *lx) { return lx->digest; }

/* ---- the window floor --------------------------------------------------
 *
 * Strings of tokens are handled as C strings: a word's letters are 1..255
 * and its separator 0 is the terminator, so strcmp orders "word + separator"
 * strings and their suffixes, and two such strings cut to their first r
 * tokens are equal exactly when their common prefix is >= r tokens long.
 *
 * Notation: p_k, len_k as in SCIENCE.md; Z = sum_k p_k (len_k + 1), the mean
 * number of tokens per word. */

static void swap_str(const uint8_t **a, size_t i, size_t j) {
  const uint8_t *t = a[i];
  a[i] = a[j];
  a[j] = t;
}

/* Sorts n strings that agree on their first d tokens: Bentley and
 * Sedgewick's multikey quicksort, which looks at each token of a string about
 * once instead of comparing whole strings O(n log n) times as qsort with
 * strcmp would (many suffixes share long runs of letters). */
static void sort_strs(const uint8_t **a, size_t n, int d) {
  while (n > 1) {
    if (n < 12) {
      for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp((const char *)a[j - 1] + d, (const char *)a[j] + d) > 0;
             j--)
          swap_str(a, j - 1, j);
      return;
    }
    swap_str(a, 0, n / 2);
    int v = a[0][d];
    size_t lt = 0, i = 0, gt = n; /* [0,lt) < v, [lt,i) == v, [gt,n) > v */
    while (i < gt) {
      int c = a[i][d];
      if (c < v)
        swap_str(a, lt++, i++);
      else if (c > v)
        swap_str(a, i, --gt);
      else
        i++;
    }
    sort_strs(a, lt, d);
    if (v != 0)
      sort_strs(a + lt, gt - lt, d + 1);
    a += gt;
    n -= gt;
  }
}

/* Common prefix length of adjacent sorted strings; INT_MAX when equal. */
static int common_prefix(const uint8_t *a, const uint8_t *b) {
  int i = 0;
  while (a[i] == b[i]) {
    if (a[i] == 0)
      return INT_MAX;
    i++;
  }
  return i;
}

/* Entropy of the distribution over distinct first-r-token cuts of m sorted
 * strings, string i having probability prob[i]; lcp[i] is the common prefix
 * of strings i-1 and i. Equal cuts are adjacent in sorted order. */
static double cut_entropy(const double *prob, const int *lcp, size_t m, int r) {
  ksum h = {0, 0};
  double g = prob[0];
  for (size_t i = 1; i < m; i++) {
    if (lcp[i] >= r) {
      g += prob[i];
    } else {
      ksum_add(&h, neg_plogp(g));
      g = prob[i];
    }
  }
  ksum_add(&h, neg_plogp(g));
  return ksum_get(&h);
}

typedef struct sorted_strs {
  const uint8_t **s;
  double *prob;
  int *lcp;
  size_t m;
} sorted_strs;

static void sorted_free(sorted_strs *ss) {
  free(ss->s);
  free(ss->prob);
  free(ss->lcp);
}

/* Sorts ss->s and fills prob (p_k * scale for the word the string lies in)
 * and lcp. */
static int sorted_finish(const trn_lexicon *lx, sorted_strs *ss, double scale) {
  ss->prob = malloc(ss->m * sizeof *ss->prob);
  ss->lcp = malloc(ss->m * sizeof *ss->lcp);
  if (!ss->prob || !ss->lcp)
    return SS_ENOMEM;
  sort_strs(ss->s, ss->m, 0);
  for (size_t i = 0; i < ss->m; i++) {
    size_t k = (size_t)(ss->s[i] - lx->text) / (size_t)lx->stride;
    ss->prob[i] = lx->p[k] * scale;
    ss->lcp[i] = i ? common_prefix(ss->s[i - 1], ss->s[i]) : 0;
  }
  return 0;
}

/* H(X_0) from the stationary token marginal: a position falls in word k with
 * probability p_k (len_k + 1) / Z, uniformly over its letters and separator. */
static double token_entropy(const trn_lexicon *lx, double z) {
  ksum mass[256];
  memset(mass, 0, sizeof mass);
  for (int k = 0; k < lx->nwords; k++) {
    const uint8_t *w = trn_lexicon_word(lx, k);
    for (int i = 0; i <= lx->len[k]; i++)
      ksum_add(&mass[w[i]], lx->p[k]);
  }
  ksum h = {0, 0};
  for (int c = 0; c < 256; c++)
    ksum_add(&h, neg_plogp(ksum_get(&mass[c]) / z));
  return ksum_get(&h);
}

/* Block entropy H_n of n >= 1 stationary tokens.
 *
 * The block starts inside some word k at offset j (probability p_k / Z for
 * each of its len_k + 1 positions). Its first segment S' is the rest of that
 * word up to and including the separator, cut to n tokens; S' is a function
 * of the block, and when it holds the separator (length l <= n) the other
 * n - l tokens are the start of a fresh stream, independent of S'. So
 *   H_n = H(S') + sum_{l <= n} P(|S| = l) G(n - l),
 * P(|S| = l) = sum_{k : len_k + 1 >= l} p_k / Z, and G(r), the entropy of the
 * first r tokens of a stream that starts at a word boundary, follows the same
 * argument with the first word in place of S':
 *   G(0) = 0,  G(r) = H(first word + separator cut to r)
 *                     + sum_{l <= r} P(len + 1 = l) G(r - l).
 * Cuts of different words (or suffixes) can coincide, so H(.) is the entropy
 * over distinct cut strings. */
static int block_entropy(const trn_lexicon *lx, size_t n, double z, double *out) {
  int maxl = lx->max_len + 1;
  size_t nw = (size_t)lx->nwords;
  sorted_strs words = {0}, suff = {0};
  double *g = malloc(n * sizeof *g);
  double *hcut = malloc(((size_t)maxl + 1) * sizeof *hcut);
  ksum *q = calloc((size_t)maxl + 1, sizeof *q);
  size_t m = 0;
  for (size_t k = 0; k < nw; k++)
    m += (size_t)lx->len[k] + 1;
  words.m = nw;
  words.s = malloc(nw * sizeof *words.s);
  suff.m = m;
  suff.s = malloc(m * sizeof *suff.s);
  int rc = SS_ENOMEM;
  if (!g || !hcut || !q || !words.s || !suff.s)
    goto done;

  for (size_t k = 0, i = 0; k < nw; k++) {
    const uint8_t *w = trn_lexicon_word(lx, (int)k);
    words.s[k] = w;
    for (int j = 0; j <= lx->len[k]; j++)
      suff.s[i++] = w + j;
    ksum_add(&q[lx->len[k] + 1], lx->p[k]);
  }
  if ((rc = sorted_finish(lx, &words, 1.0)) != 0 || (rc = sorted_finish(lx, &suff, 1.0 / z)) != 0)
    goto done;

  for (int r = 1; r <= maxl; r++)
    hcut[r] = cut_entropy(words.prob, words.lcp, words.m, r);
  g[0] = 0;
  for (size_t r = 1; r < n; r++) {
    ksum acc = {0, 0};
    ksum_add(&acc, hcut[r < (size_t)maxl ? r : (size_t)maxl]);
    for (int l = 2; l <= maxl && (size_t)l <= r; l++)
      ksum_add(&acc, ksum_get(&q[l]) * g[r - (size_t)l]);
    g[r] = ksum_get(&acc);
  }

  ksum h = {0, 0};
  int cut = n < (size_t)maxl ? (int)n : maxl;
  ksum_add(&h, cut_entropy(suff.prob, suff.lcp, suff.m, cut));
  for (int l = 1; l <= maxl && (size_t)l <= n; l++) {
    ksum at_least = {0, 0};
    for (int ll = l; ll <= maxl; ll++)
      ksum_add(&at_least, ksum_get(&q[ll]));
    ksum_add(&h, ksum_get(&at_least) / z * g[n - (size_t)l]);
  }
  *out = ksum_get(&h);
  rc = 0;
done:
  sorted_free(&words);
  sorted_free(&suff);
  free(g);
  free(hcut);
  free(q);
  return rc;
}

/* seq_len < 1 or an allocation failure gives NaN. */
double trn_lexicon_window_floor(const trn_lexicon *lx, int seq_len) {
  if (seq_len < 1)
    return NAN;
  ksum zs = {0, 0};
  for (int k = 0; k < lx->nwords; k++)
    ksum_add(&zs, lx->p[k] * (lx->len[k] + 1));
  double z = ksum_get(&zs);
  double hn = NAN;
  if (block_entropy(lx, (size_t)seq_len + 1, z, &hn) != 0)
    return NAN;
  return (hn - token_entropy(lx, z)) / seq_len;
}

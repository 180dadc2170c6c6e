/* Training data: llm.c token shards and the built-in synthetic corpus.
 *
 * Tokens are handed to the model as int32. A loader is a contiguous token
 * stream: trn_loader_next() returns the next n tokens and advances by n. Its
 * whole position fits in a fixed-size POD (trn_loader_pos) that checkpoints
 * save and restore, so a resumed run sees exactly the tokens an uninterrupted
 * run would have seen.
 *
 * Errors: functions return 0 or a negative SS_E* code (common/err.h) and write
 * one message into err (file, offset or parameter, found vs expected). */
#ifndef SS_TRAINER_DATA_H
#define SS_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "runcfg/runcfg.h"
#include "runcfg/shard.h"

/* ---- token shards (llm.c format) --------------------------------------- */

#define TRN_SHARD_MAGIC RCFG_SHARD_MAGIC
#define TRN_SHARD_VERSION RCFG_SHARD_VERSION
#define TRN_SHARD_HEADER_INTS RCFG_SHARD_HEADER_INTS

/* Writes one shard: 256 x int32 header (magic, version, count, zeros), then
 * the tokens as little-endian uint16. Written to PATH.tmp and renamed. */
int trn_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);

/* ---- the synthetic Zipf lexicon (SCIENCE.md section 4) ----------------- */

/* The lexicon's parameters, as the run config gives them. */
typedef rcfg_synth trn_synth_params;

typedef struct trn_lexicon trn_lexicon; /* opaque, immutable once built */

/* Draws the lexicon from p->seed. Refuses parameters that leave too few
 * possible distinct words (SS_EINVAL with the count). */
int trn_lexicon_new(const trn_synth_params *p, trn_lexicon **out, char *err, size_t errlen);
void trn_lexicon_free(trn_lexicon *lx);

int trn_lexicon_nwords(const trn_lexicon *lx);
/* Probability p_k of word k (0-based index = rank - 1) and its length. */
double trn_lexicon_prob(const trn_lexicon *lx, int k);
int trn_lexicon_len(const trn_lexicon *lx, int k);
/* Letters of word k (trn_lexicon_len(k) of them, each in 1..letters). */
const uint8_t *trn_lexicon_word(const trn_lexicon *lx, int k);

/* Exact entropy rate of the token stream, nats per token:
 * H = (-sum p_k ln p_k) / (sum p_k (len_k + 1)). */
double trn_lexicon_entropy_rate(const trn_lexicon *lx);

/* Exact Bayes-optimal mean validation loss of a model that sees windows of
 * seq_len + 1 stationary tokens and predicts tokens 1..seq_len from their
 * prefixes: (H(X_0..X_seq_len) - H(X_0)) / seq_len, with the block entropy
 * computed exactly from the lexicon. Always >= the entropy rate. */
double trn_lexicon_window_floor(const trn_lexicon *lx, int seq_len);

/* A 64-bit digest of the lexicon (letters of every word and its probability
 * order), recorded in run output so a changed generator is detected. */
uint64_t trn_lexicon_digest(const trn_lexicon *lx);

/* ---- loaders ----------------------------------------------------------- */

/* Position of a loader in its stream; plain data, saved in checkpoints. */
typedef struct trn_loader_pos {
  uint64_t rng[4]; /* synthetic: word-sampling generator state */
  uint64_t offset; /* shards: global token offset; synthetic: tokens drawn */
  int32_t word;    /* synthetic: word being emitted, -1 for none */
  int32_t in_word; /* synthetic: next position inside that word (len = separator) */
} trn_loader_pos;

typedef struct trn_loader trn_loader;

/* A loader over the shards matching a glob (sorted by name; the stream
 * wraps around at the end). Checks every shard's header and size; a wrong
 * magic, version or truncated file is SS_ECORRUPT naming the file and byte
 * offset. Tokens >= vocab_size are SS_EINVAL (file and token index). */
int trn_loader_open_shards(const char *glob_pattern, int vocab_size, trn_loader **out, char *err,
                           size_t errlen);

/* trn_loader_open_shards confined to the directories dirs[0..ndirs)
 * (common/shardpath.h; ndirs 0 refuses every pattern, SPATH_ANY confines
 * nothing): wildcards only in the file name, every match realpath'd under
 * one of them, else SS_EINVAL. Until a pattern has passed that check no
 * message says anything about the files it matches (not their size, not
 * their bytes); each file is opened by its resolved path and checked again
 * once open. */
int trn_loader_open_shards_in(const char *glob_pattern, const char *const *dirs, int ndirs,
                              int vocab_size, trn_loader **out, char *err, size_t errlen);

/* A loader over the synthetic stream of lx with an independent stream seed
 * (train and validation use different stream seeds over one lexicon). The
 * loader does not own lx. */
int trn_loader_open_synth(const trn_lexicon *lx, uint64_t stream_seed, trn_loader **out, char *err,
                          size_t errlen);

void trn_loader_free(trn_loader *l);

/* Writes the next n tokens into out and advances by n. */
void trn_loader_next(trn_loader *l, int32_t *out, size_t n);

void trn_loader_get_pos(const trn_loader *l, trn_loader_pos *pos);
/* SS_ECORRUPT if pos does not fit this loader (offset past the data). */
int trn_loader_set_pos(trn_loader *l, const trn_loader_pos *pos);

/* Shards only: number of files, their paths, total tokens, and the SHA-256
 * of each file's bytes as 64 hex digits. */
int trn_loader_nfiles(const trn_loader *l);
const char *trn_loader_file(const trn_loader *l, int i);
const char *trn_loader_file_sha256(const trn_loader *l, int i);
uint64_t trn_loader_ntokens(const trn_loader *l);

#endif

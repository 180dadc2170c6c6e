/* Writing token-shard datasets: byte-level shards from text files, and the
 * synthetic Zipf corpus (SCIENCE.md section 4) materialised as shards.
 *
 * Both write OUT/train_NNNNNN.bin and OUT/val_NNNNNN.bin (TRN_SHARD_PATH_FMT,
 * numbered from 0), create OUT (and its parents) when missing, and remove
 * shards of the same names numbered past the ones written, left over from an
 * earlier, larger run, so that OUT/train_*.bin is exactly this dataset. They
 * print nothing; errors are 0 / SS_E* with one message in err. */
#ifndef SS_TRAINER_PREPARE_H
#define SS_TRAINER_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/data.h"

/* snprintf format of shard i of a split: (out_dir, "train" or "val", i). */
#define TRN_SHARD_PATH_FMT "%s/%s_%06d.bin"

/* What a call wrote. */
typedef struct trn_data_summary {
  uint64_t train_tokens;
  uint64_t val_tokens;
  int train_shards;
  int val_shards;
} trn_data_summary;

/* Byte-level shards (token = byte value, vocabulary 256) from the
 * concatenation of inputs[0..ninputs) in order. The last
 * round(val_fraction * total) bytes, 0 <= val_fraction < 1, are the
 * validation split (no val shards when that rounds to 0); each split is cut
 * into shards of shard_tokens (1..INT32_MAX) tokens, the last one shorter.
 * Inputs are streamed, never held in memory whole. summary may be NULL. */
int trn_data_prepare(const char *out_dir, const char *const *inputs, int ninputs,
                     double val_fraction, size_t shard_tokens, trn_data_summary *summary, char *err,
                     size_t errlen);

/* The same, with the inputs cut into pieces of at least chunk_bytes bytes
 * that end at a line's end (a line longer than 8 * chunk_bytes is cut
 * there; a file's last piece may be shorter), and the pieces of all the
 * inputs concatenated in an order drawn from seed (the trainer's generator,
 * so the same on every machine). A trainer reading the shards front to back
 * then sees a mix of every file at every stretch of its run, not one file's
 * domain for as long as the file lasts; the validation split is a random
 * set of pieces. chunk_bytes 0: whole files in the given order (seed
 * unused), as trn_data_prepare. The index of pieces is held in memory (16
 * bytes a piece), the bytes are streamed. */
int trn_data_prepare_chunks(const char *out_dir, const char *const *inputs, int ninputs,
                            uint64_t chunk_bytes, uint64_t seed, double val_fraction,
                            size_t shard_tokens, trn_data_summary *summary, char *err,
                            size_t errlen);

/* The first train_tokens tokens of the synthetic stream with seed train_seed
 * as OUT/train_000000.bin and the first val_tokens of the stream val_seed as
 * OUT/val_000000.bin, both over the lexicon of p (each count 1..INT32_MAX:
 * one shard per split). summary may be NULL. */
int trn_data_synth(const char *out_dir, const trn_synth_params *p, uint64_t train_tokens,
                   uint64_t val_tokens, uint64_t train_seed, uint64_t val_seed,
                   trn_data_summary *summary, char *err, size_t errlen);

/* The stream seeds `scalesweep data synth` uses for a lexicon seed. A run on
 * the on-the-fly corpus that uses the same reads exactly the tokens of the
 * materialised dataset. */
static inline uint64_t trn_synth_train_seed(uint64_t lexicon_seed) {
  return lexicon_seed ^ 0x7472616eULL; /* "tran" */
}
static inline uint64_t trn_synth_val_seed(uint64_t lexicon_seed) {
  return lexicon_seed ^ 0x76616c00ULL; /* "val" */
}

#endif

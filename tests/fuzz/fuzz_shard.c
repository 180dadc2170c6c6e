/* Token shards (llm.c format): the input is written as one shard file and
 * opened by trn_loader_open_shards, which checks the header, the size and
 * every token against the vocabulary. A shard it accepts is then read the
 * way training reads it: a few windows, a wrap-around, and positions set
 * and refused as a resumed run's would be. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "trainer/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The vocabulary, picked by the first reserved header byte (0 in a real
   * shard): byte-level (what `scalesweep data prepare` writes), GPT-2's, or
   * every uint16 (then no token can be out of range). */
  static const int vocabs[3] = {256, 50257, 65536};
  int vocab = vocabs[size > 12 ? data[12] % 3 : 0];
  const char *path = fuzz_write_file("shard.bin", data, size);
  trn_loader *l = NULL;
  char err[1024] = "";
  if (trn_loader_open_shards(path, vocab, &l, err, sizeof err) != 0) {
    if (l || !err[0])
      abort();
    return 0;
  }
  uint64_t total = trn_loader_ntokens(l);
  if (total == 0 || trn_loader_nfiles(l) != 1 || strlen(trn_loader_file_sha256(l, 0)) != 64)
    abort();
  int32_t buf[256];
  size_t n = total * 2 + 3 < 256 ? (size_t)total * 2 + 3 : 256;
  trn_loader_next(l, buf, n);
  for (size_t i = 0; i < n; i++)
    if (buf[i] < 0 || buf[i] >= vocab)
      abort();
  trn_loader_pos pos;
  trn_loader_get_pos(l, &pos);
  if (pos.offset >= total)
    abort();
  pos.offset = total - 1;
  if (trn_loader_set_pos(l, &pos) != 0)
    abort();
  trn_loader_next(l, buf, 2);
  pos.offset = total;
  if (trn_loader_set_pos(l, &pos) == 0)
    abort();
  trn_loader_free(l);
  return 0;
}

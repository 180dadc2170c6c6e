#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "trainer/data.h"
#include "trainer/prepare.h"
#include "trainer/rng.h"

#define MAX_SEQ_LEN (1 << 20)

static const char usage_text[] =
    "usage: scalesweep data prepare --out DIR [--val-fraction F] "
    "[--shard-tokens N] [--shuffle SEED [--chunk-bytes B]] FILE...\n"
    "       scalesweep data synth --out DIR [--tokens N] [--val-tokens N]\n"
    "                             [--letters K] [--words W] [--min-len A] "
    "[--max-len B]\n"
    "                             [--zipf S] [--seed S] [--seq-len T]\n"
    "\n"
    "prepare  byte-level llm.c token shards (vocabulary 256) from text files,\n"
    "         concatenated in order (--shuffle: in an order drawn from SEED, so\n"
    "         that a trainer reading the shards front to back sees a mix of\n"
    "         the files and validation is a random set of them; with\n"
    "         --chunk-bytes, the files are cut into pieces of at least B bytes\n"
    "         ending at a line's end and the pieces are shuffled, so that every\n"
    "         stretch of a run's tokens mixes all the files); the last F\n"
    "         of the bytes (default 0.1) are validation. Writes\n"
    "         DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin, N tokens per shard\n"
    "         (default 100000000).\n"
    "synth    the synthetic Zipf-lexicon corpus as DIR/train_000000.bin\n"
    "         (--tokens, default 10000000) and DIR/val_000000.bin "
    "(--val-tokens,\n"
    "         default 1000000), from independent streams over one lexicon:\n"
    "         K letters (26), W words (4096) of lengths A..B (2..8), Zipf\n"
    "         exponent S (1.2), lexicon seed (1). Prints its entropy rate and\n"
    "         the window floor for windows of T tokens (256), in nats.\n"
    "\n"
    "Both print one JSON line describing what they wrote. Exit codes: 0 done,\n"
    "1 run-time failure, 2 bad usage or invalid input.\n";

/* A decimal integer, or a number in exponent form (1e7) with an integral
 * value, in [min, max]. */
static int parse_u64(const char *sub, const char *opt, const char *s, uint64_t min, uint64_t max,
                     uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s && *s != '-' && *s != '+' && !*end && errno == 0) {
    if (v >= min && v <= max) {
      *out = v;
      return 0;
    }
  } else if (*s && *s != '-') {
    double d = strtod(s, &end);
    if (!*end && d == floor(d) && d >= (double)min && d <= (double)max && d < 0x1p64) {
      *out = (uint64_t)d;
      return 0;
    }
  }
  return cli_usage_error("data", sub,
                         "%s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'", opt, min,
                         max, s);
}

static int parse_int(const char *sub, const char *opt, const char *s, int min, int max, int *out) {
  uint64_t v;
  int rc = parse_u64(sub, opt, s, (uint64_t)min, (uint64_t)max, &v);
  if (!rc)
    *out = (int)v;
  return rc;
}

static int parse_double(const char *sub, const char *opt, const char *s, const char *expect,
                        double *out) {
  char *end;
  double d = strtod(s, &end);
  if (!*s || *end || !isfinite(d)) {
    return cli_usage_error("data", sub, "%s: expected %s, got '%s'", opt, expect, s);
  }
  *out = d;
  return 0;
}

static void print_json_str(const char *s) {
  putchar('"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      printf("\\%c", *c);
    else if (*c < 0x20)
      printf("\\u%04x", *c);
    else
      putchar(*c);
  }
  putchar('"');
}

/* Splits argv[i] into an option name and its value (inline after '=' or the
 * next argument). Returns the option name length, 0 for a non-option, or -1
 * (after a usage message) when a value is missing. */
static int take_value(const char *sub, int argc, char **argv, int *i, const char **value) {
  const char *a = argv[*i];
  if (a[0] != '-' || a[1] != '-' || a[2] == 0)
    return 0;
  const char *eq = strchr(a, '=');
  if (eq) {
    *value = eq + 1;
    return (int)(eq - a);
  }
  if (*i + 1 >= argc) {
    cli_usage_error("data", sub, "%s needs a value", a);
    return -1;
  }
  *value = argv[++*i];
  return (int)strlen(a);
}

static int is_opt(const char *a, int n, const char *name) {
  return (size_t)n == strlen(name) && strncmp(a, name, (size_t)n) == 0;
}

static int runtime_error(const char *sub, int rc, const char *msg) {
  fprintf(stderr, "scalesweep data %s: %s\n", sub, msg);
  return err_exit_code(rc);
}

static int data_prepare(int argc, char **argv) {
  const char *sub = "prepare", *out = NULL;
  double frac = 0.1;
  uint64_t shard_tokens = 100000000, seed = 0, chunk = 0;
  const char **files = calloc((size_t)argc, sizeof *files);
  int nfiles = 0, rc = 0, only_files = 0, shuffle = 0;
  if (!files)
    return runtime_error(sub, SS_ENOMEM, "out of memory");
  for (int i = 2; i < argc && !rc; i++) {
    const char *a = argv[i], *v = NULL;
    if (only_files || a[0] != '-' || strcmp(a, "-") == 0) {
      files[nfiles++] = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_files = 1;
      continue;
    }
    int n = take_value(sub, argc, argv, &i, &v);
    if (n < 0)
      rc = SS_EXIT_USAGE;
    else if (is_opt(a, n, "--out"))
      out = v;
    else if (is_opt(a, n, "--val-fraction")) {
      rc = parse_double(sub, "--val-fraction", v, "a fraction 0 <= F < 1", &frac);
      if (!rc && !(frac >= 0 && frac < 1))
        rc = cli_usage_error("data", sub, "--val-fraction: expected 0 <= F < 1, got '%s'", v);
    } else if (is_opt(a, n, "--shard-tokens"))
      rc = parse_u64(sub, "--shard-tokens", v, 1, INT32_MAX, &shard_tokens);
    else if (is_opt(a, n, "--chunk-bytes"))
      rc = parse_u64(sub, "--chunk-bytes", v, 1, UINT64_MAX / 16, &chunk);
    else if (is_opt(a, n, "--shuffle")) {
      rc = parse_u64(sub, "--shuffle", v, 0, UINT64_MAX, &seed);
      shuffle = !rc;
    } else
      rc = cli_usage_error("data", sub, "unknown option '%s'", a);
  }
  if (!rc && !out)
    rc = cli_usage_error("data", sub, "--out DIR is required");
  if (!rc && nfiles == 0)
    rc = cli_usage_error("data", sub, "expected at least one input FILE");
  if (!rc && chunk && !shuffle)
    rc = cli_usage_error("data", sub,
                         "--chunk-bytes needs --shuffle SEED (the seed draws the pieces' order)");
  if (rc) {
    free(files);
    return rc;
  }
  if (shuffle) { /* Fisher-Yates with the trainer's generator: the same on every machine */
    uint64_t st[4];
    trn_rng_seed(st, seed);
    for (int i = nfiles - 1; i > 0; i--) {
      int j = (int)(trn_rng_next(st) % (uint64_t)(i + 1));
      const char *t = files[i];
      files[i] = files[j];
      files[j] = t;
    }
  }
  char err[1024];
  trn_data_summary s;
  int e = trn_data_prepare_chunks(out, files, nfiles, chunk, seed, frac, (size_t)shard_tokens, &s,
                                  err, sizeof err);
  free(files);
  if (e)
    return runtime_error(sub, e, err);
  char train[4096], val[4096];
  snprintf(train, sizeof train, "%s/train_*.bin", out);
  snprintf(val, sizeof val, "%s/val_*.bin", out);
  printf("{\"train\": ");
  print_json_str(train);
  printf(", \"val\": ");
  if (s.val_shards)
    print_json_str(val);
  else
    printf("null");
  printf(", \"train_tokens\": %" PRIu64 ", \"val_tokens\": %" PRIu64
         ", \"train_shards\": %d, \"val_shards\": %d}\n",
         s.train_tokens, s.val_tokens, s.train_shards, s.val_shards);
  return fflush(stdout) == 0 ? SS_EXIT_OK : SS_EXIT_FAILURE;
}

static int data_synth(int argc, char **argv) {
  const char *sub = "synth", *out = NULL;
  uint64_t tokens = 10000000, val_tokens = 1000000;
  trn_synth_params p = {
      .letters = 26, .words = 4096, .min_len = 2, .max_len = 8, .zipf = 1.2, .seed = 1};
  int seq_len = 256, rc = 0;
  /* Lexicon parameters are range-checked by trn_lexicon_new, the one place
   * that knows the limits. */
  for (int i = 2; i < argc && !rc; i++) {
    const char *a = argv[i], *v = NULL;
    int n = take_value(sub, argc, argv, &i, &v);
    if (n < 0)
      rc = SS_EXIT_USAGE;
    else if (n == 0)
      rc = cli_usage_error("data", sub, "unexpected argument '%s'", a);
    else if (is_opt(a, n, "--out"))
      out = v;
    else if (is_opt(a, n, "--tokens"))
      rc = parse_u64(sub, "--tokens", v, 1, INT32_MAX, &tokens);
    else if (is_opt(a, n, "--val-tokens"))
      rc = parse_u64(sub, "--val-tokens", v, 1, INT32_MAX, &val_tokens);
    else if (is_opt(a, n, "--letters"))
      rc = parse_int(sub, "--letters", v, 0, INT_MAX, &p.letters);
    else if (is_opt(a, n, "--words"))
      rc = parse_int(sub, "--words", v, 0, INT_MAX, &p.words);
    else if (is_opt(a, n, "--min-len"))
      rc = parse_int(sub, "--min-len", v, 0, INT_MAX, &p.min_len);
    else if (is_opt(a, n, "--max-len"))
      rc = parse_int(sub, "--max-len", v, 0, INT_MAX, &p.max_len);
    else if (is_opt(a, n, "--zipf"))
      rc = parse_double(sub, "--zipf", v, "a number", &p.zipf);
    else if (is_opt(a, n, "--seed"))
      rc = parse_u64(sub, "--seed", v, 0, UINT64_MAX, &p.seed);
    else if (is_opt(a, n, "--seq-len"))
      rc = parse_int(sub, "--seq-len", v, 1, MAX_SEQ_LEN, &seq_len);
    else
      rc = cli_usage_error("data", sub, "unknown option '%s'", a);
  }
  if (!rc && !out)
    rc = cli_usage_error("data", sub, "--out DIR is required");
  if (rc)
    return rc;

  char err[1024];
  trn_lexicon *lx;
  int e = trn_lexicon_new(&p, &lx, err, sizeof err);
  if (e)
    return runtime_error(sub, e, err);
  double rate = trn_lexicon_entropy_rate(lx);
  double floor_ = trn_lexicon_window_floor(lx, seq_len);
  uint64_t digest = trn_lexicon_digest(lx);
  trn_lexicon_free(lx);
  if (isnan(floor_))
    return runtime_error(sub, SS_ENOMEM, "window floor: out of memory");
  trn_data_summary s;
  e = trn_data_synth(out, &p, tokens, val_tokens, trn_synth_train_seed(p.seed),
                     trn_synth_val_seed(p.seed), &s, err, sizeof err);
  if (e)
    return runtime_error(sub, e, err);
  char train[4096], val[4096];
  snprintf(train, sizeof train, TRN_SHARD_PATH_FMT, out, "train", 0);
  snprintf(val, sizeof val, TRN_SHARD_PATH_FMT, out, "val", 0);
  printf("{\"train\": ");
  print_json_str(train);
  printf(", \"val\": ");
  print_json_str(val);
  printf(", \"train_tokens\": %" PRIu64 ", \"val_tokens\": %" PRIu64
         ", \"entropy_rate\": %.17g, \"window_floor\": %.17g, \"seq_len\": %d"
         ", \"lexicon_digest\": \"%016" PRIx64 "\"}\n",
         s.train_tokens, s.val_tokens, rate, floor_, seq_len, digest);
  return fflush(stdout) == 0 ? SS_EXIT_OK : SS_EXIT_FAILURE;
}

int cmd_data(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    if (cli_is_help(argv[i])) {
      fputs(usage_text, stdout);
      return SS_EXIT_OK;
    }
  }
  if (argc < 2)
    return cli_usage_error("data", NULL, "expected a subcommand: prepare or synth");
  if (strcmp(argv[1], "prepare") == 0)
    return data_prepare(argc, argv);
  if (strcmp(argv[1], "synth") == 0)
    return data_synth(argc, argv);
  return cli_usage_error("data", NULL, "unknown subcommand '%s', expected prepare or synth",
                         argv[1]);
}

/* The coordinate check's table (trainer/coordcheck.h; docs/models.md,
 * "muP"): the RMS of every layer's activations after a few Adam steps at
 * each width, standard parametrisation against muP, and for each row the
 * ratio of its largest to its smallest value over the widths.
 *
 *   coordcheck [gpt2|llama] [LR] [STEPS] [WIDTH ...]
 *   (defaults: llama 1e-2 10 64 128 256 512; 2 layers, head size 16,
 *   seq_len 64, muP's base width the first width) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/coordcheck.h"

#define MAXW 8

int main(int argc, char **argv) {
  const char *family = argc > 1 ? argv[1] : "llama";
  double lr = argc > 2 ? atof(argv[2]) : 1e-2;
  int steps = argc > 3 ? atoi(argv[3]) : 10;
  int widths[MAXW] = {64, 128, 256, 512}, nw = 4;
  if (argc > 4) {
    nw = 0;
    for (int i = 4; i < argc && nw < MAXW; i++)
      widths[nw++] = atoi(argv[i]);
  }
  if (strcmp(family, "gpt2") && strcmp(family, "llama")) {
    fprintf(stderr, "coordcheck: family \"%s\": expected gpt2 or llama\n", family);
    return 2;
  }
  rcfg_shape s = {.n_layer = 2, .d_model = widths[0], .n_head = 1, .seq_len = 64, .vocab_size = 27};
  if (!strcmp(family, "llama")) {
    s.family = RCFG_LLAMA;
    s.mlp_ratio = 8.0 / 3.0;
    s.mlp_multiple_of = 32;
    s.rope_theta = 10000.0;
    s.untied = 1;
  }
  int rows = TRN_CC_ROWS(s.n_layer);
  double rms[2][MAXW * 16];
  for (int mup = 0; mup < 2; mup++) {
    s.parametrization = mup ? RCFG_MUP : RCFG_SP;
    s.base_width = mup ? widths[0] : 0;
    char err[256];
    if (trn_coordcheck(&s, 16, widths, nw, steps, lr, 1, rms[mup], err, sizeof err)) {
      fprintf(stderr, "coordcheck: %s\n", err);
      return 1;
    }
  }
  printf("coordinate check: %s, 2 layers, head size 16, seq_len 64, batch 8, %d AdamW steps at lr "
         "%g, fp32; muP base width %d\n\n",
         family, steps, lr, widths[0]);
  printf("| activation |");
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < nw; i++)
      printf(" %s d=%d |", p ? "muP" : "SP", widths[i]);
  printf(" SP max/min | muP max/min |\n|---|");
  for (int i = 0; i < 2 * nw + 2; i++)
    printf("---:|");
  printf("\n");
  for (int r = 0; r < rows; r++) {
    char name[32];
    trn_cc_row_name(s.n_layer, r, name, sizeof name);
    printf("| %s |", name);
    double ratio[2];
    for (int p = 0; p < 2; p++) {
      double lo = 1e300, hi = 0;
      for (int i = 0; i < nw; i++) {
        double v = rms[p][i * rows + r];
        printf(" %.3g |", v);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      ratio[p] = hi / lo;
    }
    printf(" %.2f | %.2f |\n", ratio[0], ratio[1]);
  }
  return 0;
}

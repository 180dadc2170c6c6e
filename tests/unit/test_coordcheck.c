/* muP's coordinate check with a loose bound (the figures are in
 * docs/models.md, from tests/bench/coordcheck): after 5 Adam steps at
 * widths 32 to 128, every layer's activation RMS under muP stays within a
 * factor 3 over the widths, for both families, while under standard
 * parametrisation the residual stream grows by more than 10x. */
#include "check.h"
#include "trainer/coordcheck.h"

static void family(int llama) {
  rcfg_shape s = {.n_layer = 2, .d_model = 32, .n_head = 1, .seq_len = 32, .vocab_size = 27};
  if (llama) {
    s.family = RCFG_LLAMA;
    s.mlp_ratio = 8.0 / 3.0;
    s.mlp_multiple_of = 32;
    s.rope_theta = 10000.0;
    s.untied = 1;
  }
  const int widths[3] = {32, 64, 128};
  int rows = TRN_CC_ROWS(2);
  double rms[2][3 * TRN_CC_ROWS(2)];
  char err[256];
  for (int mup = 0; mup < 2; mup++) {
    s.parametrization = mup ? RCFG_MUP : RCFG_SP;
    s.base_width = mup ? 32 : 0;
    CHECK_INT_EQ(trn_coordcheck(&s, 16, widths, 3, 5, 1e-2, 1, rms[mup], err, sizeof err), 0);
  }
  for (int r = 0; r < rows; r++) {
    char name[32];
    trn_cc_row_name(2, r, name, sizeof name);
    double lo = 1e300, hi = 0;
    for (int i = 0; i < 3; i++) {
      double v = rms[1][i * rows + r];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (!(hi / lo < 3.0))
      fprintf(stderr, "%s muP %s: max/min %.2f over widths 32-128\n", llama ? "llama" : "gpt2",
              name, hi / lo);
    CHECK(hi / lo < 3.0);
  }
  /* the last block's output ("1.out", row rows - 2) under sp */
  double sp = rms[0][2 * rows + rows - 2] / rms[0][rows - 2];
  if (!(sp > 10.0))
    fprintf(stderr, "%s sp 1.out: x%.2f from width 32 to 128\n", llama ? "llama" : "gpt2", sp);
  CHECK(sp > 10.0);
}

int main(void) {
  family(0);
  family(1);
  CHECK_DONE();
}

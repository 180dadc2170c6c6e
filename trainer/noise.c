#include "trainer/noise.h"

void trn_noise_init(trn_noise *z, double decay) {
  z->decay = decay;
  z->ema_g2 = 0.0;
  z->ema_s = 0.0;
  z->n = 0;
}

void trn_noise_update(trn_noise *z, double g_small2, double g_big2, double b_small, double b_big) {
  /* |G|^2 = (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
   * S     = (|G_small|^2 - |G_big|^2) / (1/b_small - 1/b_big) */
  double g2 = (b_big * g_big2 - b_small * g_small2) / (b_big - b_small);
  double s = (g_small2 - g_big2) / (1.0 / b_small - 1.0 / b_big);
  z->ema_g2 = z->decay * z->ema_g2 + (1.0 - z->decay) * g2;
  z->ema_s = z->decay * z->ema_s + (1.0 - z->decay) * s;
  z->n++;
}

int trn_noise_value(const trn_noise *z, double *b) {
  /* both EMAs carry the same (1 - decay^n) bias, which cancels in the ratio */
  if (z->n == 0 || !(z->ema_g2 > 0.0))
    return -1;
  *b = z->ema_s / z->ema_g2;
  return 0;
}

double trn_noise_naive(double g_big2, double s_est) { return s_est / g_big2; }

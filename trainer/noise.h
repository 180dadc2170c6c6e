/* The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al.
 * 2018; SCIENCE.md section 3), from gradient norms the trainer already has:
 * |G_small|^2, the mean squared norm of the micro-batch gradients (batch
 * b_small), and |G_big|^2, the squared norm of their mean (batch b_big).
 * E|G_b|^2 = |G|^2 + tr(Sigma)/b gives unbiased estimates of |G|^2 and
 * tr(Sigma) per step; each is noisy, so separate exponential moving averages
 * are kept and the ratio of the averages is reported. */
#ifndef SS_TRAINER_NOISE_H
#define SS_TRAINER_NOISE_H

#include <stdint.h>

typedef struct trn_noise {
  double decay;  /* EMA decay per step */
  double ema_g2; /* EMA of the |G|^2 estimates */
  double ema_s;  /* EMA of the tr(Sigma) estimates */
  int64_t n;     /* updates so far */
} trn_noise;

void trn_noise_init(trn_noise *z, double decay);

/* One step's norms; requires b_big > b_small (in sequences). */
void trn_noise_update(trn_noise *z, double g_small2, double g_big2, double b_small, double b_big);

/* B_simple in sequences (the unit of b_small and b_big). Returns 0 and sets
 * *b, or -1 while not measurable (no update yet, or EMA(|G|^2) <= 0). */
int trn_noise_value(const trn_noise *z, double *b);

/* The biased estimate from the big batch alone: tr(Sigma)_est / |G_big|^2,
 * where |G_big|^2 still contains tr(Sigma)/b_big. For tests and reports of
 * what not to do. */
double trn_noise_naive(double g_big2, double s_est);

#endif

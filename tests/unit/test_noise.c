/* The gradient noise scale estimator on the known answer of SCIENCE.md:
 * linear regression y = x.w* + eps, x ~ N(0, I_d), noise variance s2, at
 * fixed parameters w with D = w - w*: G = D, tr(Sigma) = |D|^2 + (|D|^2 + s2) d,
 * B_simple = d + 1 + d s2 / |D|^2 = 33 for d = 16, |D|^2 = s2 = 1. */
#include "check.h"
#include "trainer/noise.h"
#include "trainer/rng.h"

#define D 16
#define B_SMALL 8
#define B_BIG 64

static double gauss(uint64_t r[4]) {
  double u1 = 1.0 - trn_rng_uniform(r), u2 = trn_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

int main(void) {
  uint64_t r[4];
  trn_rng_seed(r, 2024);
  double delta[D], n2 = 0;
  for (int i = 0; i < D; i++) {
    delta[i] = gauss(r);
    n2 += delta[i] * delta[i];
  }
  for (int i = 0; i < D; i++)
    delta[i] /= sqrt(n2); /* |D|^2 = 1 */
  const double s2 = 1.0, truth = D + 1 + D * s2 / 1.0;

  /* A long EMA (window ~ 1 / (1 - decay) = 20000 steps) so that the
   * estimate's own sampling noise is well under the 3% asked for. */
  trn_noise z;
  trn_noise_init(&z, 0.99995);
  double naive_sum = 0;
  const int steps = 100000;
  for (int s = 0; s < steps; s++) {
    double big[D] = {0}, small2 = 0;
    for (int mb = 0; mb < B_BIG / B_SMALL; mb++) {
      double g[D] = {0};
      for (int e = 0; e < B_SMALL; e++) {
        double x[D], res = 0;
        for (int i = 0; i < D; i++) {
          x[i] = gauss(r);
          res += x[i] * delta[i];
        }
        res -= sqrt(s2) * gauss(r); /* x.w - y = x.D - eps */
        for (int i = 0; i < D; i++)
          g[i] += x[i] * res / B_SMALL; /* per-example gradient x (x.D - eps) */
      }
      double gn = 0;
      for (int i = 0; i < D; i++) {
        gn += g[i] * g[i];
        big[i] += g[i] / (B_BIG / B_SMALL);
      }
      small2 += gn / (B_BIG / B_SMALL);
    }
    double big2 = 0;
    for (int i = 0; i < D; i++)
      big2 += big[i] * big[i];
    trn_noise_update(&z, small2, big2, B_SMALL, B_BIG);
    double s_est = (small2 - big2) / (1.0 / B_SMALL - 1.0 / B_BIG);
    naive_sum += trn_noise_naive(big2, s_est);
  }
  double b;
  CHECK_INT_EQ(trn_noise_value(&z, &b), 0);
  printf("B_simple: estimated %.3f, analytic %.3f; naive %.3f\n", b, truth, naive_sum / steps);
  CHECK_NEAR(b, truth, 0, 0.03);
  /* the naive ratio divides by |G_big|^2 = |G|^2 + tr(Sigma)/B_big = 1.5:
   * about 22 instead of 33, far outside the 3% */
  CHECK(fabs(naive_sum / steps / truth - 1.0) > 0.2);

  /* not measurable before any update */
  trn_noise fresh;
  trn_noise_init(&fresh, 0.95);
  CHECK(trn_noise_value(&fresh, &b) == -1);
  CHECK_DONE();
}

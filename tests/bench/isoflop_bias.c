/* isoflop_bias: Approach 2's bias on the noise-free Chinchilla surface, as a
 * Markdown table (docs/sweeps.md).
 *
 * Every row fits fit_isoflop to points exactly on L = E + A/N^alpha +
 * B/D^beta (the published parameters unless --alpha/--beta say otherwise):
 * 5 compute budgets 1e18..1e22, 7 sizes per budget evenly spaced in ln N
 * over a span of N_max/N_min, the grid's centre at ln N_opt(C) + o_j. It
 * prints a's error as fitted and as derived from the profile's shape
 * (fit_isoflop_vertex_offset: the least-squares slope of the per-budget
 * vertex offsets on ln C, over the budgets with an interior minimum), the
 * error of the fitted N_opt at C = 1e20, and the warnings the fit gave.
 *
 * Usage: isoflop_bias [--alpha A] [--beta B]
 * Built with the tests, never run by ctest:
 *   cmake --build build --target isoflop_bias && build/tests/isoflop_bias
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweeps/fit.h"

#define NB 5
#define K 7
#define E0 1.69
#define A0 406.4
#define B0 410.7

static double alpha = 0.34, beta = 0.28;

static double n_opt(double c) {
  double n;
  fit_chinchilla_allocation(A0, B0, alpha, beta, c, NULL, NULL, NULL, &n, NULL);
  return n;
}

static int count(const fit_result *r, const char *needle) {
  int k = 0;
  for (int i = 0; i < r->nwarnings; i++)
    k += strstr(r->warnings[i], needle) != NULL;
  return k;
}

/* o_j = o + slope (ln C_j - ln C_mid) */
static void row(const char *label, double span, double o, double slope) {
  fit_point p[NB * K];
  double lc[NB], v[NB], w = log(span) / 2, mid = log(1e20);
  int n = 0;
  for (int j = 0; j < NB; j++) {
    double c = 1e18 * pow(10, j), z[K];
    lc[j] = log(c);
    for (int i = 0; i < K; i++, n++) {
      z[i] = o + slope * (lc[j] - mid) + w * (-1 + 2.0 * i / (K - 1));
      double N = n_opt(c) * exp(z[i]), D = c / (6 * N);
      p[n] = (fit_point){.params = N, .tokens = D, .flops = c, .group = -1};
      p[n].loss = E0 + A0 / pow(N, alpha) + B0 / pow(D, beta);
      p[n].batch_size = p[n].steps = p[n].lr = NAN;
    }
    v[j] = fit_isoflop_vertex_offset(alpha, beta, z, K);
  }
  fit_options opt = {.threads = 1};
  fit_result r;
  char err[256];
  if (fit_isoflop(p, n, &opt, &r, err, sizeof err)) {
    printf("| %s | %s |\n", label, err);
    return;
  }
  /* the derivation over the budgets the fit could use */
  double x[NB], y[NB], mx = 0, my = 0, sxy = 0, sxx = 0;
  int m = 0;
  for (int j = 0; j < NB; j++)
    if (r.budgets[j].usable)
      x[m] = lc[j], y[m] = v[j], m++;
  for (int i = 0; i < m; i++)
    mx += x[i] / m, my += y[i] / m;
  for (int i = 0; i < m; i++)
    sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  double a_true = beta / (alpha + beta);
  const fit_param *a = fit_result_get(&r, "a"), *nc = fit_result_get(&r, "n_coef");
  double n20 = nc->value * pow(1e20, a->value);
  char warn[128] = "";
  size_t len = 0;
  static const char *const kinds[][2] = {{"narrow", "narrow"},
                                         {"sampling off-centre", "off-centre"},
                                         {"drifts", "drift"},
                                         {"unusable", "unusable"}};
  for (int k = 0; k < 4; k++) {
    int c = count(&r, kinds[k][0]);
    if (c == 1 && len < sizeof warn)
      len += (size_t)snprintf(warn + len, sizeof warn - len, "%s%s", len ? ", " : "", kinds[k][1]);
    else if (c > 1 && len < sizeof warn)
      len += (size_t)snprintf(warn + len, sizeof warn - len, "%s%s x%d", len ? ", " : "",
                              kinds[k][1], c);
  }
  printf("| %s | %gx | %+.2e | %+.2e | %+.2f%% | %d of %d | %s |\n", label, span, a->value - a_true,
         m >= 2 ? sxy / sxx : NAN, 100 * (n20 / n_opt(1e20) - 1), r.converged ? m : 0, NB,
         len ? warn : "none");
  fit_result_free(&r);
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--alpha"))
      alpha = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--beta"))
      beta = atof(argv[i + 1]);
  }
  if (argc % 2 == 0 || !(alpha > 0) || !(beta > 0)) {
    fprintf(stderr, "usage: isoflop_bias [--alpha A] [--beta B] (both positive)\n");
    return 2;
  }
  double a = beta / (alpha + beta);
  printf("Approach 2 on noise-free L = %g + %g/N^%g + %g/D^%g (a = %.6f): 5 budgets "
         "1e18..1e22, 7 sizes each\n\n",
         E0, A0, alpha, B0, beta, a);
  printf("| sampling | N_max/N_min | a error | a error, derived | N_opt(1e20) error | budgets "
         "used | warnings |\n");
  printf("|---|---|---|---|---|---|---|\n");
  row("centred", 4, 0, 0);
  row("centred", 16, 0, 0);
  row("centred", 100, 0, 0);
  row("centred", 1000, 0, 0);
  row("centred at 2 N_opt", 16, log(2), 0);
  row("centred at N_opt / 2", 16, -log(2), 0);
  row("centred at 3 N_opt", 16, log(3), 0);
  row("centred on a + 0.05", 16, 0, 0.05);
  row("centred on a - 0.05", 16, 0, -0.05);
  row("centred on a + 0.05", 100, 0, 0.05);
  row("centred on a + 0.15", 100, 0, 0.15);
  row("same sizes every budget", 100, 0, -a);
  row("same sizes every budget", 1000, 0, -a);
  return 0;
}

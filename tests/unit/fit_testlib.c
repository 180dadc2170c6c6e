/* Shared helpers of the fit tests (fit_testlib.h). */
#include "fit_testlib.h"

#include <math.h>
#include <string.h>

fit_point fitt_blank(void) {
  fit_point p = {.group = -1};
  p.params = p.tokens = p.flops = p.loss = p.batch_size = p.steps = p.lr = NAN;
  return p;
}

fit_point fitt_point(double N, double D, double C, double loss) {
  fit_point p = fitt_blank();
  p.params = N;
  p.tokens = D;
  p.flops = C;
  p.loss = loss;
  return p;
}

const fit_param *fitt_find(const fit_param *p, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(p[i].name, name))
      return &p[i];
  return NULL;
}

double fitt_param(const fit_result *r, const char *name) {
  const fit_param *p = fitt_find(r->params, r->nparams, name);
  return p ? p->value : NAN;
}

double fitt_derived(const fit_result *r, const char *name) {
  const fit_param *p = fitt_find(r->derived, r->nderived, name);
  return p ? p->value : NAN;
}

int fitt_has_warning(const fit_result *r, const char *needle) {
  for (int i = 0; i < r->nwarnings; i++)
    if (strstr(r->warnings[i], needle))
      return 1;
  return 0;
}

/* What the fit tests share (test_fit_laws.c, test_fit_curve.c,
 * test_fit_chinchilla.c): a point with nothing measured, and looking up a
 * result's parameters and warnings by name. */
#ifndef SS_TESTS_FIT_TESTLIB_H
#define SS_TESTS_FIT_TESTLIB_H

#include "sweeps/fit.h"

/* Every measurement NAN, no run (group -1): set the fields a fit reads. */
fit_point fitt_blank(void);

/* A run at params N, tokens D and flops C (NAN: not known) that reached
 * loss; the rest as fitt_blank. */
fit_point fitt_point(double N, double D, double C, double loss);

/* The parameter called name among p[0..n), or NULL. */
const fit_param *fitt_find(const fit_param *p, int n, const char *name);

/* The value of r's fitted (fitt_param) or derived (fitt_derived) parameter
 * called name; NAN when r has none of that name. */
double fitt_param(const fit_result *r, const char *name);
double fitt_derived(const fit_result *r, const char *name);

/* Whether one of r's warnings contains needle. */
int fitt_has_warning(const fit_result *r, const char *needle);

#endif

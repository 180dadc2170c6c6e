/* The study's result, from a sweep's fits (GET /api/sweeps/{id}/fit, as
 * refit.c stores them): L(N, D) with E next to the corpus's truth, the
 * compute-optimal exponents both ways, the critical batch size both ways,
 * the extrapolation and the stability checks. One builder of the numbers;
 * `scalesweep up --wait` (cli/cmd_up.c) and the sweep page
 * (scheduler/web_sweep.c) each format its rows in their own layout. */
#ifndef SS_SWEEPS_FIT_REPORT_H
#define SS_SWEEPS_FIT_REPORT_H

#include <jansson.h>

/* Which line of the result a row belongs to. */
typedef enum {
  FIT_REPORT_LAW,          /* L(N, D): E, A, alpha, B, beta */
  FIT_REPORT_OPT_LAW,      /* compute-optimal exponents from L(N, D): a, b */
  FIT_REPORT_OPT_ISO,      /* the same from the IsoFLOP minima: a, b */
  FIT_REPORT_BCRIT,        /* critical batch size per target loss, in the fit's order */
  FIT_REPORT_BNOISE,       /* the gradient noise scale: B_noise */
  FIT_REPORT_STAB_ISO,     /* IsoFLOP without the smallest budget: a, b */
  FIT_REPORT_STAB_LAW,     /* L(N, D) without the smallest budget: E, alpha, beta, a */
  FIT_REPORT_BRANCH,       /* by branching (law bcrit): B_crit(D=..) per branch point, at = D */
  FIT_REPORT_BRANCH_NOISE, /* the trunk's noise scale there: B_noise(D=..), at = D */
  FIT_REPORT_BRANCH_LAW    /* across branch points: gamma_D, alpha_B */
} fit_report_group;

/* One value: "LABEL = VALUE [LO, HI]". */
typedef struct fit_report_row {
  fit_report_group group;
  char label[40]; /* "E", "B_crit(L=3.2)", ... */
  double value;   /* NAN when the fit lacks it */
  double lo, hi;  /* its 95% interval; NAN when there is none */
  double every;   /* stability rows: the value with every budget (NAN: unknown) */
  double at;      /* FIT_REPORT_BCRIT: the target loss; NAN for the single "B_crit";
                   * FIT_REPORT_BRANCH(_NOISE): the branch point's D */
} fit_report_row;

#define FIT_REPORT_MAX_ROWS 48

/* Numbers are NAN when the fits lack them, but for the counts (0). */
typedef struct fit_report {
  int has_law, has_iso, has_batch; /* the chinchilla, isoflop and batch fits */
  int has_branch;                  /* the bcrit fit (the ladder by branching) */
  double law_runs;                 /* the chinchilla fit's n_points */
  int has_corpus;                  /* the synthetic corpus's truth */
  double entropy_rate, window_floor, seq_len, floor_gap; /* floor_gap: E - window floor */
  int iso_usable, iso_budgets; /* budgets with an interior minimum, of all */
  int has_extrap;              /* fitted without the largest budget */
  double held_out_flops, predicted_loss, measured_loss, rel_err;
  int has_stab_iso, has_stab_law;        /* fitted without the smallest budget */
  double stab_iso_flops, stab_law_flops; /* the budget each dropped */
  double stab_iso_usable;                /* count (0 when absent) */
  int nrows;
  fit_report_row rows[FIT_REPORT_MAX_ROWS];
} fit_report;

/* Fills *r from fits (an object of law name to fit object; NULL: nothing).
 * Borrows nothing: r holds copies. */
void fit_report_build(json_t *fits, fit_report *r);

/* The FIT_REPORT_BRANCH rows' indices in r->rows, by their branch point D
 * ascending, into idx (room for FIT_REPORT_MAX_ROWS); how many. */
int fit_report_branch_order(const fit_report *r, int *idx);
/* The FIT_REPORT_BRANCH_NOISE row at the branch point at, or NULL. */
const fit_report_row *fit_report_branch_noise(const fit_report *r, double at);

/* The row of group g labelled label (the first of them), or NULL. */
const fit_report_row *fit_report_find(const fit_report *r, fit_report_group g, const char *label);

#endif

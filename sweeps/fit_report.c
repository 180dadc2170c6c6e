/* The study's result as rows (sweeps/fit_report.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sweeps/fit.h"
#include "sweeps/fit_report.h"

static double num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static fit_report_row *add(fit_report *r, fit_report_group g, json_t *fit, const char *key,
                           json_t *every) {
  if (r->nrows == FIT_REPORT_MAX_ROWS)
    return NULL;
  fit_report_row *row = &r->rows[r->nrows++];
  row->group = g;
  snprintf(row->label, sizeof row->label, "%s", key);
  json_t *v = fit_json_get(fit, key);
  json_t *ci = json_object_get(json_object_get(fit, "ci95"), key);
  row->value = json_is_number(v) ? json_number_value(v) : NAN;
  row->lo = json_array_size(ci) == 2 ? json_number_value(json_array_get(ci, 0)) : NAN;
  row->hi = json_array_size(ci) == 2 ? json_number_value(json_array_get(ci, 1)) : NAN;
  v = every ? fit_json_get(every, key) : NULL;
  row->every = json_is_number(v) ? json_number_value(v) : NAN;
  row->at = NAN;
  return row;
}

static void add_all(fit_report *r, fit_report_group g, json_t *fit, const char *const *keys,
                    json_t *every) {
  for (int i = 0; keys[i]; i++)
    add(r, g, fit, keys[i], every);
}

static const char *const ab[] = {"a", "b", NULL};

/* A derived value at a point ("B_crit(L=2.5)"): its key's pattern (a scanf
 * format reading the point) and the group of its rows. */
typedef struct {
  const char *pattern;
  fit_report_group group;
} at_key;

/* Rows for fit's derived values whose keys match one of keys' patterns
 * (the first that does), each with its point; at most max; how many. */
static int add_at(fit_report *r, json_t *fit, const at_key *keys, int max) {
  const char *k;
  json_t *v;
  int any = 0;
  json_object_foreach(json_object_get(fit, "derived"), k, v) {
    double at;
    const at_key *p = keys;
    while (p->pattern && sscanf(k, p->pattern, &at) != 1)
      p++;
    fit_report_row *row;
    if (any < max && p->pattern && (row = add(r, p->group, fit, k, NULL))) {
      row->at = at;
      any++;
    }
  }
  return any;
}

void fit_report_build(json_t *fits, fit_report *r) {
  memset(r, 0, sizeof *r);
  json_t *ch = json_object_get(fits, "chinchilla"), *iso = json_object_get(fits, "isoflop"),
         *bat = json_object_get(fits, "batch");
  r->has_law = ch != NULL;
  r->has_iso = iso != NULL;
  r->has_batch = bat != NULL;
  if (ch) {
    static const char *const law[] = {"E", "A", "alpha", "B", "beta", NULL};
    r->law_runs = json_number_value(json_object_get(ch, "n_points"));
    add_all(r, FIT_REPORT_LAW, ch, law, NULL);
    json_t *corpus = json_object_get(ch, "corpus");
    r->has_corpus = json_is_object(corpus);
    r->entropy_rate = num(corpus, "entropy_rate");
    r->window_floor = num(corpus, "window_floor");
    r->seq_len = json_number_value(json_object_get(corpus, "seq_len"));
    r->floor_gap = r->rows[0].value - r->window_floor;
    add_all(r, FIT_REPORT_OPT_LAW, ch, ab, NULL);
  }
  if (iso) {
    r->iso_budgets = fit_json_budgets(iso, &r->iso_usable);
    add_all(r, FIT_REPORT_OPT_ISO, iso, ab, NULL);
  }
  if (bat) {
    static const at_key crit[] = {{"B_crit(L=%lf)", FIT_REPORT_BCRIT}, {NULL, 0}};
    if (!add_at(r, bat, crit, 16))
      add(r, FIT_REPORT_BCRIT, bat, "B_crit", NULL);
    add(r, FIT_REPORT_BNOISE, bat, "B_noise", NULL);
  }
  json_t *bc = json_object_get(fits, "bcrit");
  r->has_branch = bc != NULL;
  if (bc) {
    static const at_key branch[] = {{"B_noise(D=%lf)", FIT_REPORT_BRANCH_NOISE},
                                    {"B_crit(D=%lf)", FIT_REPORT_BRANCH},
                                    {NULL, 0}};
    add_at(r, bc, branch, 12);
    static const char *const law[] = {"gamma_D", "alpha_B", NULL};
    add_all(r, FIT_REPORT_BRANCH_LAW, bc, law, NULL);
  }
  json_t *ex = json_object_get(ch, "extrapolation");
  r->has_extrap = json_is_object(ex);
  r->held_out_flops = num(ex, "held_out_flops");
  r->predicted_loss = num(ex, "predicted_loss");
  r->measured_loss = num(ex, "measured_loss");
  r->rel_err = num(ex, "rel_err");
  json_t *wi = json_object_get(iso, "without_smallest_budget"),
         *wc = json_object_get(ch, "without_smallest_budget");
  r->has_stab_iso = json_is_object(wi);
  r->has_stab_law = json_is_object(wc);
  r->stab_iso_flops = num(wi, "dropped_flops");
  r->stab_law_flops = num(wc, "dropped_flops");
  r->stab_iso_usable = json_number_value(json_object_get(wi, "usable_budgets"));
  if (r->has_stab_iso)
    add_all(r, FIT_REPORT_STAB_ISO, wi, ab, iso);
  if (r->has_stab_law) {
    static const char *const names[] = {"E", "alpha", "beta", "a", NULL};
    add_all(r, FIT_REPORT_STAB_LAW, wc, names, ch);
  }
}

const fit_report_row *fit_report_find(const fit_report *r, fit_report_group g, const char *label) {
  for (int i = 0; i < r->nrows; i++)
    if (r->rows[i].group == g && !strcmp(r->rows[i].label, label))
      return &r->rows[i];
  return NULL;
}

int fit_report_branch_order(const fit_report *r, int *idx) {
  int n = 0;
  for (int i = 0; i < r->nrows; i++) {
    if (r->rows[i].group != FIT_REPORT_BRANCH)
      continue;
    int k = n++;
    while (k > 0 && r->rows[idx[k - 1]].at > r->rows[i].at) { /* insertion: a few rows */
      idx[k] = idx[k - 1];
      k--;
    }
    idx[k] = i;
  }
  return n;
}

const fit_report_row *fit_report_branch_noise(const fit_report *r, double at) {
  for (int i = 0; i < r->nrows; i++)
    if (r->rows[i].group == FIT_REPORT_BRANCH_NOISE && r->rows[i].at == at)
      return &r->rows[i];
  return NULL;
}

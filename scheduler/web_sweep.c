/* A sweep's page (/sweeps/ID): summary, fits and the study's result,
 * plots, one page of its runs. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/usage.h"
#include "scheduler/web.h"
#include "scheduler/route.h"
#include "sweeps/fit_report.h"

/* ---- sweep
 * ---------------------------------------------------------------------------
 */

/* lead, then "LO, HI]": an interval's numbers */
static void b_interval(sched__buf *b, const char *lead, double lo, double hi) {
  sched__b_puts(b, lead);
  sched__b_num(b, lo, "%.4g");
  sched__b_puts(b, ", ");
  sched__b_num(b, hi, "%.4g");
  sched__b_puts(b, "]");
}

/* A paragraph: open (its tag and lead), then text escaped. */
static void b_para(sched__buf *b, const char *open, const char *text) {
  sched__b_puts(b, open);
  sched__b_esc(b, text);
  sched__b_puts(b, "</p>");
}

static void render_fit_params(sched__buf *b, const char *law, json_t *fit) {
  json_t *ci = json_object_get(fit, "ci95");
  sched__b_puts(b, "<div class=\"fit\"><h3>");
  sched__b_esc(b, law);
  sched__b_printf(b, " <small>(%" JSON_INTEGER_FORMAT " points%s)</small></h3>",
                  sched__jint(fit, "n_points"),
                  json_is_false(json_object_get(fit, "converged")) ? ", not converged" : "");
  static const char *const cols[] = {"Parameter", "Value", "95% interval", NULL};
  sched__b_thead(b, "<table class=\"params\">", cols);
  static const char *const groups[2] = {"params", "derived"};
  for (int g = 0; g < 2; g++) {
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(fit, groups[g]), k, v) {
      json_t *iv = json_object_get(ci, k);
      sched__b_puts(b, "<tr><th scope=\"row\">");
      sched__b_esc(b, k);
      sched__b_puts(b, "</th><td>");
      sched__b_num(b, json_is_number(v) ? json_number_value(v) : NAN, "%.4g");
      sched__b_puts(b, "</td><td>");
      if (json_array_size(iv) == 2)
        b_interval(b, "[", json_number_value(json_array_get(iv, 0)),
                   json_number_value(json_array_get(iv, 1)));
      sched__b_puts(b, "</td></tr>");
    }
  }
  /* runs that differ only by seed: the pooled run-to-run noise (fit.h) */
  json_t *seeds = json_object_get(fit, "seeds");
  if (json_is_object(seeds)) {
    json_t *iv = json_object_get(seeds, "ci95");
    sched__b_puts(b, "<tr class=\"seeds\"><th scope=\"row\">seed SD of ln L</th><td>");
    json_t *sd = json_object_get(seeds, "sd_ln_loss");
    sched__b_num(b, json_is_number(sd) ? json_number_value(sd) : NAN, "%.4g");
    sched__b_puts(b, "</td><td>");
    if (json_array_size(iv) == 2)
      b_interval(b, "[", json_number_value(json_array_get(iv, 0)),
                 json_number_value(json_array_get(iv, 1)));
    sched__b_printf(b,
                    " <small>(%" JSON_INTEGER_FORMAT " runs in %" JSON_INTEGER_FORMAT
                    " replicated cells, df %" JSON_INTEGER_FORMAT ")</small></td></tr>",
                    sched__jint(seeds, "runs"), sched__jint(seeds, "cells"),
                    sched__jint(seeds, "df"));
  }
  sched__b_puts(b, "</tbody></table>");
  size_t i;
  json_t *wn;
  json_array_foreach(json_object_get(fit, "warnings"), i, wn) {
    b_para(b, "<p class=\"warn\">", json_string_value(wn));
  }
  sched__b_puts(b, "</div>");
}

/* "NAME = V [LO, HI]" of a row of the result (n/a when the fit lacks it),
 * and for a stability row " (every budget: V)", the full fit's value. */
static void b_value(sched__buf *b, const fit_report_row *w) {
  if (!w)
    return;
  sched__b_esc(b, w->label);
  if (isnan(w->value)) {
    sched__b_puts(b, " = n/a");
  } else {
    sched__b_puts(b, " = ");
    sched__b_num(b, w->value, "%.4g");
    if (!isnan(w->lo))
      b_interval(b, " [", w->lo, w->hi);
  }
  if (w->group == FIT_REPORT_STAB_ISO || w->group == FIT_REPORT_STAB_LAW) {
    sched__b_puts(b, " (every budget: ");
    sched__b_num_na(b, w->every, "%.4g");
    sched__b_puts(b, ")");
  }
}

/* the rows of group g with the given labels (NULL-terminated), after
 * lead, joined by ", " */
static void b_values(sched__buf *b, const fit_report *r, const char *lead, fit_report_group g,
                     const char *const *labels) {
  sched__b_puts(b, lead);
  for (int i = 0; labels[i]; i++) {
    sched__b_puts(b, i ? ", " : "");
    b_value(b, fit_report_find(r, g, labels[i]));
  }
}

static const char *const ab[] = {"a", "b", NULL};

/* L(N, D) with E next to the corpus's truth, and its exponents. */
static void li_law(sched__buf *b, const fit_report *r) {
  static const char *const e[] = {"E", NULL};
  b_values(b, r, "<li>L(N, D) = E + A/N<sup>&alpha;</sup> + B/D<sup>&beta;</sup>: ", FIT_REPORT_LAW,
           e);
  sched__b_puts(b, " nats/token");
  if (r->has_corpus) {
    sched__b_puts(b, "; the corpus: entropy rate ");
    sched__b_num(b, r->entropy_rate, "%.4f");
    sched__b_puts(b, ", window floor ");
    sched__b_num(b, r->window_floor, "%.4f");
    sched__b_printf(
        b, " (the best loss on windows of %lld tokens), E &minus; floor = ", (long long)r->seq_len);
    sched__b_num_na(b, r->floor_gap, "%+.4f");
  }
  static const char *const slopes[] = {"alpha", "beta", NULL};
  b_values(b, r, "; ", FIT_REPORT_LAW, slopes);
  sched__b_printf(b, " (%lld runs)</li>", (long long)r->law_runs);
}

/* The compute-optimal exponents, from the law and from the IsoFLOP minima. */
static void li_optimum(sched__buf *b, const fit_report *r) {
  sched__b_puts(b, "<li>Compute-optimal N<sub>opt</sub>(C) &prop; C<sup>a</sup>, "
                   "D<sub>opt</sub>(C) &prop; C<sup>b</sup>: ");
  if (r->has_law)
    b_values(b, r, "from L(N, D) ", FIT_REPORT_OPT_LAW, ab);
  if (r->has_iso) {
    b_values(b, r, r->has_law ? "; from the IsoFLOP minima " : "from the IsoFLOP minima ",
             FIT_REPORT_OPT_ISO, ab);
    sched__b_printf(b, " (%d of %d budgets with an interior minimum)", r->iso_usable,
                    r->iso_budgets);
  }
  sched__b_puts(b, "</li>");
}

/* The critical batch size from the ladder and from the noise scale. */
static void li_batch(sched__buf *b, const fit_report *r) {
  sched__b_puts(b, "<li>Critical batch size (tokens): from the ladder ");
  int any = 0;
  for (int i = 0; i < r->nrows; i++)
    if (r->rows[i].group == FIT_REPORT_BCRIT && !isnan(r->rows[i].at)) {
      sched__b_puts(b, any++ ? ", " : "");
      b_value(b, &r->rows[i]);
    }
  if (!any)
    sched__b_puts(b, "n/a");
  static const char *const noise[] = {"B_noise", NULL};
  b_values(b, r, "; from the gradient noise scale ", FIT_REPORT_BNOISE, noise);
  sched__b_puts(b, " (median over the ladder)</li>");
}

/* The critical batch size by branching, at each branch point. */
static void li_branch(sched__buf *b, const fit_report *r) {
  sched__b_puts(b, "<li>Critical batch size by branching (tokens; t-intervals), at each "
                   "branch point D: ");
  int idx[FIT_REPORT_MAX_ROWS];
  for (int k = 0, n = fit_report_branch_order(r, idx); k < n; k++) {
    const fit_report_row *w = &r->rows[idx[k]], *noise = fit_report_branch_noise(r, w->at);
    sched__b_puts(b, k ? "; " : "");
    b_value(b, w);
    if (noise) {
      sched__b_puts(b, " (the trunk's ");
      b_value(b, noise);
      sched__b_puts(b, ")");
    }
  }
  static const char *const law[] = {"gamma_D", "alpha_B", NULL};
  b_values(b, r, "; B<sub>crit</sub> &prop; D<sup>&gamma;</sup>, &prop; L<sup>-1/&alpha;B</sup>: ",
           FIT_REPORT_BRANCH_LAW, law);
  sched__b_puts(b, "</li>");
}

/* The extrapolation check: the largest budget predicted without it. */
static void li_extrapolation(sched__buf *b, const fit_report *r) {
  sched__b_puts(b, "<li>Extrapolation: fitted without the largest budget (C = ");
  sched__b_num(b, r->held_out_flops, "%.3g");
  sched__b_puts(b, "), L(N, D) predicts its runs' mean loss ");
  sched__b_num(b, r->predicted_loss, "%.4f");
  sched__b_puts(b, "; measured ");
  sched__b_num(b, r->measured_loss, "%.4f");
  sched__b_puts(b, " (mean relative error ");
  sched__b_num(b, 100 * r->rel_err, "%.2f");
  sched__b_puts(b, "%)</li>");
}

/* The stability check: the exponents without the smallest budget. */
static void li_stability(sched__buf *b, const fit_report *r) {
  sched__b_puts(b, "<li>Stability: fitted without the smallest budget (C = ");
  sched__b_num(b, r->has_stab_iso ? r->stab_iso_flops : r->stab_law_flops, "%.3g");
  sched__b_puts(b, "): ");
  static const char *const a[] = {"a", NULL}, *const law[] = {"E", "alpha", "beta", NULL};
  if (r->has_stab_iso)
    b_values(b, r, "from the IsoFLOP minima ", FIT_REPORT_STAB_ISO, a);
  if (r->has_stab_law) {
    sched__b_puts(b, r->has_stab_iso ? "; from L(N, D) " : "from L(N, D) ");
    /* its smallest run is not an isoflop one */
    if (r->has_stab_iso && r->stab_law_flops != r->stab_iso_flops) {
      sched__b_puts(b, "(without C = ");
      sched__b_num(b, r->stab_law_flops, "%.3g");
      sched__b_puts(b, ") ");
    }
    b_values(b, r, "", FIT_REPORT_STAB_LAW, law);
  }
  sched__b_puts(b, "</li>");
}

/* The study's result in sentences, what `scalesweep up --wait` prints at the
 * end (the rows of sweeps/fit_report.h): L(N, D) with E next to the corpus's
 * truth, the compute-optimal exponents both ways, the critical batch size
 * both ways, the extrapolation and stability checks. */
static void render_result(sched__buf *b, json_t *fits) {
  fit_report r;
  fit_report_build(fits, &r);
  if (!r.has_law && !r.has_iso && !r.has_batch && !r.has_branch)
    return;
  sched__b_puts(b, "<div class=\"result\"><h3>The result <small>(95% bootstrap intervals)</small>"
                   "</h3><ul>");
  if (r.has_law)
    li_law(b, &r);
  if (r.has_law || r.has_iso)
    li_optimum(b, &r);
  if (r.has_batch)
    li_batch(b, &r);
  if (r.has_branch)
    li_branch(b, &r);
  if (r.has_extrap)
    li_extrapolation(b, &r);
  if (r.has_stab_iso || r.has_stab_law)
    li_stability(b, &r);
  sched__b_puts(b, "</ul></div>");
}

/* A link to this sweep page with another status filter or offset. */
static void b_sweep_link(sched__buf *b, int64_t id, const char *status, long long offset) {
  sched__b_printf(b, "/sweeps/%" PRId64, id);
  const char *sep = "?";
  if (status) {
    sched__b_printf(b, "%sstatus=%s", sep, status); /* a known status: nothing to escape */
    sep = "&amp;";
  }
  if (offset > 0)
    sched__b_printf(b, "%soffset=%lld", sep, offset);
}

static void render_runs_table(sched__buf *b, sched__web_req *w, const store_sweep_page *p) {
  long long total = p->runs_total;
  static const char *const heads[] = {"Run",           "Status",    "N",          "D (tokens)",
                                      "B (sequences)", "C (FLOPs)", "Final loss", "Attempt",
                                      "Worker",        "Duration",  NULL};
  sched__b_thead(b, "<div class=\"scroll\"><table class=\"runs\" id=\"runs-table\">", heads);
  for (int i = 0; i < p->nruns; i++) {
    const store_page_run *r = &p->runs[i];
    sched__b_printf(b, "<tr><td><a href=\"/runs/%" PRId64 "\">%" PRId64 "</a></td><td>", r->id,
                    r->id);
    sched__b_status(b, r->status);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->nonembedding_params, NULL);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->tokens, NULL);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->batch_size, "%.0f");
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->flops, NULL);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->final_val_loss, "%.4f");
    sched__b_printf(b, "</td><td>%" PRId64 "/%" PRId64 "</td><td>", r->attempt, r->max_attempts);
    sched__b_esc(b, r->worker);
    sched__b_puts(b, "</td><td>");
    sched__b_duration(b, r->duration_s);
    sched__b_puts(b, "</td></tr>");
  }
  if (!p->nruns)
    sched__b_puts(b, "<tr><td colspan=\"10\" class=\"empty\">No runs.</td></tr>");
  sched__b_puts(b, "</tbody></table></div>");
  long long shown = p->nruns;
  long long first = shown ? (long long)w->offset + 1 : 0, last = (long long)w->offset + shown;
  sched__b_printf(
      b,
      "<nav class=\"pager\" aria-label=\"run pages\"><span>Runs %lld\xe2\x80\x93%lld of %lld"
      "</span>",
      first, last, total);
  if (w->offset > 0) {
    sched__b_puts(b, " <a rel=\"prev\" href=\"");
    long long prev = w->offset - SCHED__WEB_RUNS_PER_PAGE;
    b_sweep_link(b, w->id, w->status, prev > 0 ? prev : 0);
    sched__b_puts(b, "\">Previous</a>");
  }
  if (w->offset + shown < total) {
    sched__b_puts(b, " <a rel=\"next\" href=\"");
    b_sweep_link(b, w->id, w->status, w->offset + SCHED__WEB_RUNS_PER_PAGE);
    sched__b_puts(b, "\">Next</a>");
  }
  sched__b_puts(b, "</nav>");
}

/* The runs `scalesweep next` designed: by budget, each predicted loss with
 * its 95% interval beside the measured one once the run has finished. */
static void render_designed(sched__buf *b, const store_page_run *runs, int n) {
  sched__b_section(b, "designed", "Designed budgets");
  sched__b_puts(b, "<p>Runs that <code>scalesweep next</code> designed from this sweep's fits, "
                   "with the loss it predicted for each (95% prediction interval) beside the "
                   "loss measured.</p>");
  static const char *const heads[] = {"Budget C (FLOPs)", "Run",      "N",      "D (tokens)",
                                      "Predicted",        "Measured", "Inside", NULL};
  sched__b_thead(b, "<div class=\"scroll\"><table class=\"runs\" id=\"designed-table\">", heads);
  int inside = 0, measured = 0;
  for (int i = 0; i < n; i++) {
    const store_page_run *r = &runs[i];
    json_t *des = sched__web_doc(r->designed), *ci = json_object_get(des, "ci95");
    double lo = json_number_value(json_array_get(ci, 0)),
           hi = json_number_value(json_array_get(ci, 1));
    double m = r->final_val_loss;
    sched__b_puts(b, "<tr><td>");
    sched__b_num(b, sched__jnum(des, "flops"), "%.3g");
    sched__b_printf(b, "</td><td><a href=\"/runs/%" PRId64 "\">%" PRId64 "</a></td><td>", r->id,
                    r->id);
    sched__b_num(b, r->nonembedding_params, NULL);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, r->tokens, NULL);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, sched__jnum(des, "loss"), "%.4f");
    if (json_array_size(ci) == 2)
      b_interval(b, " [", lo, hi);
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, m, "%.4f");
    sched__b_puts(b, "</td><td>");
    if (isfinite(m) && json_array_size(ci) == 2) {
      int in = lo <= m && m <= hi;
      measured++;
      inside += in;
      sched__b_puts(b, in ? "yes" : "no");
    } else {
      sched__b_status(b, r->status);
    }
    sched__b_puts(b, "</td></tr>");
    json_decref(des);
  }
  sched__b_printf(b, "</tbody></table></div><p>%d of %d finished runs inside their interval.</p>",
                  inside, measured);
  sched__b_puts(b, "</section>\n");
}

/* A stopped design's answer (its last round, last): the answer and its
 * interval, the reason it stopped, and what more compute would buy. */
static void adaptive_answer(sched__buf *b, json_t *last, const char *st, int loss) {
  sched__b_puts(b, "<p class=\"chosen\">");
  if (json_is_true(json_object_get(last, "fitted"))) {
    json_t *ci = json_object_get(last, "ci95");
    sched__b_puts(b, loss ? "Answer: L = " : "Answer: N_opt = ");
    sched__b_num(b, sched__jnum(last, "answer"), "%.4g");
    b_interval(b, " [", json_number_value(json_array_get(ci, 0)),
               json_number_value(json_array_get(ci, 1)));
    sched__b_puts(b, ", within a factor of 1 + ");
    sched__b_num(b, sched__jnum(last, "width"), "%.3g");
    sched__b_puts(b, ". ");
  }
  sched__b_esc(b, sched__jstr(last, "reason") ? sched__jstr(last, "reason") : "");
  double more = sched__jnum(last, "more_flops"), best = sched__jnum(last, "best_width");
  if (strcmp(st, "reached") != 0 && isfinite(more)) {
    sched__b_puts(b, ". More compute: about ");
    sched__b_num(b, more, "%.3g");
    sched__b_puts(b, " FLOPs more of these candidates would reach the precision");
  } else if (strcmp(st, "reached") != 0 && isfinite(best)) {
    sched__b_puts(b, ". More compute: every remaining candidate would bring it to a factor "
                     "of about 1 + ");
    sched__b_num(b, best, "%.3g");
    sched__b_puts(b, " at best; the precision needs larger budgets");
  }
  sched__b_puts(b, ".</p>");
}

/* A round's row: the answer's interval the fit gave before it, the one
 * predicted after it, the runs chosen (N, D) and their FLOPs. */
static void adaptive_round(sched__buf *b, json_t *r) {
  sched__b_printf(b, "<tr><td>%" JSON_INTEGER_FORMAT "</td><td>", sched__jint(r, "round"));
  if (json_is_true(json_object_get(r, "fitted"))) {
    json_t *ci = json_object_get(r, "ci95");
    sched__b_num(b, sched__jnum(r, "answer"), "%.4g");
    b_interval(b, " [", json_number_value(json_array_get(ci, 0)),
               json_number_value(json_array_get(ci, 1)));
    sched__b_puts(b, "</td><td>");
    sched__b_num(b, sched__jnum(r, "width"), "%.3g");
  } else {
    sched__b_puts(b, "space-filling</td><td>");
  }
  sched__b_puts(b, "</td><td>");
  sched__b_num(b, sched__jnum(json_object_get(r, "predicted"), "width"), "%.3g");
  sched__b_puts(b, "</td><td>");
  json_t *x;
  size_t k;
  json_array_foreach(json_object_get(r, "runs"), k, x) {
    sched__b_puts(b, k ? ", (" : "(");
    sched__b_num(b, sched__jnum(x, "params"), "%.3g");
    sched__b_puts(b, ", ");
    sched__b_num(b, sched__jnum(x, "tokens"), "%.3g");
    sched__b_puts(b, ")");
  }
  if (!json_array_size(json_object_get(r, "runs")))
    sched__b_puts(b, "stopped");
  sched__b_puts(b, "</td><td>");
  sched__b_num(b, sched__jnum(r, "cost"), "%.3g");
  sched__b_puts(b, "</td></tr>");
}

/* "Adaptive design" (docs/sweeps.md, "An adaptive design"): the question,
 * the compute spent of allowed, and each round: the answer's interval the
 * fit gave before it, what was chosen, the interval predicted after it,
 * its FLOPs; once stopped, the answer and what more compute would buy. */
static void render_adaptive(sched__buf *b, json_t *a) {
  const char *st = sched__jstr(a, "status");
  st = st ? st : "running";
  sched__b_section(b, "adaptive", "Adaptive design");
  if (!sched__jstr(a, "question")) {
    sched__b_puts(b, "<p>The first round (space-filling) is training; each later round is chosen "
                     "from the fit when the one before it has ended.</p></section>\n");
    return;
  }
  int loss = sched__jstr(a, "kind") && !strcmp(sched__jstr(a, "kind"), "loss");
  sched__b_puts(b, "<p>Question: ");
  sched__b_esc(b, sched__jstr(a, "question"));
  sched__b_puts(b, ". Compute: ");
  sched__b_num(b, sched__jnum(a, "spent"), "%.3g");
  sched__b_puts(b, " of ");
  sched__b_num(b, sched__jnum(a, "compute"), "%.3g");
  sched__b_puts(b, " FLOPs trained. Status: <strong>");
  sched__b_esc(b, st);
  sched__b_puts(b, "</strong>.</p>");
  json_t *rounds = json_object_get(a, "rounds"), *r;
  size_t i;
  if (!strcmp(st, "failed"))
    b_para(b, "<p class=\"warn\">", sched__jstr(a, "reason") ? sched__jstr(a, "reason") : "");
  json_t *last = json_array_get(rounds, json_array_size(rounds) - 1);
  if (last && strcmp(st, "running") != 0)
    adaptive_answer(b, last, st, loss);
  sched__b_printf(b,
                  "<div class=\"scroll\"><table class=\"runs\" id=\"adaptive-table\"><thead>"
                  "<tr><th scope=\"col\">Round</th><th scope=\"col\">%s before it [95%%]</th>"
                  "<th scope=\"col\">Width</th><th scope=\"col\">Predicted after</th>"
                  "<th scope=\"col\">Runs chosen (N, D)</th><th scope=\"col\">FLOPs</th>"
                  "</tr></thead><tbody>",
                  loss ? "Loss" : "N_opt");
  json_array_foreach(rounds, i, r) { adaptive_round(b, r); }
  sched__b_puts(b, "</tbody></table></div></section>\n");
}

/* "Learning rate tuned on the proxy" (docs/sweeps.md, "Tuning the learning
 * rate on a muP proxy"): the tune's state, or its decision: the rates with
 * their final losses, the chosen one, the edge warning. */
static void render_lr_tune(sched__buf *b, json_t *t) {
  const char *st = sched__jstr(t, "status");
  json_t *rates = json_object_get(t, "rates"), *proxy = json_object_get(t, "proxy");
  sched__b_section(b, "lrtune", "Learning rate tuned on the proxy");
  st = st ? st : "tuning";
  if (!strcmp(st, "decided")) {
    sched__b_puts(b, "<p class=\"chosen\">Chosen: <strong>lr = ");
    sched__b_num(b, sched__jnum(t, "lr"), "%.6g");
    sched__b_printf(b,
                    "</strong>, the lowest final validation loss of the %zu rates tried on the "
                    "muP proxy",
                    json_array_size(rates));
    if (json_is_object(proxy)) {
      sched__b_printf(b,
                      " (%" JSON_INTEGER_FORMAT " layer%s x d_model %" JSON_INTEGER_FORMAT ", N ",
                      sched__jint(proxy, "n_layer"), sched__jint(proxy, "n_layer") == 1 ? "" : "s",
                      sched__jint(proxy, "d_model"));
      sched__b_num(b, sched__jnum(proxy, "nonembedding_params"), NULL);
      sched__b_puts(b, ", ");
      sched__b_num(b, sched__jnum(proxy, "tokens"), NULL);
      sched__b_printf(b, " tokens, batch %" JSON_INTEGER_FORMAT ")",
                      sched__jint(proxy, "batch_size"));
    }
    sched__b_printf(b,
                    "; under muP it carries to every width, and the study's %" JSON_INTEGER_FORMAT
                    " runs train at it (ties go to the smaller rate).</p>",
                    sched__jint(t, "study_runs"));
  } else if (!strcmp(st, "tuning")) {
    sched__b_puts(b, "<p>Tuning: the muP proxy trains at each rate of the grid. When every tune "
                     "run has ended, the rate with the lowest final validation loss is chosen "
                     "and the study's runs are added at it.</p>");
  } else if (!strcmp(st, "deciding")) {
    sched__b_puts(b, "<p>Every tune run has ended: the study's runs are being planned at the "
                     "best rate.</p>");
  } else if (!strcmp(st, "cancelled")) {
    sched__b_puts(b, "<p>The sweep was cancelled before its tune chose a rate.</p>");
  } else { /* undecided, failed */
    b_para(b, "<p class=\"warn\">No rate was chosen: ",
           sched__jstr(t, "reason") ? sched__jstr(t, "reason") : st);
  }
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(t, "warnings"), i, x) {
    b_para(b, "<p class=\"warn\" role=\"alert\">Warning: ", json_string_value(x));
  }
  if (json_array_size(rates)) {
    static const char *const cols[] = {
        "lr", "Final validation loss", "Runs", "Succeeded", "Failed", "Chosen", NULL};
    sched__b_thead(b, "<div class=\"scroll\"><table class=\"runs\" id=\"lrtune-table\">", cols);
    json_array_foreach(rates, i, x) {
      int chosen = json_is_true(json_object_get(x, "chosen"));
      sched__b_printf(b, "<tr%s><td>", chosen ? " class=\"chosen\"" : "");
      sched__b_num(b, sched__jnum(x, "lr"), "%.6g");
      sched__b_puts(b, "</td><td>");
      sched__b_num(b, sched__jnum(x, "loss"), "%.5f");
      sched__b_printf(b,
                      "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%" JSON_INTEGER_FORMAT
                      "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%s</td></tr>",
                      sched__jint(x, "runs"), sched__jint(x, "succeeded"), sched__jint(x, "failed"),
                      chosen ? "chosen" : "");
    }
    sched__b_puts(b, "</tbody></table></div>");
  }
  sched__b_puts(b, "</section>\n");
}

/* The heading, the counts and the status filters. */
static void render_summary(sched__buf *b, sched__web_req *w, const store_sweep *sw) {
  const store_sweep_counts *c = &sw->counts;
  sched__b_puts(b, "<section id=\"summary\" aria-labelledby=\"h-sweep\"><h1 "
                   "id=\"h-sweep\">");
  /* <bdi>: a name's own direction (an old one may hold U+202E) stays in it */
  sched__b_printf(b, "Sweep #%" PRId64 " <bdi class=\"name\">", w->id);
  sched__b_esc(b, sw->name);
  sched__b_puts(b, "</bdi></h1><p>");
  sched__b_status(b, sw->status);
  sched__b_puts(b, " \xc2\xb7 method ");
  sched__b_esc(b, sw->method);
  if (c->models) { /* its runs' families and parametrisations */
    sched__b_puts(b, " \xc2\xb7 model ");
    sched__b_esc(b, c->models);
  }
  sched__b_puts(b, " \xc2\xb7 submitted by <span class=\"owner\">");
  sched__b_esc(b, sw->owner ? sw->owner : "-");
  sched__b_puts(b, "</span> ");
  sched__b_esc(b, sw->created_utc);
  sched__b_puts(b, " UTC</p>");
  if (sw->description) {
    sched__b_puts(b, "<p class=\"desc\">");
    sched__b_esc(b, sw->description);
    sched__b_puts(b, "</p>");
  }
  char why[1024];
  if (c->queued > 0 && sched__place_why(w->s, sw->id, (int)c->queued_gpus, (int)c->queued_slots,
                                        c->queued_trainers, why, sizeof why)) {
    /* its queued runs cannot start on any connected worker: say why */
    sched__b_puts(b, "<p class=\"waiting\" role=\"status\">Waiting: ");
    sched__b_esc(b, why);
    sched__b_puts(b, "</p>");
  }
  sched__b_progress(b, "runs done", (double)c->done, (double)c->total, "runs", 1);
  sched__b_progress(b, "compute spent", c->flops_spent, c->flops_planned, "PF-days", SCHED__PF_DAY);
  sched__b_puts(b, "<nav class=\"filters\" aria-label=\"runs by status\"><a href=\"");
  b_sweep_link(b, w->id, NULL, 0);
  sched__b_printf(b, "\"%s>all %" PRId64 "</a>", w->status ? "" : " aria-current=\"page\"",
                  c->total);
  const int64_t by_status[] = {c->queued, c->running, c->succeeded, c->failed, c->cancelled};
  for (int i = 0; sched__route_statuses[i]; i++) {
    sched__b_puts(b, " <a href=\"");
    b_sweep_link(b, w->id, sched__route_statuses[i], 0);
    sched__b_printf(b, "\"%s>%s %" PRId64 "</a>",
                    w->status == sched__route_statuses[i] ? " aria-current=\"page\"" : "",
                    sched__route_statuses[i], by_status[i]);
  }
  /* data-owner: the script offers the button only to the owner or an admin */
  sched__b_puts(b, "</nav><p class=\"needs-token\" hidden><button type=\"button\" "
                   "id=\"cancel-sweep\" data-owner=\"");
  sched__b_esc(b, sw->owner ? sw->owner : "");
  sched__b_puts(b, "\">Cancel this sweep</button></p></section>\n");
}

static void render_fits(sched__buf *b, const char *doc) {
  json_t *fits = sched__web_doc(doc);
  sched__b_section(b, "fits", "Fits");
  if (!json_object_size(fits)) {
    sched__b_puts(b, "<p class=\"empty\">No fit yet: the laws are fitted when enough runs have "
                     "succeeded.</p>");
  } else {
    render_result(b, fits);
    const char *law;
    json_t *fit;
    json_object_foreach(fits, law, fit) render_fit_params(b, law, fit);
  }
  sched__b_puts(b, "</section>\n");
  json_decref(fits);
}

void sched__web_sweep(sched__buf *b, sched__web_req *w, const store_sweep_page *p) {
  render_summary(b, w, &p->sweep);
  sched__usage_sweep_line(b, p->usage);
  json_t *tune = sched__web_doc(p->sweep.lr_tune), *adaptive = sched__web_doc(p->sweep.adaptive);
  if (json_is_object(tune))
    render_lr_tune(b, tune);
  if (json_is_object(adaptive))
    render_adaptive(b, adaptive);
  json_decref(tune);
  json_decref(adaptive);
  render_fits(b, p->sweep.fits);
  if (p->ndesigned)
    render_designed(b, p->designed, p->ndesigned);
  sched__b_puts(
      b, "<section id=\"plots\" aria-labelledby=\"h-plots\"><h2 id=\"h-plots\">Plots</h2>"
         "<p class=\"js-only\">The plots need JavaScript.</p><div class=\"charts\">"
         "<figure id=\"chart-curves\" class=\"chart\"><figcaption>Loss curves (training "
         "and validation, log-log, colour by N) of the runs listed below</figcaption></figure>"
         "<figure id=\"chart-frontier\" class=\"chart\"><figcaption>Final loss against "
         "compute, with the fitted frontier</figcaption></figure>"
         "<figure id=\"chart-isoflop\" class=\"chart\"><figcaption>IsoFLOP profiles and "
         "their minima</figcaption></figure>"
         "<figure id=\"chart-nopt\" class=\"chart\"><figcaption>N_opt(C) and "
         "D_opt(C)</figcaption></figure>"
         "<figure id=\"chart-batch\" class=\"chart\"><figcaption>Critical batch size"
         "</figcaption></figure>"
         "<figure id=\"chart-bcrit\" class=\"chart\"><figcaption>Critical batch size by "
         "branching against D, and the gradient noise scale</figcaption></figure>"
         "</div></section>\n");
  sched__b_section(b, "runs", "Runs");
  sched__b_puts(b, "<div id=\"runs-static\">");
  render_runs_table(b, w, p);
  sched__b_puts(b, "</div></section>\n");
}

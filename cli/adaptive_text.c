/* An adaptive design's rounds as text (adaptive_text.h). */
#include "cli/adaptive_text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"

json_t *cli_get_adaptive(const cli_target *t, long long id) {
  char path[80];
  snprintf(path, sizeof path, "/api/sweeps/%lld?limit=1", id);
  json_t *sw = cli_get_json(t, path);
  if (!sw)
    return NULL;
  json_t *ad = json_object_get(sw, "adaptive");
  if (json_is_object(ad))
    json_incref(ad);
  else
    ad = NULL;
  json_decref(sw);
  return ad;
}

static double num(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static double at(const json_t *a, size_t i) {
  const json_t *v = json_array_get(a, i);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

void cli_print_adaptive(FILE *f, const json_t *ad, const char *indent) {
  if (!json_is_object(ad))
    return;
  const char *st = json_string_value(json_object_get(ad, "status"));
  const char *q = json_string_value(json_object_get(ad, "question"));
  const json_t *rounds = json_object_get(ad, "rounds");
  int loss = json_is_string(json_object_get(ad, "kind")) &&
             !strcmp(json_string_value(json_object_get(ad, "kind")), "loss");
  if (!q) {
    fprintf(f, "%sadaptive design: %s (its first round is training)\n", indent, st ? st : "");
    return;
  }
  fprintf(f, "%sadaptive design: %s; %s, %.3g of %.3g FLOPs trained\n", indent, q,
          !strcmp(st, "running")     ? "running"
          : !strcmp(st, "reached")   ? "stopped: the precision is reached"
          : !strcmp(st, "spent")     ? "stopped: the compute is spent"
          : !strcmp(st, "exhausted") ? "stopped: every candidate was tried"
                                     : st,
          num(ad, "spent"), num(ad, "compute"));
  if (!strcmp(st, "failed")) {
    fprintf(f, "%s  %s\n", indent, json_string_value(json_object_get(ad, "reason")));
    return;
  }
  fprintf(f, "%s  %-5s %-35s %-9s %-9s %4s %-9s\n", indent, "round",
          loss ? "loss before it [95%]" : "N_opt before it [95%]", "width", "predicted", "runs",
          "FLOPs");
  size_t i;
  const json_t *r;
  json_array_foreach(rounds, i, r) {
    const json_t *ci = json_object_get(r, "ci95"), *pred = json_object_get(r, "predicted");
    char ans[64] = "(space-filling)", w[16] = "", pw[16] = "";
    if (json_is_true(json_object_get(r, "fitted"))) {
      snprintf(ans, sizeof ans, "%.4g [%.4g, %.4g]", num(r, "answer"), at(ci, 0), at(ci, 1));
      snprintf(w, sizeof w, "%.3g", num(r, "width"));
    }
    if (isfinite(num(pred, "width")))
      snprintf(pw, sizeof pw, "%.3g", num(pred, "width"));
    const char *rs = json_string_value(json_object_get(r, "status"));
    if (rs && strcmp(rs, "round") != 0)
      snprintf(pw, sizeof pw, "(stop)");
    fprintf(f, "%s  %-5d %-35s %-9s %-9s %4zu %-9.3g\n", indent, (int)num(r, "round"), ans, w, pw,
            json_array_size(json_object_get(r, "runs")), num(r, "cost"));
  }
  const json_t *last = json_array_get(rounds, json_array_size(rounds) - 1);
  if (strcmp(st, "running") != 0 && last) {
    const json_t *ci = json_object_get(last, "ci95");
    if (json_is_true(json_object_get(last, "fitted")))
      fprintf(f, "%s  answer: %s = %.4g [%.4g, %.4g], within a factor of 1 + %.3g (%.3g asked)\n",
              indent, loss ? "L" : "N_opt", num(last, "answer"), at(ci, 0), at(ci, 1),
              num(last, "width"), num(ad, "precision"));
    if (strcmp(st, "reached") != 0) {
      double more = num(last, "more_flops"), best = num(last, "best_width");
      if (isfinite(more))
        fprintf(f,
                "%s  more compute: the design predicts about %.3g more FLOPs of these "
                "candidates would bring the width to %.3g\n",
                indent, more, num(ad, "precision"));
      else if (isfinite(best))
        fprintf(
            f,
            "%s  more compute: every remaining candidate would bring it to a width of about %.3g "
            "at best; reaching %.3g needs larger budgets than these candidates\n",
            indent, best, num(ad, "precision"));
    }
    fprintf(f, "%s  %s\n", indent, json_string_value(json_object_get(last, "reason")));
  }
}

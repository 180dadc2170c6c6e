/* Planning, output: a plan as JSON (the API, `scalesweep plan --json`) and
 * as the human-readable table. */
#include "sweeps/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runcfg/flops.h"
#include "sweeps/internal.h"
#include "sweeps/lr_tune.h"
#include "sweeps/shapes.h"

/* ---- output ----------------------------------------------------------- */

static json_t *batch_rule_json(const spec_batch_rule *r) {
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:i, s:i, s:s}", "name", PLAN_BATCH_RULE_NAME,
                   "formula",
                   "B_opt = coef * C^exponent tokens; B = nearest power of two of B_opt / "
                   "seq_len sequences in [min_batch, max_batch], halved while D / (B * seq_len) "
                   "< min_steps",
                   "coef", r->coef, "exponent", r->exponent, "min_steps", r->min_steps, "min_batch",
                   r->min_batch, "max_batch", r->max_batch, "source",
                   "DeepSeek LLM (2024) B_opt(C); step floor from the synthetic-corpus "
                   "measurement (SCIENCE.md section 4)");
}

static json_t *lr_rule_json(const spec_lr_rule *r) {
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:s}", "name", PLAN_LR_RULE_NAME, "formula",
                   r->sqrt_batch ? "eta = clamp(coef * C^exponent * sqrt(B * seq_len / B_opt), "
                                   "min, max), 3 significant digits"
                                 : "eta = clamp(coef * C^exponent, min, max), 3 significant "
                                   "digits",
                   "coef", r->coef, "exponent", r->exponent, "min", r->min, "max", r->max,
                   "batch_scaling", r->sqrt_batch ? "sqrt" : "none");
}

json_t *plan_rules_json(const plan *p) {
  json_t *shape =
      json_pack("{s:s, s:f, s:f, s:f}", "name", "fixed_aspect_head", "aspect_ratio",
                p->aspect_ratio, "aspect_band", SHAPE_ASPECT_BAND, "slack", SHAPE_SLACK);
  if (p->head_size)
    json_object_set_new(shape, "head_size", json_integer(p->head_size));
  else
    json_object_set_new(shape, "head_size",
                        json_string("auto: the largest power of two leaving "
                                    "4 heads, within [8, 64]"));
  return json_pack("{s:o, s:o, s:o, s:f, s:i}", "batch", batch_rule_json(&p->batch_rule), "lr",
                   lr_rule_json(&p->lr_rule), "shape", shape, "throughput_flops",
                   p->throughput_flops, "parallel_runs", p->parallel_runs);
}

char *plan_run_json(const plan_run *r, const plan *p) {
  /* the keys in this order (the config goes in second, below) */
  json_t *o = json_pack(
      "{s:i, s:s, s:s, s:I, s:I, s:I, s:i, s:f, s:I, s:f, s:f, s:f, s:I}", "index", r->index,
      "part", r->part, "config_hash", r->config_hash, "params", (json_int_t)r->params,
      "nonembedding_params", (json_int_t)r->nonembedding_params, "tokens", (json_int_t)r->tokens,
      "batch_size", r->batch_size, "lr", r->lr, "steps", (json_int_t)r->steps, "flops", r->flops,
      "flops_6nd", r->flops_6nd, "est_seconds", r->est_seconds, "seed", (json_int_t)r->seed);
  if (!o)
    return NULL;
  json_object_set_new(o, "target_params",
                      r->target_params > 0 ? json_real(r->target_params) : json_null());
  json_object_set_new(o, "budget", r->budget > 0 ? json_real(r->budget) : json_null());
  if (r->rules_from >= 0) /* only then, as below */
    json_object_set_new(o, "rules_from", json_integer(r->rules_from));
  if (r->branch_of >= 0) { /* only then: the plans of other schedules keep their text */
    json_object_set_new(o, "branch_of", json_integer(r->branch_of));
    json_object_set_new(o, "branch_step", json_integer((json_int_t)r->branch_step));
  }
  json_t *keep = r->keep_steps ? json_loads(r->keep_steps, 0, NULL) : NULL;
  if (keep)
    json_object_set_new(o, "keep_steps", keep);
  if (r->n_target_loss)
    json_object_set_new(o, "target_loss", sweeps__json_reals(r->target_loss, r->n_target_loss));
  if (r->batch_from_rule) {
    json_t *b = batch_rule_json(&p->batch_rule);
    json_object_del(b, "formula");
    json_object_del(b, "source");
    json_object_set_new(b, "compute", json_real(r->rule_compute));
    json_object_set_new(b, "b_opt_tokens", json_real(r->b_opt_tokens));
    json_object_set_new(o, "batch_rule", b);
  } else {
    json_object_set_new(o, "batch_rule", json_string("spec"));
  }
  if (r->lr_from_rule) {
    json_t *l = lr_rule_json(&p->lr_rule);
    json_object_del(l, "formula");
    json_object_set_new(l, "compute", json_real(r->rule_compute));
    json_object_set_new(o, "lr_rule", l);
  } else {
    json_object_set_new(o, "lr_rule", json_string("spec"));
  }
  char *rest = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(o);
  if (!rest)
    return NULL;
  /* splice the canonical config in as the second key: {"index":..,"config":<text>,...} */
  size_t n = strlen(rest) + strlen(r->config) + 16;
  char *out = malloc(n);
  if (out) {
    const char *comma = strchr(rest, ',');
    size_t head = comma ? (size_t)(comma - rest) : 0;
    snprintf(out, n, "%.*s,\"config\":%s%s", (int)head, rest, r->config, comma ? comma : "}");
  }
  free(rest);
  return out;
}

char *plan_runs_json(const plan *p) {
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  out[len++] = '[';
  for (size_t i = 0; i < p->n; i++) {
    char *o = plan_run_json(&p->runs[i], p);
    if (!o) {
      free(out);
      return NULL;
    }
    size_t need = len + strlen(o) + 4;
    if (need > cap) {
      while (cap < need)
        cap *= 2;
      char *t = realloc(out, cap);
      if (!t) {
        free(o);
        free(out);
        return NULL;
      }
      out = t;
    }
    if (i)
      out[len++] = ',';
    memcpy(out + len, o, strlen(o));
    len += strlen(o);
    free(o);
  }
  out[len++] = ']';
  out[len] = 0;
  return out;
}

/* 12.8k, 1.31M, 2.5G */
static void si(double x, char *out, size_t n) {
  static const char *const u[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (fabs(x) >= 999.5 && i < 5) {
    x /= 1000;
    i++;
  }
  snprintf(out, n, "%.3g%s", x, u[i]);
}

static void duration(double s, char *out, size_t n) {
  if (s < 60)
    snprintf(out, n, "%.0fs", s < 1 ? 1 : s);
  else if (s < 3600)
    snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else if (s < 86400 * 3)
    snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else
    snprintf(out, n, "%.1fd", s / 86400);
}

/* "model: gpt2, SP" (rcfg_model_text): each distinct model of the runs once,
 * in plan order */
static void write_models(const plan *p, FILE *f) {
  if (!p->n) {
    fprintf(f, "\n");
    return;
  }
  fprintf(f, "model:");
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    size_t j = 0;
    while (j < i &&
           (p->runs[j].family != r->family || p->runs[j].parametrization != r->parametrization ||
            p->runs[j].base_width != r->base_width))
      j++;
    if (j < i)
      continue;
    rcfg_shape s = {0};
    s.family = r->family;
    s.parametrization = r->parametrization;
    s.base_width = r->base_width;
    char text[64];
    rcfg_model_text(&s, text, sizeof text);
    fprintf(f, "%s %s", i ? ";" : "", text);
  }
  fprintf(f, "\n\n");
}

/* The table's header and one line per run; counts the runs whose batch
 * size and lr came from the rules. */
static void write_runs(const plan *p, FILE *f, size_t *n_brule, size_t *n_lrule) {
  fprintf(f, "%5s  %-7s %3s %5s %3s %8s %8s %5s %6s %8s %4s %9s %9s %8s\n", "#", "part", "L", "d",
          "h", "N", "D", "B", "steps", "lr", "seed", "C", "budget", "est.");
  for (size_t i = 0; i < p->n; i++) {
    const plan_run *r = &p->runs[i];
    char N[16], D[16], t[16], budget[16] = "-";
    si((double)r->nonembedding_params, N, sizeof N);
    si((double)r->tokens, D, sizeof D);
    duration(r->est_seconds, t, sizeof t);
    if (r->budget > 0)
      snprintf(budget, sizeof budget, "%.3g", r->budget);
    fprintf(f, "%5zu  %-7s %3d %5d %3d %8s %8s %5d %6lld %8.3g %4llu %9.3g %9s %8s", i, r->part,
            r->n_layer, r->d_model, r->n_head, N, D, r->batch_size, (long long)r->steps, r->lr,
            (unsigned long long)r->seed, r->flops, budget, t);
    if (r->branch_of >= 0)
      fprintf(f, "  from #%d at step %lld", r->branch_of, (long long)r->branch_step);
    fprintf(f, "\n");
    *n_brule += (size_t)r->batch_from_rule;
    *n_lrule += (size_t)r->lr_from_rule;
  }
}

/* The line on p's WSD branches, where some runs branch (whose: "" or a
 * phrase, with its space, naming whose runs they are). */
static void write_branches(const plan *p, const char *whose, FILE *f) {
  if (p->n_branches > p->n_rungs)
    fprintf(f,
            "wsd branches: %zu %sruns start their decay from the checkpoints of %zu longer runs "
            "(\"from #i at step s\"): %.3g FLOPs trained instead of %.3g, %.1f%% saved\n",
            p->n_branches - p->n_rungs, whose, p->n_trunks - p->n_rung_trunks,
            p->total_flops - (p->branch_flops_saved - p->rung_flops_saved), p->total_flops,
            100.0 * (p->branch_flops_saved - p->rung_flops_saved) / p->total_flops);
}

/* An lr tune's study (p->study): its table at the placeholder rate. */
static void write_study(const plan *p, FILE *f, size_t *n_brule, size_t *n_lrule) {
  const plan *st = p->study;
  char t[16];
  duration(p->tune_seconds, t, sizeof t);
  fprintf(f,
          "\nlr tune: %zu runs, %.3g FLOPs, estimated %s of training; the study's runs are added "
          "once they have ended\n",
          p->n, p->tune_flops, t);
  fprintf(f,
          "\nthen the study (%s%s) at the rate the tune chooses: %zu runs, planned here at lr = "
          "%g (the grid's middle rate, a placeholder: the runs' shapes, tokens, time and FLOPs "
          "do not depend on it)\n\n",
          spec_method_name(st->method),
          st->has_ladder && st->method != SPEC_BATCH ? " + batch ladder" : "", st->n, p->study_lr);
  write_runs(st, f, n_brule, n_lrule);
  duration(st->total_seconds, t, sizeof t);
  fprintf(f, "\nstudy: %zu runs, %.3g FLOPs, estimated %s of training\n", st->n, st->total_flops,
          t);
  write_branches(st, "of the study's ", f);
  for (size_t i = 0; i < st->n_warnings; i++)
    fprintf(f, "warning: study: %s\n", st->warnings[i]);
}

/* The title of a sweep with an lr tune, its models, and the tune's proxy. */
static void write_tune_head(const plan *p, FILE *f) {
  const plan_run *r = p->n ? &p->runs[0] : NULL;
  fprintf(f,
          "sweep \"%s\" (%s%s, its learning rate tuned on a muP proxy first): %zu lr tune "
          "runs, then %zu study runs at the best rate; spec digest %.16s\n",
          p->name, spec_method_name(p->study->method),
          p->study->has_ladder && p->study->method != SPEC_BATCH ? " + batch ladder" : "", p->n,
          p->study->n, p->spec_digest);
  write_models(p, f);
  size_t rates = 0;
  for (size_t i = 0; i < p->n; i++) {
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++)
      seen = p->runs[j].lr == p->runs[i].lr;
    rates += !seen;
  }
  if (r)
    fprintf(f,
            "the proxy: %d layer%s x d_model %d (base_width), %d heads, N %lld, D %lld tokens, "
            "batch %d; %zu rates x %zu seed%s\n\n",
            r->n_layer, r->n_layer == 1 ? "" : "s", r->d_model, r->n_head,
            (long long)r->nonembedding_params, (long long)r->tokens, r->batch_size, rates,
            rates ? p->n / rates : 0, rates && p->n / rates == 1 ? "" : "s");
}

/* The line on an adaptive design's first round (p->candidates: its grid). */
static void write_adaptive(const plan *p, FILE *f) {
  size_t nc = 0;
  for (size_t i = 0; i < p->candidates->n; i++)
    nc += !strcmp(p->candidates->runs[i].part, "isoflop");
  fprintf(f,
          "adaptive: the question is %s, with at most %.3g FLOPs trained (the whole grid of "
          "%zu candidates would train %.3g); these runs are the first round (space-filling, "
          "%.3g FLOPs trained), and the scheduler chooses each later one from the fit "
          "(docs/sweeps.md, \"An adaptive design\")\n",
          p->adaptive_question, p->adaptive_compute, nc, p->adaptive_grid_flops,
          p->adaptive_initial_flops);
}

/* The totals of all n runs: compute, time, and what branching saved. */
static void write_totals(const plan *p, size_t n, FILE *f) {
  char t[16], w[16];
  duration(p->total_seconds, t, sizeof t);
  duration(p->wall_seconds, w, sizeof w);
  fprintf(f, "\ntotal: %zu runs%s, %.3g FLOPs, estimated %s of training", n,
          p->study ? " (lr tune and study)" : "", p->total_flops, t);
  if (p->parallel_runs > 1)
    fprintf(f, " (%s with %d runs at a time)", w, p->parallel_runs);
  fprintf(f, " at %.3g FLOP/s per run", p->throughput_flops);
  if (p->max_hours > 0)
    fprintf(f, "; max_hours %g", p->max_hours);
  fprintf(f, "\n");
  write_branches(p, "", f);
  if (p->n_rungs)
    fprintf(f,
            "batch ladder by branching: %zu rungs start from the checkpoints of %zu trunk%s "
            "(\"from #i at step s\"), at their own batch size; %.3g FLOPs saved against "
            "training each from scratch\n",
            p->n_rungs, p->n_rung_trunks, p->n_rung_trunks == 1 ? "" : "s", p->rung_flops_saved);
}

/* The legend: the columns, and each rule with how many of the n runs it
 * chose the batch size (n_brule) and rate (n_lrule) for. */
static void write_rules(const plan *p, size_t n, size_t n_brule, size_t n_lrule, FILE *f) {
  fprintf(f, "N: non-embedding parameters; D: tokens trained; B: sequences per step; C: "
             "training FLOPs, exact count (SCIENCE.md section 1); budget: the isoflop budget "
             "(6ND, or exact with \"flops_count\": \"exact\")\n\n");
  const spec_batch_rule *b = &p->batch_rule;
  const spec_lr_rule *l = &p->lr_rule;
  fprintf(f,
          "batch rule %s (%zu of %zu runs): B_opt = %g * C^%g tokens (DeepSeek), in sequences, "
          "nearest power of two in [%d, %d], halved until D / (B * seq_len) >= %g steps\n",
          PLAN_BATCH_RULE_NAME, n_brule, n, b->coef, b->exponent, b->min_batch, b->max_batch,
          b->min_steps);
  fprintf(f,
          "lr rule %s (%zu of %zu runs): eta = %g * C^%g%s, clamped to [%g, %g], 3 "
          "significant digits\n",
          PLAN_LR_RULE_NAME, n_lrule, n, l->coef, l->exponent,
          l->sqrt_batch ? " * sqrt(B * seq_len / B_opt)" : "", l->min, l->max);
  if (p->study)
    fprintf(f,
            "lr tune: the proxy trains at each rate of $.lr_tune.lr; when every tune run has "
            "ended the rate with the lowest final validation loss (mean over seeds; ties: the "
            "smaller rate; at least %d rates with a finished run) becomes the study's "
            "base.train.lr, and a best rate at the grid's edge is flagged (\"%s\")\n",
            SPEC_LR_TUNE_MIN_RATES, LR_TUNE_EDGE_WARNING);
  if (p->head_size)
    fprintf(f,
            "shape rule: d_model / n_layer = %g (within x%g), head size %d, nearest N (within "
            "%g%% counts as equal)\n",
            p->aspect_ratio, SHAPE_ASPECT_BAND, p->head_size, (SHAPE_SLACK - 1) * 100);
  else
    fprintf(f,
            "shape rule: d_model / n_layer = %g (within x%g), head size the largest power of "
            "two leaving 4 heads in [8, 64], nearest N (within %g%% counts as equal)\n",
            p->aspect_ratio, SHAPE_ASPECT_BAND, (SHAPE_SLACK - 1) * 100);
}

void plan_write_table(const plan *p, FILE *f) {
  size_t n_brule = 0, n_lrule = 0, n = p->n + (p->study ? p->study->n : 0);
  if (p->study) {
    write_tune_head(p, f);
  } else {
    fprintf(f, "sweep \"%s\" (%s%s): %zu runs; spec digest %.16s\n", p->name,
            spec_method_name(p->method),
            p->has_ladder && p->method != SPEC_BATCH ? " + batch ladder" : "", p->n,
            p->spec_digest);
    write_models(p, f);
  }
  if (p->candidates)
    write_adaptive(p, f);
  write_runs(p, f, &n_brule, &n_lrule);
  if (p->study)
    write_study(p, f, &n_brule, &n_lrule);
  write_totals(p, n, f);
  write_rules(p, n, n_brule, n_lrule, f);
  for (size_t i = 0; i < p->n_warnings; i++)
    fprintf(f, "warning: %s\n", p->warnings[i]);
}

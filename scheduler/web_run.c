/* A run's page (/runs/ID): its numbers, reproduction check, failure,
 * curves and resolved config. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"

/* ---- run
 * -----------------------------------------------------------------------------
 */

static void b_row(sched__buf *b, const char *name) {
  sched__b_puts(b, "<tr><th scope=\"row\">");
  sched__b_puts(b, name);
  sched__b_puts(b, "</th><td>");
}

/* The row of a run that reproduces run `of`: once both have finished, whether
 * its curve matches the original's exactly (SCHED__REPRODUCTION_SQL), as far
 * as both went when one was cancelled, else the largest difference and its
 * step. */
/* Where each attempt ran (migration 014): worker, host, CPU or GPU, the
 * kernels, threads and code version, one row an attempt. */
static void b_attempts(sched__buf *b, const store_attempt *attempts, int nattempts) {
  if (nattempts == 0)
    return;
  static const char *const keys[] = {"host",
                                     "cpu",
                                     "cpu_kernels",
                                     "blas_core",
                                     "blas_core_by",
                                     "gpu",
                                     "compute_capability",
                                     "cuda_runtime",
                                     "cuda_driver",
                                     "cublas",
                                     "nccl",
                                     "threads",
                                     "scalesweep",
                                     NULL};
  sched__b_section(b, "where", "Where it ran");
  sched__b_puts(b, "<table class=\"kv\"><thead><tr><th>attempt</th><th>worker</th><th>started"
                   "</th><th>environment</th></tr></thead><tbody>");
  for (int i = 0; i < nattempts; i++) {
    const store_attempt *a = &attempts[i];
    json_t *env = a->environment ? json_loads(a->environment, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
    sched__b_printf(b, "<tr><td>%" PRId64 "</td><td>", a->attempt);
    sched__b_esc(b, a->worker);
    sched__b_puts(b, "</td><td>");
    sched__b_esc(b, a->started_at);
    sched__b_puts(b, "</td><td>");
    int n = 0;
    for (int k = 0; keys[k]; k++) {
      const json_t *v = json_object_get(env, keys[k]);
      if (!v)
        continue;
      sched__b_printf(b, "%s%s ", n++ ? "; " : "", keys[k]);
      if (json_is_string(v))
        sched__b_esc(b, json_string_value(v));
      else if (json_is_number(v))
        sched__b_printf(b, "%g", json_number_value(v));
    }
    json_decref(env);
    sched__b_puts(b, "</td></tr>");
  }
  sched__b_puts(b, "</tbody></table></section>\n");
}

static void b_reproduction(sched__buf *b, json_int_t of, json_t *rep) {
  b_row(b, "Reproduces");
  sched__b_printf(b, "<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT "</a>",
                  of, of);
  if (!json_is_object(rep)) {
    sched__b_puts(b, "; the curves are compared when both runs have finished</td></tr>");
    return;
  }
  if (json_is_true(json_object_get(rep, "identical"))) {
    sched__b_printf(
        b,
        ": <strong class=\"identical\">identical</strong>, every training and validation "
        "loss of %" JSON_INTEGER_FORMAT " steps and the final loss to the last bit</td></tr>",
        sched__jint(rep, "steps_compared"));
    return;
  }
  const char *so = sched__jstr(rep, "status_original"), *sr = sched__jstr(rep, "status_reproduced");
  int cut_o = so && !strcmp(so, "cancelled"), cut_r = sr && !strcmp(sr, "cancelled");
  if ((cut_o || cut_r) && !sched__jint(rep, "steps_compared")) {
    sched__b_printf(b, ": not compared, %s was cancelled before it stored a step</td></tr>",
                    cut_r ? "this run" : "the original");
    return;
  }
  if ((cut_o || cut_r) && json_is_true(json_object_get(rep, "identical_where_both"))) {
    /* a cancelled run stored a prefix of the curve: the prefix is what can match */
    sched__b_printf(b,
                    ": <strong class=\"identical\">identical as far as both went</strong>, every "
                    "training and validation loss of the %" JSON_INTEGER_FORMAT
                    " steps both stored",
                    sched__jint(rep, "steps_compared"));
    if (cut_o)
      sched__b_printf(b, "; the original was cancelled after %" JSON_INTEGER_FORMAT " steps",
                      sched__jint(rep, "steps_original"));
    if (cut_r)
      sched__b_printf(b, "; this run was cancelled after %" JSON_INTEGER_FORMAT " steps",
                      sched__jint(rep, "steps_reproduced"));
    sched__b_puts(b, "</td></tr>");
    return;
  }
  sched__b_puts(b, ": <strong class=\"flag\">differs</strong>, largest difference ");
  sched__b_num_na(b, sched__jnum(rep, "max_abs_diff"), "%.3g");
  sched__b_printf(b,
                  " at step %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT
                  " steps compared; %" JSON_INTEGER_FORMAT
                  " stored for the original, %" JSON_INTEGER_FORMAT " for this run); final loss ",
                  sched__jint(rep, "at_step"), sched__jint(rep, "steps_compared"),
                  sched__jint(rep, "steps_original"), sched__jint(rep, "steps_reproduced"));
  sched__b_num_na(b, sched__jnum(rep, "final_val_loss_original"), "%.6f");
  sched__b_puts(b, " then, ");
  sched__b_num_na(b, sched__jnum(rep, "final_val_loss_reproduced"), "%.6f");
  sched__b_puts(b, " now");
  /* why (migration 014): what of the environment differed, if anything */
  json_t *d = json_object_get(rep, "environment_differs");
  if (json_is_true(json_object_get(rep, "same_environment"))) {
    sched__b_puts(b, ". <strong class=\"flag\">A defect</strong>: the same environment (code, "
                     "backend, threads, kernels) gave other numbers");
  } else if (json_is_object(d)) {
    sched__b_puts(b, ". The environments differ in ");
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(d, k, v) {
      char *a = json_dumps(json_array_get(v, 0), JSON_ENCODE_ANY);
      char *z = json_dumps(json_array_get(v, 1), JSON_ENCODE_ANY);
      sched__b_puts(b, n++ ? "; " : "");
      sched__b_esc(b, k);
      sched__b_puts(b, " (");
      sched__b_esc(b, a ? a : "?");
      sched__b_puts(b, ", then ");
      sched__b_esc(b, z ? z : "?");
      sched__b_puts(b, ")");
      free(a);
      free(z);
    }
    sched__b_printf(b, ": the final loss is %s the run's tolerance (%g relative)",
                    json_is_true(json_object_get(rep, "within_tolerance")) ? "within" : "outside",
                    sched__jnum(rep, "tolerance"));
  }
  sched__b_puts(b, "</td></tr>");
}

/* An integer of the run's row as the page read it from JSON: 0 for null. */
static int64_t or0(int64_t v) { return v == STORE_NULL_INT ? 0 : v; }

/* A count of the run's row as a number: unknown (NAN) for null. */
static double num(int64_t v) { return v == STORE_NULL_INT ? NAN : (double)v; }

/* The summary's heading and its first rows: the numbers of the run. */
static void b_numbers(sched__buf *b, sched__web_req *w, const store_run_page *p) {
  const store_run *r = &p->run;
  sched__b_printf(b,
                  "<section id=\"summary\" aria-labelledby=\"h-run\"><h1 "
                  "id=\"h-run\">Run #%" PRId64 "</h1><p>of <a href=\"/sweeps/%" PRId64
                  "\">sweep #%" PRId64 " <bdi class=\"name\">",
                  w->id, r->sweep_id, r->sweep_id);
  sched__b_esc(b, p->sweep); /* in <bdi>: web_sweep.c says why */
  sched__b_puts(b, "</bdi></a> \xc2\xb7 ");
  sched__b_status(b, r->status);
  sched__b_puts(b, "</p><table class=\"kv\"><tbody>");
  b_row(b, "Attempt");
  sched__b_printf(b, "%" PRId64 " of %" PRId64 "</td></tr>", r->attempt, r->max_attempts);
  const struct {
    const char *name, *text, *fmt; /* fmt NULL: text; "d": a duration */
    double v;
  } rows[] = {{"Worker", p->worker_name, NULL, 0},
              {"Model", r->model, NULL, 0}, /* family, parametrisation (store/pages.c) */
              {"N (non-embedding)", NULL, "%.4g", num(r->nonembedding_params)},
              {"Parameters", NULL, "%.4g", num(r->params)},
              {"D (tokens)", NULL, "%.4g", num(r->tokens)},
              {"B (sequences)", NULL, "%.0f", num(r->batch_size)},
              {"C (FLOPs)", NULL, "%.4g", r->flops},
              {"Final validation loss", NULL, "%.6f", r->final_val_loss},
              {"Started (UTC)", p->started_utc, NULL, 0},
              {"Ended (UTC)", p->finished_utc, NULL, 0},
              {"Duration", NULL, "d", p->duration_s}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    b_row(b, rows[i].name);
    if (!rows[i].fmt)
      sched__b_esc(b, rows[i].text);
    else if (!strcmp(rows[i].fmt, "d"))
      sched__b_duration(b, rows[i].v);
    else
      sched__b_num(b, rows[i].v, rows[i].fmt);
    sched__b_puts(b, "</td></tr>");
  }
}

/* predict.c: the final loss from the curve so far, against the fit (a
 * running run's prediction document) */
static void b_prediction(sched__buf *b, json_t *pred) {
  b_row(b, "Predicted final loss");
  sched__b_num(b, sched__jnum(pred, "predicted"), "%.4f");
  sched__b_puts(b, " (95% ");
  sched__b_num(b, sched__jnum(pred, "lo"), "%.4f");
  sched__b_puts(b, " to ");
  sched__b_num(b, sched__jnum(pred, "hi"), "%.4f");
  sched__b_printf(b,
                  "; from %" JSON_INTEGER_FORMAT " evaluations to step %" JSON_INTEGER_FORMAT ")",
                  sched__jint(pred, "evals"), sched__jint(pred, "at_step"));
  if (json_is_number(json_object_get(pred, "surface"))) {
    sched__b_puts(b, "; the sweep's fit says ");
    sched__b_num(b, sched__jnum(pred, "surface"), "%.4f");
  }
  if (json_is_true(json_object_get(pred, "flagged")))
    sched__b_puts(b, " <strong class=\"flag\">far off the fit: worth a look</strong>");
  sched__b_puts(b, "</td></tr>");
}

/* What a branch started from: a rung of a branched batch ladder (a
 * constant schedule) or a wsd branch (docs/sweeps.md). */
static void b_branch(sched__buf *b, const store_run *r, json_t *config) {
  int64_t of = or0(r->branch_of), step = or0(r->branch_step);
  const char *sched_name =
      json_string_value(json_object_get(json_object_get(config, "train"), "schedule"));
  if (!of)
    return;
  b_row(b, "Branch of");
  if (sched_name && !strcmp(sched_name, "constant"))
    sched__b_printf(b,
                    "<a href=\"/runs/%" PRId64 "\">run %" PRId64
                    "</a>: a rung of its critical batch size ladder, started from its checkpoint "
                    "after its step %" PRId64
                    " (from its checkpoint when it kept one; else this run trained from scratch "
                    "and the fit leaves it out), then trained at this run's own batch size "
                    "and rate</td></tr>",
                    of, of, step);
  else
    sched__b_printf(b,
                    "<a href=\"/runs/%" PRId64 "\">run %" PRId64
                    "</a>: its warmup and stable phase, steps 1 to %" PRId64
                    ", are that run's (from its checkpoint when it kept one; else this run trained "
                    "them too); the same result as from scratch</td></tr>",
                    of, of, step);
}

/* The summary's rows after the numbers: prediction, branch, reproduction,
 * where it must run, who reproduced it, config hash and code version. */
static void b_relations(sched__buf *b, const store_run_page *p, json_t *config) {
  const store_run *r = &p->run;
  json_t *pred = r->prediction ? json_loads(r->prediction, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
  if (json_is_object(pred) && !strcmp(r->status, "running"))
    b_prediction(b, pred);
  json_decref(pred);
  b_branch(b, r, config);
  if (or0(r->reproduces)) {
    json_t *rep =
        p->reproduction ? json_loads(p->reproduction, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
    b_reproduction(b, (json_int_t)r->reproduces, rep);
    json_decref(rep);
  }
  if (r->on_worker) { /* reproduce --on */
    b_row(b, "Runs on");
    sched__b_puts(b, "only the worker named, or on the host, ");
    sched__b_esc(b, r->on_worker);
    sched__b_puts(b, "</td></tr>");
  }
  if (p->nreproduced_by > 0) {
    b_row(b, "Reproduced by");
    for (int i = 0; i < p->nreproduced_by; i++) {
      const store_run_ref *x = &p->reproduced_by[i];
      sched__b_printf(b, "%s<a href=\"/runs/%" PRId64 "\">run %" PRId64 "</a> (", i ? ", " : "",
                      x->id, x->id);
      sched__b_esc(b, x->status);
      sched__b_puts(b, ")");
    }
    sched__b_puts(b, "</td></tr>");
  }
  b_row(b, "Config hash");
  sched__b_puts(b, "<code>");
  sched__b_esc(b, r->config_hash);
  sched__b_puts(b, "</code></td></tr>");
  b_row(b, "Code version");
  sched__b_esc(b, r->code_version);
  sched__b_puts(b, "</td></tr></tbody></table></section>\n");
}

/* Its error and the tail of its log. */
static void b_failure(sched__buf *b, const store_run_page *p) {
  const char *error = p->run.error;
  if (!error && !p->log_tail)
    return;
  sched__b_section(b, "failure", "What went wrong");
  if (error) {
    sched__b_puts(b, "<p class=\"err\">");
    sched__b_esc(b, error);
    sched__b_puts(b, "</p>");
  }
  if (p->log_tail && *p->log_tail) {
    sched__b_puts(b, "<h3>Log tail</h3><pre class=\"log\" tabindex=\"0\">");
    sched__b_esc(b, p->log_tail);
    sched__b_puts(b, "</pre>");
  }
  sched__b_puts(b, "</section>\n");
}

/* The curves (web/run.js draws them), how to reproduce it, its config. */
static void b_curves_reproduce_config(sched__buf *b, const store_run_page *p, json_t *config) {
  int64_t id = p->run.id;
  sched__b_puts(b, "<section id=\"curves\" aria-labelledby=\"h-curves\"><h2 id=\"h-curves\">Curves"
                   "</h2><p class=\"js-only\">The curves need JavaScript; the numbers are at "
                   "<a href=\"");
  sched__b_printf(b, "/api/runs/%" PRId64 "\">/api/runs/%" PRId64 "</a>.</p>", id, id);
  sched__b_puts(
      b, "<div class=\"charts\"><figure id=\"chart-run\" class=\"chart\"><figcaption>Training "
         "and validation loss (log-log)</figcaption></figure></div></section>\n");
  sched__b_printf(
      b,
      "<section id=\"reproduce\" aria-labelledby=\"h-reproduce\"><h2 id=\"h-reproduce\">"
      "Reproduce</h2><p>Through the scheduler (a new run of the same config):</p>"
      "<pre><code>scalesweep reproduce %" PRId64 "</code></pre>"
      "<p>Alone, on any machine (<a href=\"/runs/%" PRId64 "/config.json\" download>the "
      "resolved config</a>):</p><pre><code>scalesweep train --config "
      "run-%" PRId64 ".json</code></pre>"
      "<p class=\"needs-token\" hidden><button type=\"button\" id=\"reproduce-run\">"
      "Reproduce this run</button> <button type=\"button\" id=\"cancel-run\" "
      "data-owner=\"",
      id, id, id);
  /* data-owner: the script offers Cancel only to its sweep's owner or an admin */
  sched__b_esc(b, p->owner ? p->owner : "");
  sched__b_puts(b, "\">Cancel this run</button></p></section>\n");
  sched__b_puts(b,
                "<section id=\"config\" aria-labelledby=\"h-config\"><h2 id=\"h-config\">Resolved "
                "config</h2><pre class=\"config\" tabindex=\"0\">");
  char *cfg = json_dumps(config, JSON_INDENT(2) | JSON_SORT_KEYS);
  sched__b_esc(b, cfg ? cfg : "");
  free(cfg);
  sched__b_puts(b, "</pre></section>\n");
}

void sched__web_run(sched__buf *b, sched__web_req *w, const store_run_page *p, json_t *config) {
  b_numbers(b, w, p);
  b_relations(b, p, config);
  b_attempts(b, p->attempts, p->nattempts);
  b_failure(b, p);
  b_curves_reproduce_config(b, p, config);
}

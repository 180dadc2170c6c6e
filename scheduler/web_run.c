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
static void b_attempts(sched__buf *b, const json_t *attempts) {
  if (json_array_size(attempts) == 0)
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
  size_t i;
  json_t *a;
  json_array_foreach((json_t *)attempts, i, a) {
    const json_t *env = json_object_get(a, "environment");
    sched__b_printf(b, "<tr><td>%" JSON_INTEGER_FORMAT "</td><td>", sched__jint(a, "attempt"));
    sched__b_esc(b, sched__jstr(a, "worker"));
    sched__b_puts(b, "</td><td>");
    sched__b_esc(b, sched__jstr(a, "started_at"));
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

void sched__web_run(sched__buf *b, sched__web_req *w, json_t *r) {
  json_int_t sweep = sched__jint(r, "sweep_id");
  sched__b_printf(b,
                  "<section id=\"summary\" aria-labelledby=\"h-run\"><h1 "
                  "id=\"h-run\">Run #%" PRId64 "</h1><p>of <a href=\"/sweeps/%" JSON_INTEGER_FORMAT
                  "\">sweep #%" JSON_INTEGER_FORMAT " <bdi class=\"name\">",
                  w->id, sweep, sweep);
  sched__b_esc(b, sched__jstr(r, "sweep")); /* in <bdi>: web_sweep.c says why */
  sched__b_puts(b, "</bdi></a> \xc2\xb7 ");
  sched__b_status(b, sched__jstr(r, "status"));
  sched__b_puts(b, "</p><table class=\"kv\"><tbody>");
  b_row(b, "Attempt");
  sched__b_printf(b, "%" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT "</td></tr>",
                  sched__jint(r, "attempt"), sched__jint(r, "max_attempts"));
  static const struct {
    const char *name, *key, *fmt; /* fmt NULL: text; "d": a duration */
  } rows[] = {{"Worker", "worker", NULL},
              {"Model", "model", NULL}, /* family, parametrisation (store/pages.c) */
              {"N (non-embedding)", "nonembedding_params", "%.4g"},
              {"Parameters", "params", "%.4g"},
              {"D (tokens)", "tokens", "%.4g"},
              {"B (sequences)", "batch_size", "%.0f"},
              {"C (FLOPs)", "flops", "%.4g"},
              {"Final validation loss", "final_val_loss", "%.6f"},
              {"Started (UTC)", "started_at", NULL},
              {"Ended (UTC)", "finished_at", NULL},
              {"Duration", "duration_s", "d"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    b_row(b, rows[i].name);
    if (!rows[i].fmt)
      sched__b_esc(b, sched__jstr(r, rows[i].key));
    else if (!strcmp(rows[i].fmt, "d"))
      sched__b_duration(b, sched__jnum(r, rows[i].key));
    else
      sched__b_num(b, sched__jnum(r, rows[i].key), rows[i].fmt);
    sched__b_puts(b, "</td></tr>");
  }
  json_t *pred = json_object_get(r, "prediction");
  const char *status = sched__jstr(r, "status");
  if (json_is_object(pred) && status && !strcmp(status, "running")) {
    /* predict.c: the final loss from the curve so far, against the fit */
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
  const char *sched_name = json_string_value(
      json_object_get(json_object_get(json_object_get(r, "config"), "train"), "schedule"));
  if (sched__jint(r, "branch_of") && sched_name && !strcmp(sched_name, "constant")) {
    /* a rung of a branched batch ladder (docs/sweeps.md) */
    b_row(b, "Branch of");
    sched__b_printf(b,
                    "<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT
                    "</a>: a rung of its critical batch size ladder, started from its checkpoint "
                    "after its step %" JSON_INTEGER_FORMAT
                    " (from its checkpoint when it kept one; else this run trained from scratch "
                    "and the fit leaves it out), then trained at this run's own batch size "
                    "and rate</td></tr>",
                    sched__jint(r, "branch_of"), sched__jint(r, "branch_of"),
                    sched__jint(r, "branch_step"));
  } else if (sched__jint(r, "branch_of")) { /* a wsd branch (docs/sweeps.md) */
    b_row(b, "Branch of");
    sched__b_printf(b,
                    "<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT
                    "</a>: its warmup and stable phase, steps 1 to %" JSON_INTEGER_FORMAT
                    ", are that run's (from its checkpoint when it kept one; else this run trained "
                    "them too); the same result as from scratch</td></tr>",
                    sched__jint(r, "branch_of"), sched__jint(r, "branch_of"),
                    sched__jint(r, "branch_step"));
  }
  if (sched__jint(r, "reproduces"))
    b_reproduction(b, sched__jint(r, "reproduces"), json_object_get(r, "reproduction"));
  if (json_is_string(json_object_get(r, "on_worker"))) { /* reproduce --on */
    b_row(b, "Runs on");
    sched__b_puts(b, "only the worker named, or on the host, ");
    sched__b_esc(b, sched__jstr(r, "on_worker"));
    sched__b_puts(b, "</td></tr>");
  }
  json_t *by = json_object_get(r, "reproduced_by");
  if (json_array_size(by) > 0) {
    b_row(b, "Reproduced by");
    size_t i;
    json_t *x;
    json_array_foreach(by, i, x) {
      sched__b_printf(
          b, "%s<a href=\"/runs/%" JSON_INTEGER_FORMAT "\">run %" JSON_INTEGER_FORMAT "</a> (",
          i ? ", " : "", sched__jint(x, "id"), sched__jint(x, "id"));
      sched__b_esc(b, sched__jstr(x, "status"));
      sched__b_puts(b, ")");
    }
    sched__b_puts(b, "</td></tr>");
  }
  b_row(b, "Config hash");
  sched__b_puts(b, "<code>");
  sched__b_esc(b, sched__jstr(r, "config_hash"));
  sched__b_puts(b, "</code></td></tr>");
  b_row(b, "Code version");
  sched__b_esc(b, sched__jstr(r, "code_version"));
  sched__b_puts(b, "</td></tr></tbody></table></section>\n");
  b_attempts(b, json_object_get(r, "attempts"));

  if (sched__jstr(r, "error") || sched__jstr(r, "log_tail")) {
    sched__b_section(b, "failure", "What went wrong");
    if (sched__jstr(r, "error")) {
      sched__b_puts(b, "<p class=\"err\">");
      sched__b_esc(b, sched__jstr(r, "error"));
      sched__b_puts(b, "</p>");
    }
    if (sched__jstr(r, "retry_after")) {
      sched__b_puts(b, "<p>Its next attempt starts no sooner than ");
      sched__b_esc(b, sched__jstr(r, "retry_after"));
      sched__b_puts(b, " UTC.</p>");
    }
    if (sched__jstr(r, "log_tail") && *sched__jstr(r, "log_tail")) {
      sched__b_puts(b, "<h3>Log tail</h3><pre class=\"log\" tabindex=\"0\">");
      sched__b_esc(b, sched__jstr(r, "log_tail"));
      sched__b_puts(b, "</pre>");
    }
    sched__b_puts(b, "</section>\n");
  }

  sched__b_puts(b, "<section id=\"curves\" aria-labelledby=\"h-curves\"><h2 id=\"h-curves\">Curves"
                   "</h2><p class=\"js-only\">The curves need JavaScript; the numbers are at "
                   "<a href=\"");
  sched__b_printf(b, "/api/runs/%" PRId64 "\">/api/runs/%" PRId64 "</a>.</p>", w->id, w->id);
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
      "Reproduce this run</button> <button type=\"button\" id=\"cancel-run\">Cancel "
      "this run</button></p></section>\n",
      w->id, w->id, w->id);

  sched__b_puts(b,
                "<section id=\"config\" aria-labelledby=\"h-config\"><h2 id=\"h-config\">Resolved "
                "config</h2><pre class=\"config\" tabindex=\"0\">");
  char *cfg = json_dumps(json_object_get(r, "config"), JSON_INDENT(2) | JSON_SORT_KEYS);
  sched__b_esc(b, cfg ? cfg : "");
  free(cfg);
  sched__b_puts(b, "</pre></section>\n");
}

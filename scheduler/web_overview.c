/* The overview page (/): workers, queue, sweeps, failures. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/web.h"

static void render_workers(sched__buf *b, sched *s) {
  sched__b_section(b, "workers", "Workers");
  int n = 0;
  for (sched__wconn *c = s->wp.conns; c; c = c->next)
    n += c->authed && !c->closing;
  if (!n) {
    sched__b_puts(b, "<p class=\"empty\">No worker is connected.</p></section>\n");
    return;
  }
  sched__b_puts(
      b, "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">Worker</th>"
         "<th scope=\"col\">Host</th><th scope=\"col\">GPUs</th><th scope=\"col\">CPU slots</th>"
         "</tr></thead><tbody>");
  for (sched__wconn *c = s->wp.conns; c; c = c->next) {
    if (!c->authed || c->closing)
      continue;
    sched__b_puts(b, "<tr><td>");
    sched__b_esc(b, c->name);
    sched__b_puts(b, "</td><td>");
    sched__b_esc(b, c->host);
    sched__b_puts(b, "</td><td><ul class=\"gpus\">");
    for (int g = 0; g < c->ngpus; g++) {
      const sched__wrun *on = NULL;
      for (const sched__wrun *w = c->runs; w && !on; w = w->next)
        for (int k = 0; k < w->ngpus && k < 8; k++)
          if (w->gpus[k] == g)
            on = w;
      if (on)
        sched__b_printf(b,
                        "<li class=\"busy\">GPU %d: busy, <a href=\"/runs/%" PRId64
                        "\">run %" PRId64 "</a></li>",
                        g, on->run_id, on->run_id);
      else
        sched__b_printf(b, "<li class=\"%s\">GPU %d: %s</li>", c->gpu_busy[g] ? "busy" : "free", g,
                        c->gpu_busy[g] ? "busy" : "free");
    }
    if (!c->ngpus)
      sched__b_puts(b, "<li>none</li>");
    sched__b_printf(b, "</ul></td><td>%d of %d busy", c->cpu_busy, c->cpu_slots);
    for (const sched__wrun *w = c->runs; w; w = w->next)
      if (!w->ngpus)
        sched__b_printf(b, " <a href=\"/runs/%" PRId64 "\">run %" PRId64 "</a>", w->run_id,
                        w->run_id);
    sched__b_puts(b, "</td></tr>");
  }
  sched__b_puts(b, "</tbody></table></div></section>\n");
}

/* a row's first cells: the run and its sweep, linked (the sweep's </a> open) */
static void b_run_cells(sched__buf *b, json_t *r) {
  sched__b_printf(b,
                  "<tr><td><a href=\"/runs/%" JSON_INTEGER_FORMAT "\">%" JSON_INTEGER_FORMAT
                  "</a></td><td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">",
                  sched__jint(r, "id"), sched__jint(r, "id"), sched__jint(r, "sweep_id"));
  sched__b_esc(b, sched__jstr(r, "sweep"));
}

void sched__web_overview(sched__buf *b, sched *s, json_t *d) {
  render_workers(b, s);

  json_t *q = json_object_get(d, "queue");
  sched__b_printf(b,
                  "<section id=\"queue\" aria-labelledby=\"h-queue\"><h2 id=\"h-queue\">Queue</h2>"
                  "<p>%" JSON_INTEGER_FORMAT " run%s queued (%" JSON_INTEGER_FORMAT
                  " on CPU slots, %" JSON_INTEGER_FORMAT " GPUs asked for).</p>",
                  sched__jint(q, "runs"), sched__jint(q, "runs") == 1 ? "" : "s",
                  sched__jint(q, "cpu"), sched__jint(q, "gpus"));
  json_t *next = json_object_get(d, "next");
  if (json_array_size(next)) {
    sched__b_puts(b,
                  "<div class=\"scroll\"><table><caption>Next to start</caption><thead><tr>"
                  "<th scope=\"col\">Run</th><th scope=\"col\">Sweep</th><th scope=\"col\">N</th>"
                  "<th scope=\"col\">C (FLOPs)</th><th scope=\"col\">GPUs</th>"
                  "<th scope=\"col\">Attempts so far</th></tr></thead><tbody>");
    size_t i;
    json_t *r;
    json_array_foreach(next, i, r) {
      b_run_cells(b, r);
      sched__b_puts(b, "</a></td><td>");
      sched__b_num(b, sched__jnum(r, "nonembedding_params"), NULL);
      sched__b_puts(b, "</td><td>");
      sched__b_num(b, sched__jnum(r, "flops"), NULL);
      sched__b_printf(
          b, "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%" JSON_INTEGER_FORMAT "</td></tr>",
          sched__jint(r, "gpus"), sched__jint(r, "attempt"));
    }
    sched__b_puts(b, "</tbody></table></div>");
  }
  sched__b_puts(b, "</section>\n");

  json_t *sweeps = json_object_get(d, "sweeps");
  sched__b_section(b, "sweeps", "Sweeps");
  if (!json_array_size(sweeps)) {
    sched__b_puts(b, "<p class=\"empty\">No sweep yet: <code>scalesweep submit "
                     "spec.json</code>.</p>");
  } else {
    sched__b_puts(b, "<div class=\"scroll\"><table class=\"sweeps\"><thead><tr>"
                     "<th scope=\"col\">Sweep</th><th scope=\"col\">Status</th>"
                     "<th scope=\"col\">Runs done</th><th scope=\"col\">Compute spent</th>"
                     "<th scope=\"col\">Running</th><th scope=\"col\">Queued</th>"
                     "<th scope=\"col\">Failed</th></tr></thead><tbody>");
    size_t i;
    json_t *sw;
    json_array_foreach(sweeps, i, sw) {
      json_int_t id = sched__jint(sw, "id");
      sched__b_printf(
          b, "<tr><td><a href=\"/sweeps/%" JSON_INTEGER_FORMAT "\">#%" JSON_INTEGER_FORMAT " ", id,
          id);
      sched__b_puts(b, "<bdi>"); /* web_sweep.c says why */
      sched__b_esc(b, sched__jstr(sw, "name"));
      sched__b_puts(b, "</bdi></a></td><td>");
      sched__b_status(b, sched__jstr(sw, "status"));
      sched__b_puts(b, "</td><td>");
      sched__b_progress(b, "runs done", sched__jnum(sw, "done"), sched__jnum(sw, "total"), "runs",
                        1);
      sched__b_puts(b, "</td><td>");
      sched__b_progress(b, "compute spent", sched__jnum(sw, "flops_spent"),
                        sched__jnum(sw, "flops_planned"), "PF-days", SCHED__PF_DAY);
      sched__b_printf(b,
                      "</td><td>%" JSON_INTEGER_FORMAT "</td><td>%" JSON_INTEGER_FORMAT
                      "</td><td>%" JSON_INTEGER_FORMAT "</td></tr>",
                      sched__jint(sw, "running"), sched__jint(sw, "queued"),
                      sched__jint(sw, "failed"));
    }
    sched__b_puts(b, "</tbody></table></div>");
    if (sched__jint(d, "sweeps_total") > (json_int_t)json_array_size(sweeps))
      sched__b_printf(b, "<p>The newest %zu of %" JSON_INTEGER_FORMAT " sweeps.</p>",
                      json_array_size(sweeps), sched__jint(d, "sweeps_total"));
  }
  sched__b_puts(b, "</section>\n");

  json_t *fails = json_object_get(d, "failures");
  sched__b_section(b, "failures", "Recent failures");
  if (!json_array_size(fails)) {
    sched__b_puts(b, "<p class=\"empty\">None.</p>");
  } else {
    sched__b_puts(b, "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">Run</th>"
                     "<th scope=\"col\">Sweep</th><th scope=\"col\">Attempts</th>"
                     "<th scope=\"col\">Ended (UTC)</th><th "
                     "scope=\"col\">Error</th></tr></thead><tbody>");
    size_t i;
    json_t *r;
    json_array_foreach(fails, i, r) {
      b_run_cells(b, r);
      sched__b_printf(b, "</a></td><td>%" JSON_INTEGER_FORMAT "</td><td>",
                      sched__jint(r, "attempt"));
      sched__b_esc(b, sched__jstr(r, "finished_at"));
      sched__b_puts(b, "</td><td class=\"err\">");
      sched__b_esc(b, sched__jstr(r, "error"));
      sched__b_puts(b, "</td></tr>");
    }
    sched__b_puts(b, "</tbody></table></div>");
  }
  sched__b_puts(b, "</section>\n");

  sched__b_puts(b,
                "<section id=\"submit\" class=\"needs-token\" aria-labelledby=\"h-submit\" hidden>"
                "<h2 id=\"h-submit\">Submit a sweep</h2><form id=\"submit-form\">"
                "<label for=\"spec\">Sweep spec (JSON)</label>"
                "<textarea id=\"spec\" name=\"spec\" rows=\"8\" spellcheck=\"false\"></textarea>"
                "<button type=\"submit\">Submit</button></form></section>\n");
}

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
static void b_run_cells(sched__buf *b, const store_overview_run *r) {
  sched__b_printf(b,
                  "<tr><td><a href=\"/runs/%" PRId64 "\">%" PRId64
                  "</a></td><td><a href=\"/sweeps/%" PRId64 "\">",
                  r->id, r->id, r->sweep_id);
  sched__b_esc(b, r->sweep);
}

static void render_queue(sched__buf *b, const store_overview *o) {
  sched__b_printf(b,
                  "<section id=\"queue\" aria-labelledby=\"h-queue\"><h2 id=\"h-queue\">Queue</h2>"
                  "<p>%" PRId64 " run%s queued (%" PRId64 " on CPU slots, %" PRId64
                  " GPUs asked for).</p>",
                  o->queued, o->queued == 1 ? "" : "s", o->queued_cpu, o->queued_gpus);
  if (o->nnext) {
    sched__b_puts(b,
                  "<div class=\"scroll\"><table><caption>Next to start</caption><thead><tr>"
                  "<th scope=\"col\">Run</th><th scope=\"col\">Sweep</th><th scope=\"col\">N</th>"
                  "<th scope=\"col\">C (FLOPs)</th><th scope=\"col\">GPUs</th>"
                  "<th scope=\"col\">Attempts so far</th></tr></thead><tbody>");
    for (int i = 0; i < o->nnext; i++) {
      const store_overview_run *r = &o->next[i];
      b_run_cells(b, r);
      sched__b_puts(b, "</a></td><td>");
      sched__b_num(b, r->nonembedding_params, NULL);
      sched__b_puts(b, "</td><td>");
      sched__b_num(b, r->flops, NULL);
      sched__b_printf(b, "</td><td>%" PRId64 "</td><td>%" PRId64 "</td></tr>", r->gpus, r->attempt);
    }
    sched__b_puts(b, "</tbody></table></div>");
  }
  sched__b_puts(b, "</section>\n");
}

static void render_sweeps(sched__buf *b, const store_overview *o) {
  sched__b_section(b, "sweeps", "Sweeps");
  if (!o->nsweeps) {
    sched__b_puts(b, "<p class=\"empty\">No sweep yet: <code>scalesweep submit "
                     "spec.json</code>.</p>");
  } else {
    sched__b_puts(b, "<div class=\"scroll\"><table class=\"sweeps\"><thead><tr>"
                     "<th scope=\"col\">Sweep</th><th scope=\"col\">Owner</th>"
                     "<th scope=\"col\">Status</th><th scope=\"col\">Runs done</th><th "
                     "scope=\"col\">Compute spent</th>"
                     "<th scope=\"col\">Running</th><th scope=\"col\">Queued</th>"
                     "<th scope=\"col\">Failed</th></tr></thead><tbody>");
    for (int i = 0; i < o->nsweeps; i++) {
      const store_overview_sweep *sw = &o->sweeps[i];
      sched__b_printf(b, "<tr><td><a href=\"/sweeps/%" PRId64 "\">#%" PRId64 " ", sw->id, sw->id);
      sched__b_puts(b, "<bdi>"); /* web_sweep.c says why */
      sched__b_esc(b, sw->name);
      sched__b_puts(b, "</bdi></a></td><td>");
      sched__b_esc(b, sw->owner ? sw->owner : "-");
      sched__b_puts(b, "</td><td>");
      sched__b_status(b, sw->status);
      sched__b_puts(b, "</td><td>");
      sched__b_progress(b, "runs done", (double)sw->done, (double)sw->total, "runs", 1);
      sched__b_puts(b, "</td><td>");
      sched__b_progress(b, "compute spent", sw->flops_spent, sw->flops_planned, "PF-days",
                        SCHED__PF_DAY);
      sched__b_printf(b, "</td><td>%" PRId64 "</td><td>%" PRId64 "</td><td>%" PRId64 "</td></tr>",
                      sw->running, sw->queued, sw->failed);
    }
    sched__b_puts(b, "</tbody></table></div>");
    if (o->sweeps_total > o->nsweeps)
      sched__b_printf(b, "<p>The newest %d of %" PRId64 " sweeps.</p>", o->nsweeps,
                      o->sweeps_total);
  }
  sched__b_puts(b, "</section>\n");
}

static void render_failures(sched__buf *b, const store_overview *o) {
  sched__b_section(b, "failures", "Recent failures");
  if (!o->nfailures) {
    sched__b_puts(b, "<p class=\"empty\">None.</p>");
  } else {
    sched__b_puts(b, "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">Run</th>"
                     "<th scope=\"col\">Sweep</th><th scope=\"col\">Attempts</th>"
                     "<th scope=\"col\">Ended (UTC)</th><th "
                     "scope=\"col\">Error</th></tr></thead><tbody>");
    for (int i = 0; i < o->nfailures; i++) {
      const store_overview_run *r = &o->failures[i];
      b_run_cells(b, r);
      sched__b_printf(b, "</a></td><td>%" PRId64 "</td><td>", r->attempt);
      sched__b_esc(b, r->finished_utc);
      sched__b_puts(b, "</td><td class=\"err\">");
      sched__b_esc(b, r->error);
      sched__b_puts(b, "</td></tr>");
    }
    sched__b_puts(b, "</tbody></table></div>");
  }
  sched__b_puts(b, "</section>\n");
}

void sched__web_overview(sched__buf *b, sched *s, const store_overview *o) {
  render_workers(b, s);
  render_queue(b, o);
  render_sweeps(b, o);
  render_failures(b, o);
  sched__b_puts(b,
                "<section id=\"submit\" class=\"needs-token\" aria-labelledby=\"h-submit\" hidden>"
                "<h2 id=\"h-submit\">Submit a sweep</h2><form id=\"submit-form\">"
                "<label for=\"spec\">Sweep spec (JSON)</label>"
                "<textarea id=\"spec\" name=\"spec\" rows=\"8\" spellcheck=\"false\"></textarea>"
                "<button type=\"submit\">Submit</button></form></section>\n");
}

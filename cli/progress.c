/* A sweep's progress while a command waits for it (progress.h). Three
 * reads a poll: the sweep's counts (/api/sweeps/ID?limit=0), its running
 * runs (/runs?status=running) and their curves' last points (/curves,
 * 2 points a run). */
#include "cli/progress.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define SHOW_RUNNING 3 /* running runs named on the line */

static double wall(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

void cli_progress_init(cli_progress *p, FILE *out) {
  memset(p, 0, sizeof *p);
  p->out = out;
  p->tty = isatty(fileno(out));
  p->t0 = -1;
}

static long long count(json_t *c, const char *k) {
  return (long long)json_number_value(json_object_get(c, k));
}

/* 1.2e15 -> "1.2e15"; small numbers plainly */
static void flops_text(char *b, size_t n, double f) { snprintf(b, n, "%.2g", f); }

static void duration_text(char *b, size_t n, double s) {
  if (s < 90)
    snprintf(b, n, "%.0f s", s);
  else if (s < 5400)
    snprintf(b, n, "%.0f min", s / 60);
  else
    snprintf(b, n, "%.1f h", s / 3600);
}

/* The sweep's counts into p, and its compute planned and spent by ended
 * runs: 1 when it has finished, 0 when not, -1 when the scheduler did not
 * answer. */
static int poll_counts(cli_progress *p, const cli_target *t, long long id, double *planned,
                       double *spent) {
  char path[160];
  snprintf(path, sizeof path, "/api/sweeps/%lld?limit=0", id);
  json_t *sw = cli_get_json(t, path);
  if (!sw)
    return -1;
  json_t *c = json_object_get(sw, "counts");
  p->total = count(c, "total");
  p->queued = count(c, "queued");
  p->running = count(c, "running");
  p->succeeded = count(c, "succeeded");
  p->failed = count(c, "failed");
  p->cancelled = count(c, "cancelled");
  p->done = p->succeeded + p->failed + p->cancelled;
  *planned = json_number_value(json_object_get(c, "flops_planned"));
  *spent = json_number_value(json_object_get(c, "flops_done"));
  /* an lr tune whose runs have all ended but whose study's runs are not
   * added yet: not finished */
  const char *tune = json_string_value(json_object_get(json_object_get(sw, "lr_tune"), "status"));
  int tuning = tune && (!strcmp(tune, "tuning") || !strcmp(tune, "deciding"));
  /* an adaptive design whose next round is still to come: not finished */
  json_t *ad = json_object_get(sw, "adaptive");
  const char *ads = json_string_value(json_object_get(ad, "status"));
  tuning |= ads && !strcmp(ads, "running");
  const char *sst = json_string_value(json_object_get(sw, "status"));
  int settled = sst && strcmp(sst, "queued") != 0 && strcmp(sst, "running") != 0;
  p->sweep_failed = sst && !strcmp(sst, "failed");
  json_decref(sw);
  /* the status settles at the scheduler's next tick; one that never does
   * (its update lost) is not waited on for more than 10 s */
  int ended = p->total > 0 && p->queued + p->running == 0 && !tuning;
  if (!ended)
    p->ended_at = 0;
  else if (p->ended_at == 0)
    p->ended_at = wall();
  int finished = ended && (settled || wall() - p->ended_at > 10);
  if (finished && !settled)
    p->sweep_failed = p->failed > 0;
  return finished;
}

/* The running runs' curves, their last 2 points each (NULL when none). */
static json_t *running_curves(const cli_target *t, long long id, json_t *rows) {
  char ids[64 * 24] = "";
  size_t off = 0, i;
  json_t *r;
  json_array_foreach(rows, i, r) {
    off += (size_t)snprintf(ids + off, sizeof ids - off, "%s%lld", off ? "," : "",
                            (long long)json_number_value(json_object_get(r, "id")));
    if (off >= sizeof ids)
      break;
  }
  if (!ids[0])
    return NULL;
  char cpath[sizeof ids + 96];
  snprintf(cpath, sizeof cpath, "/api/sweeps/%lld/curves?runs=%s&points=2&limit=64", id, ids);
  return cli_get_json(t, cpath);
}

/* The running runs: their latest loss named in text (SHOW_RUNNING of
 * them), their share of compute added to *spent; the number of them with
 * a loss to show. */
static long long poll_running(const cli_progress *p, const cli_target *t, long long id, char *text,
                              size_t textlen, double *spent) {
  char path[160];
  snprintf(path, sizeof path, "/api/sweeps/%lld/runs?status=running&limit=64", id);
  json_t *rj = cli_get_json(t, path);
  json_t *rows = json_object_get(rj, "runs");
  json_t *curves = running_curves(t, id, rows);
  long long reporting = 0;
  size_t toff = 0, i;
  int shown = 0;
  json_t *r;
  json_array_foreach(rows, i, r) {
    long long rid = (long long)json_number_value(json_object_get(r, "id"));
    double tokens = json_number_value(json_object_get(r, "tokens"));
    double flops = json_number_value(json_object_get(r, "flops"));
    json_t *cv = NULL, *x;
    size_t k;
    json_array_foreach(curves, k, x) {
      if ((long long)json_number_value(json_object_get(x, "run_id")) == rid)
        cv = x;
    }
    json_t *tok = json_object_get(cv, "tokens"), *loss = json_object_get(cv, "train_loss");
    size_t last = json_array_size(loss);
    double at = last ? json_number_value(json_array_get(tok, last - 1)) : 0;
    if (tokens > 0 && flops > 0)
      *spent += flops * fmin(1.0, at / tokens);
    reporting += last > 0;
    if (shown < SHOW_RUNNING && toff < textlen) {
      if (last)
        toff +=
            (size_t)snprintf(text + toff, textlen - toff, "%srun %lld loss %.3f", shown ? ", " : "",
                             rid, json_number_value(json_array_get(loss, last - 1)));
      else
        toff += (size_t)snprintf(text + toff, textlen - toff, "%srun %lld starting",
                                 shown ? ", " : "", rid);
      shown++;
    }
  }
  if (p->running > shown && toff < textlen)
    snprintf(text + toff, textlen - toff, ", +%lld", p->running - shown);
  json_decref(curves);
  json_decref(rj);
  return reporting;
}

/* The progress line: runs done, the running ones (runs_text), compute
 * spent of planned and, before the end, the time left at the rate seen
 * since the first poll. */
static void progress_line(cli_progress *p, long long id, int finished, double planned, double spent,
                          const char *runs_text, double now, char *line, size_t linelen) {
  if (p->t0 < 0) {
    p->t0 = now;
    p->spent0 = spent;
  }
  char eta[48] = "";
  double rate = now > p->t0 + 1 ? (spent - p->spent0) / (now - p->t0) : 0;
  if (!finished && rate > 0 && planned > spent) {
    char d[24];
    duration_text(d, sizeof d, (planned - spent) / rate);
    snprintf(eta, sizeof eta, ", about %s left", d);
  }
  char sp[24], pl[24];
  flops_text(sp, sizeof sp, spent);
  flops_text(pl, sizeof pl, planned);
  int size = (int)linelen;
  int n = snprintf(line, linelen, "sweep %lld: %lld/%lld runs done", id, p->done, p->total);
  if (p->failed)
    n += snprintf(line + n, linelen - (size_t)n, " (%lld failed)", p->failed);
  if (p->running)
    n += snprintf(line + n, linelen - (size_t)n, ", %lld running (%s)", p->running, runs_text);
  snprintf(line + (n < size ? n : size - 1), linelen - (size_t)(n < size ? n : size - 1),
           ", %s of %s FLOPs (%.0f%%)%s", sp, pl, planned > 0 ? 100.0 * spent / planned : 0.0, eta);
}

/* Shows the line: rewritten on a terminal, else printed when it says
 * something new (see progress.h). */
static void show_line(cli_progress *p, const char *line, long long reporting, double now) {
  if (p->tty) {
    /* one line, rewritten: cut to the terminal's usual width */
    fprintf(p->out, "\r\033[K%.150s", line);
    p->shown = 1;
  } else {
    /* a new line when the counts change, when a running run first reports
     * its loss (a run shorter than a minute still shows one), or a minute
     * after the last */
    char key[96];
    snprintf(key, sizeof key, "%lld/%lld/%lld/%lld/%lld", p->done, p->running, reporting, p->failed,
             p->total);
    if (strcmp(key, p->last) != 0 || now - p->last_t >= 60) {
      fprintf(p->out, "%s\n", line);
      snprintf(p->last, sizeof p->last, "%s", key);
      p->last_t = now;
    }
  }
  fflush(p->out);
}

int cli_progress_poll(cli_progress *p, const cli_target *t, long long id) {
  double planned, spent;
  int finished = poll_counts(p, t, id, &planned, &spent);
  if (finished < 0)
    return -1;
  /* the running runs: their latest loss, and their share of compute spent */
  char runs_text[256] = "";
  long long reporting = 0; /* running runs with a loss to show */
  if (p->running > 0)
    reporting = poll_running(p, t, id, runs_text, sizeof runs_text, &spent);
  double now = wall();
  char line[512];
  progress_line(p, id, finished, planned, spent, runs_text, now, line, sizeof line);
  show_line(p, line, reporting, now);
  return finished;
}

void cli_progress_end(cli_progress *p) {
  if (p->tty && p->shown) {
    fputc('\n', p->out);
    fflush(p->out);
  }
  p->shown = 0;
}

/* The client commands: submit, status, runs, cancel, reproduce. They talk
 * to the scheduler's HTTP API; tables for people, --json for programs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/adaptive_text.h"
#include "cli/client.h"
#include "cli/progress.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "common/fileio.h"
#include "sweeps/spec.h"

typedef struct copts {
  const char *url, *state, *token_file;
  int json;
  int run;        /* cancel: the id is a run's */
  int wait;       /* reproduce: wait and compare */
  const char *on; /* reproduce: the worker (name or host) to run on */
  const char *arg;
} copts;

/* Reads the client options into *o (--run, --wait and --on only where the
 * usage names them); returns only when they are good: after printing usage
 * (for -h/--help, exit 0) or what is wrong (exit 2), exits, as every client
 * command does nothing without its options. */
static void parse(int argc, char **argv, copts *o, const char *usage) {
  memset(o, 0, sizeof *o);
  const cli_opt opts[] = {CLI_API_OPTS(o),
                          {"--run", NULL, strstr(usage, "[--run]") ? &o->run : NULL},
                          {"--wait", NULL, strstr(usage, "[--wait]") ? &o->wait : NULL},
                          {"--on", strstr(usage, "--on WORKER") ? &o->on : NULL, NULL}};
  int rc = cli_args_read(argc, argv, argv[0], opts, sizeof opts / sizeof *opts, &o->arg, 1, NULL,
                         usage);
  if (rc < 0 && o->on && !*o->on)
    rc = cli_usage_error(argv[0], NULL, "--on needs a worker's name or host");
  if (rc >= 0)
    exit(rc);
}

static int positive_id(const char *cmd, const char *s) {
  char *end;
  long long v = s ? strtoll(s, &end, 10) : 0;
  if (!s || *end || v <= 0) {
    fprintf(stderr, "scalesweep %s: expected a positive integer id, found '%s'\n", cmd,
            s ? s : "nothing");
    return 0;
  }
  return 1;
}

/* Performs the request (cli_call with o's target). */
static json_t *call(const copts *o, const char *method, const char *path, const char *body,
                    size_t len, int *rc, char **raw) {
  return cli_call(o->url, o->state, o->token_file, method, path, body, len, rc, raw);
}

/* A spec's token shards ("data": {"train", "val"} anywhere in it) given as
 * relative paths are taken from the directory submit runs in: the scheduler
 * and the trainers run elsewhere and accept absolute paths only. Returns 1
 * when dir + "/" + rel, with "." and ".." components resolved, fits in out. */
static int absolute_path(const char *dir, const char *rel, char *out, size_t n) {
  char tmp[8192];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/%s", dir, rel) >= sizeof tmp)
    return 0;
  size_t len = 0;
  out[0] = '\0';
  for (char *save = NULL, *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (!strcmp(c, "."))
      continue;
    if (!strcmp(c, "..")) { /* up one component; "/.." is "/" */
      while (len > 0 && out[len - 1] != '/')
        len--;
      if (len > 0)
        len--;
      out[len] = '\0';
      continue;
    }
    size_t cl = strlen(c);
    if (len + 1 + cl + 1 > n)
      return 0;
    out[len++] = '/';
    memcpy(out + len, c, cl + 1);
    len += cl;
  }
  if (len == 0)
    snprintf(out, n, "/");
  return 1;
}

typedef struct shards_ctx {
  const char *cwd;
  int changed;
} shards_ctx;

/* spec_walk's visit: a relative shard path made absolute against cwd */
static void absolute_shard(void *ud, const char *path, const char *key, json_t *e) {
  shards_ctx *x = ud;
  (void)path;
  if (strcmp(key, "data") || !json_is_object(e))
    return;
  static const char *const shard_keys[] = {"train", "val"};
  for (int k = 0; k < 2; k++) {
    const char *p = json_string_value(json_object_get(e, shard_keys[k]));
    char abs[4096];
    if (p && *p && p[0] != '/' && absolute_path(x->cwd, p, abs, sizeof abs)) {
      json_object_set_new(e, shard_keys[k], json_string(abs));
      x->changed++;
    }
  }
}

/* Retries of a submission answered 503, a second apart. */
#define SUBMIT_RETRIES 10

int cli_submit(const char *file, const char *url, const char *state, const char *token_file,
               int json_out, long long *id, int *earlier) {
  size_t len;
  char *body, msg[512];
  if (fio_read_all(file, &body, &len, msg, sizeof msg) != 0) {
    fprintf(stderr, "scalesweep submit: %s\n", msg);
    return SS_EXIT_USAGE;
  }
  /* a spec that does not parse goes as it is, for the scheduler to say where */
  json_t *spec = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
  char cwd[4096];
  shards_ctx sc = {cwd, 0};
  if (spec && getcwd(cwd, sizeof cwd))
    spec_walk(spec, "$", absolute_shard, &sc);
  if (sc.changed > 0) {
    char *text = json_dumps(spec, JSON_INDENT(2));
    if (text) {
      free(body);
      body = text;
      len = strlen(text);
    }
  }
  json_decref(spec);
  cli_target t;
  int rc = cli_target_find(&t, url, state, token_file), status = 0;
  char *resp = NULL;
  /* 503: the scheduler is checking other specs (at most 2 at once) or its
   * database is down for now; it asks for a retry a second later */
  for (int tries = 0; !rc; tries++) {
    if (cli_request(&t, "POST", "/api/sweeps", body, len, &status, &resp) != 0) {
      rc = SS_EXIT_FAILURE;
      break;
    }
    if (status != 503 || tries == SUBMIT_RETRIES)
      break;
    free(resp);
    resp = NULL;
    fprintf(stderr, "scalesweep submit: the scheduler is busy (503); retrying in 1 s\n");
    sleep(1);
  }
  free(body);
  if (rc) {
    free(resp);
    return rc;
  }
  json_t *j = json_loads(resp, JSON_DECODE_INT_AS_REAL, NULL);
  json_t *old = json_object_get(j, "id");
  if (earlier && status == 409 && json_is_number(old)) {
    /* the same spec (by its digest) was submitted before: that sweep */
    *earlier = 1;
    *id = (long long)json_number_value(old);
    printf("sweep %lld: this spec was submitted before; following that sweep\n", *id);
  } else if (status >= 400) {
    rc = cli_say_error(status, j, resp);
  } else {
    *id = (long long)json_number_value(old);
    if (json_out)
      printf("%s\n", resp);
    else
      printf("sweep %lld submitted: %lld runs planned\n", *id,
             (long long)json_number_value(json_object_get(j, "runs")));
  }
  json_decref(j);
  free(resp);
  return rc;
}

int cmd_submit(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep submit SPEC.json [--url URL] [--state DIR] [--token-file F] [--json]\n"
      "                         [--wait]\n"
      "  --wait  follow the sweep until it has finished: a progress line (runs done, the\n"
      "          running runs' latest loss, compute spent, time left), then the outcome;\n"
      "          exit 1 when the sweep failed: a run failed that it does not replace (with\n"
      "          --json the progress goes to stderr)\n";
  copts o;
  parse(argc, argv, &o, usage);
  if (!o.arg) {
    fprintf(stderr, "scalesweep submit: a spec file is required\n%s", usage);
    return SS_EXIT_USAGE;
  }
  long long id;
  int earlier = 0;
  int rc = cli_submit(o.arg, o.url, o.state, o.token_file, o.json, &id, o.wait ? &earlier : NULL);
  if (rc || !o.wait)
    return rc;
  cli_target t;
  if ((rc = cli_target_find(&t, o.url, o.state, o.token_file)) != 0)
    return rc;
  cli_progress pr;
  cli_progress_init(&pr, o.json ? stderr : stdout);
  for (int misses = 0;;) {
    int st = cli_progress_poll(&pr, &t, id);
    if (st == 1)
      break;
    if (st < 0 && ++misses == 30) { /* a minute without an answer */
      cli_progress_end(&pr);
      fprintf(stderr,
              "scalesweep submit: the scheduler has not answered for a minute; the "
              "sweep goes on (scalesweep status %lld)\n",
              id);
      return SS_EXIT_FAILURE;
    } else if (st >= 0) {
      misses = 0;
    }
    sleep(pr.tty ? 1 : 2);
  }
  cli_progress_end(&pr);
  fprintf(o.json ? stderr : stdout,
          "sweep %lld finished: %lld of %lld runs succeeded, %lld failed, %lld cancelled "
          "(scalesweep fit %lld for the laws)\n",
          id, pr.succeeded, pr.total, pr.failed, pr.cancelled, id);
  return pr.sweep_failed ? SS_EXIT_FAILURE : 0;
}

static const char *str(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "-";
}

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* A sweep's lr tune (docs/sweeps.md, "Tuning the learning rate on a muP
 * proxy"): its state, or the rate chosen with the table it was chosen
 * from and the edge warning. */
static void print_lr_tune(json_t *t) {
  const char *st = str(t, "status");
  json_t *rates = json_object_get(t, "rates"), *proxy = json_object_get(t, "proxy"), *x;
  size_t i;
  if (!strcmp(st, "decided")) {
    printf("learning rate tuned on the proxy: lr %.6g chosen, the lowest final validation loss "
           "of %zu rates",
           num(t, "lr"), json_array_size(rates));
    if (json_is_object(proxy))
      printf(" on the muP proxy (%lld layer%s x d_model %lld, N %.4g, D %.4g tokens, batch "
             "%lld)",
             (long long)num(proxy, "n_layer"), num(proxy, "n_layer") == 1 ? "" : "s",
             (long long)num(proxy, "d_model"), num(proxy, "nonembedding_params"),
             num(proxy, "tokens"), (long long)num(proxy, "batch_size"));
    printf("; the study's %lld runs train at it\n", (long long)num(t, "study_runs"));
  } else if (!strcmp(st, "tuning")) {
    printf("learning rate tuned on the proxy: tuning; the study's runs are added at the best "
           "rate once every tune run has ended\n");
  } else if (!strcmp(st, "deciding")) {
    printf("learning rate tuned on the proxy: every tune run has ended; the study is being "
           "planned at the best rate\n");
  } else if (!strcmp(st, "cancelled")) {
    printf("learning rate tuned on the proxy: cancelled before a rate was chosen\n");
  } else {
    printf("learning rate tuned on the proxy: no rate chosen: %s\n",
           json_is_string(json_object_get(t, "reason")) ? str(t, "reason") : st);
  }
  if (json_array_size(rates)) {
    printf("  %12s %12s %5s %9s %6s\n", "lr", "final loss", "runs", "succeeded", "failed");
    json_array_foreach(rates, i, x) {
      json_t *loss = json_object_get(x, "loss");
      char l[32] = "-";
      if (json_is_number(loss))
        snprintf(l, sizeof l, "%.5f", json_number_value(loss));
      printf("  %12.6g %12s %5lld %9lld %6lld%s\n", num(x, "lr"), l, (long long)num(x, "runs"),
             (long long)num(x, "succeeded"), (long long)num(x, "failed"),
             json_is_true(json_object_get(x, "chosen")) ? "  <- chosen" : "");
    }
  }
  json_array_foreach(json_object_get(t, "warnings"), i, x) {
    printf("warning: %s\n", json_string_value(x) ? json_string_value(x) : "");
  }
}

int cmd_status(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep status [SWEEP] [--url URL] [--state DIR] [--json]\n"
      "  without SWEEP: every sweep with its progress; with SWEEP: that sweep\n";
  copts o;
  parse(argc, argv, &o, usage);
  if (o.arg && !positive_id("status", o.arg))
    return SS_EXIT_USAGE;
  char path[64];
  snprintf(path, sizeof path, o.arg ? "/api/sweeps/%s" : "/api/sweeps", o.arg ? o.arg : "");
  char *raw = NULL;
  int rc;
  json_t *j = call(&o, "GET", path, NULL, 0, &rc, &raw);
  if (!j)
    return rc;
  if (o.json) {
    printf("%s\n", raw);
  } else if (!o.arg) {
    printf("%6s  %-24s %-10s %5s %5s %5s %5s %5s  %s\n", "id", "name", "status", "runs", "done",
           "run", "queue", "fail", "compute (PF-days done / planned)");
    size_t i;
    json_t *s;
    json_array_foreach(j, i, s) {
      printf("%6lld  %-24.24s %-10s %5lld %5lld %5lld %5lld %5lld  %.3g / %.3g\n",
             (long long)num(s, "id"), str(s, "name"), str(s, "status"), (long long)num(s, "runs"),
             (long long)num(s, "succeeded"), (long long)num(s, "running"),
             (long long)num(s, "queued"), (long long)num(s, "failed"),
             num(s, "flops_done") / 8.64e19, num(s, "flops_planned") / 8.64e19);
    }
    json_array_foreach(j, i, s) {
      if (json_is_string(json_object_get(s, "waiting")))
        printf("sweep %lld waits: %s\n", (long long)num(s, "id"), str(s, "waiting"));
    }
  } else {
    json_t *c = json_object_get(j, "counts");
    printf("sweep %lld %s: %s; %lld runs: %lld queued, %lld running, %lld succeeded, "
           "%lld failed, %lld cancelled; compute %.3g / %.3g PF-days\n",
           (long long)num(j, "id"), str(j, "name"), str(j, "status"), (long long)num(c, "total"),
           (long long)num(c, "queued"), (long long)num(c, "running"),
           (long long)num(c, "succeeded"), (long long)num(c, "failed"),
           (long long)num(c, "cancelled"), num(c, "flops_done") / 8.64e19,
           num(c, "flops_planned") / 8.64e19);
    if (num(c, "branched") > 0 && num(c, "flops_done") > 0)
      printf("wsd branches: %lld runs started from a longer run's checkpoint; %.3g of %.3g FLOPs "
             "trained (%.1f%% saved)\n",
             (long long)num(c, "branched"), num(c, "flops_trained"), num(c, "flops_done"),
             100.0 * (1.0 - num(c, "flops_trained") / num(c, "flops_done")));
    if (json_is_string(json_object_get(j, "waiting")))
      printf("waiting: %s\n", str(j, "waiting"));
    if (json_is_object(json_object_get(j, "lr_tune")))
      print_lr_tune(json_object_get(j, "lr_tune"));
    cli_print_adaptive(stdout, json_object_get(j, "adaptive"), "");
  }
  free(raw);
  json_decref(j);
  return 0;
}

int cmd_runs(int argc, char **argv) {
  static const char usage[] = "usage: scalesweep runs SWEEP [--url URL] [--state DIR] [--json]\n"
                              "  every run of the sweep (fetched a page of 1000 at a time)\n";
  copts o;
  parse(argc, argv, &o, usage);
  if (!positive_id("runs", o.arg))
    return SS_EXIT_USAGE;
  json_t *all = json_array();
  for (long long offset = 0;;) {
    char path[128], *raw = NULL;
    int rc;
    snprintf(path, sizeof path, "/api/sweeps/%s/runs?limit=1000&offset=%lld", o.arg, offset);
    json_t *j = call(&o, "GET", path, NULL, 0, &rc, &raw);
    free(raw);
    if (!j) {
      json_decref(all);
      return rc;
    }
    json_t *page = json_object_get(j, "runs");
    json_array_extend(all, page);
    offset += (long long)json_array_size(page);
    int done = json_array_size(page) == 0 || offset >= (long long)num(j, "runs_total");
    json_decref(j);
    if (done)
      break;
  }
  if (o.json) {
    char *s = json_dumps(all, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
  } else {
    printf("%7s  %-10s %3s %12s %12s %6s %11s %10s  %s\n", "run", "status", "try", "params",
           "tokens", "batch", "flops", "val_loss", "error");
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r) {
      /* a failed run waiting for its next attempt says when */
      char err[96] = "";
      const char *e = json_is_string(json_object_get(r, "error")) ? str(r, "error") : "";
      const char *next = json_string_value(json_object_get(r, "retry_after"));
      if (next) /* YYYY-MM-DD HH:MM:SS, UTC: the time of day */
        snprintf(err, sizeof err, "(next try %s UTC) %.60s", strlen(next) > 11 ? next + 11 : next,
                 e);
      else
        snprintf(err, sizeof err, "%.60s", e);
      printf("%7lld  %-10s %3lld %12.4g %12.4g %6lld %11.3e %10.5f  %s\n", (long long)num(r, "id"),
             str(r, "status"), (long long)num(r, "attempt"), num(r, "nonembedding_params"),
             num(r, "tokens"), (long long)num(r, "batch_size"), num(r, "flops"),
             num(r, "final_val_loss"), err);
    }
  }
  json_decref(all);
  return 0;
}

/* POSTs to /api/KIND/ID/ACTION for a positive id; prints the answer as
 * JSON with --json, else through say(). */
static int post_action(const copts *o, const char *cmd, const char *kind, const char *action,
                       const char *body, void (*say)(const copts *o, json_t *j)) {
  if (!positive_id(cmd, o->arg))
    return SS_EXIT_USAGE;
  char path[96], *raw = NULL;
  int rc;
  snprintf(path, sizeof path, "/api/%s/%s/%s", kind, o->arg, action);
  json_t *j = call(o, "POST", path, body, strlen(body), &rc, &raw);
  if (!j)
    return rc;
  if (o->json)
    printf("%s\n", raw);
  else
    say(o, j);
  free(raw);
  json_decref(j);
  return 0;
}

static void say_cancelled(const copts *o, json_t *j) {
  printf("%s %s cancelled (%lld running run(s) stopping)\n", o->run ? "run" : "sweep", o->arg,
         (long long)num(j, "cancelling_running"));
}

int cmd_cancel(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep cancel ID [--run] [--url URL] [--state DIR] [--token-file F]\n"
      "  cancels sweep ID (or run ID with --run): queued runs at once, running runs\n"
      "  after their trainer checkpoints\n";
  copts o;
  parse(argc, argv, &o, usage);
  return post_action(&o, "cancel", o.run ? "runs" : "sweeps", "cancel", "{}", say_cancelled);
}

static void say_reproduced(const copts *o, json_t *j) {
  printf("run %lld queued, reproducing run %s%s%s\n", (long long)num(j, "id"), o->arg,
         o->on ? " on " : "", o->on ? o->on : "");
}

/* --wait: polls the new run until it has finished and its comparison with
 * the original is there; prints it. 0 when the curves are identical, 1 when
 * they differ or the run failed. */
/* Why a finished reproduction differs (store/pages.c's REPRODUCTION_SQL):
 * in another environment, what differed and whether the final loss lies
 * within the run's tolerance (1: explained, within it); in the same one, a
 * defect (0). */
static int why_different(json_t *rep) {
  const json_t *d = json_object_get(rep, "environment_differs");
  if (json_is_true(json_object_get(rep, "same_environment"))) {
    printf("DEFECT: the same environment (code, backend, threads, kernels) gave other numbers: "
           "this is a bug; please report it with both runs' ids\n");
    return 0;
  }
  if (!json_is_object(d)) {
    printf("the environments cannot be compared: one run recorded none (it ran before "
           "migration 014, or its trainer reported none)\n");
    return 0;
  }
  printf("the environments differ in:");
  const char *k;
  const json_t *v;
  int n = 0;
  json_object_foreach((json_t *)d, k, v) {
    char *a = json_dumps(json_array_get(v, 0), JSON_ENCODE_ANY);
    char *b = json_dumps(json_array_get(v, 1), JSON_ENCODE_ANY);
    printf("%s %s (%s, then %s)", n++ ? ";" : "", k, a ? a : "?", b ? b : "?");
    free(a);
    free(b);
  }
  int within = json_is_true(json_object_get(rep, "within_tolerance"));
  printf("\nso the numbers may differ: the final val loss is %s the run's tolerance (%g "
         "relative)\n",
         within ? "within" : "OUTSIDE", num(rep, "tolerance"));
  return within;
}

static int wait_reproduction(const copts *o, long long id) {
  char path[64];
  snprintf(path, sizeof path, "/api/runs/%lld", id);
  int said = 0;
  for (;;) {
    int rc;
    char *raw = NULL;
    json_t *j = call(o, "GET", path, NULL, 0, &rc, &raw);
    if (!j)
      return rc;
    const char *waiting = json_string_value(json_object_get(j, "waiting"));
    if (waiting && !said++ && !o->json) /* once: it may wait for its worker a long while */
      printf("run %lld waits: %s\n", id, waiting);
    json_t *rep = json_object_get(j, "reproduction");
    const char *st = str(json_object_get(j, "run"), "status");
    if (json_is_object(rep) || !strcmp(st, "cancelled")) {
      int same = json_is_true(json_object_get(rep, "identical"));
      /* a cancelled run stored a prefix of its curve (as the run's page says) */
      int cut_r = !strcmp(str(rep, "status_reproduced"), "cancelled"),
          cut = cut_r || !strcmp(str(rep, "status_original"), "cancelled");
      if (o->json)
        printf("%s\n", raw);
      else if (!json_is_object(rep))
        printf("run %lld was cancelled\n", id);
      else if (same)
        printf("run %lld reproduces run %.0f exactly: %.0f steps, every training and validation "
               "loss identical, final val loss %.17g\n",
               id, num(rep, "of"), num(rep, "steps_compared"), num(rep, "final_val_loss_original"));
      else if (cut && num(rep, "steps_compared") == 0)
        printf("run %lld was not compared with run %.0f: %s was cancelled before it stored a "
               "step\n",
               id, num(rep, "of"), cut_r ? "it" : "the original");
      else if (cut && json_is_true(json_object_get(rep, "identical_where_both")))
        printf("run %lld (%s) matches run %.0f (%s) as far as both went: the %.0f steps both "
               "stored are identical (%.0f stored for the original, %.0f for this run)\n",
               id, str(rep, "status_reproduced"), num(rep, "of"), str(rep, "status_original"),
               num(rep, "steps_compared"), num(rep, "steps_original"),
               num(rep, "steps_reproduced"));
      else
        printf("run %lld differs from run %.0f: largest loss difference %.3g at step %.0f "
               "(%.0f of %.0f / %.0f steps compared); final val loss %.17g vs %.17g\n",
               id, num(rep, "of"), num(rep, "max_abs_diff"), num(rep, "at_step"),
               num(rep, "steps_compared"), num(rep, "steps_original"), num(rep, "steps_reproduced"),
               num(rep, "final_val_loss_reproduced"), num(rep, "final_val_loss_original"));
      int explained = 0;
      if (!o->json && json_is_object(rep) && !same && !cut)
        explained = why_different(rep);
      free(raw);
      json_decref(j);
      return same || explained ? 0 : SS_EXIT_FAILURE;
    }
    free(raw);
    json_decref(j);
    sleep(1);
  }
}

int cmd_reproduce(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep reproduce RUN_ID [--on WORKER] [--wait] [--url URL] [--state DIR]\n"
      "                            [--token-file F] [--json]\n"
      "  queues a new run with finished run RUN_ID's stored config (runs.reproduces names\n"
      "  the original);\n"
      "  --on WORKER runs it only on the worker of that name (the status page and GET\n"
      "  /api/workers list them) or on that host; it waits while none is connected, and\n"
      "  a name that never connected is refused\n"
      "  --wait waits for it and reports whether its loss curve matches the original's\n"
      "  exactly (exit 0) or the largest difference; then, from the two runs' recorded\n"
      "  environments, what differed and whether the final loss lies within the run's\n"
      "  tolerance (exit 0), or that the same environment gave other numbers: a defect\n"
      "  (exit 1)\n";
  copts o;
  parse(argc, argv, &o, usage);
  json_t *req = o.on ? json_pack("{s:s}", "on", o.on) : json_object();
  char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  if (!body) {
    fprintf(stderr, "scalesweep reproduce: --on '%s': not valid UTF-8 text\n", o.on ? o.on : "");
    return SS_EXIT_USAGE;
  }
  if (!o.wait) {
    int rc = post_action(&o, "reproduce", "runs", "reproduce", body, say_reproduced);
    free(body);
    return rc;
  }
  if (!positive_id("reproduce", o.arg)) {
    free(body);
    return SS_EXIT_USAGE;
  }
  char path[96], *raw = NULL;
  int rc;
  snprintf(path, sizeof path, "/api/runs/%s/reproduce", o.arg);
  json_t *j = call(&o, "POST", path, body, strlen(body), &rc, &raw);
  free(body);
  free(raw);
  if (!j)
    return rc;
  long long id = (long long)num(j, "id");
  json_decref(j);
  if (!o.json)
    printf("run %lld queued, reproducing run %s%s%s; waiting for it\n", id, o.arg,
           o.on ? " on " : "", o.on ? o.on : "");
  return wait_reproduction(&o, id);
}

/* `scalesweep usage` (compute per person or sweep, GET /api/usage) and
 * `scalesweep limits NAME` (an admin sets a person's limits, POST
 * /api/limits/NAME): README, "A shared cluster". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/err.h"

typedef struct uopts {
  const char *url, *state, *token_file;
  const char *since, *by, *name;
  const char *gpus, *queued_runs, *queued_flops;
  int json;
} uopts;

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static const char *str(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

/* A limit's cell: its value, or "-" for none. */
static void limit_cell(char *buf, size_t len, json_t *limits, const char *k) {
  json_t *v = json_object_get(limits, k);
  if (json_is_number(v))
    snprintf(buf, len, "%.4g", json_number_value(v));
  else
    snprintf(buf, len, "-");
}

static void print_people(json_t *doc) {
  printf("%-16s %8s %12s %12s %11s %11s %10s %12s %8s %6s %14s\n", "PERSON", "ATTEMPTS", "GPU-S",
         "CPU-SLOT-S", "FLOPS", "FLOPS-LOST", "STEPS-LOST", "EFFECTIVE-S", "STANDING", "QUEUED",
         "LIMITS");
  json_t *rows = json_object_get(doc, "rows");
  for (size_t i = 0; i < json_array_size(rows); i++) {
    json_t *r = json_array_get(rows, i), *l = json_object_get(r, "limits");
    char standing[16] = "-", g[24], q[24], f[24];
    if (json_is_number(json_object_get(r, "standing")))
      snprintf(standing, sizeof standing, "%.0f", num(r, "standing"));
    limit_cell(g, sizeof g, l, "max_gpus");
    limit_cell(q, sizeof q, l, "max_queued_runs");
    limit_cell(f, sizeof f, l, "max_queued_flops");
    printf("%-16s %8.0f %12.1f %12.1f %11.3g %11.3g %10.0f %12.1f %8s %6.0f %s/%s/%s\n",
           str(r, "person"), num(r, "attempts"), num(r, "gpu_s"), num(r, "cpu_slot_s"),
           num(r, "flops_trained"), num(r, "flops_lost"), num(r, "steps_lost"),
           num(r, "effective_usage_s"), standing, num(r, "queued_runs"), g, q, f);
  }
  printf("effective usage: device-seconds of ended attempts halved every %.3g days, plus "
         "running ones so far; standing 1 is served first (of %.0f people with queued runs); "
         "limits: GPUs/queued runs/queued FLOPs\n",
         num(doc, "half_life_s") / 86400, num(doc, "people_queued"));
}

static void print_sweeps(json_t *doc) {
  printf("%6s %-24s %-16s %8s %12s %12s %11s %11s %10s\n", "SWEEP", "NAME", "PERSON", "ATTEMPTS",
         "GPU-S", "CPU-SLOT-S", "FLOPS", "FLOPS-LOST", "STEPS-LOST");
  json_t *rows = json_object_get(doc, "rows");
  for (size_t i = 0; i < json_array_size(rows); i++) {
    json_t *r = json_array_get(rows, i);
    printf("%6.0f %-24.24s %-16s %8.0f %12.1f %12.1f %11.3g %11.3g %10.0f\n", num(r, "sweep_id"),
           str(r, "name"), str(r, "person"), num(r, "attempts"), num(r, "gpu_s"),
           num(r, "cpu_slot_s"), num(r, "flops_trained"), num(r, "flops_lost"),
           num(r, "steps_lost"));
  }
}

/* Reads the common options and those of o (usage's or limits'); the
 * positional NAME (limits) into o->name. -1 to go on, else the exit code
 * (--help, or a usage error said on stderr). */
static int parse(int argc, char **argv, uopts *o, int limits, const char *usage) {
  const cli_opt opts[] = {CLI_API_OPTS(o),
                          {"--since", limits ? NULL : &o->since, NULL},
                          {"--by", limits ? NULL : &o->by, NULL},
                          {"--gpus", limits ? &o->gpus : NULL, NULL},
                          {"--queued-runs", limits ? &o->queued_runs : NULL, NULL},
                          {"--queued-flops", limits ? &o->queued_flops : NULL, NULL}};
  return cli_args_read(argc, argv, argv[0], opts, sizeof opts / sizeof *opts, &o->name, limits,
                       NULL, usage);
}

int cmd_usage(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep usage [--since DATE] [--by person|sweep] [--json] [--url URL]\n"
      "                        [--state DIR] [--token-file F]\n"
      "  device-seconds (GPUs or CPU slots x wall time), FLOPs trained and FLOPs lost\n"
      "  (steps trained again after a failure, a fence or a restart from an older\n"
      "  checkpoint) per person or sweep, of the attempts that started from DATE on\n"
      "  (YYYY-MM-DD); per person also each one's effective usage and standing in\n"
      "  fair share. A member sees their own; an admin everyone's.\n";
  uopts o = {0};
  int rc = parse(argc, argv, &o, 0, usage);
  if (rc >= 0)
    return rc;
  if (o.by && strcmp(o.by, "person") && strcmp(o.by, "sweep"))
    return cli_usage_error("usage", NULL, "--by %s: expected person or sweep", o.by);
  char path[256];
  snprintf(path, sizeof path, "/api/usage?by=%s%s%.40s", o.by ? o.by : "person",
           o.since ? "&since=" : "", o.since ? o.since : "");
  for (char *p = strchr(path, ' '); p; p = strchr(p, ' '))
    *p = 'T'; /* "DATE HH:MM" as the API takes it */
  char *raw = NULL;
  json_t *doc = cli_call(o.url, o.state, o.token_file, "GET", path, NULL, 0, &rc, &raw);
  if (doc && o.json)
    printf("%s\n", raw);
  else if (doc && o.by && !strcmp(o.by, "sweep"))
    print_sweeps(doc);
  else if (doc)
    print_people(doc);
  json_decref(doc);
  free(raw);
  return rc;
}

/* A limit option's JSON value: null for "none", the number as given */
static int limit_json(json_t *body, const char *key, const char *opt, const char *v, int real) {
  if (!v)
    return 0;
  if (!strcmp(v, "none"))
    return json_object_set_new(body, key, json_null()), 0;
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !(x >= 0) || (!real && x != (double)(long long)x))
    return cli_usage_error("limits", NULL, "%s %s: expected %s >= 0, or none", opt, v,
                           real ? "a number" : "a whole number");
  json_object_set_new(body, key, real ? json_real(x) : json_integer((json_int_t)x));
  return 0;
}

int cmd_limits(int argc, char **argv) {
  static const char usage[] =
      "usage: scalesweep limits NAME [--gpus N] [--queued-runs N] [--queued-flops X]\n"
      "                         [--url URL] [--state DIR] [--token-file F]\n"
      "  sets person NAME's limits (admins only): GPUs in use at once, runs queued,\n"
      "  FLOPs queued; 'none' (or an option left out) is no limit. A submission over\n"
      "  a queued limit is refused (403, with the figures); runs over the GPU limit\n"
      "  wait, and their sweep says so.\n";
  uopts o = {0};
  int rc = parse(argc, argv, &o, 1, usage);
  if (rc >= 0)
    return rc;
  if (!o.name)
    return cli_usage_error("limits", NULL, "a person's NAME expected");
  json_t *body = json_object();
  if ((rc = limit_json(body, "max_gpus", "--gpus", o.gpus, 0)) ||
      (rc = limit_json(body, "max_queued_runs", "--queued-runs", o.queued_runs, 0)) ||
      (rc = limit_json(body, "max_queued_flops", "--queued-flops", o.queued_flops, 1))) {
    json_decref(body);
    return rc;
  }
  char *text = json_dumps(body, JSON_COMPACT), path[128];
  json_decref(body);
  snprintf(path, sizeof path, "/api/limits/%.64s", o.name);
  json_t *ok = cli_call(o.url, o.state, o.token_file, "POST", path, text, strlen(text), &rc, NULL);
  if (ok)
    printf("limits of %s: GPUs %s, queued runs %s, queued FLOPs %s\n", o.name,
           o.gpus ? o.gpus : "none", o.queued_runs ? o.queued_runs : "none",
           o.queued_flops ? o.queued_flops : "none");
  json_decref(ok);
  free(text);
  return rc;
}

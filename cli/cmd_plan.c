/* scalesweep plan FILE [--json] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/err.h"
#include "sweeps/plan.h"
#include "sweeps/spec.h"

static const char usage[] =
    "usage: scalesweep plan FILE [--json]\n"
    "\n"
    "Validates a sweep spec and prints the runs it plans (shape, N, D, batch size,\n"
    "learning rate, FLOPs, estimated time), the batch/lr rule and the totals; no\n"
    "scheduler needed. docs/sweeps.md describes the spec.\n"
    "  --json   print the planned runs as a JSON list instead: each with its\n"
    "           resolved config, config_hash, params, nonembedding_params, tokens,\n"
    "           batch_size, flops and est_seconds\n"
    "Exit codes: 0 valid, 2 invalid spec (every problem listed) or bad usage.\n";

int cmd_plan(int argc, char **argv) {
  const char *file = NULL;
  int json = 0;
  const cli_opt opts[] = {{"--json", NULL, &json}};
  int rc = cli_args_read(argc, argv, "plan", opts, 1, &file, 1, NULL, usage);
  if (rc >= 0)
    return rc;
  if (!file)
    return cli_usage_error("plan", NULL, "a spec FILE is required");
  const char *path = strcmp(file, "-") ? file : "/dev/stdin";
  spec_problems pr = {0};
  spec *s = NULL;
  plan *p = NULL;
  rc = plan_load(path, &s, &p, &pr);
  if (rc) {
    char *msg = spec_problems_format(&pr, path);
    fprintf(stderr, "%s\n", msg ? msg : err_str(rc));
    if (pr.n > 1) {
      char sum[96];
      spec_problems_summary(&pr, sum, sizeof sum);
      fprintf(stderr, "scalesweep plan: %s; nothing planned\n", sum);
    }
    free(msg);
    spec_problems_free(&pr);
    spec_free(s);
    return err_exit_code(rc);
  }
  if (json) {
    char *t = plan_runs_json(p);
    if (!t) {
      fprintf(stderr, "scalesweep plan: out of memory\n");
      rc = SS_ENOMEM;
    } else {
      printf("%s\n", t);
      free(t);
    }
  } else {
    plan_write_table(p, stdout);
  }
  plan_free(p);
  spec_free(s);
  spec_problems_free(&pr);
  return err_exit_code(rc);
}

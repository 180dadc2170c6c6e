/* Sweep specs through the planner: spec_parse, then plan_spec (shapes,
 * rules, every run resolved by the trainer's parser) and the plan's
 * renderings (`scalesweep plan` and `--json`, the rules). */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "sweeps/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink && !(sink = fopen("/dev/null", "w")))
    abort();
  char *text = fuzz_strndup(data, size);
  spec *s = NULL;
  spec_problems pr = {0};
  if (spec_parse(text, "fuzz.json", &s, &pr) == 0) {
    plan *p = NULL;
    int rc = plan_spec(s, &p, &pr);
    if ((rc == 0) != (p != NULL) || (rc != 0 && pr.n == 0))
      abort();
    if (p) {
      free(plan_runs_json(p));
      json_decref(plan_rules_json(p));
      plan_write_table(p, sink);
    }
    plan_free(p);
  }
  free(spec_problems_format(&pr, "fuzz.json"));
  spec_free(s);
  spec_problems_free(&pr);
  free(text);
  return 0;
}

/* Sweep specs: spec_parse (JSON, every key, type and range) and what the
 * CLI and the API do with its answer: the problems as text and as JSON, and
 * for a valid spec its canonical text. Planning is fuzz_plan's. */
#include <stdlib.h>

#include "fuzz.h"
#include "sweeps/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_strndup(data, size);
  spec *s = NULL;
  spec_problems pr = {0};
  int rc = spec_parse(text, "fuzz.json", &s, &pr);
  if ((rc == 0) != (s != NULL) || (rc != 0 && pr.n == 0))
    abort(); /* the contract: a spec, or at least one problem */
  free(spec_problems_format(&pr, "fuzz.json"));
  json_decref(spec_problems_to_json(&pr));
  if (s)
    free(spec_canonical(s));
  spec_free(s);
  spec_problems_free(&pr);
  free(text);
  return 0;
}

/* Run configs: rcfg_parse (runcfg/: cJSON, defaults, validation). A config it
 * accepts must print (rcfg_to_json) to text that parses back to the
 * same text: the resolved config alone reproduces a run. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "runcfg/runcfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_strndup(data, size);
  rcfg cfg;
  char err[4096];
  if (rcfg_parse(text, "fuzz.json", &cfg, err, sizeof err) == 0) {
    char *a = rcfg_to_json(&cfg);
    rcfg again;
    if (!a || rcfg_parse(a, "resolved.json", &again, err, sizeof err) != 0)
      abort();
    char *b = rcfg_to_json(&again);
    if (!b || strcmp(a, b) != 0)
      abort();
    free(a);
    free(b);
  } else if (!err[0]) {
    abort(); /* a refusal always says why */
  }
  free(text);
  return 0;
}

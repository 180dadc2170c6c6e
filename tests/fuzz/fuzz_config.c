/* Run configs: trn_config_parse (cJSON, defaults, validation). A config it
 * accepts must print (trn_config_to_json) to text that parses back to the
 * same text: the resolved config alone reproduces a run. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "trainer/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_strndup(data, size);
  trn_config cfg;
  char err[4096];
  if (trn_config_parse(text, "fuzz.json", &cfg, err, sizeof err) == 0) {
    char *a = trn_config_to_json(&cfg);
    trn_config again;
    if (!a || trn_config_parse(a, "resolved.json", &again, err, sizeof err) != 0)
      abort();
    char *b = trn_config_to_json(&again);
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

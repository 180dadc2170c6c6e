/* Names that travel between programs (names.h). */
#include "common/names.h"

#include <string.h>

int ss_trainer_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > SS_TRAINER_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (!alnum && (i == 0 || (ch != '_' && ch != '-' && ch != '.')))
      return 0;
  }
  return 1;
}

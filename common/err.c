#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *err_name(int code) {
  switch (code) {
#define SS__ERR_NAME(name, val, msg) \
  case SS_##name:                    \
    return #name;
    SS_ERRNO_MAP(SS__ERR_NAME)
#undef SS__ERR_NAME
  }
  return "UNKNOWN";
}

const char *err_str(int code) {
  switch (code) {
#define SS__ERR_STR(name, val, msg) \
  case SS_##name:                   \
    return msg;
    SS_ERRNO_MAP(SS__ERR_STR)
#undef SS__ERR_STR
  }
  return "unknown error";
}

int err_exit_code(int code) {
  if (code == 0)
    return SS_EXIT_OK;
  if (code == SS_EINVAL || code == SS_ECORRUPT || code == SS_ENOENT || code == SS_ERANGE)
    return SS_EXIT_USAGE;
  return SS_EXIT_FAILURE;
}

void err_setf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  size_t n = strlen(err);
  while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
    err[--n] = '\0';
}

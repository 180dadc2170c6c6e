/* Error codes shared by every scalesweep library.
 *
 * Library functions return 0 on success or one of the negative codes below
 * (libuv style). The table is an X-macro so that the enum, err_name() and
 * err_str() can never disagree. */
#ifndef SS_COMMON_ERR_H
#define SS_COMMON_ERR_H

#include <stddef.h>

#define SS_ERRNO_MAP(X)                                     \
  X(EINVAL, -22, "invalid input")                           \
  X(EIO, -5, "input/output error")                          \
  X(ENOENT, -2, "no such file or directory")                \
  X(ENOMEM, -12, "out of memory")                           \
  X(ERANGE, -34, "value out of range")                      \
  X(ENUMERIC, -1001, "numerical failure (NaN or infinity)") \
  X(ETERM, -1002, "stopped by a signal")                    \
  X(ECORRUPT, -1003, "corrupt or incompatible file")        \
  X(EQUERY, -1004, "database statement failed")             \
  X(ETIMEOUT, -1006, "database statement ran too long")     \
  X(ECONN, -1005, "database connection lost or unavailable")

enum {
#define SS__ERR_ENUM(name, val, msg) SS_##name = (val),
  SS_ERRNO_MAP(SS__ERR_ENUM)
#undef SS__ERR_ENUM
};

/* "EINVAL" for SS_EINVAL; "UNKNOWN" for codes outside the table. */
const char *err_name(int code);
/* A short human-readable description of the code. */
const char *err_str(int code);

/* Exit codes of every scalesweep command (docs/design.md#exit-codes). */
enum { SS_EXIT_OK = 0, SS_EXIT_FAILURE = 1, SS_EXIT_USAGE = 2 };

/* Maps an error code to the process exit code: invalid input, corrupt files
 * and missing files are the user's (2), everything else a run-time failure (1). */
int err_exit_code(int code);

/* Writes a message into err (errlen bytes; nothing when err is NULL) and
 * strips trailing newlines and spaces, which libpq's and other libraries'
 * messages end with. */
void err_setf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

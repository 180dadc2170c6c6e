/* Token files (the cluster token, the API token): the one reader the
 * scheduler, the worker and the client commands share. */
#ifndef SS_COMMON_TOKEN_H
#define SS_COMMON_TOKEN_H

#include <stddef.h>

#define TOKEN_MAX 4096 /* bytes in a token file, trailing white space included */

/* Reads a token from path: the file's text less trailing white space (space,
 * tab, CR, LF). Refused: a file over TOKEN_MAX bytes, a token shorter than
 * min_len characters, a NUL byte or text that is not UTF-8, a token that
 * does not fit out (outlen). *shared (may be NULL) is set when group or
 * other users may read the file, for the caller to warn about. Returns 0,
 * or SS_ENOENT / SS_EIO (cannot read) / SS_EINVAL (refused) with
 * "PATH: reason" in err; the token is never part of a message, and out is
 * zeroed on failure. */
int token_read(const char *path, size_t min_len, char *out, size_t outlen, int *shared, char *err,
               size_t errlen);

/* Compares two tokens in time independent of where they differ; an empty
 * or NULL got never matches. 1 when equal. */
int token_equal(const char *want, const char *got);

/* A fresh random secret from the kernel's generator: nbytes random bytes as
 * 2 * nbytes lowercase hex digits and a NUL in out. 0, or -1 with errno
 * (getrandom failed; out is then an empty string). */
int token_random_hex(char *out, size_t nbytes);

#endif

#include "common/token.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "common/err.h"

int token_read(const char *path, size_t min_len, char *out, size_t outlen, int *shared, char *err,
               size_t errlen) {
  if (shared)
    *shared = 0;
  if (outlen)
    out[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot read the token file: %s", path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  struct stat st;
  if (shared && !fstat(fileno(f), &st) && (st.st_mode & 077))
    *shared = 1;
  char buf[TOKEN_MAX + 1];
  size_t n = fread(buf, 1, sizeof buf, f);
  int rerr = ferror(f);
  fclose(f);
  int rc = 0;
  if (rerr) {
    snprintf(err, errlen, "%s: read error", path);
    rc = SS_EIO;
    goto out;
  }
  if (n > TOKEN_MAX) {
    snprintf(err, errlen, "%s: the token file is over %d bytes", path, TOKEN_MAX);
    rc = SS_EINVAL;
    goto out;
  }
  while (n > 0 &&
         (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  buf[n] = '\0';
  /* Jansson validates UTF-8 and refuses an embedded NUL here */
  json_t *probe = json_stringn(buf, n);
  int text = probe && strlen(buf) == n;
  json_decref(probe);
  if (!text || n == 0) {
    snprintf(err, errlen, "%s: the token file is empty or not UTF-8 text", path);
    rc = SS_EINVAL;
  } else if (n < min_len) {
    snprintf(err, errlen, "%s: token is %zu characters, expected at least %zu", path, n, min_len);
    rc = SS_EINVAL;
  } else if (n >= outlen) {
    snprintf(err, errlen, "%s: token is %zu characters, at most %zu fit", path, n, outlen - 1);
    rc = SS_EINVAL;
  } else {
    memcpy(out, buf, n + 1);
  }
out:
  memset(buf, 0, sizeof buf);
  return rc;
}

int token_equal(const char *want, const char *got) {
  if (!want || !got)
    return 0;
  size_t lw = strlen(want), lg = strlen(got);
  unsigned char diff = (unsigned char)(lw != lg);
  for (size_t i = 0; i < lw; i++)
    diff |= (unsigned char)(want[i] ^ (i < lg ? got[i] : 0));
  return diff == 0 && lw > 0;
}

int token_random_hex(char *out, size_t nbytes) {
  unsigned char raw[256];
  out[0] = 0;
  if (nbytes > sizeof raw || getrandom(raw, nbytes, 0) != (ssize_t)nbytes)
    return -1;
  for (size_t i = 0; i < nbytes; i++)
    snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

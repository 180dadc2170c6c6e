#include "common/addr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

int addr_split(const char *hp, const char *empty_host, int min_port, char *host, size_t hostlen,
               int *port, char *err, size_t errlen) {
  const char *colon = hp ? strrchr(hp, ':') : NULL;
  if (!colon)
    goto bad;
  const char *h = hp;
  size_t hl = (size_t)(colon - hp);
  if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
    h = hp + 1;
    hl -= 2;
  }
  if (hl == 0) {
    if (!empty_host || strlen(empty_host) >= hostlen)
      goto bad;
    snprintf(host, hostlen, "%s", empty_host);
  } else {
    if (hl >= hostlen)
      goto bad;
    memcpy(host, h, hl);
    host[hl] = '\0';
  }
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || *end || p < min_port || p > 65535)
    goto bad;
  *port = (int)p;
  return 0;
bad:
  if (err)
    snprintf(err, errlen, "%s: expected HOST:PORT (port %d-65535)", hp ? hp : "(none)", min_port);
  return SS_EINVAL;
}

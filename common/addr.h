/* HOST:PORT, the one parser of addresses given on the command line
 * (--listen, --workers, --scheduler). */
#ifndef SS_COMMON_ADDR_H
#define SS_COMMON_ADDR_H

#include <stddef.h>

/* Splits "127.0.0.1:8080", "[::1]:0", "host.example:7070" or ":8080" into
 * host (brackets of an IPv6 literal removed) and port. An empty host is
 * empty_host (NULL: refused). Ports from min_port to 65535 are accepted (0
 * for a listener that takes any free port, 1 for a peer to connect to).
 * Returns 0, or SS_EINVAL with "ADDR: expected HOST:PORT (port MIN-65535)"
 * in err (may be NULL). */
int addr_split(const char *hostport, const char *empty_host, int min_port, char *host,
               size_t hostlen, int *port, char *err, size_t errlen);

#endif

/* Content digests (OpenSSL's SHA-256). */
#ifndef SS_COMMON_DIGEST_H
#define SS_COMMON_DIGEST_H

#include <stddef.h>

/* The SHA-256 of n bytes as 64 lowercase hex digits and a NUL. */
void digest_sha256_hex(const void *data, size_t n, char out[65]);

#endif

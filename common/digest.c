#include "common/digest.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

void digest_sha256_hex(const void *data, size_t n, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data, n, md, &len, EVP_sha256(), NULL) || len != 32) {
    memset(out, '0', 64);
    out[64] = '\0';
    return;
  }
  for (unsigned i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

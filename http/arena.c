/* The per-request arena (h2o's memory pool): the first block lives inside
 * the request allocation, further blocks are chained and freed with the
 * request (request.c). Also the growable buffers of heads, bodies and
 * buffered input. */
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

void *http_alloc(http_request *r, size_t n) {
  const size_t a = alignof(max_align_t);
  if (n > SIZE_MAX - a)
    return NULL;
  n = (n + a - 1) / a * a;
  if (n == 0)
    n = a;
  if (n <= sizeof r->arena - r->arena_used) {
    void *p = (char *)r->arena + r->arena_used;
    r->arena_used += n;
    return p;
  }
  http_block *b = r->blocks;
  if (b && n <= b->cap - b->used) {
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
  }
  size_t cap = n > HTTP_ARENA_BLOCK / 2 ? n : HTTP_ARENA_BLOCK;
  http_block *nb = malloc(sizeof *nb + cap);
  if (!nb)
    return NULL;
  nb->cap = cap;
  nb->used = n;
  if (cap == n && b) { /* a large one-off: keep filling the current block */
    nb->next = b->next;
    b->next = nb;
  } else {
    nb->next = b;
    r->blocks = nb;
  }
  return nb->data;
}

char *http__strndup(http_request *r, const char *s, size_t n) {
  char *p = http_alloc(r, n + 1);
  if (!p)
    return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

int http__grow(char **buf, size_t *cap, size_t need, size_t first, size_t max) {
  if (need <= *cap)
    return 0;
  size_t n = *cap ? *cap : first;
  while (n < need)
    n *= 2;
  if (max && n > max)
    n = max;
  char *p = realloc(*buf, n);
  if (!p)
    return -1;
  *buf = p;
  *cap = n;
  return 0;
}

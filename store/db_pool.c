/* The read pool (store.h): n connections of their own, each a db with its
 * queue and its reconnects; a read goes to the one that will answer it
 * first, as far as queue lengths tell. */
#include <stdlib.h>

#include "store/internal.h"

struct db_pool {
  int n, open; /* connections; those not yet closed */
  void (*close_cb)(void *ud);
  void *close_ud;
  db *conns[]; /* (n) */
};

db_pool *db_pool_open(uv_loop_t *loop, const char *url, int n, const db_options *o) {
  if (n < 1)
    n = 1;
  db_pool *p = calloc(1, sizeof *p + (size_t)n * sizeof(db *));
  if (!p)
    return NULL;
  for (int i = 0; i < n; i++) {
    p->conns[i] = db_open_opts(loop, url, o);
    if (!p->conns[i])
      break;
    p->n++;
  }
  if (p->n == 0) {
    free(p);
    return NULL;
  }
  p->open = p->n;
  return p;
}

/* The least loaded connection up among conns[0..n-1], or NULL. */
static db *least_loaded(const db_pool *p, int n) {
  db *best = NULL;
  for (int i = 0; i < n; i++)
    if (db_ready(p->conns[i]) && (!best || db_queue_length(p->conns[i]) < db_queue_length(best)))
      best = p->conns[i];
  return best;
}

db *db_pool_get(db_pool *p, int heavy) {
  db *d = heavy && p->n > 1 ? least_loaded(p, p->n - 1) : NULL;
  if (!d)
    d = least_loaded(p, p->n);
  return d ? d : p->conns[0];
}

int db_pool_ready(const db_pool *p) { return least_loaded(p, p->n) != NULL; }

size_t db_pool_queue_length(const db_pool *p) {
  size_t n = 0;
  for (int i = 0; i < p->n; i++)
    n += db_queue_length(p->conns[i]);
  return n;
}

static void on_conn_closed(void *ud) {
  db_pool *p = ud;
  if (--p->open > 0)
    return;
  void (*cb)(void *) = p->close_cb;
  void *cud = p->close_ud;
  free(p);
  if (cb)
    cb(cud);
}

void db_pool_close(db_pool *p, void (*cb)(void *ud), void *ud) {
  p->close_cb = cb;
  p->close_ud = ud;
  int n = p->n;
  for (int i = 0; i < n; i++)
    db_close(p->conns[i], on_conn_closed, p);
}

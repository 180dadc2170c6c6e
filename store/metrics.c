/* Metric rows (metrics.h).
 *
 * A batch goes as column arrays in PostgreSQL's binary array format
 * (array_recv: ndim, has-nulls flag, element type, then per dimension its
 * length and lower bound, then per element its byte length, -1 for NULL,
 * and its big-endian value), one element per step, so one INSERT never
 * touches a row twice. Binary arrays spare the server parsing decimal
 * text, most of its work per row. */
#include "store/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

enum { OID_INT4 = 23, OID_INT8 = 20, OID_FLOAT8 = 701 };

#define NCOLS (2 + STORE_METRIC_NVALUES)

typedef struct colbuf {
  unsigned char *p;
  size_t len;
} colbuf;

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* room for n elements of at most 8 bytes each */
static int col_init(colbuf *b, int oid, size_t n) {
  b->p = malloc(20 + n * 12);
  if (!b->p)
    return -1;
  put32(b->p, 1);                 /* dimensions */
  put32(b->p + 4, 1);             /* may hold NULLs */
  put32(b->p + 8, (uint32_t)oid); /* element type */
  put32(b->p + 12, (uint32_t)n);  /* length */
  put32(b->p + 16, 1);            /* lower bound */
  b->len = 20;
  return 0;
}

static void col_u64(colbuf *b, uint64_t u) {
  unsigned char *p = b->p + b->len;
  put32(p, 8);
  put32(p + 4, (uint32_t)(u >> 32));
  put32(p + 8, (uint32_t)u);
  b->len += 12;
}

static void col_int4(colbuf *b, int32_t v) {
  put32(b->p + b->len, 4);
  put32(b->p + b->len + 4, (uint32_t)v);
  b->len += 8;
}

static void col_float8(colbuf *b, double v) {
  if (isnan(v)) {
    put32(b->p + b->len, UINT32_MAX); /* NULL */
    b->len += 4;
    return;
  }
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  col_u64(b, u);
}

typedef struct insert_row {
  int own;
  int64_t rows;
} insert_row;

static void decode_insert(const PGresult *res, int row, void *elem) {
  *(insert_row *)elem =
      (insert_row){!strcmp(PQgetvalue(res, row, 0), "t"), store__int(res, row, 1)};
}

static void deliver_insert(const store__call *c, int status, const void *rows, int n,
                           const char *errmsg) {
  const insert_row *r = rows;
  if (status == 0 && n != 1) {
    status = SS_EQUERY;
    errmsg = "the metrics insert returned no row";
  }
  ((store_done_cb)c->cb)(c->ud, status, status ? 0 : r->own ? r->rows : STORE_FENCED, errmsg);
}

static const store__rows_spec inserted = {sizeof(insert_row), decode_insert, deliver_insert};

void store_metrics_insert(db *d, int64_t run_id, int attempt, int64_t worker_id,
                          const store_metric_row *rows, size_t n, store_done_cb cb, void *ud) {
  colbuf cols[NCOLS] = {{0}};
  int oom = 0;
  for (int j = 0; j < NCOLS; j++)
    oom |= col_init(&cols[j], j == 0 ? OID_INT4 : j == 1 ? OID_INT8 : OID_FLOAT8, n);
  for (size_t i = 0; i < n && !oom; i++) {
    col_int4(&cols[0], rows[i].step);
    col_u64(&cols[1], (uint64_t)rows[i].tokens);
    for (int j = 0; j < STORE_METRIC_NVALUES; j++)
      col_float8(&cols[2 + j], rows[i].v[j]);
  }
  if (oom) {
    for (int j = 0; j < NCOLS; j++)
      free(cols[j].p);
    cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  char rid[24], att[24], wid[24], lo[24], hi[24];
  const char *p[5 + NCOLS] = {store__itoa(rid, sizeof rid, run_id),
                              store__itoa(att, sizeof att, attempt),
                              store__itoa(wid, sizeof wid, worker_id)};
  int lens[5 + NCOLS] = {0}, fmts[5 + NCOLS] = {0};
  for (int j = 0; j < NCOLS; j++) {
    p[3 + j] = (const char *)cols[j].p;
    lens[3 + j] = (int)cols[j].len;
    fmts[3 + j] = 1;
  }
  /* the steps already stored are merged, the others are plain inserts,
   * cheaper than ON CONFLICT's speculative ones; one run's batches go
   * through one connection in order, so no other statement inserts its
   * steps meanwhile; were one to, the primary key refuses the batch and
   * the worker resends it */
  p[3 + NCOLS] = store__itoa(lo, sizeof lo, n ? rows[0].step : 0);
  p[4 + NCOLS] = store__itoa(hi, sizeof hi, n ? rows[n - 1].step : -1);
  /* own: the same fence as a result's (store_runs_finish): the run is
   * running, on this worker, in this attempt */
  store__call *c = store__rows_call(&inserted, (void (*)(void))cb, ud, 0);
  if (c)
    db_query_bin(d,
                 "WITH own AS (SELECT 1 FROM runs WHERE id = $1::bigint AND attempt = $2::int "
                 "AND worker = $3::bigint AND status = 'running'), "
                 "u AS (SELECT * FROM unnest($4::int[], $5::bigint[], $6::float8[], "
                 "$7::float8[], $8::float8[], $9::float8[], $10::float8[], $11::float8[], "
                 "$12::float8[]) AS u (step, tokens, train_loss, val_loss, lr, grad_norm, "
                 "b_noise, loss_scale, tok_per_s) WHERE EXISTS (SELECT 1 FROM own)), "
                 "merged AS (UPDATE metrics m SET "
                 "train_loss = coalesce(m.train_loss, u.train_loss), "
                 "val_loss = coalesce(m.val_loss, u.val_loss), lr = coalesce(m.lr, u.lr), "
                 "grad_norm = coalesce(m.grad_norm, u.grad_norm), "
                 "b_noise = coalesce(m.b_noise, u.b_noise), "
                 "loss_scale = coalesce(m.loss_scale, u.loss_scale), "
                 "tok_per_s = coalesce(m.tok_per_s, u.tok_per_s) FROM u "
                 "WHERE m.run_id = $1::bigint AND m.step BETWEEN $13::int AND $14::int "
                 "AND m.step = u.step RETURNING 1), "
                 "ins AS (INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr, "
                 "grad_norm, b_noise, loss_scale, tok_per_s) SELECT $1::bigint, u.* FROM u "
                 "WHERE NOT EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = $1::bigint "
                 "AND m.step BETWEEN $13::int AND $14::int AND m.step = u.step) RETURNING 1) "
                 "SELECT EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM ins)",
                 5 + NCOLS, p, lens, fmts, store__on_rows, c);
  for (int j = 0; j < NCOLS; j++)
    free(cols[j].p);
}

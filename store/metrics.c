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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

enum { OID_INT4 = 23, OID_INT8 = 20, OID_FLOAT8 = 701 };

_Static_assert(SS_MCOL_step == 0 && SS_MCOL_tokens == 1, "insert_sql: the key first");

/* the stored columns (common/metric_row.h), in the table's order */
static int stored_cols(int cols[SS_MCOL_N]) {
  int n = 0;
  for (int i = 0; i < SS_MCOL_N; i++)
    if (ss_metric_stored(i))
      cols[n++] = i;
  return n;
}

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
  status = store__one_row(status, n, &errmsg, "the metrics insert returned no row");
  ((store_done_cb)c->cb)(c->ud, status, status ? 0 : r->own ? r->rows : STORE_FENCED, errmsg);
}

static const store__rows_spec inserted = {sizeof(insert_row), decode_insert, deliver_insert};

/* Appends printf-style text to sql[*len..n). */
static void add(char *sql, size_t n, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add(char *sql, size_t n, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = *len < n ? vsnprintf(sql + *len, n - *len, fmt, ap) : 0;
  va_end(ap);
  *len += k > 0 ? (size_t)k : 0;
}

/* The batch's statement for the stored columns cols[0..ncols) (step and
 * tokens first, the table's key): $1..$3 the fence, $4.. one array per
 * column, then the batch's first and last step. The steps already stored
 * are merged, the others are plain inserts, cheaper than ON CONFLICT's
 * speculative ones; one run's batches go through one connection in
 * order, so no other statement inserts its steps meanwhile; were one to,
 * the primary key refuses the batch and the worker resends it. own: the
 * same fence as a result's (store_runs_finish): the run is running, on
 * this worker, in this attempt. */
static void insert_sql(char *sql, size_t n, const int *cols, int ncols) {
  size_t len = 0;
  int lo = 4 + ncols, hi = 5 + ncols;
  add(sql, n, &len,
      "WITH own AS (SELECT 1 FROM runs WHERE id = $1::bigint AND attempt = $2::int "
      "AND worker = $3::bigint AND status = 'running'), u AS (SELECT * FROM unnest(");
  for (int j = 0; j < ncols; j++)
    add(sql, n, &len, "%s$%d::%s[]", j ? ", " : "", 4 + j, ss_metric_sql_type(cols[j]));
  add(sql, n, &len, ") AS u (");
  for (int j = 0; j < ncols; j++)
    add(sql, n, &len, "%s%s", j ? ", " : "", ss_metric_cols[cols[j]].name);
  add(sql, n, &len, ") WHERE EXISTS (SELECT 1 FROM own)), merged AS (UPDATE metrics m SET ");
  for (int j = 2; j < ncols; j++)
    add(sql, n, &len, "%s%s = coalesce(m.%s, u.%s)", j > 2 ? ", " : "",
        ss_metric_cols[cols[j]].name, ss_metric_cols[cols[j]].name, ss_metric_cols[cols[j]].name);
  add(sql, n, &len,
      " FROM u WHERE m.run_id = $1::bigint AND m.step BETWEEN $%d::int AND $%d::int "
      "AND m.step = u.step RETURNING 1), ins AS (INSERT INTO metrics (run_id",
      lo, hi);
  for (int j = 0; j < ncols; j++)
    add(sql, n, &len, ", %s", ss_metric_cols[cols[j]].name);
  add(sql, n, &len,
      ") SELECT $1::bigint, u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM metrics m WHERE "
      "m.run_id = $1::bigint AND m.step BETWEEN $%d::int AND $%d::int AND m.step = u.step) "
      "RETURNING 1) SELECT EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM ins)",
      lo, hi);
}

void store_metrics_insert(db *d, int64_t run_id, int attempt, int64_t worker_id,
                          const store_metric_row *rows, size_t n, store_done_cb cb, void *ud) {
  int cols[SS_MCOL_N];
  int ncols = stored_cols(cols);
  colbuf col[SS_MCOL_N] = {{0}};
  int oom = 0;
  for (int j = 0; j < ncols; j++) {
    ss_metric_kind k = ss_metric_cols[cols[j]].kind;
    oom |= col_init(&col[j],
                    k == SS_MK_STEP     ? OID_INT4
                    : k == SS_MK_COUNT8 ? OID_INT8
                                        : OID_FLOAT8,
                    n);
  }
  for (size_t i = 0; i < n && !oom; i++)
    for (int j = 0; j < ncols; j++) {
      double v = rows[i].v[cols[j]];
      ss_metric_kind k = ss_metric_cols[cols[j]].kind;
      if (k == SS_MK_STEP)
        col_int4(&col[j], (int32_t)v);
      else if (k == SS_MK_COUNT8)
        col_u64(&col[j], (uint64_t)(int64_t)v);
      else
        col_float8(&col[j], v);
    }
  if (oom) {
    for (int j = 0; j < ncols; j++)
      free(col[j].p);
    cb(ud, SS_ENOMEM, 0, "out of memory");
    return;
  }
  char rid[24], att[24], wid[24], lo[24], hi[24], sql[4096];
  const char *p[5 + SS_MCOL_N] = {store__itoa(rid, sizeof rid, run_id),
                                  store__itoa(att, sizeof att, attempt),
                                  store__itoa(wid, sizeof wid, worker_id)};
  int lens[5 + SS_MCOL_N] = {0}, fmts[5 + SS_MCOL_N] = {0};
  for (int j = 0; j < ncols; j++) {
    p[3 + j] = (const char *)col[j].p;
    lens[3 + j] = (int)col[j].len;
    fmts[3 + j] = 1;
  }
  int32_t first = n ? (int32_t)rows[0].v[SS_MCOL_step] : 0;
  int32_t last = n ? (int32_t)rows[n - 1].v[SS_MCOL_step] : -1;
  p[3 + ncols] = store__itoa(lo, sizeof lo, first);
  p[4 + ncols] = store__itoa(hi, sizeof hi, last);
  insert_sql(sql, sizeof sql, cols, ncols);
  store__call *c = store__rows_call(&inserted, (void (*)(void))cb, ud, 0);
  if (c)
    db_query_bin(d, sql, 5 + ncols, p, lens, fmts, store__on_rows, c);
  for (int j = 0; j < ncols; j++)
    free(col[j].p);
}

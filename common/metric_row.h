/* The metric row: what a trainer's step and eval lines carry, what the
 * protocol accepts of them, what the metrics table stores and what the API
 * serves, defined once.
 *
 * An X-macro rather than a schema file that generates code: the row is
 * read by C at every layer (trainer, protocol, scheduler, store), and a
 * table the preprocessor expands needs no generator in the build; the
 * parts that are not C follow from it at run time (the SQL statements are
 * built from it, the API serves its stored columns as "columns", the page
 * reads those) or are checked against it by a test (the migrations'
 * metrics table: tests/integration/test_metric_row.py).
 *
 * SS_METRIC_COLS(X) calls X(name, kind, line, required, fmt) per column,
 * in the order the built-in trainer writes them:
 * - name: the JSON key, the metrics table's column and the index
 *   SS_MCOL_<name>.
 * - kind: its value, SQL type and whether it is stored (SS_MK_*). The
 *   step line's fp16 flag "skipped" and the tests' "host_syncs" are in
 *   the line but not stored; they are here because the line's order is
 *   (the protocol checks them when present, the store leaves them out).
 * - line: the trainer event that carries it: SS_ML_STEP, SS_ML_EVAL or
 *   both (SS_ML_BOTH: the row's key, step and tokens).
 * - required: 1 when that line must carry it (what a row without it
 *   would leave the metrics table unable to say); an optional column may
 *   be absent or null (an external trainer need not send it: docs/trainers.md).
 * - fmt: how the built-in trainer prints the value (common/events.h): a
 *   printf format (%.17g round-trips a double; a rate or a clock reading
 *   needs no more than 6 digits), or "b" for true/false.
 *
 * A new column: a line here, a migration adding it to the metrics table,
 * the trainer that computes it, and a chart if one shows it. */
#ifndef SS_COMMON_METRIC_ROW_H
#define SS_COMMON_METRIC_ROW_H

#include <math.h>
#include <stdint.h>

#define SS_METRIC_COLS(X)                                \
  X(step, SS_MK_STEP, SS_ML_BOTH, 1, "%lld")             \
  X(tokens, SS_MK_COUNT8, SS_ML_BOTH, 1, "%lld")         \
  X(train_loss, SS_MK_REAL, SS_ML_STEP, 1, "%.17g")      \
  X(val_loss, SS_MK_REAL, SS_ML_EVAL, 1, "%.17g")        \
  X(lr, SS_MK_REAL, SS_ML_STEP, 0, "%.17g")              \
  X(grad_norm, SS_MK_REAL, SS_ML_STEP, 0, "%.17g")       \
  X(b_noise, SS_MK_REAL, SS_ML_STEP, 0, "%.17g")         \
  X(loss_scale, SS_MK_REAL, SS_ML_STEP, 0, "%.17g")      \
  X(skipped, SS_MK_FLAG, SS_ML_STEP, 0, "b")             \
  X(host_syncs, SS_MK_LINE_COUNT, SS_ML_STEP, 0, "%lld") \
  X(tok_per_s, SS_MK_REAL, SS_ML_STEP, 0, "%.6g")        \
  X(wall_s, SS_MK_REAL, SS_ML_STEP, 0, "%.6g")

/* What a column holds. The first three are stored (integer, bigint,
 * double precision); the last two only travel in the line. */
typedef enum ss_metric_kind {
  SS_MK_STEP,      /* an integer in [0, 2^31): the table's step is an integer */
  SS_MK_COUNT8,    /* an integer >= 0 */
  SS_MK_REAL,      /* a number */
  SS_MK_FLAG,      /* true or false (line only) */
  SS_MK_LINE_COUNT /* an integer >= 0 (line only) */
} ss_metric_kind;

typedef enum ss_metric_line { SS_ML_STEP = 1, SS_ML_EVAL = 2, SS_ML_BOTH = 3 } ss_metric_line;

enum {
#define SS_MCOL_ENUM(name, kind, line, required, fmt) SS_MCOL_##name,
  SS_METRIC_COLS(SS_MCOL_ENUM)
#undef SS_MCOL_ENUM
      SS_MCOL_N
};

/* One column's description (ss_metric_cols[SS_MCOL_<name>]). */
typedef struct ss_metric_col {
  const char *name;
  ss_metric_kind kind;
  ss_metric_line line;
  int required;
  const char *fmt;
} ss_metric_col;

static const ss_metric_col ss_metric_cols[SS_MCOL_N] = {
#define SS_MCOL_DESC(name, kind, line, required, fmt) {#name, kind, line, required, fmt},
    SS_METRIC_COLS(SS_MCOL_DESC)
#undef SS_MCOL_DESC
};

/* One row, every column a double: NAN where absent (or null). The
 * integers are exact below 2^53 (9e15 tokens), as they were when the
 * scheduler read them with json_number_value. */
typedef struct ss_metric_row {
  double v[SS_MCOL_N];
} ss_metric_row;

static inline int ss_metric_stored(int col) { return ss_metric_cols[col].kind <= SS_MK_REAL; }

/* The SQL type of a stored column. */
static inline const char *ss_metric_sql_type(int col) {
  ss_metric_kind k = ss_metric_cols[col].kind;
  return k == SS_MK_STEP ? "int" : k == SS_MK_COUNT8 ? "bigint" : "float8";
}

static inline void ss_metric_row_clear(ss_metric_row *r) {
  for (int i = 0; i < SS_MCOL_N; i++)
    r->v[i] = NAN;
}

#endif

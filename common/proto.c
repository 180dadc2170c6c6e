/* The scheduler <-> worker wire protocol: line framing, validation of every
 * message type (docs/runtime.md), encoding.
 *
 * Framing rules (both peers):
 * - a line is every byte before '\n'; at most PROTO_MAX_LINE of them, a
 *   trailing '\r' included. A CRLF line is tolerated: its '\r' is stripped
 *   before on_line sees it (so `nc` and telnet work for debugging).
 * - empty lines (also "\r\n") are skipped: they carry no message.
 * - the reader never holds more than PROTO_MAX_LINE bytes (+1 for a NUL):
 *   as soon as an unfinished line would exceed the bound, proto_reader_feed
 *   returns SS_ERANGE, forgets the partial line and ignores the rest of that
 *   chunk; the caller drops the connection (framing is lost).
 * - on_line gets a NUL-terminated copy (line[len] == '\0') valid during the
 *   call only. A non-zero return from on_line stops the feed: the rest of
 *   the chunk is dropped, the reader is left empty and proto_reader_feed
 *   returns that value (for a callback that is about to close the
 *   connection).
 *
 * Validation: every field that a message type requires must be present with
 * its JSON type (and range: ids and counts are non-negative, sequence numbers
 * start at 1, and what a peer keeps in a C int, such as attempts, CPU slots,
 * GPU indices and exit codes, fits in 32 bits: a cast would turn 2^32 + 5
 * into 5); the few optional fields (welcome.data_dirs) are checked the
 * same way when present. Unknown keys are ignored, so that a version 1 peer can accept
 * additions that do not change the meaning of the message. Duplicate keys
 * are rejected: a peer must not be able to say two things at once. */
#include "common/proto.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/metric_row.h"
#include "common/names.h"

/* ---- names -------------------------------------------------------------- */

static const char *const type_names[] = {
    [PROTO_INVALID] = "invalid",   [PROTO_HELLO] = "hello",     [PROTO_HEARTBEAT] = "heartbeat",
    [PROTO_STARTED] = "started",   [PROTO_METRICS] = "metrics", [PROTO_CHECKPOINT] = "checkpoint",
    [PROTO_FINISHED] = "finished", [PROTO_WELCOME] = "welcome", [PROTO_ASSIGN] = "assign",
    [PROTO_CANCEL] = "cancel",     [PROTO_ACK] = "ack",         [PROTO_ERROR] = "error",
    [PROTO_STOPPING] = "stopping",
};
#define NTYPES ((int)(sizeof type_names / sizeof *type_names))

const char *proto_type_name(proto_type t) {
  if ((int)t < 0 || (int)t >= NTYPES)
    return "invalid";
  return type_names[t];
}

/* ---- framing ------------------------------------------------------------ */

void proto_reader_init(proto_reader *r) {
  r->buf = NULL;
  r->len = 0;
  r->cap = 0;
}

void proto_reader_free(proto_reader *r) {
  free(r->buf);
  proto_reader_init(r);
}

/* Makes room for `need` bytes (need <= PROTO_MAX_LINE + 1), doubling from
 * 4 KiB so that ordinary lines cost no reallocation. */
static int reader_reserve(proto_reader *r, size_t need) {
  if (need <= r->cap)
    return 0;
  size_t cap = r->cap ? r->cap : 4096;
  while (cap < need)
    cap *= 2;
  if (cap > (size_t)PROTO_MAX_LINE + 1)
    cap = (size_t)PROTO_MAX_LINE + 1;
  char *p = realloc(r->buf, cap);
  if (!p)
    return SS_ENOMEM;
  r->buf = p;
  r->cap = cap;
  return 0;
}

int proto_reader_feed(proto_reader *r, const char *data, size_t n,
                      int (*on_line)(void *ud, const char *line, size_t len), void *ud) {
  while (n > 0) {
    const char *nl = memchr(data, '\n', n);
    size_t take = nl ? (size_t)(nl - data) : n;
    if (r->len + take > PROTO_MAX_LINE) {
      r->len = 0;
      return SS_ERANGE;
    }
    int rc = reader_reserve(r, r->len + take + 1);
    if (rc) {
      r->len = 0;
      return rc;
    }
    memcpy(r->buf + r->len, data, take);
    r->len += take;
    if (!nl)
      return 0;
    data += take + 1;
    n -= take + 1;
    size_t len = r->len;
    r->len = 0;
    if (len > 0 && r->buf[len - 1] == '\r')
      len--;
    if (len == 0)
      continue;
    r->buf[len] = '\0';
    rc = on_line(ud, r->buf, len);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- validation --------------------------------------------------------- */

typedef struct vctx {
  char *err;
  size_t errlen;
  int failed;
} vctx;

static void vfail(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void vfail(vctx *c, const char *fmt, ...) {
  if (c->failed)
    return;
  c->failed = 1;
  if (!c->err || !c->errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, c->errlen, fmt, ap);
  va_end(ap);
}

/* A short rendering of a JSON value for "found ..." in messages: scalars as
 * JSON (strings cut at 40 bytes), containers by kind. */
static void describe(const json_t *v, char *out, size_t n) {
  static const char *const named[] = {[JSON_OBJECT] = "an object",
                                      [JSON_ARRAY] = "an array",
                                      [JSON_TRUE] = "true",
                                      [JSON_FALSE] = "false",
                                      [JSON_NULL] = "null"};
  json_type t = json_typeof(v);
  switch (t) {
  case JSON_INTEGER:
    snprintf(out, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return;
  case JSON_REAL: {
    char *s = json_dumps(v, JSON_ENCODE_ANY); /* 1.0 stays 1.0, unlike %g */
    snprintf(out, n, "%s", s ? s : "a number");
    free(s);
    return;
  }
  case JSON_STRING: {
    size_t len = json_string_length(v);
    json_t *cut = json_stringn_nocheck(json_string_value(v), len > 40 ? 40 : len);
    char *s = cut ? json_dumps(cut, JSON_ENCODE_ANY) : NULL;
    /* A cut in the middle of a UTF-8 sequence is harmless here: the
     * description is only printed. */
    snprintf(out, n, "%s%s", s ? s : "a string", s && len > 40 ? "..." : "");
    free(s);
    json_decref(cut);
    return;
  }
  default:
    snprintf(out, n, "%s",
             (size_t)t < sizeof named / sizeof *named && named[t] ? named[t] : "a value");
  }
}

static void fail_type(vctx *c, const char *path, const char *expected, const json_t *v) {
  char found[96];
  describe(v, found, sizeof found);
  vfail(c, "%s: expected %s, found %s", path, expected, found);
}

/* The member `key` of object o, or NULL after a "missing" error. */
static json_t *need(vctx *c, const json_t *o, const char *path, const char *key,
                    const char *expected) {
  json_t *v = json_object_get(o, key);
  if (!v)
    vfail(c, "%s.%s: missing, expected %s", path, key, expected);
  return v;
}

static void check_int(vctx *c, const char *path, const json_t *v, json_int_t min) {
  if (c->failed)
    return;
  if (!json_is_integer(v)) {
    fail_type(c, path,
              min == 0   ? "a non-negative integer"
              : min == 1 ? "a positive integer"
                         : "an integer",
              v);
    return;
  }
  if (json_integer_value(v) < min)
    vfail(c, "%s: expected an integer >= %" JSON_INTEGER_FORMAT ", found %" JSON_INTEGER_FORMAT,
          path, min, json_integer_value(v));
}

/* An integer that its reader keeps in an int: in [min, INT32_MAX]. */
static void check_int32(vctx *c, const char *path, const json_t *v, json_int_t min) {
  check_int(c, path, v, min);
  if (!c->failed && json_integer_value(v) > INT32_MAX)
    fail_type(
        c, path,
        min == 0 ? "an integer in [0, 2147483647]" : "an integer in [-2147483648, 2147483647]", v);
}

enum kind {
  K_INT0,       /* integer >= 0 */
  K_INT1,       /* integer >= 1 */
  K_INT,        /* any integer */
  K_INT0_32,    /* integer in [0, INT32_MAX]: kept in an int */
  K_INT_32,     /* integer in [INT32_MIN, INT32_MAX]: kept in an int */
  K_NUMBER,     /* any number */
  K_NUMBER_POS, /* number > 0 */
  K_STRING,
  K_STRING_OR_NULL,
  K_OBJECT,
  K_OBJECT_OR_NULL,
  K_BOOL,
  K_VERSION,      /* == PROTO_VERSION */
  K_GPU_LIST,     /* [{"index":int32>=0,"name":str,"memory_bytes":int>=0}] */
  K_RUN_REFS,     /* [{"run_id":int>=0,"attempt":int32>=0}] */
  K_INT0_LIST,    /* [int>=0] */
  K_INT0_32_LIST, /* [integer in [0, INT32_MAX]] */
  K_ROWS,         /* trainer step / eval events */
  K_PATH_LIST,    /* [absolute path string] */
  K_BACKENDS,     /* {"cuda": {"devices": K_GPU_LIST} or {"error": str}, ...} */
  K_DIST,         /* {"ranks": [int32>=0, ...], "addr": str, "secret": str} */
  K_TRAINERS,     /* [trainer name (common/names.h), ...], at most PROTO_MAX_TRAINERS */
};

static const char *kind_text(enum kind k) {
  switch (k) {
  case K_INT0:
    return "a non-negative integer";
  case K_INT1:
    return "a positive integer";
  case K_INT:
    return "an integer";
  case K_INT0_32:
    return "an integer in [0, 2147483647]";
  case K_INT_32:
    return "an integer in [-2147483648, 2147483647]";
  case K_NUMBER:
    return "a number";
  case K_NUMBER_POS:
    return "a positive number";
  case K_STRING:
    return "a string";
  case K_STRING_OR_NULL:
    return "a string or null";
  case K_OBJECT:
    return "an object";
  case K_OBJECT_OR_NULL:
    return "an object or null";
  case K_BOOL:
    return "true or false";
  case K_VERSION:
    return "1";
  case K_GPU_LIST:
    return "an array of GPU objects";
  case K_RUN_REFS:
    return "an array of {run_id, attempt} objects";
  case K_INT0_LIST:
    return "an array of non-negative integers";
  case K_INT0_32_LIST:
    return "an array of integers in [0, 2147483647]";
  case K_ROWS:
    return "an array of step and eval events";
  case K_PATH_LIST:
    return "an array of absolute paths";
  case K_BACKENDS:
    return "an object of backends";
  case K_DIST:
    return "an object {ranks, addr, secret}";
  case K_TRAINERS:
    return "an array of trainer names";
  }
  return "a value";
}

typedef struct field {
  const char *key;
  enum kind kind;
} field;

static void check_value(vctx *c, const char *path, const json_t *v, enum kind k);

/* Builds a JSON path; a path cut at the buffer's end is still a useful hint. */
static void subpath(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void subpath(char *out, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, n, fmt, ap);
  va_end(ap);
}

static void check_fields(vctx *c, const char *path, const json_t *o, const field *fs) {
  char sub[256];
  for (; fs->key && !c->failed; fs++) {
    json_t *v = need(c, o, path, fs->key, kind_text(fs->kind));
    if (!v)
      return;
    subpath(sub, sizeof sub, "%s.%s", path, fs->key);
    check_value(c, sub, v, fs->kind);
  }
}

static void check_optional(vctx *c, const char *path, const json_t *o, const field *fs) {
  char sub[256];
  for (; fs->key && !c->failed; fs++) {
    json_t *v = json_object_get(o, fs->key);
    if (!v)
      continue;
    subpath(sub, sizeof sub, "%s.%s", path, fs->key);
    check_value(c, sub, v, fs->kind);
  }
}

/* A metric column's kind as this file checks it (common/metric_row.h). */
static enum kind metric_kind(int col) {
  switch (ss_metric_cols[col].kind) {
  case SS_MK_REAL:
    return K_NUMBER;
  case SS_MK_FLAG:
    return K_BOOL;
  default:
    return K_INT0;
  }
}

_Static_assert(SS_MCOL_N <= 32, "proto_row's masks hold a bit per metric column");

/* A step or eval row read into out (SS_ML_STEP or SS_ML_EVAL), or 0 when
 * any of its columns is missing or of the wrong type: check_row's test
 * without building a path per field (a metrics message carries hundreds of
 * rows, nearly always valid; only a row this refuses is checked again by
 * check_row, for the message that names what is wrong). An optional column
 * that is absent or null reads as NAN. */
static int row_read(const json_t *row, proto_row *out) {
  const char *e = json_string_value(json_object_get(row, "event"));
  int line = !e ? 0 : !strcmp(e, "step") ? SS_ML_STEP : !strcmp(e, "eval") ? SS_ML_EVAL : 0;
  out->line = line;
  out->present = out->ints = 0;
  if (!line)
    return 0;
  for (int i = 0; i < SS_MCOL_N; i++) {
    const ss_metric_col *col = &ss_metric_cols[i];
    json_t *v = json_object_get(row, col->name);
    out->m.v[i] = NAN;
    if (!(col->line & line) || !v)
      continue;
    out->present |= 1u << i;
    out->ints |= (uint32_t)json_is_integer(v) << i;
    if (json_is_null(v) && !col->required)
      continue;
    switch (col->kind) {
    case SS_MK_REAL:
      if (!json_is_number(v))
        return 0;
      out->m.v[i] = json_number_value(v);
      break;
    case SS_MK_FLAG:
      if (!json_is_boolean(v))
        return 0;
      out->m.v[i] = json_is_true(v);
      break;
    default:
      if (!json_is_integer(v) || json_integer_value(v) < 0 ||
          (col->kind == SS_MK_STEP && json_integer_value(v) > INT32_MAX))
        return 0;
      out->m.v[i] = (double)json_integer_value(v);
    }
  }
  for (int i = 0; i < SS_MCOL_N; i++)
    if ((ss_metric_cols[i].line & line) && ss_metric_cols[i].required && isnan(out->m.v[i]))
      return 0;
  return line;
}

/* A trainer `step` or `eval` event as the trainer printed it. The columns
 * its line requires (common/metric_row.h) must be there; the optional ones
 * are checked when present and not null (b_noise only when measurable,
 * loss_scale only with fp16, grad_norm null on a skipped fp16 step). */
static void check_row(vctx *c, const char *path, const json_t *row) {
  char sub[256];
  if (!json_is_object(row)) {
    fail_type(c, path, "a step or eval event object", row);
    return;
  }
  json_t *ev = need(c, row, path, "event", "\"step\" or \"eval\"");
  if (!ev)
    return;
  const char *e = json_string_value(ev);
  int line = !e ? 0 : !strcmp(e, "step") ? SS_ML_STEP : !strcmp(e, "eval") ? SS_ML_EVAL : 0;
  if (!line) {
    subpath(sub, sizeof sub, "%s.event", path);
    fail_type(c, sub, "\"step\" or \"eval\"", ev);
    return;
  }
  for (int i = 0; i < SS_MCOL_N && !c->failed; i++) {
    const ss_metric_col *col = &ss_metric_cols[i];
    json_t *v = json_object_get(row, col->name);
    if (!(col->line & line) || (!col->required && (!v || json_is_null(v))))
      continue;
    if (!(v = need(c, row, path, col->name, kind_text(metric_kind(i)))))
      return;
    subpath(sub, sizeof sub, "%s.%s", path, col->name);
    check_value(c, sub, v, metric_kind(i));
    if (!c->failed && col->kind == SS_MK_STEP && json_integer_value(v) > INT32_MAX)
      fail_type(c, sub, "an integer in [0, 2147483647]", v); /* the metrics table's step */
  }
}

static void check_array(vctx *c, const char *path, const json_t *v, enum kind k) {
  static const field gpu_fields[] = {
      {"index", K_INT0_32}, {"name", K_STRING}, {"memory_bytes", K_INT0}, {NULL, 0}};
  static const field ref_fields[] = {{"run_id", K_INT0}, {"attempt", K_INT0_32}, {NULL, 0}};
  /* hello.runs[].gpus (optional): the devices a reconnected worker's run holds */
  static const field ref_optional[] = {{"gpus", K_INT0_32_LIST}, {NULL, 0}};
  if (!json_is_array(v)) {
    fail_type(c, path, kind_text(k), v);
    return;
  }
  char sub[256];
  size_t i;
  json_t *e;
  proto_row scratch;
  json_array_foreach(v, i, e) {
    if (c->failed)
      return;
    if (k == K_ROWS && row_read(e, &scratch))
      continue;
    subpath(sub, sizeof sub, "%s[%zu]", path, i);
    switch (k) {
    case K_GPU_LIST:
    case K_RUN_REFS:
      if (!json_is_object(e)) {
        fail_type(c, sub, "an object", e);
      } else {
        check_fields(c, sub, e, k == K_GPU_LIST ? gpu_fields : ref_fields);
        if (k == K_RUN_REFS)
          check_optional(c, sub, e, ref_optional);
      }
      break;
    case K_INT0_LIST:
      check_int(c, sub, e, 0);
      break;
    case K_INT0_32_LIST:
      check_int32(c, sub, e, 0);
      break;
    case K_PATH_LIST:
      if (!json_is_string(e) || json_string_value(e)[0] != '/')
        fail_type(c, sub, "an absolute path", e);
      break;
    case K_ROWS:
      check_row(c, sub, e);
      break;
    case K_TRAINERS:
      if (i >= PROTO_MAX_TRAINERS)
        vfail(c, "%s: expected at most %d trainers", path, PROTO_MAX_TRAINERS);
      else if (!json_is_string(e) || !ss_trainer_name_ok(json_string_value(e)))
        fail_type(c, sub,
                  "a trainer name (1 to 32 letters, digits, '_', '-' or '.', the first a "
                  "letter or digit)",
                  e);
      break;
    default:
      break;
    }
  }
}

/* hello.backends: "cuda" says which GPUs CUDA runs on ("devices", each a
 * GPU object) or why it cannot run ("error"); other backends are objects. */
static void check_backends(vctx *c, const char *path, const json_t *v) {
  static const field cuda_ok[] = {{"devices", K_GPU_LIST}, {NULL, 0}};
  static const field cuda_error[] = {{"error", K_STRING}, {NULL, 0}};
  if (!json_is_object(v)) {
    fail_type(c, path, kind_text(K_BACKENDS), v);
    return;
  }
  char sub[256];
  const char *key;
  json_t *b;
  json_object_foreach((json_t *)v, key, b) {
    subpath(sub, sizeof sub, "%s.%s", path, key);
    if (!json_is_object(b))
      fail_type(c, sub, "an object", b);
    else if (!strcmp(key, "cuda"))
      check_fields(c, sub, b, json_object_get(b, "error") ? cuda_error : cuda_ok);
    if (c->failed)
      return;
  }
}

/* The kinds checked by the value's JSON type alone. */
static int scalar_ok(const json_t *v, enum kind k) {
  switch (k) {
  case K_INT:
    return json_is_integer(v);
  case K_NUMBER:
    return json_is_number(v);
  case K_NUMBER_POS:
    return json_is_number(v) && json_number_value(v) > 0;
  case K_STRING_OR_NULL:
    return json_is_string(v) || json_is_null(v);
  case K_STRING:
    return json_is_string(v);
  case K_OBJECT_OR_NULL:
    return json_is_object(v) || json_is_null(v);
  case K_OBJECT:
    return json_is_object(v);
  case K_BOOL:
    return json_is_boolean(v);
  default:
    return 0;
  }
}

static const field dist_fields[] = {
    {"ranks", K_INT0_32_LIST}, {"addr", K_STRING}, {"secret", K_STRING}, {NULL, 0}};

static void check_value(vctx *c, const char *path, const json_t *v, enum kind k) {
  if (c->failed)
    return;
  switch (k) {
  case K_INT0:
    check_int(c, path, v, 0);
    return;
  case K_INT1:
    check_int(c, path, v, 1);
    return;
  case K_INT0_32:
    check_int32(c, path, v, 0);
    return;
  case K_INT_32:
    check_int32(c, path, v, INT32_MIN);
    return;
  case K_INT:
  case K_NUMBER:
  case K_NUMBER_POS:
  case K_STRING:
  case K_STRING_OR_NULL:
  case K_OBJECT:
  case K_OBJECT_OR_NULL:
  case K_BOOL:
    if (!scalar_ok(v, k))
      fail_type(c, path, kind_text(k), v);
    return;
  case K_VERSION:
    if (!json_is_integer(v) || json_integer_value(v) != PROTO_VERSION)
      fail_type(c, path,
                "protocol version 1 (HINT: run the same scalesweep version on "
                "the scheduler and the workers)",
                v);
    return;
  case K_GPU_LIST:
  case K_RUN_REFS:
  case K_INT0_LIST:
  case K_INT0_32_LIST:
  case K_ROWS:
  case K_PATH_LIST:
  case K_TRAINERS:
    check_array(c, path, v, k);
    return;
  case K_BACKENDS:
    check_backends(c, path, v);
    return;
  case K_DIST:
    if (!json_is_object(v))
      fail_type(c, path, kind_text(k), v);
    else
      check_fields(c, path, v, dist_fields);
    if (!c->failed && json_array_size(json_object_get(v, "ranks")) == 0)
      fail_type(c, path, "at least one rank in ranks", json_object_get(v, "ranks"));
    return;
  }
}

/* The required fields of each message type (docs/runtime.md). */
static const field f_hello[] = {
    {"version", K_VERSION}, {"token", K_STRING},      {"name", K_STRING},   {"host", K_STRING},
    {"gpus", K_GPU_LIST},   {"cpu_slots", K_INT0_32}, {"runs", K_RUN_REFS}, {NULL, 0}};
static const field f_heartbeat[] = {{"runs", K_INT0_LIST}, {NULL, 0}};
static const field f_started[] = {
    {"run_id", K_INT0}, {"attempt", K_INT0_32}, {"config", K_OBJECT}, {NULL, 0}};
static const field f_metrics[] = {
    {"run_id", K_INT0}, {"attempt", K_INT0_32}, {"seq", K_INT1}, {"rows", K_ROWS}, {NULL, 0}};
static const field f_checkpoint[] = {
    {"run_id", K_INT0}, {"attempt", K_INT0_32}, {"step", K_INT0}, {"path", K_STRING}, {NULL, 0}};
static const field f_finished[] = {
    {"run_id", K_INT0},          {"attempt", K_INT0_32}, {"seq", K_INT1},
    {"exit_code", K_INT_32},     {"signal", K_INT0_32},  {"done", K_OBJECT_OR_NULL},
    {"error", K_STRING_OR_NULL}, {"log_tail", K_STRING}, {NULL, 0}};
static const field f_welcome[] = {
    {"worker_id", K_INT0}, {"heartbeat_s", K_NUMBER_POS}, {"lease_s", K_NUMBER_POS}, {NULL, 0}};
static const field f_assign[] = {{"run_id", K_INT0},
                                 {"attempt", K_INT0_32},
                                 {"config", K_OBJECT},
                                 {"gpus", K_INT0_32_LIST},
                                 {"checkpoint_dir", K_STRING},
                                 {"resume", K_BOOL},
                                 {NULL, 0}};
static const field f_cancel[] = {{"run_id", K_INT0}, {NULL, 0}};
/* welcome.data_dirs (optional): the directories the scheduler allows token
 * shards under (absent: none). */
/* welcome.secret (optional): the worker's secret, given when a worker
 * takes its name (scheduler/wmsg.c, "Worker identity") */
static const field o_welcome[] = {{"data_dirs", K_PATH_LIST}, {"secret", K_STRING}, {NULL, 0}};
/* assign.dist (optional): the worker's part of a run spread over workers:
 * its ranks, rank 0's address and the run's secret */
/* assign.branch_from, assign.keep_steps (optional; docs/sweeps.md "WSD
 * branches"): the trunk's checkpoint a wsd branch starts from, and the
 * steps after which a trunk keeps checkpoints for its branches */
static const field o_assign[] = {
    {"dist", K_DIST}, {"branch_from", K_STRING}, {"keep_steps", K_INT0_LIST}, {NULL, 0}};
/* checkpoint.branch (optional): true for a trunk's kept branch point, which
 * is not the run's own latest checkpoint */
static const field o_checkpoint[] = {{"branch", K_BOOL}, {NULL, 0}};
static const field f_ack[] = {
    {"run_id", K_INT0}, {"attempt", K_INT0_32}, {"seq", K_INT0}, {NULL, 0}};
/* ack.stored (optional): false when the scheduler refused the message (its
 * attempt is no longer that worker's running one): nothing was stored, and
 * resending cannot help */
static const field o_ack[] = {{"stored", K_BOOL}, {NULL, 0}};
static const field f_error[] = {{"message", K_STRING}, {NULL, 0}};
static const field f_stopping[] = {{"runs", K_RUN_REFS}, {NULL, 0}};

/* Optional fields, checked when present. finished: interrupted (the worker
 * stopped the trainer, or a signal from outside did, after its checkpoint:
 * the run goes back to the queue without spending an attempt), fenced (the
 * worker killed it because its lease could not be renewed) and the step of
 * the attempt's last checkpoint. */
static const field o_finished[] = {
    {"interrupted", K_BOOL}, {"fenced", K_BOOL}, {"checkpoint_step", K_INT0}, {NULL, 0}};
static const field o_none[] = {{NULL, 0}};
/* hello.backends (optional): what the worker can run (absent: an older
 * worker, whose GPUs are taken as CUDA's); hello.slurm_job (optional): the
 * Slurm job the worker runs in (SLURM_JOB_ID), which the scheduler's
 * --slurm uses to know its jobs' workers */
/* hello.trainers (optional): the trainers the worker runs ("builtin" and
 * those its operator declared; absent: an older worker, "builtin" only) */
/* hello.secret, hello.instance (optional): the secret a welcome gave this
 * worker's name, and a random string of this worker process (a reconnect
 * of the same process replaces its stale connection; another process with
 * the same identity does not) */
static const field o_hello[] = {{"backends", K_BACKENDS}, {"slurm_job", K_STRING},
                                {"trainers", K_TRAINERS}, {"secret", K_STRING},
                                {"instance", K_STRING},   {NULL, 0}};

static const field *const type_fields[] = {
    [PROTO_HELLO] = f_hello,     [PROTO_HEARTBEAT] = f_heartbeat,   [PROTO_STARTED] = f_started,
    [PROTO_METRICS] = f_metrics, [PROTO_CHECKPOINT] = f_checkpoint, [PROTO_FINISHED] = f_finished,
    [PROTO_WELCOME] = f_welcome, [PROTO_ASSIGN] = f_assign,         [PROTO_CANCEL] = f_cancel,
    [PROTO_ACK] = f_ack,         [PROTO_ERROR] = f_error,           [PROTO_STOPPING] = f_stopping,
};

static const field *const type_optional[] = {
    [PROTO_HELLO] = o_hello,
    [PROTO_HEARTBEAT] = o_none,
    [PROTO_STARTED] = o_none,
    [PROTO_METRICS] = o_none,
    [PROTO_CHECKPOINT] = o_checkpoint,
    [PROTO_FINISHED] = o_finished,
    [PROTO_WELCOME] = o_welcome,
    [PROTO_ASSIGN] = o_assign,
    [PROTO_CANCEL] = o_none,
    [PROTO_ACK] = o_ack,
    [PROTO_ERROR] = o_none,
    [PROTO_STOPPING] = o_none,
};

int proto_row_read(const json_t *ev, proto_row *out, char *err, size_t errlen) {
  vctx c = {err, errlen, 0};
  if (err && errlen)
    err[0] = '\0';
  int line = row_read(ev, out);
  if (line)
    return line;
  check_row(&c, "$", ev);
  if (!c.failed) /* row_read and check_row disagree: a bug, but say what was refused */
    vfail(&c, "$: not a valid step or eval event");
  return 0;
}

int proto_metric_row(const json_t *row, ss_metric_row *out) {
  proto_row r;
  int line = row_read(row, &r);
  *out = r.m;
  return line;
}

/* A double read from a JSON integer back as that integer: exact, as the
 * line's was, up to 2^53; above, the integer nearest the double, which
 * reads back as the same double (what the scheduler stores). 2^63 itself
 * (the largest integer's double) is no int64. */
static json_int_t integral(double v) { return v >= 0x1p63 ? INT64_MAX : (json_int_t)v; }

json_t *proto_row_json(const proto_row *row) {
  json_t *o = json_object();
  int ok = !json_object_set_new(o, "event", json_string(row->line == SS_ML_EVAL ? "eval" : "step"));
  for (int i = 0; ok && i < SS_MCOL_N; i++) {
    if (!(row->present >> i & 1))
      continue;
    double v = row->m.v[i];
    json_t *j = isnan(v)                               ? json_null()
                : ss_metric_cols[i].kind == SS_MK_FLAG ? json_boolean(v != 0)
                : row->ints >> i & 1                   ? json_integer(integral(v))
                                                       : json_real(v);
    ok = !json_object_set_new(o, ss_metric_cols[i].name, j);
  }
  if (ok)
    return o;
  json_decref(o);
  return NULL;
}

proto_type proto_parse(const char *line, size_t len, json_t **msg, char *err, size_t errlen) {
  vctx c = {err, errlen, 0};
  if (msg)
    *msg = NULL;
  if (err && errlen)
    err[0] = '\0';
  if (len > PROTO_MAX_LINE) {
    vfail(&c, "$: line of %zu bytes exceeds the limit of %u", len, PROTO_MAX_LINE);
    return PROTO_INVALID;
  }
  json_error_t jerr;
  json_t *root = json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    vfail(&c, "$: invalid JSON at column %d: %s", jerr.column, jerr.text);
    return PROTO_INVALID;
  }
  proto_type t = PROTO_INVALID;
  if (!json_is_object(root)) {
    fail_type(&c, "$", "a message object", root);
    goto out;
  }
  json_t *tv = need(&c, root, "$", "type", "a message type string");
  if (!tv)
    goto out;
  const char *ts = json_string_value(tv);
  for (int i = PROTO_INVALID + 1; ts && i < NTYPES; i++)
    if (!strcmp(ts, type_names[i]))
      t = (proto_type)i;
  if (t == PROTO_INVALID) {
    fail_type(&c, "$.type",
              "one of hello, heartbeat, started, metrics, checkpoint, finished, stopping, "
              "welcome, assign, cancel, ack, error",
              tv);
    goto out;
  }
  check_fields(&c, "$", root, type_fields[t]);
  check_optional(&c, "$", root, type_optional[t]);
out:
  if (c.failed) {
    json_decref(root);
    return PROTO_INVALID;
  }
  if (msg)
    *msg = root;
  else
    json_decref(root);
  return t;
}

/* ---- encoding ----------------------------------------------------------- */

/* NULL when msg cannot be encoded (a NaN has no JSON form; Jansson refuses
 * it earlier) or when the line would exceed PROTO_MAX_LINE, which the peer
 * would reject: the caller must split or drop such a message. */
char *proto_encode(const json_t *msg, size_t *len) {
  char *s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!s)
    return NULL;
  size_t n = strlen(s);
  if (n > PROTO_MAX_LINE) {
    free(s);
    return NULL;
  }
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return NULL;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  if (len)
    *len = n + 1;
  return line;
}

/* The scheduler <-> worker wire protocol (docs/runtime.md): newline-
 * delimited JSON over TCP, one message per line, bounded length.
 *
 * proto_reader frames a byte stream into lines without ever holding more
 * than PROTO_MAX_LINE bytes of one line; proto_parse turns a line into a
 * validated message (Jansson object) or an error that names the JSON path
 * and what was expected. Both sides use these; neither trusts its peer. */
#ifndef SS_COMMON_PROTO_H
#define SS_COMMON_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metric_row.h"

#define PROTO_VERSION 1
#define PROTO_MAX_LINE (1u << 20)
/* the most trainers a worker offers (hello.trainers) */
#define PROTO_MAX_TRAINERS 16

typedef enum proto_type {
  PROTO_INVALID = 0,
  /* worker -> scheduler */
  PROTO_HELLO,
  PROTO_HEARTBEAT,
  PROTO_STARTED,
  PROTO_METRICS,
  PROTO_CHECKPOINT,
  PROTO_FINISHED,
  /* scheduler -> worker */
  PROTO_WELCOME,
  PROTO_ASSIGN,
  PROTO_CANCEL,
  PROTO_ACK,
  PROTO_ERROR,
  /* worker -> scheduler, added after the others (which keep their values):
   * the worker is stopping; its runs will checkpoint and be reported as
   * interrupted, and it takes no new work */
  PROTO_STOPPING
} proto_type;

const char *proto_type_name(proto_type t);

/* Line framing. Feed bytes as they arrive; each complete line is passed to
 * on_line (without the newline). A line longer than PROTO_MAX_LINE makes
 * proto_reader_feed return SS_ERANGE (the connection should be dropped). */
typedef struct proto_reader {
  char *buf;
  size_t len, cap;
} proto_reader;

void proto_reader_init(proto_reader *r);
void proto_reader_free(proto_reader *r);
int proto_reader_feed(proto_reader *r, const char *data, size_t n,
                      int (*on_line)(void *ud, const char *line, size_t len), void *ud);

/* Parses and validates one line: the object's "type" and every field that
 * type requires, with its JSON type. Returns the type and sets *msg (a new
 * reference), or PROTO_INVALID with a message such as
 * "$.rows[3].step: expected an integer, found \"x\"" in err. */
proto_type proto_parse(const char *line, size_t len, json_t **msg, char *err, size_t errlen);

/* A step or eval row read into out by the metric table
 * (common/metric_row.h), in the same pass that validates it: SS_ML_STEP or
 * SS_ML_EVAL, or 0 when proto_row_read would refuse it. Absent and null
 * optional columns read as NAN. */
int proto_metric_row(const json_t *row, ss_metric_row *out);

/* A step or eval row as a trainer's line gave it: the values (NAN where
 * absent or null) and what a metrics message written from them needs to
 * say the same thing (which of the line's columns it carried, null ones
 * included, and which as JSON integers). The worker keeps its batch so. */
typedef struct proto_row {
  ss_metric_row m;
  int line;         /* SS_ML_STEP or SS_ML_EVAL */
  uint32_t present; /* bit i: the line carried column i (null included) */
  uint32_t ints;    /* bit i: as a JSON integer */
} proto_row;

/* A trainer's step or eval event read into out in the pass that validates
 * it: SS_ML_STEP or SS_ML_EVAL, or 0 with what is wrong ("$.tokens:
 * expected ...") in err. Keys outside the metric table are not read. */
int proto_row_read(const json_t *ev, proto_row *out, char *err, size_t errlen);

/* The row as a metrics message carries it: "event", then the columns its
 * line carried in the table's order, null as null, an integer as an
 * integer; valid by construction (no nesting, every value checked when it
 * was read). A new reference; NULL when out of memory. */
json_t *proto_row_json(const proto_row *row);

/* Serialises msg as one line (compact JSON + '\n'); malloc'd, *len set. */
char *proto_encode(const json_t *msg, size_t *len);

#endif

/* What a trainer reports, turned into messages (report.h): its config
 * event into started, checkpoint events into checkpoint, step and eval rows
 * into the outbox, and at its end one finished message (exit code, signal,
 * error, the tail of its log). */
#include "worker/report.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/events.h"
#include "common/proto.h"
#include "worker/conn.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/outbox.h"
#include "worker/run.h"
#include "worker/trainers.h"
#include "worker/wbuf.h"

#define LOG_TAIL_BYTES 4096

/* Sends msg (consumed) and keeps it in *slot, instead of the one before, to
 * be resent after a reconnect. 0 when it fails validation (logged). */
static int send_latest(wrk__run *r, wrk__wbuf **slot, json_t *msg, const char *event) {
  char err[512];
  wrk__wbuf *b = wrk__wbuf_encode(msg, err, sizeof err);
  json_decref(msg);
  if (!b) {
    wrk__log("run %" PRId64 ": cannot report the trainer's %s event: %s", r->id, event, err);
    return 0;
  }
  wrk__wbuf_unref(*slot);
  *slot = b;
  wrk__send(r->w, b);
  return 1;
}

/* A short, printable rendering of a trainer's line for messages. */
static void quote_line(const char *line, size_t len, char *out, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < len && k + 5 < n; i++) {
    unsigned char ch = (unsigned char)line[i];
    out[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    if (i == 79 && len > 80) {
      memcpy(out + k, "...", 3);
      k += 3;
      break;
    }
  }
  out[k] = 0;
}

/* A done event's figures the scheduler stores: final_val_loss > 0 and
 * tokens >= 0, numbers; NULL when it has them, else what is wrong. */
static const char *done_problem(const json_t *ev) {
  json_t *loss = json_object_get(ev, "final_val_loss"), *tokens = json_object_get(ev, "tokens");
  if (!json_is_number(loss))
    return "\"done\" without final_val_loss (a number, the final validation loss in nats per "
           "token)";
  if (!(json_number_value(loss) > 0))
    return "\"done\" with final_val_loss <= 0 (a loss in nats per token is positive)";
  if (!json_is_number(tokens) || json_number_value(tokens) < 0)
    return "\"done\" without tokens (a number >= 0, the tokens trained)";
  return NULL;
}

/* A valid event of the trainer's into what it makes: a row in the outbox
 * (row: a step or eval line as read), a started or checkpoint message, the
 * done object or the error kept for the finished message. */
static void handle_event(wrk__run *r, const char *event, json_t *ev, const proto_row *row) {
  if (row) {
    wrk__outbox_add_row(r, row);
  } else if (!strcmp(event, "config")) {
    json_t *msg = wrk__run_header(r, "started");
    json_object_set(msg, "config", ev);
    send_latest(r, &r->started, msg, event);
  } else if (!strcmp(event, "checkpoint") && json_is_true(json_object_get(ev, "branch"))) {
    /* a trunk's branch point (docs/sweeps.md, "WSD branches"): not the
     * run's own latest checkpoint, its resume point stays */
    json_t *msg = wrk__run_header(r, "checkpoint");
    json_object_set(msg, "step", json_object_get(ev, "step"));
    json_object_set(msg, "path", json_object_get(ev, "path"));
    json_object_set_new(msg, "branch", json_true());
    if (send_latest(r, &r->branch, msg, event))
      wrk__log("run %" PRId64 " attempt %" PRId64 ": branch point at step %" JSON_INTEGER_FORMAT,
               r->id, r->attempt, json_integer_value(json_object_get(ev, "step")));
  } else if (!strcmp(event, "checkpoint")) {
    /* the rows up to the checkpoint go first */
    wrk__outbox_flush(r);
    json_t *msg = wrk__run_header(r, "checkpoint");
    json_object_set(msg, "step", json_object_get(ev, "step"));
    json_object_set(msg, "path", json_object_get(ev, "path"));
    json_t *stepj = json_object_get(ev, "step");
    if (json_is_integer(stepj) && json_integer_value(stepj) >= 0)
      r->ckpt_step = json_integer_value(stepj);
    if (send_latest(r, &r->ckpt, msg, event))
      wrk__log("run %" PRId64 " attempt %" PRId64 ": checkpoint at step %" JSON_INTEGER_FORMAT,
               r->id, r->attempt, json_integer_value(json_object_get(ev, "step")));
  } else if (!strcmp(event, "done")) {
    json_decref(r->done);
    r->done = json_incref(ev);
  } else if (!strcmp(event, "error")) {
    const char *m = json_string_value(json_object_get(ev, "message"));
    free(r->error);
    r->error = strdup(m ? m : "the trainer reported an error without a message");
  }
}

int wrk__on_trainer_line(void *ud, const char *line, size_t len) {
  wrk__run *r = ud;
  if (r->broken)
    return 0;
  r->lines++;
  r->last_line_ms = uv_now(&r->w->loop);
  json_error_t jerr;
  json_t *ev = json_loadb(line, len, 0, &jerr);
  const char *event = json_is_object(ev) ? json_string_value(json_object_get(ev, "event")) : NULL;
  char q[128], why[512];
  if (!event) {
    quote_line(line, len, q, sizeof q);
    if (!ev)
      wrk__run_broke_contract(r, "stdout line %" PRId64 " is not JSON (%s at column %d): '%s'",
                              r->lines, jerr.text, jerr.column, q);
    else
      wrk__run_broke_contract(r,
                              "stdout line %" PRId64 " is not an object with an \"event\" string: "
                              "'%s'",
                              r->lines, q);
    json_decref(ev);
    return 0;
  }
  int known = 0; /* the trainer's events (common/events.h) */
  for (int i = 0; i < TRN_EV_N; i++)
    known |= !strcmp(event, trn_event_names[i]);
  const char *bad = NULL;
  proto_row row; /* a step or eval line, read once into its C values */
  int is_row = !strcmp(event, "step") || !strcmp(event, "eval");
  if (!known) {
    int k = snprintf(why, sizeof why, "unknown event \"%.40s\" (expected ", event);
    for (int i = 0; i < TRN_EV_N && k > 0 && (size_t)k < sizeof why; i++) {
      const char *sep = i + 1 == TRN_EV_N ? ")" : i + 2 == TRN_EV_N ? " or " : ", ";
      k += snprintf(why + k, sizeof why - (size_t)k, "%s%s", trn_event_names[i], sep);
    }
    bad = why;
  } else if (is_row && !proto_row_read(ev, &row, why, sizeof why)) {
    bad = why;
  } else if (!strcmp(event, "done")) {
    bad = done_problem(ev);
  } else if (!strcmp(event, "checkpoint") &&
             (!json_is_integer(json_object_get(ev, "step")) ||
              json_integer_value(json_object_get(ev, "step")) < 0 ||
              !json_is_string(json_object_get(ev, "path")))) {
    bad = "\"checkpoint\" without step (an integer >= 0) and path (a string)";
  }
  if (bad) {
    quote_line(line, len, q, sizeof q);
    wrk__run_broke_contract(r, "stdout line %" PRId64 ": %s: '%s'", r->lines, bad, q);
    json_decref(ev);
    return 0;
  }
  handle_event(r, event, ev, is_row ? &row : NULL);
  json_decref(ev);
  return 0;
}

static char *log_tail(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return strdup("");
  struct stat st;
  char buf[LOG_TAIL_BYTES];
  ssize_t n = 0;
  if (!fstat(fd, &st)) {
    off_t off = st.st_size > LOG_TAIL_BYTES ? st.st_size - LOG_TAIL_BYTES : 0;
    n = pread(fd, buf, sizeof buf, off);
  }
  close(fd);
  return wrk__utf8_clean(buf, n > 0 ? (size_t)n : 0);
}

/* A trainer that exited 0 without a done event broke the contract (unless
 * it is a part without rank 0 of a run spread over workers, which prints
 * no done). */
static void check_done(wrk__run *r, int64_t code) {
  char part[4096];
  int nhere = wrk__run_dist_ranks(r, part, sizeof part);
  int reports = nhere == 0 || !strcmp(part, "0") || !strncmp(part, "0,", 2);
  if (r->error || r->broken || code != 0 || r->done || !reports || r->pid <= 0)
    return;
  char msg[512];
  snprintf(msg, sizeof msg,
           "run %" PRId64 " attempt %" PRId64 ": the trainer \"%s\" broke the trainer "
           "contract (docs/trainers.md): it exited with code 0 without a \"done\" event",
           r->id, r->attempt, wrk__run_trainer(r));
  wrk__log("%s; the attempt fails", msg);
  r->error = strdup(msg);
  r->broken = 1;
}

/* No error event (a config the trainer refused, a crash): how it ended,
 * and the last line of its stderr (in tail) says why. */
static void error_from_tail(wrk__run *r, const char *tail) {
  char m[1024];
  const char *last = NULL;
  size_t llen = 0;
  for (const char *p = tail ? tail : ""; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0 && strncmp(p, "---- worker:", 12)) {
      last = p;
      llen = n;
    }
    p += n + (e ? 1 : 0);
  }
  int k = r->term_signal
              ? snprintf(m, sizeof m, "the trainer was killed by signal %d (%s)", r->term_signal,
                         strsignal(r->term_signal))
              : snprintf(m, sizeof m, "the trainer exited with code %" PRId64, r->exit_status);
  if (last && k > 0 && (size_t)k < sizeof m)
    snprintf(m + k, sizeof m - (size_t)k, ": %.*s", (int)(llen > 800 ? 800 : llen), last);
  r->error = strdup(m);
}

char *wrk__report_settle(wrk__run *r, int64_t code) {
  check_done(r, code);
  char *tail = log_tail(r->log_path);
  if (!r->error && code != 0)
    error_from_tail(r, tail);
  return tail;
}

static json_t *finished_msg(const wrk__run *r, int64_t code, int interrupted, int fenced,
                            const char *tail) {
  json_t *msg = wrk__run_header(r, "finished");
  json_object_set_new(msg, "seq", json_integer(r->next_seq));
  json_object_set_new(msg, "interrupted", json_boolean(interrupted));
  if (fenced)
    json_object_set_new(msg, "fenced", json_true());
  if (r->ckpt_step >= 0)
    json_object_set_new(msg, "checkpoint_step", json_integer(r->ckpt_step));
  json_object_set_new(msg, "exit_code", json_integer(code));
  json_object_set_new(msg, "signal", json_integer(r->term_signal));
  json_object_set(msg, "done", r->done && !r->broken ? r->done : json_null());
  json_object_set_new(msg, "error", r->error ? json_string(r->error) : json_null());
  json_object_set_new(msg, "log_tail", json_string(tail ? tail : ""));
  return msg;
}

/* "run 3 attempt 1: exited with code 0", with why it is not a failure when
 * it is interrupted */
static void log_end(const wrk__run *r, int interrupted, int fenced) {
  char note[160] = "";
  if (interrupted && fenced)
    snprintf(note, sizeof note, "; fenced: reported as interrupted, not failed");
  else if (interrupted && r->ckpt_step >= 0)
    snprintf(note, sizeof note,
             "; interrupted after its checkpoint at step %" PRId64
             ": reported as interrupted, not failed",
             r->ckpt_step);
  else if (interrupted)
    snprintf(note, sizeof note, "; interrupted: reported as interrupted, not failed");
  if (r->term_signal)
    wrk__log("run %" PRId64 " attempt %" PRId64 ": killed by signal %d%s", r->id, r->attempt,
             r->term_signal, note);
  else
    wrk__log("run %" PRId64 " attempt %" PRId64 ": exited with code %" PRId64 "%s", r->id,
             r->attempt, r->exit_status, note);
}

int wrk__report_finished(wrk__run *r, int64_t code, int interrupted, int fenced, char *tail) {
  json_t *msg = finished_msg(r, code, interrupted, fenced, tail);
  free(tail);
  char err[512];
  wrk__wbuf *b = wrk__wbuf_encode(msg, err, sizeof err);
  if (!b) {
    /* a malformed done object or error text: report without them */
    wrk__log("run %" PRId64 ": %s; sending finished without the done object", r->id, err);
    json_object_set_new(msg, "done", json_null());
    json_object_set_new(msg, "error", json_string("the trainer's final events were malformed"));
    b = wrk__wbuf_encode(msg, err, sizeof err);
  }
  json_decref(msg);
  int queued = b != NULL;
  if (b) {
    r->finished_seq = r->next_seq++;
    wrk__outbox_push(r, r->finished_seq, b);
    wrk__wbuf_unref(b);
  } else {
    wrk__log("BUG: run %" PRId64 ": cannot encode the finished message: %s", r->id, err);
  }
  log_end(r, interrupted, fenced);
  return queued;
}

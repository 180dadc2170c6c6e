/* The trainer's output lines, written from one description of the events
 * (common/events.h): trn_emit formats any event. Internal to trainer/. */
#ifndef SS_TRAINER_EMIT_H
#define SS_TRAINER_EMIT_H

#include <stdio.h>

#include "common/events.h"

struct cJSON;

/* One field's value. set 0 leaves the field out; TRN_VAL_NULL writes null
 * (a skipped fp16 step's grad_norm). Which member is read follows the
 * field's fmt: i for an "ll" format and TRN_BOOL, d for the other printf
 * formats and TRN_NUM, s for TRN_STR, j for TRN_JSON (borrowed). */
typedef struct trn_val {
  int set;
  long long i;
  double d;
  const char *s;
  const struct cJSON *j;
} trn_val;

#define TRN_VAL_NULL 2

static inline trn_val trn_i(long long i) { return (trn_val){.set = 1, .i = i}; }
static inline trn_val trn_d(double d) { return (trn_val){.set = 1, .d = d}; }
static inline trn_val trn_s(const char *s) { return (trn_val){.set = 1, .s = s}; }
static inline trn_val trn_b(int b) { return (trn_val){.set = 1, .i = b}; }
static inline trn_val trn_j(const struct cJSON *j) { return (trn_val){.set = 1, .j = j}; }
static inline trn_val trn_null(void) { return (trn_val){.set = TRN_VAL_NULL}; }

/* trn_ev_<name>: one trn_val per field of the event, in its order */
#define TRN_EV_MEMBER(name, fmt) trn_val name;
#define TRN_EV_MCOL_MEMBER(name, kind, line, required, fmt) trn_val name;
#define TRN_EVENT(name, fields)  \
  typedef struct trn_ev_##name { \
    fields                       \
  } trn_ev_##name;
TRN_EVENTS(TRN_EV_MEMBER, TRN_EV_MCOL_MEMBER)
#undef TRN_EVENT

/* Writes event ev, whose fields (a trn_ev_<name>) are at fields, as one
 * line to out and flushes it. */
void trn_emit(FILE *out, trn_event ev, const void *fields);

/* TRN_EMIT(out, checkpoint, .step = trn_i(7), ...) */
#define TRN_EMIT(out, name, ...) trn_emit(out, TRN_EV_##name, &(trn_ev_##name){__VA_ARGS__})

#endif

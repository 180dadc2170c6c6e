/* The writer of the trainer's events (emit.h). Numbers go through printf
 * with the event table's formats, so that a line is the same bytes from
 * run to run and %.17g round-trips every double; strings and the config's
 * JSON go through cJSON, which has always written them. */
#include "trainer/emit.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef struct field {
  const char *name, *fmt;
  int line; /* a metric column's trainer line (SS_ML_*), else 0: every event of its own */
} field;

#define FIELD(name, fmt) {#name, fmt, 0},
#define MCOL(name, kind, line, required, fmt) {#name, fmt, line},
#define TRN_EVENT(name, fields)                                                                   \
  static const field fields_##name[] = {fields};                                                  \
  _Static_assert(sizeof(trn_ev_##name) == sizeof fields_##name / sizeof(field) * sizeof(trn_val), \
                 "trn_ev_" #name " is an array of trn_val");
TRN_EVENTS(FIELD, MCOL)
#undef TRN_EVENT

static const struct {
  const field *f;
  size_t n;
} events[TRN_EV_N] = {
#define TRN_EVENT(name, fields) {fields_##name, sizeof fields_##name / sizeof(field)},
    TRN_EVENTS(_, _)
#undef TRN_EVENT
};

/* a value cJSON prints (TRN_STR, TRN_NUM, TRN_JSON) */
static void put_cjson(FILE *out, const char *fmt, const trn_val *v) {
  cJSON *made = fmt[0] == 's'   ? cJSON_CreateString(v->s)
                : fmt[0] == 'n' ? cJSON_CreateNumber(v->d)
                                : NULL;
  char *s = cJSON_PrintUnformatted(made ? made : v->j);
  fputs(s ? s : "null", out);
  free(s);
  cJSON_Delete(made);
}

static void put_value(FILE *out, const char *fmt, const trn_val *v) {
  if (v->set == TRN_VAL_NULL)
    fputs("null", out);
  else if (fmt[0] == '%' && strstr(fmt, "ll"))
    fprintf(out, fmt, v->i);
  else if (fmt[0] == '%')
    fprintf(out, fmt, v->d);
  else if (fmt[0] == 'b')
    fputs(v->i ? "true" : "false", out);
  else
    put_cjson(out, fmt, v);
}

void trn_emit(FILE *out, trn_event ev, const void *fields) {
  const trn_val *v = fields;
  int line = ev == TRN_EV_step ? SS_ML_STEP : ev == TRN_EV_eval ? SS_ML_EVAL : 0;
  fprintf(out, "{\"event\":\"%s\"", trn_event_names[ev]);
  for (size_t i = 0; i < events[ev].n; i++) {
    const field *f = &events[ev].f[i];
    if (!v[i].set || (f->line && !(f->line & line)))
      continue;
    fprintf(out, ",\"%s\":", f->name);
    put_value(out, f->fmt, &v[i]);
  }
  fputs("}\n", out);
  fflush(out);
}

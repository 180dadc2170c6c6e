/* The scheduler's event stream (events.h). */
#include "scheduler/events.h"

#include <stdlib.h>
#include <string.h>

void sched__events_emit(sched__events *ev, const char *name, json_t *data) {
  char *text = json_dumps(data, JSON_COMPACT);
  json_decref(data);
  if (!text)
    return;
  uint64_t id = ++ev->next_id;
  sched__event *e = &ev->ring[id % SCHED__EVENT_RING];
  free(e->name);
  free(e->data);
  e->id = id;
  e->name = strdup(name);
  e->data = text;
  for (sched__sse *c = ev->sse; c; c = c->next)
    http_sse_send(c->stream, id, name, text);
}

void sched__events_free(sched__events *ev) {
  for (int i = 0; i < SCHED__EVENT_RING; i++) {
    free(ev->ring[i].name);
    free(ev->ring[i].data);
    ev->ring[i].name = ev->ring[i].data = NULL;
  }
}

/* The scheduler's event stream (internal): every event is kept in a ring
 * for resumption (SSE's Last-Event-ID) and sent to every open stream. */
#ifndef SS_SCHEDULER_EVENTS_H
#define SS_SCHEDULER_EVENTS_H

#include <jansson.h>
#include <stdint.h>

#include "http/http.h"

#define SCHED__EVENT_RING 1024

/* A recent event kept for SSE resumption (Last-Event-ID). */
typedef struct sched__event {
  uint64_t id;
  char *name;
  char *data;
} sched__event;

typedef struct sched__sse {
  http_sse *stream;
  int64_t user_id; /* who opened it (0: no token, under open reads) */
  struct sched__sse *next;
} sched__sse;

/* Zeroed is empty. The streams belong to the HTTP server (the API adds and
 * removes them); the ring's texts are freed by sched__events_free. */
typedef struct sched__events {
  sched__sse *sse;
  sched__event ring[SCHED__EVENT_RING]; /* event id % SCHED__EVENT_RING */
  uint64_t next_id;                     /* the newest event's id (0: none yet) */
} sched__events;

/* Numbers the event, keeps it in the ring and sends it to every stream;
 * steals data. */
void sched__events_emit(sched__events *ev, const char *name, json_t *data);

/* Frees the ring's texts. */
void sched__events_free(sched__events *ev);

#endif

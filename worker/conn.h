/* The connection to the scheduler (conn.c): resolve, connect (each address
 * in turn), hello and welcome, reading and dispatching its messages,
 * writing, and reconnecting forever with exponential backoff. */
#ifndef SS_WORKER_CONN_H
#define SS_WORKER_CONN_H

#include <jansson.h>
#include <uv.h>

#include "common/proto.h"

typedef struct wrk__worker wrk__worker;
typedef struct wrk__wbuf wrk__wbuf;

/* Heap-allocated by conn.c, freed in its TCP handle's close callback. */
typedef struct wrk__conn {
  uv_tcp_t tcp;
  uv_connect_t creq;
  wrk__worker *w;
  proto_reader rd;
  int connected; /* TCP established */
  int welcomed;
  int closing;
  char rbuf[64 << 10];
} wrk__conn;

/* A handler of one scheduler message type; m is valid (proto_parse). */
typedef void wrk__handler(wrk__conn *c, json_t *m);

/* Resolves and connects unless stopping or already connecting. */
void wrk__connect_start(wrk__worker *w);
/* Closes c (NULL: nothing; a reason is logged when given); its close
 * callback reconnects or carries on the shutdown. */
void wrk__conn_close(wrk__conn *c, const char *why);
/* Writes b on c now (before a welcome too: the hello). */
void wrk__conn_write(wrk__conn *c, wrk__wbuf *b);
/* Sends when there is a welcomed connection; otherwise the message waits in
 * its run (for the kinds that are kept) or is dropped (heartbeats). */
void wrk__send(wrk__worker *w, wrk__wbuf *b);
/* Encodes and sends msg (a message that fails validation is a bug, logged). */
void wrk__send_json(wrk__worker *w, json_t *msg);

#endif

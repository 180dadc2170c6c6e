/* A small HTTP/1.1 server on libuv, parsing with llhttp: the scheduler's
 * JSON API, its static page and Server-Sent Events.
 *
 * Limits (http_limits) bound the header size, the body size (413), the
 * number of connections (with a reserve for privileged requests), event
 * streams per address and in total, what a stream may queue, and
 * idle/slow-client time, so no client can hold the loop or its slots.
 * Keep-alive is supported; one request at a time per connection.
 *
 * Handlers may answer later (after a database query): a request stays
 * valid until it is answered with one http_respond* call, even if its
 * client went away meanwhile (then the answer is dropped). Each request has
 * an arena (http_alloc) freed in one go after the answer. */
#ifndef SS_HTTP_HTTP_H
#define SS_HTTP_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_server http_server;
typedef struct http_request http_request;
typedef struct http_sse http_sse;

/* Zero fields take the defaults below (http_server_start). Connection
 * slots: max_connections is a hard ceiling; a connection accepted at the
 * ceiling first evicts a connection that holds a slot for nothing (one
 * lingering after its last answer, then the longest idle keep-alive or new
 * connection, then the oldest unfinished request); with none to evict it
 * is closed at once. Once more than max_connections - reserve_connections
 * are open, only requests the reserved hook admits (http_hooks) are served;
 * the others get 503 with Retry-After. Event streams are limited per client
 * address and in total (429 and 503 with Retry-After past them). */
typedef struct http_limits {
  size_t max_header_bytes;  /* 16 KiB */
  size_t max_body_bytes;    /* 1 MiB: larger bodies get 413 */
  int max_connections;      /* 1024: the hard ceiling of open connections */
  int idle_timeout_ms;      /* 30 s: a keep-alive connection idle this long is closed */
  int header_timeout_ms;    /* 10 s (at most idle_timeout_ms): a new connection, or a
                             * keep-alive one from its request's first byte, that has
                             * not sent a complete request by then is closed (408) */
  int reserve_connections;  /* max_connections / 16: the last slots, kept for requests
                             * the reserved hook admits (none without a hook) */
  int max_streams;          /* max_connections / 2: event streams in total */
  int max_streams_per_addr; /* 8: event streams from one client address */
  size_t stream_max_queue;  /* 256 KiB: a stream with more queued (beyond the kernel's
                             * send buffer, itself bounded) for stream_stall_ms is
                             * closed as stalled; with 4 times this, at once */
  int stream_stall_ms;      /* 5 s */
  size_t streams_max_queue; /* 32 MiB: over this, queued across all streams, the
                             * stream furthest behind is closed */
} http_limits;

void http_limits_default(http_limits *l);

/* Called once per complete request. */
typedef void (*http_handler)(http_request *req, void *ud);

/* What the server asks its owner (http_server_hooks). reserved: 1 when a
 * request (its head is complete; no body yet) may use the reserved slots
 * (say, it carries the right token, or it is a health check). log: one line
 * about the server's own decisions (a stalled stream closed, requests
 * refused for want of slots; at most one line per 10 s for refusals); NULL
 * writes it to stderr. */
typedef struct http_hooks {
  int (*reserved)(http_request *r, void *ud);
  void (*log)(const char *line, void *ud);
  void *ud;
} http_hooks;

/* Creates a server bound to host:port (port 0: any free port; the bound
 * port is returned in *port). Returns NULL with a message on failure.
 * SIGPIPE, if still at its default action, is ignored from then on. */
http_server *http_server_start(uv_loop_t *loop, const char *host, int port,
                               const http_limits *limits, http_handler handler, void *ud,
                               int *bound_port, char *err, size_t errlen);

/* Sets the hooks (copied); call it before the loop runs. */
void http_server_hooks(http_server *s, const http_hooks *h);

/* Stops accepting, closes every connection (SSE streams included); cb runs
 * when every handle is closed. Requests not yet answered are answered 503.
 * Such a request stays valid until the handler answers it (the answer is
 * then dropped). The server is freed when cb returns. */
void http_server_stop(http_server *s, void (*cb)(void *ud), void *ud);

/* Request accessors (valid until the answer). */
const char *http_method(const http_request *r); /* "GET", "POST", ... */
const char *http_path(const http_request *r);   /* decoded path, no query */
const char *http_query(const http_request *r);  /* raw query string or "" */
/* Finds the first NAME=VALUE of the query: 1 with *value decoded ('+' is a
 * space; "" for a bare NAME) in request memory, 0 when absent (*value NULL),
 * -1 when the value's percent-encoding is invalid or decodes to NUL. */
int http_query_param(http_request *r, const char *name, const char **value);
const char *http_header(const http_request *r, const char *name); /* case-insensitive; NULL */
const char *http_body(const http_request *r, size_t *len);
const char *http_peer(const http_request *r); /* "ip:port" */
uint64_t http_request_start_ns(const http_request *r);
/* Called once with the answer's status and body when the handler answers
 * r (http_respond and the calls built on it), even when the client has
 * gone; r's accessors are still valid then. One per request (the last set
 * wins); the scheduler writes its audit trail with it. */
typedef void (*http_answer_cb)(http_request *r, int status, const char *body, size_t len,
                               void *ud);
void http_on_answer(http_request *r, http_answer_cb cb, void *ud);

/* Memory that lives as long as the request. */
void *http_alloc(http_request *r, size_t n);

/* Answers. Headers is "" or extra header lines each ending in "\r\n". */
void http_respond(http_request *r, int status, const char *content_type, const char *body,
                  size_t len, const char *headers);
void http_respond_json(http_request *r, int status, const char *json);
/* {"error": {"message": msg, "path": path}} (path may be NULL) */
void http_respond_error(http_request *r, int status, const char *msg, const char *path);

/* Turns the request into an SSE stream (200, text/event-stream); the
 * request is answered and the stream lives until the client goes or the
 * server stops. http_sse_send writes "id: ID\nevent: EV\ndata: DATA\n\n".
 * Returns NULL (the request is answered, or freed when the client has
 * already gone) when the client has gone, or when the stream limits of
 * http_limits are reached: 429 when its address has max_streams_per_addr
 * streams, 503 when the server has max_streams; both with Retry-After and a
 * JSON error. http_sse_send returns 0, or a negative libuv error: UV_EPIPE
 * once the stream is closing; UV_ENOBUFS when the client fell too far
 * behind (stream_max_queue; the stream is closed). id 0 writes no id line;
 * each line of data becomes a "data:" line. A ": keepalive" comment goes
 * out every 15 s. */
http_sse *http_sse_start(http_request *r);
int http_sse_send(http_sse *s, uint64_t id, const char *event, const char *data);
/* Bytes queued for the stream that the kernel has not taken yet. */
size_t http_sse_queued(const http_sse *s);
/* The Last-Event-ID the client sent when it opened the stream (0: none). */
uint64_t http_sse_last_id(const http_sse *s);
/* Closes the stream (its on_close callback follows, as when its client
 * goes); the scheduler closes a revoked user's streams so. */
void http_sse_close(http_sse *s);
/* Called when the stream's client goes away; set by the owner. The stream
 * is freed when cb returns. */
void http_sse_on_close(http_sse *s, void (*cb)(http_sse *s, void *ud), void *ud);

/* Statistics for /metrics. */
typedef struct http_stats {
  uint64_t requests, responses_4xx, responses_5xx;
  int connections, sse_streams;
  uint64_t refused_reserve; /* 503: only the reserved slots were left; or closed at
                             * once at the ceiling, with no slot to evict */
  uint64_t refused_streams; /* 429/503: over a stream limit */
  uint64_t evicted;         /* connections closed to make room for a new one */
  uint64_t stalled_streams; /* streams closed because their reader fell behind */
} http_stats;
void http_server_stats(const http_server *s, http_stats *out);

#endif

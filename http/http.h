/* A small HTTP/1.1 server on libuv, parsing with llhttp: the scheduler's
 * JSON API, its static page and Server-Sent Events.
 *
 * Limits (http_limits) bound the header size, the body size (413), the
 * number of connections and idle/slow-client time, so no client can hold
 * the loop. Keep-alive is supported; one request at a time per connection.
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

typedef struct http_limits {
  size_t max_header_bytes; /* 16 KiB */
  size_t max_body_bytes;   /* 1 MiB: larger bodies get 413 */
  int max_connections;     /* 1024: further connections are closed at once */
  int idle_timeout_ms;     /* 30 s without a complete request: closed */
} http_limits;

void http_limits_default(http_limits *l);

/* Called once per complete request. */
typedef void (*http_handler)(http_request *req, void *ud);

/* Creates a server bound to host:port (port 0: any free port; the bound
 * port is returned in *port). Returns NULL with a message on failure.
 * SIGPIPE, if still at its default action, is ignored from then on. */
http_server *http_server_start(uv_loop_t *loop, const char *host, int port,
                               const http_limits *limits, http_handler handler, void *ud,
                               int *bound_port, char *err, size_t errlen);

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
 * Returns NULL (the request is freed) when the client has already gone.
 * http_sse_send returns 0, or a negative libuv error: UV_EPIPE once the
 * stream is closing; UV_ENOBUFS when the client fell 4 MiB behind (the
 * stream is closed). id 0 writes no id line; each line of data becomes a
 * "data:" line. A ": keepalive" comment goes out every 15 s. */
http_sse *http_sse_start(http_request *r);
int http_sse_send(http_sse *s, uint64_t id, const char *event, const char *data);
/* The Last-Event-ID the client sent when it opened the stream (0: none). */
uint64_t http_sse_last_id(const http_sse *s);
/* Called when the stream's client goes away; set by the owner. The stream
 * is freed when cb returns. */
void http_sse_on_close(http_sse *s, void (*cb)(http_sse *s, void *ud), void *ud);

/* Statistics for /metrics. */
typedef struct http_stats {
  uint64_t requests, responses_4xx, responses_5xx;
  int connections, sse_streams;
} http_stats;
void http_server_stats(const http_server *s, http_stats *out);

#endif

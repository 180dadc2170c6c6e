/* What the files of http/ share (see http.h for the public contract).
 *
 *   server.c  — listening, limits, stop, statistics
 *   conn.c    — a connection's lifecycle: accept, read, buffer, write,
 *               drain, linger, close, its timer
 *   parse.c   — llhttp callbacks and the checks on a request's head
 *   request.c — requests: target, headers, query parameters, accessors
 *   arena.c   — the per-request allocator and growable buffers
 *   respond.c — status lines, answers, JSON error documents
 *   sse.c     — Server-Sent Event streams
 *
 * A connection is a small state machine:
 *   READ  — parsing a request (or idle between requests); the timer bounds
 *           the time to a complete request from the accept or from a
 *           keep-alive request's first byte (header timeout: slow loris),
 *           and the idle time between keep-alive requests (idle timeout).
 *   BUSY  — a complete request is with the handler; llhttp is paused and
 *           further bytes (a pipelined request) are buffered, bounded.
 *   SSE   — the connection is an event stream; input is discarded; the
 *           timer runs while the queue is over the bound (stalled reader).
 *   DRAIN — a last answer is queued; once written the socket is shut down.
 *   LINGER— shut down; input is discarded until EOF or a short timer, so
 *           that unread input does not turn the close into a reset that
 *           would destroy the answer before the client reads it.
 * llhttp is paused twice per request: after the head (to check the head
 * size, the URL and Content-Length before any body is read) and after the
 * message (one request at a time).
 *
 * Slots: n_conns - n_closing connections count against max_connections;
 * at the ceiling an accept evicts a lingering or idle one (conn.c); past
 * max_connections - reserve_connections only requests the reserved hook
 * admits are served (parse.c); stream limits and queues are sse.c's.
 *
 * Memory: each connection is one allocation holding its libuv handles and
 * freed in the last close callback. Each request is one allocation whose
 * tail is the first block of its arena; a request whose client has gone is
 * detached from its connection and freed by the handler's answer.
 *
 * Only http/ includes llhttp.h (through this header). */
#ifndef SS_HTTP_INTERNAL_H
#define SS_HTTP_INTERNAL_H

#include <arpa/inet.h>
#include <llhttp.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

enum {
  HTTP_READ_BUF = 64 * 1024,     /* one read; shared by all connections */
  HTTP_IN_HIGH = 64 * 1024,      /* buffered pipelined input: stop reading */
  HTTP_WRITE_HIGH = 1024 * 1024, /* queued answers: stop parsing */
  HTTP_SSE_SNDBUF = 64 * 1024,   /* a stream's kernel send buffer (SO_SNDBUF) */
  HTTP_SSE_HARD_FACTOR = 4,      /* this many times stream_max_queue: closed at once */
  HTTP_REFUSAL_LOG_MS = 10000,   /* refusals are logged at most this often */
  HTTP_SSE_KEEPALIVE_MS = 15000, /* ": keepalive" comment period */
  HTTP_LINGER_MS = 2000,         /* input drained after a closing answer */
  HTTP_ARENA_FIRST = 2048,       /* arena bytes inside the request allocation */
  HTTP_ARENA_BLOCK = 16 * 1024,  /* further arena blocks */
};

enum { CONN_READ, CONN_BUSY, CONN_SSE, CONN_DRAIN, CONN_LINGER };
enum { PAUSE_NONE, PAUSE_HEAD, PAUSE_DONE };

typedef struct http_conn http_conn;

struct http_sse {
  http_conn *conn;
  uint64_t last_id;
  void (*on_close)(http_sse *s, void *ud);
  void *ud;
};

typedef struct http_kv {
  const char *name, *value;
} http_kv;

typedef struct http_block {
  struct http_block *next;
  size_t used, cap;
  max_align_t data[];
} http_block;

struct http_request {
  http_conn *conn;    /* NULL once the client has gone or the server stopped */
  const char *method; /* static (llhttp) */
  char *path, *query; /* arena */
  char *peer;         /* arena */
  char *head;         /* "url\0name\0value\0..." as parsed (malloc) */
  size_t head_len, head_cap;
  int n_fields;     /* header fields seen in head */
  http_kv *headers; /* arena, n_headers entries, built after the head */
  int n_headers;
  char *body; /* malloc, NUL-terminated */
  size_t body_len, body_cap;
  uint64_t start_ns;
  int is_head, keep_alive, http10, dispatched;
  http_answer_cb on_answer; /* http_on_answer (NULL: none) */
  void *on_answer_ud;
  http_block *blocks; /* arena blocks after the first */
  size_t arena_used;
  max_align_t arena[HTTP_ARENA_FIRST / sizeof(max_align_t)];
};

struct http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shutdown;
  http_server *srv;
  http_conn *prev, *next;
  llhttp_t parser;
  http_request *req; /* being read or with the handler */
  char *in;          /* input received while BUSY, not yet parsed */
  size_t in_len, in_cap;
  size_t head_bytes; /* raw bytes of the current request's head */
  int state, pause;
  int in_message;     /* a request has begun (a timeout answers 408) */
  int timer_extended; /* the request timer was extended once (conn.c) */
  int head_done;
  int err_status; /* set by a parser callback that rejects the request */
  const char *err_msg;
  int processing;  /* http__conn_parse is on the stack */
  int read_paused; /* uv_read_stop'ed: too much buffered input */
  int closing, closed_handles;
  unsigned writes; /* uv_write requests in flight */
  int is_sse;
  http_sse sse;
  size_t sse_queued;         /* write_queue_size as last counted in srv->sse_queued */
  int served;                /* requests answered on this connection */
  uint64_t since;            /* uv_now when it last became idle or began a request */
  char ip[INET6_ADDRSTRLEN]; /* the peer's address, without the port */
  char peer[INET6_ADDRSTRLEN + 8];
};

struct http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t keepalive;
  http_limits lim;
  http_handler handler;
  void *ud;
  llhttp_settings_t settings;
  http_hooks hooks;
  http_conn *conns;
  int n_conns, n_sse;
  int n_closing;           /* connections closing, still counted in n_conns */
  size_t sse_queued;       /* bytes queued across streams (sum of their sse_queued) */
  uint64_t refusals;       /* refused requests not yet logged */
  uint64_t refusal_log_ms; /* uv_now of the last refusal line */
  int open_handles;        /* listener, keepalive timer, connections */
  int stopping;
  void (*stop_cb)(void *ud);
  void *stop_ud;
  http_stats stats;
  char readbuf[HTTP_READ_BUF];
};

/* One queued write: header and bytes in one allocation. */
typedef struct http_write {
  uv_write_t req; /* first: the callback casts back */
  http_conn *conn;
  size_t len;
  char data[];
} http_write;

/* ---- server.c ---- */

/* A handle of the server (listener, keepalive timer, a connection) is
 * closed: the server is freed, after its stop callback, with the last. */
void http__server_handle_closed(http_server *s);

/* A line through the log hook (stderr without one). */
void http__log(http_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts a refused request; a line goes out at most every 10 s. */
void http__log_refusal(http_server *s, const char *what);
/* Connections open and not closing: what the limits count. */
int http__live_conns(const http_server *s);

/* ---- conn.c ---- */

/* Accepts a connection on s's listener (closed at once over the limit). */
void http__conn_accept(http_server *s);
/* (Re)starts the connection's one timer (idle, request, drain, linger). */
void http__conn_timer(http_conn *c, int ms);
/* Closes at once; pending writes are cancelled (their callbacks free them).
 * A request with the handler is detached and freed by its answer. */
void http__conn_close(http_conn *c);
/* The last answer is queued: close once it is written. */
void http__conn_drain(http_conn *c);
/* A write of len bytes to fill in; NULL when out of memory. */
http_write *http__write_new(size_t len);
/* Queues w (ownership passes); on failure the connection is closed.
 * Returns 0 or a negative libuv error. */
int http__conn_write(http_conn *c, http_write *w);
/* Parses buffered input after an answer or when the write queue drained. */
void http__conn_resume(http_conn *c);

/* ---- parse.c ---- */

/* Fills the llhttp callbacks every connection's parser uses. */
void http__parser_settings(llhttp_settings_t *s);
/* Feeds data to llhttp until a request goes to the handler (and is not
 * answered at once), the connection fails, or data runs out. Returns the
 * bytes consumed. */
size_t http__conn_parse(http_conn *c, const char *data, size_t len);

/* ---- request.c ---- */

/* A request on c, its peer copied; NULL when out of memory. */
http_request *http__req_new(http_conn *c);
/* Frees r, its arena, head and body (NULL: nothing). */
void http__req_free(http_request *r);
/* Turns the raw head into the header index, the path and the query.
 * Returns NULL or a message for a 400. */
const char *http__req_index_head(http_request *r);

/* ---- arena.c ---- */

/* A NUL-terminated copy of s[0..n) in r's arena; NULL when out of memory. */
char *http__strndup(http_request *r, const char *s, size_t n);
/* Makes *buf (malloc'd, *cap bytes) hold need bytes: the capacity starts
 * at first and doubles, then is clamped to max (0: no clamp; the caller
 * keeps need <= max). Returns 0, or -1 out of memory (*buf unchanged). */
int http__grow(char **buf, size_t *cap, size_t need, size_t first, size_t max);

/* ---- respond.c ---- */

/* {"error":{"message":msg,"path":path}}, malloc'd; NULL when out of memory. */
char *http__error_json(int status, const char *msg, const char *path);
/* Formats a complete answer; NULL when out of memory. */
http_write *http__response_new(int status, const char *ctype, const char *body, size_t len,
                               const char *headers, int is_head, int http10, int close);
/* Answers a request that never reached the handler, then closes. */
void http__conn_fail(http_conn *c, int status, const char *msg);
/* http__conn_fail with extra header lines ("" or lines ending in "\r\n"). */
void http__conn_fail_h(http_conn *c, int status, const char *msg, const char *headers);

/* ---- sse.c ---- */

/* c, an event stream, is closed: counts it and tells its owner. */
void http__sse_closed(http_conn *c);
/* A write of stream c completed: its queue is counted again. */
void http__sse_wrote(http_conn *c);
/* The timer of stream c fired: closed when its queue is still over the bound. */
void http__sse_timer(http_conn *c);

#endif

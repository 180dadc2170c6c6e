/* The scaffolding of the HTTP server's tests (tests/unit/test_http_*.c):
 * five servers on loopback in a libuv loop on the main thread (their
 * handler has the routes the tests ask for), driven by blocking-socket
 * clients on a second thread. Only the client thread CHECKs while the loop
 * runs; what the handler saw is checked after the thread is joined. Small
 * limits (2 KiB head, 64 KiB body, 400 ms idle) keep the timeout tests
 * fast. */
#ifndef SS_TESTS_HTTP_CLIENT_H
#define SS_TESTS_HTTP_CLIENT_H

#include <stddef.h>
#include <uv.h>

#include "http/http.h"

/* Only the "quick" server has the short idle timeout: on a loaded machine a
 * client thread can be descheduled for longer than IDLE_MS, which would cut
 * off unrelated tests. The others wait SLOW_IDLE_MS. */
enum { IDLE_MS = 400, SLOW_IDLE_MS = 20000, MAX_HEAD = 2048, MAX_BODY = 64 * 1024 };
enum { LIMITED_CONNS = 3 };
/* The "guard" server's slots and stream limits (http_limits): GUARD_CONNS
 * slots of which GUARD_RESERVE are for /healthz and "Bearer GUARD_TOKEN";
 * streams at most GUARD_STREAMS, GUARD_STREAMS_PER_ADDR per address; a
 * request within GUARD_HEADER_MS; a stream queueing over GUARD_QUEUE for
 * GUARD_STALL_MS is cut, and so is the one furthest behind when all queue
 * over GUARD_TOTAL_QUEUE. */
enum {
  GUARD_CONNS = 12,
  GUARD_RESERVE = 4,
  GUARD_STREAMS = 4,
  GUARD_STREAMS_PER_ADDR = 2,
  GUARD_HEADER_MS = 300,
  GUARD_QUEUE = 64 * 1024,
  GUARD_STALL_MS = 300,
  GUARD_TOTAL_QUEUE = 96 * 1024,
};
#define GUARD_TOKEN "guard-secret"
enum { SRV_MAIN, SRV_LIMITED, SRV_QUICK, SRV_V6, SRV_GUARD, N_SRV };

typedef struct http_test_state {
  uv_loop_t *loop;
  http_server *srv[N_SRV]; /* srv[SRV_V6] is NULL without IPv6 */
  int port[N_SRV];
  http_request *held; /* answered only after the server stopped */
  int stopped;
  int sse_opened, sse_closed;
  int flood_sends, flood_rc;
  int slow_started, slow_answered;
  int arena_ok;
  char last_peer[64];
  http_request *parked[16]; /* /park: answered by /release */
  int n_parked;
  int stall_streams;  /* /stall streams still open */
  int log_lines;      /* lines of the guard server's log hook */
  char last_log[512]; /* the latest (under log_lock) */
} http_test_state;

extern http_test_state ht;

/* The servers' handler (ud: the server's slot in ht, for /stats). */
void http_test_handler(http_request *r, void *ud);

/* The small limits above (2 KiB head, 64 KiB body, 64 connections,
 * IDLE_MS) over l's other fields. */
void http_harness_limits(http_limits *l);
/* Starts the servers in a loop of its own (small limits; each server's idle
 * timeout and connection limit as above), runs scenarios on the client
 * thread, then checks that every earlier client has gone and stops the
 * servers with an open stream and a request the handler never answers
 * (the stop answers 503). Returns once every handle is closed and
 * uv_loop_close() succeeded: the number of CHECKs that failed in the
 * harness and the client helpers (counted apart from the caller's), or -1
 * when a server could not start. */
int http_harness_main(void (*scenarios)(void));

/* ---- blocking clients ---- */

typedef struct response {
  int status;
  char head[4096];
  char *body;
  size_t body_len;
} response;

/* A per-connection input buffer so that pipelined answers are split right. */
typedef struct client {
  int fd;
  char buf[1 << 16];
  size_t len;
} client;

double now_ms(void);
int connect_to(int port); /* -1 when the connection fails; 5 s receive timeout */
/* connect_to from the loopback address ip (all of 127/8 is loopback on
 * Linux), with a receive buffer of rcvbuf bytes when rcvbuf > 0. */
int connect_from(const char *ip, int port, int rcvbuf);
/* The guard server's log: the number of lines, the latest copied to out. */
int guard_log(char *out, size_t n);
/* A value of the guard server's /stats, asked on probe (a keep-alive
 * connection with the token, so that the count of connections holds still
 * while the probe asks) or, when probe is NULL, on a fresh connection; -1
 * when it cannot be read. */
int guard_stat(client *probe, const char *name);
void send_str(int fd, const char *s);
int client_fill(client *c);
/* The value of header name in an answer's head (static storage), or NULL. */
const char *header_in(const char *head, const char *name);
/* Reads one answer; no_body for HEAD. Returns 0, or -1 on EOF/timeout. */
int read_response(client *c, response *r, int no_body);
/* Sends req on c (none when NULL), reads the answer into *r (free r->body)
 * and CHECKs that one came with the given status (0: any). */
void exchange(client *c, const char *req, int status, response *r);
/* exchange(), then CHECKs that the body is body. */
void expect_body(client *c, const char *req, int status, const char *body);
/* 1 when the server closed the connection (EOF or reset) within the receive timeout. */
int closed_by_server(client *c);
client *client_open(int port);
void client_close(client *c);
/* One request on a fresh connection; the answer in *r (free r->body). */
int roundtrip(int port, const char *req, response *r);
/* One request on a fresh connection; CHECKs the status and that the body has body_has. */
void check_status(int port, const char *req, int status, const char *body_has);
/* Reads SSE events up to n; returns the text after the answer's head. */
char *read_events(client *c, int n, response *head);
/* A fresh connection that asks for /events (headers: more header lines, each
 * ending in \r\n) and has read n events: their text in *ev (NULL when they
 * did not come), the answer's head in *head. */
client *events_open(int port, const char *headers, int n, response *head, char **ev);

#endif

/* The scheduler's API and status page as an HTTP client sees them: the
 * input is written as raw bytes to the real HTTP server (http/) on
 * 127.0.0.1 whose handler is the scheduler's (scheduler/api.c sched__http:
 * the routes, the ids in paths, the query parameters such as ?limit=,
 * ?offset=, ?sort=, ?points=, the Bearer check, SSE, submissions through
 * the spec parser and planner, and the page's renderings in web*.c). The
 * store is store_stub.c: its documents are "{}" and "[]", none, or errors.
 * Each input gets a scheduler of its own on a private loop and one
 * connection: the input is written, the loop runs until the requests have
 * been answered (no answer pending in the store, no new request, nothing
 * more received for a few turns: the server drops the answers of a client
 * that has gone), then the client resets the connection (loopback.h: no
 * TIME_WAIT), the server stops and uv_loop_close must succeed.
 *
 * Input: an optional first line "#OSCRIPT": O's bit 0 set closes reads
 * (--closed-reads: GETs need the token too), SCRIPT the store's answers
 * (store_stub.h); then the requests (API token: FUZZ_ROUTE_TOKEN). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "loopback.h"
#include "scheduler/internal.h"
#include "tests/fuzz/store_stub.h"

#define FUZZ_ROUTE_TOKEN "fuzz-api-token-0123456789abcdef"
enum { FUZZ_ROUTE_MAX_INPUT = 256 * 1024 };

/* the answers' status lines, when looking at one input */
static void on_answer(void *ud, const char *buf, size_t n) {
  *(size_t *)ud += n;
  if (!getenv("FUZZ_VERBOSE"))
    return;
  for (const char *p = buf; (p = memmem(p, n - (size_t)(p - buf), "HTTP/1.1 ", 9)); p++)
    fprintf(stderr, "fuzz_route: <- %.*s\n", (int)strcspn(p, "\r\n"), p);
}

static void on_stopped(void *ud) { *(int *)ud = 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_ROUTE_MAX_INPUT)
    size = FUZZ_ROUTE_MAX_INPUT;
  const uint8_t *script = NULL;
  size_t nscript = 0;
  int options = 0;
  if (size && data[0] == '#') {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t line = nl ? (size_t)(nl - data) : size;
    if (line > 1) {
      options = data[1];
      script = data + 2;
      nscript = line - 2;
    }
    size_t skip = nl ? line + 1 : size;
    data += skip;
    size -= skip;
  }
  store_stub_script(script, nscript);

  uv_loop_t loop;
  sched *s = calloc(1, sizeof *s);
  if (!s || uv_loop_init(&loop) != 0)
    abort();
  s->loop = &loop;
  s->o.lease_s = 30;
  s->o.heartbeat_s = 5;
  s->o.open_reads = !(options & 1);
  s->o.checkpoint_root = "/nonexistent/checkpoints";
  snprintf(s->token, sizeof s->token, "%s", FUZZ_ROUTE_TOKEN);
  snprintf(s->api_token, sizeof s->api_token, "%s", FUZZ_ROUTE_TOKEN);
  char load_err[256];
  if (sched__auth_load(s, load_err, sizeof load_err) != 0) /* the stub's admin and member */
    abort();
  store_stub_sched_open(s, &loop);
  s->wp.loop = &loop;
  s->wp.token = s->token;
  s->wp.auth_block_s = 60;
  s->wp.ev = &s->ev;
  s->wp.n = &s->n;
  http_limits lim;
  http_limits_default(&lim);
  lim.max_body_bytes = 64 * 1024; /* a spec, not a large one: planning is slow enough */
  char err[256];
  s->http = http_server_start(&loop, "127.0.0.1", 0, &lim, sched__http, s, &s->http_port, err,
                              sizeof err);
  if (!s->http) {
    fprintf(stderr, "fuzz_route: cannot start the server: %s\n", err);
    abort();
  }

  size_t got = 0, last_got = 0;
  fuzz_peer p = {.data = data, .len = size, .on_data = on_answer, .ud = &got};
  fuzz_peer_connect(&loop, &p, s->http_port);
  http_stats st;
  uint64_t last_requests = 0;
  for (int still = 0; still < 8;) {
    uv_run(&loop, UV_RUN_NOWAIT);
    http_server_stats(s->http, &st);
    int busy = !p.written || store_stub_pending() || (!p.closed && fuzz_unread(p.fd));
    still = busy || st.requests != last_requests || got != last_got ? 0 : still + 1;
    last_requests = st.requests;
    last_got = got;
  }
  fuzz_peer_close(&p); /* the client goes (its connection is reset) */
  while (!p.closed || store_stub_pending())
    uv_run(&loop, UV_RUN_NOWAIT);
  int stopped = 0;
  s->stopping = 1;
  http_server_stop(s->http, on_stopped, &stopped);
  store_stub_sched_close(s);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!stopped || uv_loop_close(&loop) != 0) {
    fprintf(stderr, "fuzz_route: a handle was left open\n");
    abort();
  }
  sched__events_free(&s->ev);
  sched__refits_free(&s->refits);
  sched__place_free(s);
  sched__auth_free(&s->auth);
  free(s);
  return 0;
}

/* The connection (db.h, internal.h): connecting with libpq's non-blocking
 * calls, the poll handle on its socket, losing it and reconnecting with
 * backoff, opening and closing the db. The statements it carries are
 * db.c's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

#define DB_BACKOFF_MIN_MS 100
#define DB_BACKOFF_MAX_MS 5000
/* libpq enforces connect_timeout only in its blocking calls. */
#define DB_CONNECT_TIMEOUT_MS 10000

static void connect_start(db *d);
static void on_poll(uv_poll_t *h, int status, int events);

/* Copies the first line of a libpq message into dst, runs of blanks made
 * single spaces (libpq's second lines are hints such as "Is the server
 * running locally ...?"). */
void store__db_msg_copy(char *dst, size_t n, const char *src) {
  size_t j = 0;
  int space = 0;
  if (!src)
    src = "unknown error";
  while (*src == '\n' || *src == ' ')
    src++;
  for (; *src && *src != '\n' && j + 1 < n; src++) {
    if (*src == '\t' || *src == ' ') {
      space = 1;
      continue;
    }
    if (space && j > 0 && j + 2 < n)
      dst[j++] = ' ';
    space = 0;
    dst[j++] = *src;
  }
  dst[j] = '\0';
}

static void notice_ignore(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* ---- the poll handle ---------------------------------------------------- */

static void maybe_finish(db *d) {
  if (!d->closing || d->nhandles > 0)
    return;
  void (*cb)(void *) = d->close_cb;
  void *ud = d->close_ud;
  free(d->url);
  free(d);
  if (cb)
    cb(ud);
}

static void on_watch_closed(uv_handle_t *h) {
  store__db_watcher *w = h->data;
  db *d = w->d;
  free(w);
  d->nhandles--;
  maybe_finish(d);
}

static void on_handle_closed(uv_handle_t *h) {
  db *d = h->data;
  d->nhandles--;
  maybe_finish(d);
}

/* Must run before libpq closes the socket (PQfinish), so that libuv never
 * polls a closed descriptor. */
static void watch_close(db *d) {
  if (!d->watch)
    return;
  uv_close((uv_handle_t *)&d->watch->poll, on_watch_closed);
  d->watch = NULL;
}

/* Watches the connection's current socket for events; 0 or a libuv error. */
int store__db_watch(db *d, int events) {
  int fd = PQsocket(d->conn);
  if (d->watch && d->watch->fd != fd)
    watch_close(d);
  if (fd < 0)
    return UV_EBADF;
  if (!d->watch) {
    store__db_watcher *w = malloc(sizeof *w);
    if (!w)
      return UV_ENOMEM;
    int rc = uv_poll_init(d->loop, &w->poll, fd);
    if (rc) {
      free(w);
      return rc;
    }
    w->poll.data = w;
    w->d = d;
    w->fd = fd;
    d->watch = w;
    d->nhandles++;
  }
  return uv_poll_start(&d->watch->poll, events, on_poll);
}

/* ---- connection state --------------------------------------------------- */

static void on_timer(uv_timer_t *t);

void store__db_backoff_start(db *d) {
  uv_timer_start(&d->timer, on_timer, d->backoff_ms, 0);
  d->backoff_ms *= 2;
  if (d->backoff_ms > DB_BACKOFF_MAX_MS)
    d->backoff_ms = DB_BACKOFF_MAX_MS;
}

void store__db_drop_conn(db *d) {
  watch_close(d);
  if (d->conn)
    PQfinish(d->conn);
  d->conn = NULL;
  d->state = STORE__DB_DOWN;
  d->flushing = 0;
}

static void log_outage(db *d, const char *what, const char *msg) {
  if (d->outage_logged || d->closing)
    return;
  fprintf(stderr, "scalesweep: database %s: %s (retrying with backoff)\n", what, msg);
  d->outage_logged = 1;
}

void store__db_req_free(store__db_req *q) {
  PQclear(q->cur);
  PQclear(q->last);
  PQclear(q->failed);
  free(q);
}

/* The connection is unusable: the request in flight fails with status and
 * msg; waiting ones stay queued for the next connection. */
void store__db_conn_reset(db *d, int status, const char *msg) {
  char buf[STORE__DB_MSG_MAX];
  store__db_msg_copy(buf, sizeof buf, msg);
  store__db_drop_conn(d);
  log_outage(d, "connection lost", buf);
  if (!d->closing)
    store__db_backoff_start(d);
  store__db_req *q = d->inflight;
  d->inflight = NULL;
  if (q) {
    q->cb(q->ud, status, NULL, buf);
    store__db_req_free(q);
  }
}

static void connect_failed(db *d, const char *msg) {
  char buf[STORE__DB_MSG_MAX];
  store__db_msg_copy(buf, sizeof buf, msg);
  store__db_drop_conn(d);
  log_outage(d, "unreachable", buf);
  store__db_backoff_start(d);
}

static void connected(db *d) {
  uv_timer_stop(&d->timer);
  if (PQsetnonblocking(d->conn, 1) != 0) {
    connect_failed(d, PQerrorMessage(d->conn));
    return;
  }
  d->state = STORE__DB_UP;
  d->backoff_ms = DB_BACKOFF_MIN_MS;
  if (d->outage_logged)
    fprintf(stderr, "scalesweep: database: connected again\n");
  d->outage_logged = 0;
  int rc = store__db_watch(d, UV_READABLE);
  if (rc) {
    store__db_conn_reset(d, SS_ECONN, uv_strerror(rc));
    return;
  }
  store__db_setup(d);
  store__db_pump(d);
}

/* Waits for the socket as PQconnectPoll last asked. */
static void connect_wait(db *d) {
  int rc = store__db_watch(d, d->connect_poll == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
  if (rc)
    connect_failed(d, rc == UV_EBADF ? PQerrorMessage(d->conn) : uv_strerror(rc));
}

static void connect_step(db *d) {
  if (d->watch)
    uv_poll_stop(&d->watch->poll);
  d->connect_poll = PQconnectPoll(d->conn);
  switch (d->connect_poll) {
  case PGRES_POLLING_OK:
    connected(d);
    break;
  case PGRES_POLLING_FAILED:
    connect_failed(d, PQerrorMessage(d->conn));
    break;
  default:
    connect_wait(d);
    break;
  }
}

/* The URL comes last so that whatever it sets overrides these defaults
 * (TCP only: a dead peer is noticed within about a minute, idle or not). */
static void connect_start(db *d) {
  static const char *const keys[] = {"fallback_application_name",
                                     "keepalives_idle",
                                     "keepalives_interval",
                                     "keepalives_count",
                                     "tcp_user_timeout",
                                     "dbname",
                                     NULL};
  const char *const vals[] = {"scalesweep", "30", "10", "3", "60000", d->url, NULL};
  d->conn = PQconnectStartParams(keys, vals, 1);
  if (!d->conn) {
    connect_failed(d, "out of memory");
    return;
  }
  if (PQstatus(d->conn) == CONNECTION_BAD) {
    connect_failed(d, PQerrorMessage(d->conn));
    return;
  }
  PQsetNoticeProcessor(d->conn, notice_ignore, NULL);
  d->state = STORE__DB_CONNECTING;
  d->connect_poll = PGRES_POLLING_WRITING;
  uv_timer_start(&d->timer, on_timer, DB_CONNECT_TIMEOUT_MS, 0);
  connect_wait(d);
}

static void on_timer(uv_timer_t *t) {
  db *d = t->data;
  if (d->closing)
    return;
  if (d->state == STORE__DB_DOWN)
    connect_start(d);
  else if (d->state == STORE__DB_CONNECTING)
    connect_failed(d, "timed out while connecting");
}

static void on_poll(uv_poll_t *h, int status, int events) {
  store__db_watcher *w = h->data;
  db *d = w->d;
  if (w != d->watch || d->closing)
    return;
  if (d->state == STORE__DB_CONNECTING) {
    connect_step(d);
    return;
  }
  if (status < 0) {
    store__db_conn_reset(d, SS_ECONN, uv_strerror(status));
    return;
  }
  if ((events & UV_WRITABLE) && d->flushing) {
    store__db_flush(d);
    if (d->state != STORE__DB_UP)
      return;
  }
  if (events & UV_READABLE)
    store__db_process_input(d);
}

/* ---- the interface ------------------------------------------------------ */

db *db_open(uv_loop_t *loop, const char *url) { return db_open_opts(loop, url, NULL); }

db *db_open_opts(uv_loop_t *loop, const char *url, const db_options *o) {
  db *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  if (o)
    d->opts = *o;
  d->url = strdup(url ? url : "");
  if (!d->url) {
    free(d);
    return NULL;
  }
  d->loop = loop;
  d->state = STORE__DB_DOWN;
  d->backoff_ms = DB_BACKOFF_MIN_MS;
  uv_timer_init(loop, &d->timer);
  d->timer.data = d;
  uv_prepare_init(loop, &d->prepare);
  d->prepare.data = d;
  d->nhandles = 2;
  connect_start(d);
  return d;
}

int db_ready(const db *d) { return d->state == STORE__DB_UP; }

void db_close(db *d, void (*cb)(void *ud), void *ud) {
  if (d->closing)
    return;
  d->closing = 1;
  d->close_cb = cb;
  d->close_ud = ud;
  store__db_drop_conn(d);
  uv_close((uv_handle_t *)&d->timer, on_handle_closed);
  uv_close((uv_handle_t *)&d->prepare, on_handle_closed);
  store__db_req *q = d->inflight;
  d->inflight = NULL;
  if (q) {
    q->next = d->head;
  } else {
    q = d->head;
  }
  d->head = d->tail = NULL;
  d->nwaiting = 0;
  while (q) {
    store__db_req *next = q->next;
    q->cb(q->ud, SS_ECONN, NULL, "database connection closed");
    store__db_req_free(q);
    q = next;
  }
}

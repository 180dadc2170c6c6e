/* The worker agent: see worker.h for what it does. Layout of this file:
 * logging and small helpers; refcounted wire buffers; the connection to the
 * scheduler (resolve, connect, hello/welcome, reading, sending, backoff);
 * runs (assign, spawn, trainer output, batching, exit, cancel, acks);
 * startup (token, GPUs) and shutdown.
 *
 * Ownership: the worker struct is heap-allocated by wrk_run and freed after
 * its loop is closed. A connection (conn) and
 * a run are heap objects with their libuv handles embedded; each is freed
 * only in the close callback of its last handle. A run leaves the worker's
 * list when its finished message is acknowledged (or at shutdown); its
 * memory goes when its handles are closed too. */
#include "worker/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "common/addr.h"
#include "common/err.h"
#include "common/fileio.h"
#include "common/proto.h"
#include "common/token.h"

extern char **environ;

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define WELCOME_TIMEOUT_MS 10000
#define FLUSH_MS 200
#define FLUSH_ROWS 500
#define FLUSH_BYTES (512u << 10) /* keeps a batch far below PROTO_MAX_LINE */
#define LOG_TAIL_BYTES 4096
#define MAX_ADDRS 8
#define MAX_BAD_LINES_LOGGED 3
#define FENCE_CHECK_MS 250
#define HB_RING 64

/* ---- logging ------------------------------------------------------------ */

/* One line per event on stderr: "2024-05-01T12:00:00.123Z worker: ...".
 * Built in one buffer and written with one call so lines never interleave. */
static void wlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void wlog(const char *fmt, ...) {
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ worker: ", ts.tv_nsec / 1000000);
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (k < 0)
    k = 0;
  n += (size_t)k < sizeof line - n - 1 ? (size_t)k : sizeof line - n - 2;
  line[n++] = '\n';
  fwrite(line, 1, n, stderr);
}

/* ---- small helpers ------------------------------------------------------ */

/* A copy of s[0..n) that is valid UTF-8 (json_string refuses anything
 * else): a sequence cut by the start of the window is dropped, any other
 * invalid byte becomes '?'. */
static char *utf8_clean(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out)
    return NULL;
  size_t i = 0, o = 0;
  while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
    i++;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    int ok = len > 0 && i + len <= n && c != 0;
    for (size_t k = 1; ok && k < len; k++)
      ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
    if (ok && len > 1) {
      /* reject overlong forms, surrogates and code points past U+10FFFF */
      unsigned cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
      for (size_t k = 1; k < len; k++)
        cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3Fu);
      static const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok) {
      out[o++] = '?';
      i++;
      continue;
    }
    memcpy(out + o, s + i, len);
    o += len;
    i += len;
  }
  out[o] = '\0';
  return out;
}

/* ---- wire buffers ------------------------------------------------------- */

/* An encoded message line, shared by the unacked queue and in-flight
 * writes: freed when the last of them lets go. */
typedef struct wbuf {
  int refs;
  size_t len;
  char data[];
} wbuf;

static wbuf *wbuf_ref(wbuf *b) {
  if (b)
    b->refs++;
  return b;
}

static void wbuf_unref(wbuf *b) {
  if (b && --b->refs == 0)
    free(b);
}

/* Encodes msg and checks it against the protocol's own validation, so that a
 * message the scheduler would refuse (and the worker would then resend
 * forever) never leaves. NULL with the reason in err otherwise. */
static wbuf *wbuf_encode(const json_t *msg, char *err, size_t errlen) {
  size_t len;
  char *line = proto_encode(msg, &len);
  if (!line) {
    snprintf(err, errlen, "cannot encode (over %u bytes, or not JSON)", PROTO_MAX_LINE);
    return NULL;
  }
  if (proto_parse(line, len - 1, NULL, err, errlen) == PROTO_INVALID) {
    free(line);
    return NULL;
  }
  wbuf *b = malloc(sizeof *b + len);
  if (b) {
    b->refs = 1;
    b->len = len;
    memcpy(b->data, line, len);
  } else {
    snprintf(err, errlen, "out of memory");
  }
  free(line);
  return b;
}

/* ---- types -------------------------------------------------------------- */

typedef struct worker worker;
typedef struct run run;

typedef struct conn {
  uv_tcp_t tcp;
  uv_connect_t creq;
  worker *w;
  proto_reader rd;
  int connected; /* TCP established */
  int welcomed;
  int closing;
  char rbuf[64 << 10];
} conn;

typedef struct qmsg {
  struct qmsg *next;
  int64_t seq;
  wbuf *b;
} qmsg;

enum run_state { RUN_WAITING, RUN_RUNNING, RUN_EXITED };

struct run {
  run *next;
  worker *w;
  int64_t id, attempt;
  enum run_state state;
  json_t *assign; /* the assign message */
  int *gpus;
  int ngpus;

  uv_process_t proc;
  uv_pipe_t out;
  uv_timer_t flush_timer, kill_timer;
  int nopen;      /* handles initialised and not yet closed */
  int in_list;    /* still in w->runs */
  int proc_alive; /* spawned and not yet reaped */
  int out_open;   /* stdout pipe open */
  int cancelled;
  int fenced;          /* killed because its lease could not be renewed */
  uint64_t renewed_ms; /* loop time from which its lease surely runs */
  int pid;

  proto_reader rd;
  int out_broken; /* a line over the limit: the rest of stdout is drained */
  int bad_lines;
  json_t *batch; /* rows not yet sealed into a metrics message */
  size_t batch_bytes;
  int64_t next_seq;
  qmsg *q_head, *q_tail; /* unacked metrics / finished, by seq */
  wbuf *started, *ckpt;  /* resent after each reconnect */
  int64_t finished_seq;  /* 0 until the finished message exists */
  json_t *done;
  char *error;
  int64_t exit_status;
  int term_signal;

  char dir[PATH_MAX + 32];
  char log_path[PATH_MAX + 64];
  char obuf[64 << 10];
};

typedef struct gpu {
  int index;
  char name[128];
  int64_t memory_bytes;
} gpu;

struct worker {
  uv_loop_t loop;
  char *token;
  char name[512], host[256];
  char sched_host[256], sched_port[16];
  char bin[PATH_MAX];
  char work_dir[PATH_MAX];
  gpu *gpus;
  int ngpus;
  int cpu_slots;
  double hb_override;
  int kill_grace_ms, drain_ms;

  uv_signal_t sigint, sigterm;
  uv_timer_t reconnect_timer, welcome_timer, hb_timer, drain_timer, fence_timer;
  uv_getaddrinfo_t gai;
  int gai_active;
  struct sockaddr_storage addrs[MAX_ADDRS];
  int naddrs, addr_i;
  conn *c;
  int backoff_ms;
  int64_t worker_id;
  int64_t lease_ms; /* from the last welcome; 0 before one */
  /* heartbeats carry a number "hb"; the scheduler answers each once it has
   * renewed the leases. Send times by number, to date the answers. */
  int64_t hb_next;
  struct {
    int64_t hb;
    uint64_t sent_ms;
  } hb_sent[HB_RING];
  int fencing; /* the scheduler answers heartbeats: trainers are fenced */

  run *runs;    /* in order of assignment */
  int stopping; /* 1: stopping runs and draining; 2: closing every handle */
  int closed_all;
};

static void conn_close(conn *c, const char *why);
static void start_connect(worker *w);
static void run_complete(run *r);
static void maybe_finish_shutdown(worker *w);
static void close_all(worker *w);

/* ---- sending ------------------------------------------------------------ */

typedef struct wreq {
  uv_write_t req;
  wbuf *b;
  conn *c;
} wreq;

static void on_write(uv_write_t *req, int status) {
  wreq *wr = (wreq *)req;
  if (status < 0 && status != UV_ECANCELED && !wr->c->closing) {
    wlog("write to the scheduler failed: %s", uv_strerror(status));
    conn_close(wr->c, NULL);
  }
  wbuf_unref(wr->b);
  free(wr);
}

/* Writes b on c now (before a welcome too: the hello). */
static void conn_write(conn *c, wbuf *b) {
  if (!c || c->closing || !c->connected)
    return;
  wreq *wr = malloc(sizeof *wr);
  if (!wr) {
    conn_close(c, "out of memory");
    return;
  }
  wr->b = wbuf_ref(b);
  wr->c = c;
  uv_buf_t buf = uv_buf_init(b->data, (unsigned)b->len);
  int rc = uv_write(&wr->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (rc) {
    wbuf_unref(wr->b);
    free(wr);
    wlog("write to the scheduler failed: %s", uv_strerror(rc));
    conn_close(c, NULL);
  }
}

/* Sends when there is a welcomed connection; otherwise the message waits
 * in its run (for the kinds that are kept) or is dropped (heartbeats). */
static void send_msg(worker *w, wbuf *b) {
  if (w->c && w->c->welcomed)
    conn_write(w->c, b);
}

static void send_json(worker *w, json_t *msg) {
  char err[512];
  wbuf *b = wbuf_encode(msg, err, sizeof err);
  if (!b) {
    wlog("BUG: refusing to send an invalid %s message: %s",
         json_string_value(json_object_get(msg, "type")), err);
    return;
  }
  send_msg(w, b);
  wbuf_unref(b);
}

/* ---- runs: lookup, lifetime --------------------------------------------- */

static run *find_run(worker *w, int64_t id, int64_t attempt) {
  for (run *r = w->runs; r; r = r->next)
    if (r->id == id && r->attempt == attempt)
      return r;
  return NULL;
}

static void run_free(run *r) {
  for (qmsg *q = r->q_head, *next; q; q = next) {
    next = q->next;
    wbuf_unref(q->b);
    free(q);
  }
  wbuf_unref(r->started);
  wbuf_unref(r->ckpt);
  json_decref(r->batch);
  json_decref(r->done);
  json_decref(r->assign);
  proto_reader_free(&r->rd);
  free(r->error);
  free(r->gpus);
  free(r);
}

static void run_maybe_free(run *r) {
  if (!r->in_list && r->nopen == 0)
    run_free(r);
}

static void on_run_handle_closed(uv_handle_t *h) {
  run *r = h->data;
  r->nopen--;
  run_maybe_free(r);
}

static void run_close_handle(run *r, uv_handle_t *h) {
  if (!uv_is_closing(h))
    uv_close(h, on_run_handle_closed);
}

/* Takes r out of the worker's list; its memory goes with its last handle. */
static void run_unlink(run *r) {
  worker *w = r->w;
  for (run **p = &w->runs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  r->in_list = 0;
  run_close_handle(r, (uv_handle_t *)&r->flush_timer);
  run_close_handle(r, (uv_handle_t *)&r->kill_timer);
  run_maybe_free(r);
}

static void enqueue(run *r, int64_t seq, wbuf *b) {
  qmsg *q = malloc(sizeof *q);
  if (!q) {
    wlog("run %" PRId64 ": out of memory; message %" PRId64 " lost", r->id, seq);
    return;
  }
  q->next = NULL;
  q->seq = seq;
  q->b = wbuf_ref(b);
  if (r->q_tail)
    r->q_tail->next = q;
  else
    r->q_head = q;
  r->q_tail = q;
}

/* ---- runs: metrics batching --------------------------------------------- */

static json_t *run_header(run *r, const char *type) {
  return json_pack("{s:s, s:I, s:I}", "type", type, "run_id", (json_int_t)r->id, "attempt",
                   (json_int_t)r->attempt);
}

/* Seals the current batch into metrics message seq N, keeps it until its
 * ack, and sends it when connected. A row the protocol would refuse is
 * logged and dropped (so one odd trainer line cannot block the run). */
static void run_flush(run *r) {
  uv_timer_stop(&r->flush_timer);
  if (!r->batch || json_array_size(r->batch) == 0)
    return;
  json_t *rows = r->batch;
  r->batch = NULL;
  r->batch_bytes = 0;
  json_t *msg = run_header(r, "metrics");
  json_object_set_new(msg, "seq", json_integer(r->next_seq));
  json_object_set(msg, "rows", rows);
  char err[512];
  wbuf *b = wbuf_encode(msg, err, sizeof err);
  if (!b) {
    json_t *good = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      json_t *probe = json_array();
      json_array_append(probe, row);
      json_object_set_new(msg, "rows", probe);
      char perr[512];
      wbuf *pb = wbuf_encode(msg, perr, sizeof perr);
      if (pb)
        json_array_append(good, row);
      else
        wlog("run %" PRId64 ": dropped a trainer row the protocol refuses: %s", r->id, perr);
      wbuf_unref(pb);
    }
    json_object_set_new(msg, "rows", good);
    b = json_array_size(good) ? wbuf_encode(msg, err, sizeof err) : NULL;
  }
  json_decref(rows);
  json_decref(msg);
  if (!b)
    return;
  int64_t seq = r->next_seq++;
  enqueue(r, seq, b);
  send_msg(r->w, b);
  wbuf_unref(b);
}

static void on_flush_timer(uv_timer_t *t) { run_flush(t->data); }

static void run_add_row(run *r, json_t *row, size_t len) {
  if (len > FLUSH_BYTES) {
    wlog("run %" PRId64 ": dropped a trainer row of %zu bytes", r->id, len);
    return;
  }
  if (r->batch_bytes + len > FLUSH_BYTES)
    run_flush(r);
  if (!r->batch)
    r->batch = json_array();
  json_array_append(r->batch, row);
  r->batch_bytes += len;
  if (json_array_size(r->batch) == 1)
    uv_timer_start(&r->flush_timer, on_flush_timer, FLUSH_MS, 0);
  if (json_array_size(r->batch) >= FLUSH_ROWS)
    run_flush(r);
}

/* ---- runs: trainer output ----------------------------------------------- */

static wbuf *replace(wbuf *old, wbuf *b) {
  wbuf_unref(old);
  return b;
}

static int on_trainer_line(void *ud, const char *line, size_t len) {
  run *r = ud;
  json_error_t jerr;
  json_t *ev = json_loadb(line, len, 0, &jerr);
  const char *event = ev ? json_string_value(json_object_get(ev, "event")) : NULL;
  if (!event) {
    if (r->bad_lines++ < MAX_BAD_LINES_LOGGED)
      wlog("run %" PRId64 ": ignored a trainer line that is not a JSON event: %.100s", r->id, line);
    json_decref(ev);
    return 0;
  }
  char err[512];
  if (!strcmp(event, "step") || !strcmp(event, "eval")) {
    run_add_row(r, ev, len);
  } else if (!strcmp(event, "config")) {
    json_t *msg = run_header(r, "started");
    json_object_set(msg, "config", ev);
    wbuf *b = wbuf_encode(msg, err, sizeof err);
    json_decref(msg);
    if (b) {
      r->started = replace(r->started, b);
      send_msg(r->w, b);
    } else {
      wlog("run %" PRId64 ": cannot report the trainer's config event: %s", r->id, err);
    }
  } else if (!strcmp(event, "checkpoint")) {
    /* the rows up to the checkpoint go first */
    run_flush(r);
    json_t *msg = run_header(r, "checkpoint");
    json_object_set(msg, "step", json_object_get(ev, "step"));
    json_object_set(msg, "path", json_object_get(ev, "path"));
    wbuf *b = wbuf_encode(msg, err, sizeof err);
    json_decref(msg);
    if (b) {
      r->ckpt = replace(r->ckpt, b);
      send_msg(r->w, b);
      wlog("run %" PRId64 " attempt %" PRId64 ": checkpoint at step %" JSON_INTEGER_FORMAT, r->id,
           r->attempt, json_integer_value(json_object_get(ev, "step")));
    } else {
      wlog("run %" PRId64 ": cannot report the trainer's checkpoint event: %s", r->id, err);
    }
  } else if (!strcmp(event, "done")) {
    json_decref(r->done);
    r->done = json_incref(ev);
  } else if (!strcmp(event, "error")) {
    const char *m = json_string_value(json_object_get(ev, "message"));
    free(r->error);
    r->error = strdup(m ? m : "the trainer reported an error without a message");
  }
  json_decref(ev);
  return 0;
}

static void on_out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  run *r = h->data;
  *buf = uv_buf_init(r->obuf, sizeof r->obuf);
}

static void on_out_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  run *r = s->data;
  if (nread > 0) {
    if (r->out_broken)
      return;
    int rc = proto_reader_feed(&r->rd, buf->base, (size_t)nread, on_trainer_line, r);
    if (rc) {
      wlog("run %" PRId64 ": the trainer printed a line over %u bytes; the rest of its "
           "output is ignored",
           r->id, PROTO_MAX_LINE);
      r->out_broken = 1;
    }
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF)
    wlog("run %" PRId64 ": reading the trainer's output failed: %s", r->id,
         uv_strerror((int)nread));
  r->out_open = 0;
  run_close_handle(r, (uv_handle_t *)&r->out);
  if (!r->proc_alive)
    run_complete(r);
}

static void on_child_exit(uv_process_t *p, int64_t exit_status, int term_signal) {
  run *r = p->data;
  r->proc_alive = 0;
  r->exit_status = exit_status;
  r->term_signal = term_signal;
  uv_timer_stop(&r->kill_timer);
  run_close_handle(r, (uv_handle_t *)&r->proc);
  if (!r->out_open)
    run_complete(r);
}

/* ---- runs: start -------------------------------------------------------- */

static void run_start(run *r);

/* Ends a run that never started (or failed to): a finished message with
 * the reason, so that the scheduler reaches a decision either way. */
static void run_fail_start(run *r, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void run_fail_start(run *r, int exit_code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  wlog("run %" PRId64 " attempt %" PRId64 ": %s", r->id, r->attempt, msg);
  free(r->error);
  r->error = strdup(msg);
  r->exit_status = exit_code;
  r->term_signal = 0;
  run_complete(r);
}

/* When several CPU runs share the host, libgomp's spinning waits steal the
 * cores from each other (20-50x slower); passive waiting changes no result. */
static int cpu_shared(const run *r) {
  worker *w = r->w;
  if (w->cpu_slots > 1)
    return 1;
  for (const run *x = w->runs; x; x = x->next)
    if (x != r && x->state == RUN_RUNNING && x->ngpus == 0)
      return 1;
  return 0;
}

static char **child_env(const run *r, char *cvd, size_t cvdlen) {
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 4, sizeof *env);
  if (!env)
    return NULL;
  int passive = r->ngpus == 0 && cpu_shared(r) && !getenv("OMP_WAIT_POLICY");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) &&
        strncmp(environ[i], "CUDA_DEVICE_ORDER=", 18))
      env[k++] = environ[i];
  size_t o = (size_t)snprintf(cvd, cvdlen, "CUDA_VISIBLE_DEVICES=");
  for (int i = 0; i < r->ngpus && o < cvdlen; i++)
    o += (size_t)snprintf(cvd + o, cvdlen - o, "%s%d", i ? "," : "", r->gpus[i]);
  env[k++] = cvd;
  /* nvidia-smi numbers GPUs in PCI bus order; CUDA's default order differs */
  env[k++] = "CUDA_DEVICE_ORDER=PCI_BUS_ID";
  if (passive)
    env[k++] = "OMP_WAIT_POLICY=PASSIVE";
  env[k] = NULL;
  return env;
}

static int gpu_offered(const worker *w, int index) {
  for (int i = 0; i < w->ngpus; i++)
    if (w->gpus[i].index == index)
      return 1;
  return 0;
}

static int write_config(run *r, const char *path, char *err, size_t errlen) {
  json_t *cfg = json_deep_copy(json_object_get(r->assign, "config"));
  const char *ckdir = json_string_value(json_object_get(r->assign, "checkpoint_dir"));
  if (!cfg) {
    snprintf(err, errlen, "out of memory");
    return SS_ENOMEM;
  }
  if (ckdir && *ckdir) {
    json_t *ck = json_object_get(cfg, "checkpoint");
    if (!json_is_object(ck)) {
      ck = json_object();
      json_object_set_new(cfg, "checkpoint", ck);
    }
    json_object_set_new(ck, "dir", json_string(ckdir));
  }
  char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  json_decref(cfg);
  if (!text) {
    snprintf(err, errlen, "cannot encode the run config");
    return SS_EINVAL;
  }
  /* not fsynced: the trainer reads it at once, and after a crash the run is
   * assigned again with its config (an fsync here cost tens of ms per run,
   * time a GPU would sit idle between runs) */
  int rc = 0;
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) == EOF || fputc('\n', f) == EOF) {
    snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
    rc = SS_EIO;
  }
  if (f && fclose(f) != 0 && !rc) {
    snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
    rc = SS_EIO;
  }
  free(text);
  return rc;
}

static void run_start(run *r) {
  worker *w = r->w;
  for (int i = 0; i < r->ngpus; i++)
    if (!gpu_offered(w, r->gpus[i])) {
      run_fail_start(r, SS_EXIT_USAGE, "assigned GPU %d, which this worker does not offer",
                     r->gpus[i]);
      return;
    }
  for (run *x = w->runs; x; x = x->next) {
    if (x == r || x->state != RUN_RUNNING)
      continue;
    for (int i = 0; i < r->ngpus; i++)
      for (int j = 0; j < x->ngpus; j++)
        if (r->gpus[i] == x->gpus[j])
          wlog("run %" PRId64 ": warning: GPU %d is also used by run %" PRId64, r->id, r->gpus[i],
               x->id);
  }

  char err[1024], cfg_path[PATH_MAX + 64];
  if (fio_mkdirs(r->dir, 0755) != 0) {
    run_fail_start(r, SS_EXIT_FAILURE, "cannot create %s: %s", r->dir, strerror(errno));
    return;
  }
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", r->dir);
  if (write_config(r, cfg_path, err, sizeof err)) {
    run_fail_start(r, SS_EXIT_FAILURE, "cannot write the run config: %s", err);
    return;
  }

  const char *ckdir = json_string_value(json_object_get(r->assign, "checkpoint_dir"));
  int resume = json_is_true(json_object_get(r->assign, "resume"));
  char ckfile[PATH_MAX + 32];
  if (resume) {
    char prev[PATH_MAX + 32];
    snprintf(ckfile, sizeof ckfile, "%s/checkpoint.bin", ckdir);
    snprintf(prev, sizeof prev, "%s/checkpoint.prev.bin", ckdir);
    if (!*ckdir || (access(ckfile, R_OK) && access(prev, R_OK))) {
      wlog("run %" PRId64 " attempt %" PRId64 ": resume asked but %s%s; starting from scratch",
           r->id, r->attempt, *ckdir ? ckfile : "no checkpoint_dir was given",
           *ckdir ? " is not here" : "");
      resume = 0;
    }
  }

  int fd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    run_fail_start(r, SS_EXIT_FAILURE, "cannot open %s: %s", r->log_path, strerror(errno));
    return;
  }

  char cvd[256];
  char **env = child_env(r, cvd, sizeof cvd);
  /* resume at most from the last step whose metrics the scheduler has
   * stored: a checkpoint past it would leave the steps between unrecorded */
  json_t *maxj = json_object_get(r->assign, "resume_max_step");
  char maxs[32] = "";
  if (resume && json_is_integer(maxj) && json_integer_value(maxj) >= 0)
    snprintf(maxs, sizeof maxs, "%" JSON_INTEGER_FORMAT, json_integer_value(maxj));
  char *args[] = {w->bin,
                  "train",
                  "--config",
                  cfg_path,
                  resume ? "--resume" : NULL,
                  resume ? (char *)ckdir : NULL,
                  maxs[0] ? "--resume-max-step" : NULL,
                  maxs[0] ? maxs : NULL,
                  NULL};
  {
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "---- worker: run %" PRId64 " attempt %" PRId64
                     ": %s train --config %s%s%s%s%s (%s)\n",
                     r->id, r->attempt, w->bin, cfg_path, resume ? " --resume " : "",
                     resume ? ckdir : "", maxs[0] ? " --resume-max-step " : "", maxs, cvd);
    if (n > 0 && write(fd, head, (size_t)n < sizeof head ? (size_t)n : sizeof head - 1) < 0)
      wlog("run %" PRId64 ": cannot write to %s: %s", r->id, r->log_path, strerror(errno));
  }

  uv_pipe_init(&w->loop, &r->out, 0);
  r->out.data = r;
  r->nopen++;
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&r->out;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = fd;
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.exit_cb = on_child_exit;
  po.file = w->bin;
  po.args = args;
  po.env = env;
  po.stdio_count = 3;
  po.stdio = stdio;
  r->proc.data = r;
  int rc = env ? uv_spawn(&w->loop, &r->proc, &po) : UV_ENOMEM;
  free(env);
  close(fd);
  if (rc) {
    /* uv_spawn initialised the handle even when it failed: it is closed */
    if (env) {
      r->nopen++;
      run_close_handle(r, (uv_handle_t *)&r->proc);
    }
    run_close_handle(r, (uv_handle_t *)&r->out);
    run_fail_start(r, 127, "cannot start %s: %s", w->bin, uv_strerror(rc));
    return;
  }
  r->nopen++;
  r->proc_alive = 1;
  r->out_open = 1;
  r->pid = r->proc.pid;
  r->state = RUN_RUNNING;
  uv_read_start((uv_stream_t *)&r->out, on_out_alloc, on_out_read);
  wlog("run %" PRId64 " attempt %" PRId64 ": started pid %d (%s)%s", r->id, r->attempt, r->pid, cvd,
       resume ? ", resuming" : "");
}

/* ---- runs: end ---------------------------------------------------------- */

static char *log_tail(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return strdup("");
  struct stat st;
  char buf[LOG_TAIL_BYTES];
  ssize_t n = 0;
  if (!fstat(fd, &st)) {
    off_t off = st.st_size > LOG_TAIL_BYTES ? st.st_size - LOG_TAIL_BYTES : 0;
    n = pread(fd, buf, sizeof buf, off);
  }
  close(fd);
  return utf8_clean(buf, n > 0 ? (size_t)n : 0);
}

/* The trainer has exited and its stdout is drained (or it never started):
 * the last rows go, then one finished message that continues the seq. */
static void run_complete(run *r) {
  worker *w = r->w;
  run_flush(r);
  uv_timer_stop(&r->kill_timer);
  r->state = RUN_EXITED;
  int64_t code = r->term_signal ? 128 + r->term_signal : r->exit_status;
  char *tail = log_tail(r->log_path);
  if (!r->error && code != 0) {
    /* no error event (a config the trainer refused, a crash): the last line
     * of its stderr says why */
    char m[1024];
    const char *last = NULL;
    size_t llen = 0;
    for (const char *p = tail ? tail : ""; *p;) {
      const char *e = strchr(p, '\n');
      size_t n = e ? (size_t)(e - p) : strlen(p);
      if (n > 0 && strncmp(p, "---- worker:", 12)) {
        last = p;
        llen = n;
      }
      p += n + (e ? 1 : 0);
    }
    int k = r->term_signal
                ? snprintf(m, sizeof m, "the trainer was killed by signal %d (%s)", r->term_signal,
                           strsignal(r->term_signal))
                : snprintf(m, sizeof m, "the trainer exited with code %" PRId64, r->exit_status);
    if (last && k > 0 && (size_t)k < sizeof m)
      snprintf(m + k, sizeof m - (size_t)k, ": %.*s", (int)(llen > 800 ? 800 : llen), last);
    r->error = strdup(m);
  }
  json_t *msg = run_header(r, "finished");
  json_object_set_new(msg, "seq", json_integer(r->next_seq));
  json_object_set_new(msg, "exit_code", json_integer(code));
  json_object_set_new(msg, "signal", json_integer(r->term_signal));
  json_object_set(msg, "done", r->done ? r->done : json_null());
  json_object_set_new(msg, "error", r->error ? json_string(r->error) : json_null());
  json_object_set_new(msg, "log_tail", json_string(tail ? tail : ""));
  free(tail);
  char err[512];
  wbuf *b = wbuf_encode(msg, err, sizeof err);
  if (!b) {
    /* a malformed done object or error text: report without them */
    wlog("run %" PRId64 ": %s; sending finished without the done object", r->id, err);
    json_object_set_new(msg, "done", json_null());
    json_object_set_new(msg, "error", json_string("the trainer's final events were malformed"));
    b = wbuf_encode(msg, err, sizeof err);
  }
  json_decref(msg);
  if (b) {
    r->finished_seq = r->next_seq++;
    enqueue(r, r->finished_seq, b);
    send_msg(w, b);
    wbuf_unref(b);
  } else {
    wlog("BUG: run %" PRId64 ": cannot encode the finished message: %s", r->id, err);
  }
  if (r->term_signal)
    wlog("run %" PRId64 " attempt %" PRId64 ": killed by signal %d", r->id, r->attempt,
         r->term_signal);
  else
    wlog("run %" PRId64 " attempt %" PRId64 ": exited with code %" PRId64, r->id, r->attempt,
         r->exit_status);
  run_close_handle(r, (uv_handle_t *)&r->flush_timer);
  run_close_handle(r, (uv_handle_t *)&r->kill_timer);
  if (!b) {
    run_unlink(r);
  }
  /* a newer attempt of the same run waited for this one to stop */
  if (!w->stopping)
    for (run *x = w->runs; x; x = x->next)
      if (x->id == r->id && x->state == RUN_WAITING) {
        run_start(x);
        break;
      }
  maybe_finish_shutdown(w);
}

static void on_kill_timer(uv_timer_t *t) {
  run *r = t->data;
  if (!r->proc_alive)
    return;
  wlog("run %" PRId64 " attempt %" PRId64 ": still running %d ms after SIGTERM; SIGKILL", r->id,
       r->attempt, r->w->kill_grace_ms);
  uv_process_kill(&r->proc, SIGKILL);
}

/* SIGTERM (the trainer writes a checkpoint and exits 143), then SIGKILL
 * after the grace period. A run that has not started ends at once. */
static void run_cancel(run *r, const char *why) {
  if (r->cancelled || r->state == RUN_EXITED)
    return;
  r->cancelled = 1;
  if (r->state == RUN_WAITING) {
    r->term_signal = 0;
    run_fail_start(r, 128 + SIGTERM, "%s before it started", why);
    return;
  }
  wlog("run %" PRId64 " attempt %" PRId64 ": %s: SIGTERM to pid %d", r->id, r->attempt, why,
       r->pid);
  int rc = uv_process_kill(&r->proc, SIGTERM);
  if (rc)
    wlog("run %" PRId64 ": SIGTERM failed: %s", r->id, uv_strerror(rc));
  uv_timer_start(&r->kill_timer, on_kill_timer, (uint64_t)r->w->kill_grace_ms, 0);
}

/* ---- scheduler messages ------------------------------------------------- */

static void on_assign(worker *w, json_t *m) {
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int64_t attempt = json_integer_value(json_object_get(m, "attempt"));
  if (w->stopping) {
    wlog("run %" PRId64 " attempt %" PRId64 ": assignment ignored: the worker is stopping", id,
         attempt);
    return;
  }
  if (find_run(w, id, attempt)) {
    wlog("run %" PRId64 " attempt %" PRId64 ": already assigned here; repeat ignored", id, attempt);
    return;
  }
  run *r = calloc(1, sizeof *r);
  json_t *gl = json_object_get(m, "gpus");
  size_t ng = json_array_size(gl);
  if (!r || (ng && !(r->gpus = calloc(ng, sizeof *r->gpus)))) {
    wlog("run %" PRId64 ": out of memory; assignment ignored", id);
    free(r);
    return;
  }
  r->w = w;
  r->id = id;
  r->attempt = attempt;
  r->assign = json_incref(m);
  r->ngpus = (int)ng;
  for (size_t i = 0; i < ng; i++)
    r->gpus[i] = (int)json_integer_value(json_array_get(gl, i));
  r->next_seq = 1;
  r->state = RUN_WAITING;
  r->renewed_ms = uv_now(&w->loop); /* claimed just before it was sent */
  proto_reader_init(&r->rd);
  if (snprintf(r->dir, sizeof r->dir, "%s/runs/%" PRId64, w->work_dir, id) >= (int)sizeof r->dir ||
      snprintf(r->log_path, sizeof r->log_path, "%s/attempt-%" PRId64 ".log", r->dir, attempt) >=
          (int)sizeof r->log_path)
    wlog("run %" PRId64 ": the work directory's path is too long", id);
  uv_timer_init(&w->loop, &r->flush_timer);
  uv_timer_init(&w->loop, &r->kill_timer);
  r->flush_timer.data = r->kill_timer.data = r;
  r->nopen = 2;
  r->in_list = 1;
  run **tail = &w->runs;
  while (*tail)
    tail = &(*tail)->next;
  *tail = r;

  /* an older attempt of the same run still here stops first: two trainers
   * must never share a checkpoint directory */
  int blocked = 0;
  for (run *x = w->runs; x; x = x->next) {
    if (x == r || x->id != id || x->state == RUN_EXITED)
      continue;
    char why[64];
    snprintf(why, sizeof why, "superseded by attempt %" PRId64, attempt);
    if (x->state == RUN_RUNNING)
      blocked = 1;
    run_cancel(x, why);
  }
  wlog("run %" PRId64 " attempt %" PRId64 ": assigned (%zu GPU%s)%s", id, attempt, ng,
       ng == 1 ? "" : "s", blocked ? "; waiting for the previous attempt to stop" : "");
  if (!blocked)
    run_start(r);
}

static void on_cancel(worker *w, json_t *m) {
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int found = 0;
  for (run *r = w->runs, *next; r; r = next) {
    next = r->next;
    if (r->id != id)
      continue;
    found = 1;
    run_cancel(r, "cancelled by the scheduler");
  }
  if (!found)
    wlog("cancel for run %" PRId64 ", which is not here; ignored", id);
}

static void on_ack(worker *w, json_t *m) {
  int64_t id = json_integer_value(json_object_get(m, "run_id"));
  int64_t attempt = json_integer_value(json_object_get(m, "attempt"));
  int64_t seq = json_integer_value(json_object_get(m, "seq"));
  run *r = find_run(w, id, attempt);
  if (!r)
    return; /* a repeated ack for a run already released: nothing to drop */
  while (r->q_head && r->q_head->seq <= seq) {
    qmsg *q = r->q_head;
    r->q_head = q->next;
    if (!r->q_head)
      r->q_tail = NULL;
    wbuf_unref(q->b);
    free(q);
  }
  if (r->finished_seq && r->finished_seq <= seq) {
    wlog("run %" PRId64 " attempt %" PRId64 ": finished and acknowledged", id, attempt);
    run_unlink(r);
    maybe_finish_shutdown(w);
  }
}

static void on_hb_timer(uv_timer_t *t) {
  worker *w = t->data;
  json_t *ids = json_array();
  for (run *r = w->runs; r; r = r->next) {
    int dup = 0;
    for (run *x = w->runs; x != r; x = x->next)
      dup |= x->id == r->id;
    if (!dup)
      json_array_append_new(ids, json_integer(r->id));
  }
  int64_t hb = ++w->hb_next;
  w->hb_sent[hb % HB_RING].hb = hb;
  w->hb_sent[hb % HB_RING].sent_ms = uv_now(&w->loop);
  json_t *msg =
      json_pack("{s:s, s:o, s:I}", "type", "heartbeat", "runs", ids, "hb", (json_int_t)hb);
  send_json(w, msg);
  json_decref(msg);
}

/* The scheduler renewed the leases of the runs listed, no earlier than the
 * heartbeat was sent. */
static void on_lease_renewed(worker *w, json_t *m) {
  int64_t hb = json_integer_value(json_object_get(m, "hb"));
  if (hb <= 0 || w->hb_sent[hb % HB_RING].hb != hb)
    return;
  uint64_t sent = w->hb_sent[hb % HB_RING].sent_ms;
  w->fencing = 1;
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(m, "runs"), i, id) {
    for (run *r = w->runs; r; r = r->next)
      if (r->id == json_integer_value(id) && r->renewed_ms < sent)
        r->renewed_ms = sent;
  }
}

/* Fencing: a run whose lease this worker could not renew for most of the
 * lease (a partition, a scheduler or database away) may be re-queued and
 * started elsewhere; its trainer is killed (no SIGTERM: a checkpoint
 * written now could race the next attempt's) before that can happen. The
 * run's finished message still goes, when the scheduler is back. Only once
 * the scheduler has answered a heartbeat (an older one never does). */
static void on_fence_timer(uv_timer_t *t) {
  worker *w = t->data;
  if (!w->fencing || w->lease_ms <= 0)
    return;
  uint64_t now = uv_now(&w->loop), keep = (uint64_t)(w->lease_ms - w->lease_ms / 4);
  for (run *r = w->runs; r; r = r->next) {
    if (r->state != RUN_RUNNING || !r->proc_alive || r->fenced || now - r->renewed_ms <= keep)
      continue;
    wlog("run %" PRId64 " attempt %" PRId64 ": lease not renewed for %" PRIu64 " ms (lease %" PRId64
         " ms): SIGKILL to pid %d, the run may go to another worker",
         r->id, r->attempt, now - r->renewed_ms, w->lease_ms, r->pid);
    r->fenced = r->cancelled = 1;
    uv_process_kill(&r->proc, SIGKILL);
  }
}

static void on_welcome(conn *c, json_t *m) {
  worker *w = c->w;
  if (c->welcomed) {
    wlog("a second welcome from the scheduler; ignored");
    return;
  }
  c->welcomed = 1;
  w->backoff_ms = BACKOFF_MIN_MS;
  w->worker_id = json_integer_value(json_object_get(m, "worker_id"));
  double lease = json_number_value(json_object_get(m, "lease_s"));
  w->lease_ms = lease * 1000 > 3.6e6 ? 3600000 : (int64_t)(lease * 1000);
  uv_timer_stop(&w->welcome_timer);
  double hb =
      w->hb_override > 0 ? w->hb_override : json_number_value(json_object_get(m, "heartbeat_s"));
  uint64_t hb_ms = hb * 1000 < 10 ? 10 : hb * 1000 > 3.6e6 ? 3600000 : (uint64_t)(hb * 1000);
  uv_timer_start(&w->hb_timer, on_hb_timer, hb_ms, hb_ms);
  int nmsg = 0, nruns = 0;
  for (run *r = w->runs; r; r = r->next) {
    nruns++;
    if (r->started)
      conn_write(c, r->started);
    if (r->ckpt)
      conn_write(c, r->ckpt);
    for (qmsg *q = r->q_head; q; q = q->next, nmsg++)
      conn_write(c, q->b);
  }
  wlog("connected to the scheduler at %s:%s as worker %" PRId64 " (heartbeat %.3g s); "
       "%d run%s here, %d unacknowledged message%s resent",
       w->sched_host, w->sched_port, w->worker_id, hb, nruns, nruns == 1 ? "" : "s", nmsg,
       nmsg == 1 ? "" : "s");
}

static int on_sched_line(void *ud, const char *line, size_t len) {
  conn *c = ud;
  worker *w = c->w;
  if (c->closing)
    return 1;
  char err[512];
  json_t *m = NULL;
  proto_type t = proto_parse(line, len, &m, err, sizeof err);
  switch (t) {
  case PROTO_INVALID:
    wlog("ignored a bad message from the scheduler: %s", err);
    break;
  case PROTO_WELCOME:
    on_welcome(c, m);
    break;
  case PROTO_ASSIGN:
    on_assign(w, m);
    break;
  case PROTO_CANCEL:
    on_cancel(w, m);
    break;
  case PROTO_ACK:
    on_ack(w, m);
    break;
  case PROTO_HEARTBEAT:
    on_lease_renewed(w, m);
    break;
  case PROTO_ERROR:
    wlog("the scheduler reported an error: %s", json_string_value(json_object_get(m, "message")));
    json_decref(m);
    conn_close(c, NULL);
    return 1;
  default:
    wlog("ignored a %s message from the scheduler (a worker's message type)", proto_type_name(t));
    break;
  }
  json_decref(m);
  return c->closing ? 1 : 0;
}

/* ---- the connection ----------------------------------------------------- */

static void on_reconnect_timer(uv_timer_t *t) { start_connect(t->data); }

/* Exponential backoff from 100 ms to 5 s; once a welcome has told the lease,
 * to at most a quarter of it, so that a worker kept out for a while (a
 * scheduler restarting, its database away) is back before its runs' leases
 * lapse. */
static void schedule_reconnect(worker *w) {
  if (w->stopping)
    return;
  int cap = BACKOFF_MAX_MS;
  if (w->lease_ms > 0 && w->lease_ms / 4 < cap)
    cap = w->lease_ms / 4 > BACKOFF_MIN_MS ? (int)(w->lease_ms / 4) : BACKOFF_MIN_MS;
  if (w->backoff_ms > cap)
    w->backoff_ms = cap;
  wlog("reconnecting in %d ms", w->backoff_ms);
  uv_timer_start(&w->reconnect_timer, on_reconnect_timer, (uint64_t)w->backoff_ms, 0);
  w->backoff_ms = w->backoff_ms * 2 > cap ? cap : w->backoff_ms * 2;
}

static void connect_next(worker *w);

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  worker *w = c->w;
  int try_next = !c->connected && w->addr_i + 1 < w->naddrs;
  if (w->c == c)
    w->c = NULL;
  proto_reader_free(&c->rd);
  free(c);
  if (w->stopping) {
    maybe_finish_shutdown(w);
    return;
  }
  if (try_next) {
    w->addr_i++;
    connect_next(w);
  } else {
    schedule_reconnect(w);
  }
}

/* Closes c (a reason is logged when given); the close callback decides
 * whether to reconnect. */
static void conn_close(conn *c, const char *why) {
  if (!c || c->closing)
    return;
  worker *w = c->w;
  c->closing = 1;
  if (why)
    wlog("%s", why);
  if (w->c == c) {
    uv_timer_stop(&w->hb_timer);
    uv_timer_stop(&w->welcome_timer);
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  if (nread > 0) {
    int rc = proto_reader_feed(&c->rd, buf->base, (size_t)nread, on_sched_line, c);
    if (rc == SS_ERANGE)
      conn_close(c, "the scheduler sent a line over the protocol's limit; reconnecting");
    else if (rc == SS_ENOMEM)
      conn_close(c, "out of memory reading from the scheduler; reconnecting");
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_EOF)
    conn_close(c, "the scheduler closed the connection");
  else {
    char m[256];
    snprintf(m, sizeof m, "connection to the scheduler lost: %s", uv_strerror((int)nread));
    conn_close(c, m);
  }
}

static void send_hello(conn *c) {
  worker *w = c->w;
  json_t *gpus = json_array();
  for (int i = 0; i < w->ngpus; i++)
    json_array_append_new(gpus, json_pack("{s:i, s:s, s:I}", "index", w->gpus[i].index, "name",
                                          w->gpus[i].name, "memory_bytes",
                                          (json_int_t)w->gpus[i].memory_bytes));
  json_t *runs = json_array();
  for (run *r = w->runs; r; r = r->next)
    json_array_append_new(runs, json_pack("{s:I, s:I}", "run_id", (json_int_t)r->id, "attempt",
                                          (json_int_t)r->attempt));
  json_t *msg = json_pack("{s:s, s:i, s:s, s:s, s:s, s:o, s:i, s:o}", "type", "hello", "version",
                          PROTO_VERSION, "token", w->token, "name", w->name, "host", w->host,
                          "gpus", gpus, "cpu_slots", w->cpu_slots, "runs", runs);
  char err[512];
  wbuf *b = msg ? wbuf_encode(msg, err, sizeof err) : NULL;
  json_decref(msg);
  if (!b) {
    conn_close(c, "BUG: cannot encode the hello message");
    return;
  }
  conn_write(c, b);
  wbuf_unref(b);
}

static void on_welcome_timeout(uv_timer_t *t) {
  worker *w = t->data;
  if (w->c && !w->c->welcomed)
    conn_close(w->c, "no welcome from the scheduler within 10 s");
}

static void on_connect(uv_connect_t *req, int status) {
  conn *c = req->data;
  worker *w = c->w;
  if (status < 0) {
    if (status != UV_ECANCELED && !c->closing) {
      char m[512];
      snprintf(m, sizeof m, "cannot connect to the scheduler at %s:%s: %s", w->sched_host,
               w->sched_port, uv_strerror(status));
      conn_close(c, m);
    }
    return;
  }
  if (c->closing)
    return;
  c->connected = 1;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_tcp_keepalive(&c->tcp, 1, 10);
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
  if (rc) {
    conn_close(c, "cannot read from the scheduler's connection");
    return;
  }
  send_hello(c);
}

static void connect_next(worker *w) {
  if (w->stopping)
    return;
  conn *c = calloc(1, sizeof *c);
  if (!c) {
    wlog("out of memory");
    schedule_reconnect(w);
    return;
  }
  c->w = w;
  proto_reader_init(&c->rd);
  uv_tcp_init(&w->loop, &c->tcp);
  c->tcp.data = c;
  c->creq.data = c;
  w->c = c;
  uv_timer_start(&w->welcome_timer, on_welcome_timeout, WELCOME_TIMEOUT_MS, 0);
  int rc =
      uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&w->addrs[w->addr_i], on_connect);
  if (rc) {
    char m[512];
    snprintf(m, sizeof m, "cannot connect to the scheduler at %s:%s: %s", w->sched_host,
             w->sched_port, uv_strerror(rc));
    conn_close(c, m);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  worker *w = req->data;
  w->gai_active = 0;
  if (status < 0 || w->stopping) {
    if (status < 0 && status != UV_ECANCELED)
      wlog("cannot resolve %s: %s", w->sched_host, uv_strerror(status));
    uv_freeaddrinfo(res);
    if (w->stopping)
      maybe_finish_shutdown(w);
    else
      schedule_reconnect(w);
    return;
  }
  w->naddrs = 0;
  for (struct addrinfo *a = res; a && w->naddrs < MAX_ADDRS; a = a->ai_next)
    if (a->ai_addrlen <= sizeof w->addrs[0])
      memcpy(&w->addrs[w->naddrs++], a->ai_addr, a->ai_addrlen);
  uv_freeaddrinfo(res);
  if (!w->naddrs) {
    wlog("%s has no address", w->sched_host);
    schedule_reconnect(w);
    return;
  }
  w->addr_i = 0;
  connect_next(w);
}

static void start_connect(worker *w) {
  if (w->stopping || w->c || w->gai_active)
    return;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  w->gai.data = w;
  int rc = uv_getaddrinfo(&w->loop, &w->gai, on_resolved, w->sched_host, w->sched_port, &hints);
  if (rc) {
    wlog("cannot resolve %s: %s", w->sched_host, uv_strerror(rc));
    schedule_reconnect(w);
    return;
  }
  w->gai_active = 1;
}

/* ---- shutdown ----------------------------------------------------------- */

static void on_worker_handle_closed(uv_handle_t *h) {}

static void close_all(worker *w) {
  if (w->closed_all)
    return;
  w->closed_all = 1;
  w->stopping = 2;
  uv_close((uv_handle_t *)&w->sigint, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->sigterm, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->reconnect_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->welcome_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->hb_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->drain_timer, on_worker_handle_closed);
  uv_close((uv_handle_t *)&w->fence_timer, on_worker_handle_closed);
  if (w->gai_active)
    uv_cancel((uv_req_t *)&w->gai);
  conn_close(w->c, NULL);
  while (w->runs) {
    run *r = w->runs;
    int unacked = 0;
    for (qmsg *q = r->q_head; q; q = q->next)
      unacked++;
    if (unacked)
      wlog("run %" PRId64 " attempt %" PRId64 ": %d unacknowledged message%s dropped at exit",
           r->id, r->attempt, unacked, unacked == 1 ? "" : "s");
    if (r->proc_alive) {
      wlog("run %" PRId64 ": SIGKILL to pid %d at exit", r->id, r->pid);
      uv_process_kill(&r->proc, SIGKILL);
      r->proc_alive = 0;
      run_close_handle(r, (uv_handle_t *)&r->proc);
    }
    if (r->out_open) {
      r->out_open = 0;
      run_close_handle(r, (uv_handle_t *)&r->out);
    }
    run_unlink(r);
  }
}

static void on_drain_timer(uv_timer_t *t) {
  worker *w = t->data;
  wlog("stopping without every acknowledgement (waited %d ms)", w->drain_ms);
  close_all(w);
}

/* While stopping: once no trainer runs, wait (up to drain_ms) for the acks
 * of what is left, then close everything. */
static void maybe_finish_shutdown(worker *w) {
  if (w->stopping != 1)
    return;
  for (run *r = w->runs; r; r = r->next)
    if (r->state != RUN_EXITED)
      return;
  if (!w->runs || !w->c || !w->c->welcomed) {
    close_all(w);
    return;
  }
  if (!uv_is_active((uv_handle_t *)&w->drain_timer))
    uv_timer_start(&w->drain_timer, on_drain_timer, (uint64_t)w->drain_ms, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
  worker *w = s->data;
  if (w->stopping) {
    wlog("%s again: stopping now", strsignal(signum));
    close_all(w);
    return;
  }
  wlog("%s: stopping (trainers get SIGTERM; a second signal stops at once)", strsignal(signum));
  w->stopping = 1;
  uv_timer_stop(&w->reconnect_timer);
  if (w->gai_active)
    uv_cancel((uv_req_t *)&w->gai);
  if (w->c && !w->c->welcomed)
    conn_close(w->c, NULL);
  for (run *r = w->runs, *next; r; r = next) {
    next = r->next;
    if (r->state == RUN_WAITING) {
      run_unlink(r);
      continue;
    }
    if (r->state == RUN_RUNNING)
      run_cancel(r, "the worker is stopping");
  }
  maybe_finish_shutdown(w);
}

/* ---- startup ------------------------------------------------------------ */

static int read_token(worker *w, const wrk_options *o) {
  if (!o->token_file) {
    if (!o->token || !*o->token) {
      wlog("no cluster token: give --token-file");
      return SS_EINVAL;
    }
    w->token = strdup(o->token);
    return w->token ? 0 : SS_ENOMEM;
  }
  char buf[TOKEN_MAX + 1], err[512];
  int shared = 0;
  int rc = token_read(o->token_file, 1, buf, sizeof buf, &shared, err, sizeof err);
  if (shared)
    wlog("warning: the token file %s is readable by other users", o->token_file);
  if (rc) {
    wlog("%s", err);
    return rc;
  }
  w->token = strdup(buf);
  memset(buf, 0, sizeof buf);
  return w->token ? 0 : SS_ENOMEM;
}

static int parse_address(worker *w, const char *s) {
  if (!s || !*s) {
    wlog("no scheduler address: give --scheduler HOST:PORT");
    return SS_EINVAL;
  }
  int port;
  char err[512];
  if (addr_split(s, NULL, 1, w->sched_host, sizeof w->sched_host, &port, err, sizeof err)) {
    wlog("--scheduler %s", err);
    return SS_EINVAL;
  }
  snprintf(w->sched_port, sizeof w->sched_port, "%d", port);
  return 0;
}

/* nvidia-smi's CSV: "0, NVIDIA H200, 143771" (memory in MiB). No GPU when
 * it is missing or fails: a CPU host is fine. */
static void discover_gpus(worker *w) {
  FILE *p = popen("nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits"
                  " 2>/dev/null",
                  "r");
  if (!p) {
    wlog("cannot run nvidia-smi: %s; no GPUs", strerror(errno));
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char *c1 = strchr(line, ','), *c2 = strrchr(line, ',');
    if (!c1 || c1 == c2)
      continue;
    *c1 = *c2 = '\0';
    char *end;
    long idx = strtol(line, &end, 10);
    if (end == line || idx < 0 || idx > INT_MAX)
      continue;
    char *name = c1 + 1;
    while (*name == ' ')
      name++;
    size_t nl = strlen(name);
    while (nl > 0 && name[nl - 1] == ' ')
      name[--nl] = '\0';
    long long mib = strtoll(c2 + 1, NULL, 10);
    gpu *g = realloc(w->gpus, (size_t)(w->ngpus + 1) * sizeof *g);
    if (!g)
      break;
    w->gpus = g;
    g += w->ngpus++;
    g->index = (int)idx;
    char *clean = utf8_clean(name, nl);
    snprintf(g->name, sizeof g->name, "%s", clean ? clean : "GPU");
    free(clean);
    g->memory_bytes = mib > 0 ? (int64_t)mib << 20 : 0;
  }
  int st = pclose(p);
  if (w->ngpus == 0)
    wlog("no GPUs found (nvidia-smi %s)", st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127
                                              ? "not installed"
                                          : st != 0 ? "failed"
                                                    : "lists none");
}

static int restrict_gpus(worker *w, const wrk_options *o) {
  if (!o->gpus)
    return 0;
  gpu *keep = calloc((size_t)o->n_gpus + 1, sizeof *keep);
  if (!keep)
    return SS_ENOMEM;
  int n = 0;
  for (int i = 0; i < o->n_gpus; i++) {
    int found = 0;
    for (int j = 0; j < w->ngpus && !found; j++)
      if (w->gpus[j].index == o->gpus[i]) {
        found = 1;
        int dup = 0;
        for (int k = 0; k < n; k++)
          dup |= keep[k].index == o->gpus[i];
        if (!dup)
          keep[n++] = w->gpus[j];
      }
    if (!found) {
      char have[256] = "none";
      size_t off = 0;
      for (int j = 0; j < w->ngpus && off < sizeof have; j++)
        off += (size_t)snprintf(have + off, sizeof have - off, "%s%d", j ? ", " : "",
                                w->gpus[j].index);
      wlog("--gpus: GPU %d does not exist on this host (found: %s)", o->gpus[i], have);
      free(keep);
      return SS_EINVAL;
    }
  }
  free(w->gpus);
  w->gpus = keep;
  w->ngpus = n;
  return 0;
}

void wrk_options_init(wrk_options *o) {
  memset(o, 0, sizeof *o);
  o->cpu_slots = -1;
  o->drain_ms = -1;
}

static void list_handle(uv_handle_t *h, void *arg) {
  wlog("BUG: handle %p of type %s left open at exit", (void *)h, uv_handle_type_name(h->type));
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

static void worker_free(worker *w) {
  if (w->token) {
    memset(w->token, 0, strlen(w->token));
    free(w->token);
  }
  free(w->gpus);
  free(w);
}

int wrk_run(const wrk_options *o) {
  worker *w = calloc(1, sizeof *w);
  if (!w)
    return SS_ENOMEM;
  int rc = parse_address(w, o->scheduler);
  if (!rc)
    rc = read_token(w, o);
  if (rc) {
    worker_free(w);
    return rc;
  }
  if (uv_os_gethostname(w->host, &(size_t){sizeof w->host}))
    snprintf(w->host, sizeof w->host, "localhost");
  if (o->name && *o->name)
    snprintf(w->name, sizeof w->name, "%s", o->name);
  else
    snprintf(w->name, sizeof w->name, "%s:%d", w->host, (int)getpid());
  size_t bl = sizeof w->bin;
  if (o->binary && *o->binary)
    snprintf(w->bin, sizeof w->bin, "%s", o->binary);
  else if (uv_exepath(w->bin, &bl))
    snprintf(w->bin, sizeof w->bin, "/proc/self/exe");
  const char *wd = o->work_dir && *o->work_dir ? o->work_dir : "./.scalesweep/worker";
  if (fio_mkdirs(wd, 0755) != 0 || !realpath(wd, w->work_dir)) {
    wlog("cannot create the work directory %s: %s", wd, strerror(errno));
    worker_free(w);
    return SS_EIO;
  }
  discover_gpus(w);
  rc = restrict_gpus(w, o);
  if (rc) {
    worker_free(w);
    return rc;
  }
  w->cpu_slots = o->cpu_slots >= 0 ? o->cpu_slots : w->ngpus == 0 ? 1 : 0;
  w->hb_override = o->heartbeat_s;
  w->kill_grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : 10000;
  w->drain_ms = o->drain_ms >= 0 ? o->drain_ms : 2000;
  w->backoff_ms = BACKOFF_MIN_MS;

  /* A SIGINT ignored by whoever started us stays ignored (the shell's rule
   * for background jobs; `scalesweep up` stops its worker with SIGTERM). */
  struct sigaction old_int;
  int watch_int = !(sigaction(SIGINT, NULL, &old_int) == 0 && old_int.sa_handler == SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  rc = uv_loop_init(&w->loop);
  if (rc) {
    wlog("cannot start the event loop: %s", uv_strerror(rc));
    worker_free(w);
    return SS_EIO;
  }
  uv_signal_init(&w->loop, &w->sigint);
  uv_signal_init(&w->loop, &w->sigterm);
  uv_timer_init(&w->loop, &w->reconnect_timer);
  uv_timer_init(&w->loop, &w->welcome_timer);
  uv_timer_init(&w->loop, &w->hb_timer);
  uv_timer_init(&w->loop, &w->drain_timer);
  uv_timer_init(&w->loop, &w->fence_timer);
  w->sigint.data = w->sigterm.data = w;
  w->reconnect_timer.data = w->welcome_timer.data = w->hb_timer.data = w->drain_timer.data = w;
  w->fence_timer.data = w;
  uv_timer_start(&w->fence_timer, on_fence_timer, FENCE_CHECK_MS, FENCE_CHECK_MS);
  if (watch_int)
    uv_signal_start(&w->sigint, on_signal, SIGINT);
  uv_signal_start(&w->sigterm, on_signal, SIGTERM);

  char gl[256] = "";
  size_t off = 0;
  for (int i = 0; i < w->ngpus && off < sizeof gl; i++)
    off += (size_t)snprintf(gl + off, sizeof gl - off, "%s%d", i ? "," : "", w->gpus[i].index);
  wlog("%s: GPUs [%s], %d CPU slot%s, work dir %s, trainer %s", w->name, gl, w->cpu_slots,
       w->cpu_slots == 1 ? "" : "s", w->work_dir, w->bin);
  start_connect(w);

  uv_run(&w->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&w->loop);
  if (rc) {
    uv_walk(&w->loop, list_handle, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    worker_free(w);
    return SS_EIO;
  }
  wlog("stopped");
  worker_free(w);
  return 0;
}

/* common/proto.c: line framing, validation of every message type, encoding.
 *
 * Framing contract checked here: lines may be split across feeds at any
 * byte; many lines may come in one feed; "\r\n" is tolerated (the '\r' is
 * stripped); empty lines are skipped; a line of PROTO_MAX_LINE bytes is
 * accepted and one byte more gives SS_ERANGE without the reader ever holding
 * more than PROTO_MAX_LINE + 1 bytes. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/err.h"
#include "common/proto.h"

/* ---- framing ------------------------------------------------------------ */

typedef struct lines {
  int n;
  char *v[64];
  size_t len[64];
  int stop_after; /* on_line returns 1 after this many lines (0: never) */
  int bad_nul;    /* a line was not NUL-terminated */
} lines;

static int collect(void *ud, const char *line, size_t len) {
  lines *l = ud;
  if (line[len] != '\0')
    l->bad_nul = 1;
  if (l->n < 64) {
    l->v[l->n] = malloc(len + 1);
    memcpy(l->v[l->n], line, len + 1);
    l->len[l->n] = len;
  }
  l->n++;
  return l->stop_after && l->n >= l->stop_after ? 1 : 0;
}

static void lines_free(lines *l) {
  for (int i = 0; i < l->n && i < 64; i++)
    free(l->v[i]);
  memset(l, 0, sizeof *l);
}

/* A reader and the lines it has delivered, opened and closed together. */
typedef struct reader_lines {
  proto_reader r;
  lines l;
} reader_lines;

static void rl_open(reader_lines *f) {
  proto_reader_init(&f->r);
  memset(&f->l, 0, sizeof f->l);
}

static void rl_close(reader_lines *f) {
  lines_free(&f->l);
  proto_reader_free(&f->r);
}

/* proto_reader_feed of len bytes of data into f's reader, lines to f's list */
static int feed(reader_lines *f, const char *data, size_t len) {
  return proto_reader_feed(&f->r, data, len, collect, &f->l);
}

static void test_split_and_many(void) {
  const char *stream = "{\"a\":1}\n{\"b\":22}\n\n{\"c\":333}\r\n\r\n{\"d\":4}\n";
  const char *want[] = {"{\"a\":1}", "{\"b\":22}", "{\"c\":333}", "{\"d\":4}"};
  size_t n = strlen(stream);
  /* every split point, and byte at a time */
  for (size_t cut = 0; cut <= n; cut++) {
    reader_lines f;
    rl_open(&f);
    CHECK_INT_EQ(feed(&f, stream, cut), 0);
    CHECK_INT_EQ(feed(&f, stream + cut, n - cut), 0);
    CHECK_INT_EQ(f.l.n, 4);
    for (int i = 0; i < 4 && i < f.l.n; i++)
      CHECK(!strcmp(f.l.v[i], want[i]));
    CHECK(!f.l.bad_nul);
    CHECK_INT_EQ(f.r.len, 0);
    rl_close(&f);
  }
  reader_lines f;
  rl_open(&f);
  for (size_t i = 0; i < n; i++)
    CHECK_INT_EQ(feed(&f, stream + i, 1), 0);
  CHECK_INT_EQ(f.l.n, 4);
  CHECK(f.l.n == 4 && !strcmp(f.l.v[2], "{\"c\":333}"));
  lines_free(&f.l);
  /* an unfinished line stays buffered */
  CHECK_INT_EQ(feed(&f, "{\"x\"", 4), 0);
  CHECK_INT_EQ(f.l.n, 0);
  CHECK_INT_EQ(f.r.len, 4);
  rl_close(&f);
}

static void test_stop(void) {
  reader_lines f;
  rl_open(&f);
  f.l.stop_after = 2;
  CHECK_INT_EQ(feed(&f, "a\nb\nc\nd", 7), 1);
  CHECK_INT_EQ(f.l.n, 2);
  CHECK_INT_EQ(f.r.len, 0);
  rl_close(&f);
}

static void test_limit(void) {
  size_t max = PROTO_MAX_LINE;
  char *big = malloc(max + 2);
  memset(big, 'x', max + 1);
  big[max] = '\n';
  /* exactly the limit: accepted, in one feed and in 3 pieces */
  for (int pieces = 1; pieces <= 3; pieces++) {
    reader_lines f;
    rl_open(&f);
    size_t step = (max + 1) / (size_t)pieces + 1, off = 0;
    int rc = 0;
    while (off < max + 1 && !rc) {
      size_t k = off + step > max + 1 ? max + 1 - off : step;
      rc = feed(&f, big + off, k);
      off += k;
    }
    CHECK_INT_EQ(rc, 0);
    CHECK_INT_EQ(f.l.n, 1);
    CHECK(f.l.n == 1 && f.l.len[0] == max);
    CHECK(f.r.cap <= max + 1);
    rl_close(&f);
  }
  /* one byte over: SS_ERANGE as soon as the partial line passes the bound,
   * before any newline arrives, and nothing over the bound is buffered */
  memset(big, 'y', max + 2);
  {
    reader_lines f;
    rl_open(&f);
    CHECK_INT_EQ(feed(&f, big, max), 0);
    CHECK_INT_EQ(feed(&f, big, 1), SS_ERANGE);
    CHECK_INT_EQ(f.l.n, 0);
    CHECK(f.r.cap <= max + 1);
    CHECK_INT_EQ(f.r.len, 0);
    /* the reader is usable again (the caller drops the connection anyway) */
    CHECK_INT_EQ(feed(&f, "{}\n", 3), 0);
    CHECK_INT_EQ(f.l.n, 1);
    rl_close(&f);
  }
  {
    reader_lines f;
    rl_open(&f);
    big[max + 1] = '\n';
    CHECK_INT_EQ(feed(&f, big, max + 2), SS_ERANGE);
    CHECK_INT_EQ(f.l.n, 0);
    CHECK(f.r.cap <= max + 1);
    rl_close(&f);
  }
  /* a CR counts toward the limit: max bytes then "\r\n" is over */
  {
    reader_lines f;
    rl_open(&f);
    memset(big, 'z', max);
    big[max] = '\r';
    big[max + 1] = '\n';
    CHECK_INT_EQ(feed(&f, big, max + 2), SS_ERANGE);
    rl_close(&f);
  }
  free(big);
}

/* ---- parsing ------------------------------------------------------------ */

static proto_type parse(const char *s, char *err, size_t errlen) {
  json_t *m = NULL;
  proto_type t = proto_parse(s, strlen(s), &m, err, errlen);
  if (t != PROTO_INVALID) {
    CHECK(json_is_object(m));
    json_decref(m);
  } else {
    CHECK(m == NULL);
  }
  return t;
}

static void expect_ok(const char *s, proto_type want) {
  char err[512];
  proto_type t = parse(s, err, sizeof err);
  if (t != want)
    fprintf(stderr, "expected %s for %s, got %s: %s\n", proto_type_name(want), s,
            proto_type_name(t), err);
  CHECK_INT_EQ(t, want);
}

/* The error must contain every fragment (the JSON path, found, expected). */
static void expect_err(const char *s, const char *frag1, const char *frag2) {
  char err[512];
  proto_type t = parse(s, err, sizeof err);
  CHECK_INT_EQ(t, PROTO_INVALID);
  int ok = t == PROTO_INVALID && strstr(err, frag1) && (!frag2 || strstr(err, frag2));
  if (!ok)
    fprintf(stderr, "for %s\n  got error: %s\n  wanted: %s / %s\n", s, err, frag1,
            frag2 ? frag2 : "");
  CHECK(ok);
}

static const char *HELLO =
    "{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"h:1\",\"host\":\"h\","
    "\"gpus\":[{\"index\":0,\"name\":\"NVIDIA H200\",\"memory_bytes\":150754820096}],"
    "\"cpu_slots\":0,\"runs\":[{\"run_id\":7,\"attempt\":2}]}";

static void test_valid(void) {
  expect_ok(HELLO, PROTO_HELLO);
  expect_ok("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
            "\"gpus\":[],\"cpu_slots\":1,\"runs\":[]}",
            PROTO_HELLO);
  expect_ok("{\"type\":\"heartbeat\",\"runs\":[1,2,3]}", PROTO_HEARTBEAT);
  expect_ok("{\"type\":\"heartbeat\",\"runs\":[]}", PROTO_HEARTBEAT);
  expect_ok("{\"type\":\"started\",\"run_id\":1,\"attempt\":1,\"config\":{\"event\":\"config\"}}",
            PROTO_STARTED);
  expect_ok("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
            "{\"event\":\"step\",\"step\":1,\"tokens\":64,\"train_loss\":3.3,\"lr\":1e-5,"
            "\"grad_norm\":1.08,\"tok_per_s\":161148},"
            "{\"event\":\"eval\",\"step\":1,\"tokens\":64,\"val_loss\":3.2,\"future\":\"x\"}]}",
            PROTO_METRICS);
  expect_ok("{\"type\":\"checkpoint\",\"run_id\":1,\"attempt\":0,\"step\":10,\"path\":\"/c\"}",
            PROTO_CHECKPOINT);
  expect_ok("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":0,"
            "\"signal\":0,\"done\":{\"final_val_loss\":3.2},\"error\":null,\"log_tail\":\"\"}",
            PROTO_FINISHED);
  expect_ok("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":143,"
            "\"signal\":0,\"done\":null,\"error\":\"stopped\",\"log_tail\":\"x\"}",
            PROTO_FINISHED);
  expect_ok("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":5,\"lease_s\":30}",
            PROTO_WELCOME);
  expect_ok("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":0.5,\"lease_s\":30}",
            PROTO_WELCOME);
  expect_ok("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":5,\"lease_s\":30,"
            "\"data_dirs\":[\"/data\",\"/mnt/shards\"]}",
            PROTO_WELCOME);
  expect_ok("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[0],"
            "\"checkpoint_dir\":\"/ck\",\"resume\":false}",
            PROTO_ASSIGN);
  /* a worker's part of a run spread over workers */
  expect_ok("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[],"
            "\"checkpoint_dir\":\"/ck\",\"resume\":false,\"dist\":{\"ranks\":[2,3],"
            "\"addr\":\"10.0.0.1:29501\",\"secret\":\"ab12\"}}",
            PROTO_ASSIGN);
  /* a hello with its backends */
  expect_ok("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"w\",\"host\":\"h\","
            "\"gpus\":[],\"cpu_slots\":1,\"runs\":[],\"backends\":{\"cpu\":{\"slots\":1},"
            "\"cuda\":{\"error\":\"no device\"}}}",
            PROTO_HELLO);
  /* a worker in a Slurm job says which (the scheduler's --slurm counts its jobs' workers) */
  expect_ok("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n1-42\",\"host\":\"h\","
            "\"gpus\":[],\"cpu_slots\":1,\"runs\":[],\"slurm_job\":\"42\"}",
            PROTO_HELLO);
  expect_ok("{\"type\":\"cancel\",\"run_id\":5}", PROTO_CANCEL);
  expect_ok("{\"type\":\"ack\",\"run_id\":1,\"attempt\":1,\"seq\":3}", PROTO_ACK);
  /* a refused (fenced) message's ack */
  expect_ok("{\"type\":\"ack\",\"run_id\":1,\"attempt\":1,\"seq\":3,\"stored\":false}", PROTO_ACK);
  expect_ok("{\"type\":\"error\",\"message\":\"bad token\"}", PROTO_ERROR);
  /* a stopping worker, and an interrupted run's finished */
  expect_ok("{\"type\":\"stopping\",\"runs\":[{\"run_id\":3,\"attempt\":2}]}", PROTO_STOPPING);
  expect_ok("{\"type\":\"stopping\",\"runs\":[]}", PROTO_STOPPING);
  expect_ok("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":143,"
            "\"signal\":0,\"done\":null,\"error\":\"stopped\",\"log_tail\":\"x\","
            "\"interrupted\":true,\"checkpoint_step\":120}",
            PROTO_FINISHED);
  /* a fenced trainer's finished */
  expect_ok("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":-1,"
            "\"signal\":9,\"done\":null,\"error\":\"killed\",\"log_tail\":\"x\","
            "\"interrupted\":true,\"fenced\":true,\"checkpoint_step\":120}",
            PROTO_FINISHED);
  /* the largest values an int holds, and run ids beyond it (int64) */
  expect_ok("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
            "\"gpus\":[{\"index\":2147483647,\"name\":\"g\",\"memory_bytes\":1}],"
            "\"cpu_slots\":2147483647,\"runs\":[{\"run_id\":9223372036854775807,"
            "\"attempt\":2147483647,\"gpus\":[0]}]}",
            PROTO_HELLO);
  expect_ok("{\"type\":\"finished\",\"run_id\":4294967301,\"attempt\":1,\"seq\":4,"
            "\"exit_code\":-2147483648,\"signal\":0,\"done\":null,\"error\":null,"
            "\"log_tail\":\"\"}",
            PROTO_FINISHED);
  /* unknown keys are ignored */
  expect_ok("{\"type\":\"cancel\",\"run_id\":5,\"reason\":\"user\"}", PROTO_CANCEL);
  /* whitespace around the object */
  expect_ok("  {\"type\":\"cancel\", \"run_id\": 5}  ", PROTO_CANCEL);
}

static void test_invalid(void) {
  /* not JSON / not an object / no type */
  expect_err("{\"type\":\"cancel\",", "$: invalid JSON", "column");
  expect_err("", "$: invalid JSON", NULL);
  expect_err("[1,2]", "$: expected a message object", "found an array");
  expect_err("42", "$: expected a message object", "found 42");
  expect_err("{\"run_id\":1}", "$.type: missing", NULL);
  expect_err("{\"type\":7}", "$.type: expected one of", "found 7");
  expect_err("{\"type\":\"launch\"}", "$.type: expected one of", "found \"launch\"");
  expect_err("{\"type\":\"cancel\",\"run_id\":1,\"run_id\":2}", "$: invalid JSON", "duplicate");
  /* stopping; finished's optional fields have their types when present */
  expect_err("{\"type\":\"stopping\"}", "$.runs: missing", NULL);
  expect_err("{\"type\":\"stopping\",\"runs\":[{\"run_id\":1}]}", "$.runs[0].attempt: missing",
             NULL);
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":143,"
             "\"signal\":0,\"done\":null,\"error\":null,\"log_tail\":\"\",\"interrupted\":1}",
             "$.interrupted: expected true or false", "found 1");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":-1,"
             "\"signal\":9,\"done\":null,\"error\":null,\"log_tail\":\"\",\"fenced\":\"yes\"}",
             "$.fenced: expected true or false", "found \"yes\"");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":143,"
             "\"signal\":0,\"done\":null,\"error\":null,\"log_tail\":\"\",\"checkpoint_step\":-1}",
             "$.checkpoint_step: expected an integer >= 0", NULL);
  expect_err("{\"type\":\"ack\",\"run_id\":1,\"attempt\":1,\"seq\":3,\"stored\":0}",
             "$.stored: expected true or false", "found 0");
  /* hello */
  expect_err("{\"type\":\"hello\",\"version\":2,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[]}",
             "$.version: expected protocol version 1", "found 2");
  expect_err("{\"type\":\"hello\",\"version\":1,\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[]}",
             "$.token: missing", "a string");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":5,\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[]}",
             "$.token: expected a string", "found 5");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[{\"index\":0,\"name\":\"g\",\"memory_bytes\":1},{\"index\":-1,"
             "\"name\":\"g\",\"memory_bytes\":1}],\"cpu_slots\":1,\"runs\":[]}",
             "$.gpus[1].index: expected an integer >= 0", "found -1");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[{\"index\":0,\"memory_bytes\":1}],\"cpu_slots\":1,\"runs\":[]}",
             "$.gpus[0].name: missing", NULL);
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1.5,\"runs\":[]}",
             "$.cpu_slots: expected a non-negative integer", "found 1.5");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[{\"run_id\":\"7\",\"attempt\":1}]}",
             "$.runs[0].run_id: expected a non-negative integer", "found \"7\"");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":{},\"cpu_slots\":1,\"runs\":[]}",
             "$.gpus: expected an array of GPU objects", "found an object");
  /* heartbeat */
  expect_err("{\"type\":\"heartbeat\"}", "$.runs: missing", NULL);
  expect_err("{\"type\":\"heartbeat\",\"runs\":[1,\"x\"]}", "$.runs[1]: expected", "found \"x\"");
  /* started */
  expect_err("{\"type\":\"started\",\"run_id\":1,\"attempt\":1,\"config\":[]}",
             "$.config: expected an object", "found an array");
  expect_err("{\"type\":\"started\",\"attempt\":1,\"config\":{}}", "$.run_id: missing", NULL);
  /* metrics */
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":0,\"rows\":[]}",
             "$.seq: expected an integer >= 1", "found 0");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":[{\"event\":"
             "\"step\",\"step\":1,\"tokens\":64,\"train_loss\":3},{},{},{\"event\":\"step\","
             "\"step\":\"x\",\"tokens\":1,\"train_loss\":1}]}",
             "$.rows[1].event: missing", NULL);
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
             "{\"event\":\"step\",\"step\":1,\"tokens\":64,\"train_loss\":3},"
             "{\"event\":\"step\",\"step\":2,\"tokens\":64,\"train_loss\":3},"
             "{\"event\":\"eval\",\"step\":2,\"tokens\":64,\"val_loss\":3},"
             "{\"event\":\"step\",\"step\":\"x\",\"tokens\":1,\"train_loss\":1}]}",
             "$.rows[3].step: expected a non-negative integer, found \"x\"", NULL);
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
             "{\"event\":\"done\",\"step\":1,\"tokens\":64}]}",
             "$.rows[0].event: expected \"step\" or \"eval\"", "found \"done\"");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
             "{\"event\":\"eval\",\"step\":1,\"tokens\":64}]}",
             "$.rows[0].val_loss: missing", NULL);
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
             "{\"event\":\"step\",\"step\":1,\"tokens\":64,\"train_loss\":3,\"lr\":\"high\"}]}",
             "$.rows[0].lr: expected a number", "found \"high\"");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":[7]}",
             "$.rows[0]: expected a step or eval event object", "found 7");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1,\"rows\":["
             "{\"event\":\"step\",\"step\":2147483648,\"tokens\":64,\"train_loss\":3}]}",
             "$.rows[0].step: expected an integer in [0, 2147483647]", "found 2147483648");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":1,\"seq\":1}", "$.rows: missing",
             NULL);
  /* checkpoint */
  expect_err("{\"type\":\"checkpoint\",\"run_id\":1,\"attempt\":1,\"step\":3}", "$.path: missing",
             NULL);
  expect_err("{\"type\":\"checkpoint\",\"run_id\":1,\"attempt\":1,\"step\":3,\"path\":null}",
             "$.path: expected a string", "found null");
  /* finished */
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":0,"
             "\"signal\":0,\"done\":[],\"error\":null,\"log_tail\":\"\"}",
             "$.done: expected an object or null", "found an array");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":0,"
             "\"signal\":0,\"done\":null,\"error\":false,\"log_tail\":\"\"}",
             "$.error: expected a string or null", "found false");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":0,"
             "\"signal\":0,\"done\":null,\"error\":null}",
             "$.log_tail: missing", NULL);
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,\"exit_code\":\"0\","
             "\"signal\":0,\"done\":null,\"error\":null,\"log_tail\":\"\"}",
             "$.exit_code: expected an integer", "found \"0\"");
  /* welcome */
  expect_err("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":0,\"lease_s\":30}",
             "$.heartbeat_s: expected a positive number", "found 0");
  expect_err("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":5}", "$.lease_s: missing",
             NULL);
  expect_err("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":5,\"lease_s\":30,"
             "\"data_dirs\":\"/data\"}",
             "$.data_dirs: expected an array of absolute paths", NULL);
  expect_err("{\"type\":\"welcome\",\"worker_id\":3,\"heartbeat_s\":5,\"lease_s\":30,"
             "\"data_dirs\":[\"/data\",\"rel\"]}",
             "$.data_dirs[1]: expected an absolute path", "found \"rel\"");
  /* assign */
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[0],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":\"yes\"}",
             "$.resume: expected true or false", "found \"yes\"");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[0,-2],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":false}",
             "$.gpus[1]: expected an integer >= 0", "found -2");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":\"{}\",\"gpus\":[],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":false}",
             "$.config: expected an object", "found \"{}\"");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[],"
             "\"resume\":false}",
             "$.checkpoint_dir: missing", NULL);
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":false,\"dist\":{\"ranks\":[\"2\"],"
             "\"addr\":\"h:1\",\"secret\":\"s\"}}",
             "$.dist.ranks[0]: expected a non-negative integer", "found \"2\"");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":false,\"dist\":{\"ranks\":[],"
             "\"addr\":\"h:1\",\"secret\":\"s\"}}",
             "$.dist: expected at least one rank in ranks", NULL);
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"w\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[],\"backends\":{\"cuda\":{\"devices\":7}}}",
             "$.backends.cuda.devices: expected an array of GPU objects", "found 7");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"w\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[],\"slurm_job\":42}",
             "$.slurm_job: expected a string", "found 42");
  /* what a peer keeps in an int is refused beyond it, never cast: 2^32 + 5
   * would become 5 (a worker claiming 5 CPU slots, attempt 5 of a run) */
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":4294967301,\"runs\":[]}",
             "$.cpu_slots: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":2147483648,\"runs\":[]}",
             "$.cpu_slots: expected an integer in [0, 2147483647]", "found 2147483648");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[{\"run_id\":7,\"attempt\":4294967301}]}",
             "$.runs[0].attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[{\"run_id\":7,\"attempt\":1,"
             "\"gpus\":[0,4294967296]}]}",
             "$.runs[0].gpus[1]: expected an integer in [0, 2147483647]", "found 4294967296");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"n\",\"host\":\"h\","
             "\"gpus\":[{\"index\":4294967296,\"name\":\"g\",\"memory_bytes\":1}],"
             "\"cpu_slots\":1,\"runs\":[]}",
             "$.gpus[0].index: expected an integer in [0, 2147483647]", "found 4294967296");
  expect_err("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"name\":\"w\",\"host\":\"h\","
             "\"gpus\":[],\"cpu_slots\":1,\"runs\":[],\"backends\":{\"cuda\":{\"devices\":"
             "[{\"index\":2147483648,\"name\":\"g\",\"memory_bytes\":1}]}}}",
             "$.backends.cuda.devices[0].index: expected an integer in [0, 2147483647]",
             "found 2147483648");
  expect_err("{\"type\":\"stopping\",\"runs\":[{\"run_id\":3,\"attempt\":4294967301}]}",
             "$.runs[0].attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"started\",\"run_id\":1,\"attempt\":4294967301,\"config\":{}}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"metrics\",\"run_id\":1,\"attempt\":4294967301,\"seq\":1,"
             "\"rows\":[]}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"checkpoint\",\"run_id\":1,\"attempt\":4294967301,\"step\":3,"
             "\"path\":\"/c\"}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":4294967301,\"seq\":4,"
             "\"exit_code\":0,\"signal\":0,\"done\":null,\"error\":null,\"log_tail\":\"\"}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,"
             "\"exit_code\":4294967296,\"signal\":0,\"done\":null,\"error\":null,"
             "\"log_tail\":\"\"}",
             "$.exit_code: expected an integer in [-2147483648, 2147483647]", "found 4294967296");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,"
             "\"exit_code\":-2147483649,\"signal\":0,\"done\":null,\"error\":null,"
             "\"log_tail\":\"\"}",
             "$.exit_code: expected an integer >= -2147483648", "found -2147483649");
  expect_err("{\"type\":\"finished\",\"run_id\":1,\"attempt\":1,\"seq\":4,"
             "\"exit_code\":-1,\"signal\":4294967305,\"done\":null,\"error\":null,"
             "\"log_tail\":\"\"}",
             "$.signal: expected an integer in [0, 2147483647]", "found 4294967305");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":4294967301,\"config\":{},"
             "\"gpus\":[],\"checkpoint_dir\":\"/ck\",\"resume\":false}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},"
             "\"gpus\":[0,4294967296],\"checkpoint_dir\":\"/ck\",\"resume\":false}",
             "$.gpus[1]: expected an integer in [0, 2147483647]", "found 4294967296");
  expect_err("{\"type\":\"assign\",\"run_id\":1,\"attempt\":1,\"config\":{},\"gpus\":[],"
             "\"checkpoint_dir\":\"/ck\",\"resume\":false,\"dist\":{\"ranks\":[4294967297],"
             "\"addr\":\"h:1\",\"secret\":\"s\"}}",
             "$.dist.ranks[0]: expected an integer in [0, 2147483647]", "found 4294967297");
  expect_err("{\"type\":\"ack\",\"run_id\":1,\"attempt\":4294967301,\"seq\":1}",
             "$.attempt: expected an integer in [0, 2147483647]", "found 4294967301");
  /* cancel, ack, error */
  expect_err("{\"type\":\"cancel\"}", "$.run_id: missing", NULL);
  expect_err("{\"type\":\"cancel\",\"run_id\":1e3}", "$.run_id: expected a non-negative integer",
             "found 1000.0");
  expect_err("{\"type\":\"ack\",\"run_id\":1,\"attempt\":1}", "$.seq: missing", NULL);
  expect_err("{\"type\":\"ack\",\"run_id\":1,\"attempt\":true,\"seq\":1}",
             "$.attempt: expected a non-negative integer", "found true");
  expect_err("{\"type\":\"error\"}", "$.message: missing", NULL);
  /* a long string is cut in the message */
  expect_err("{\"type\":\"error\",\"message\":1,\"x\":0}", "$.message: expected a string",
             "found 1");
  {
    char err[512];
    char s[600];
    snprintf(s, sizeof s, "{\"type\":\"cancel\",\"run_id\":\"%0300d\"}", 0);
    CHECK_INT_EQ(parse(s, err, sizeof err), PROTO_INVALID);
    CHECK(strstr(err, "...") != NULL);
    CHECK(strlen(err) < 200);
  }
  /* a tiny error buffer is never overrun, and NULL is allowed */
  {
    char err[8];
    CHECK_INT_EQ(parse("{\"type\":\"ack\"}", err, sizeof err), PROTO_INVALID);
    CHECK(strlen(err) == 7);
    CHECK_INT_EQ(parse("{\"type\":\"ack\"}", NULL, 0), PROTO_INVALID);
  }
  /* embedded NUL bytes are not JSON */
  {
    char err[256];
    json_t *m;
    CHECK_INT_EQ(proto_parse("{\"type\":\"cancel\",\0\"run_id\":1}", 28, &m, err, sizeof err),
                 PROTO_INVALID);
  }
}

/* ---- encoding ----------------------------------------------------------- */

static void test_encode(void) {
  json_t *m = json_pack("{s:s, s:I, s:I, s:I, s:[{s:s, s:I, s:I, s:f}]}", "type", "metrics",
                        "run_id", (json_int_t)9, "attempt", (json_int_t)1, "seq", (json_int_t)1,
                        "rows", "event", "step", "step", (json_int_t)1, "tokens", (json_int_t)64,
                        "train_loss", 3.318347979336977);
  size_t len = 0;
  char *line = proto_encode(m, &len);
  CHECK(line != NULL);
  CHECK(len == strlen(line));
  CHECK(len > 0 && line[len - 1] == '\n');
  CHECK(memchr(line, '\n', len - 1) == NULL);
  json_t *back = NULL;
  char err[256];
  CHECK_INT_EQ(proto_parse(line, len - 1, &back, err, sizeof err), PROTO_METRICS);
  CHECK(back && json_equal(m, back));
  /* doubles survive the round trip bit for bit */
  json_t *row = json_array_get(json_object_get(back, "rows"), 0);
  CHECK(json_real_value(json_object_get(row, "train_loss")) == 3.318347979336977);
  json_decref(back);
  free(line);
  /* a string with a newline stays on one line */
  json_t *e = json_pack("{s:s, s:s}", "type", "error", "message", "two\nlines");
  line = proto_encode(e, &len);
  CHECK(line && memchr(line, '\n', len - 1) == NULL);
  free(line);
  json_decref(e);
  /* a message over the line limit is refused */
  char *big = malloc(PROTO_MAX_LINE + 1);
  memset(big, 'a', PROTO_MAX_LINE);
  big[PROTO_MAX_LINE] = '\0';
  e = json_pack("{s:s, s:s}", "type", "error", "message", big);
  CHECK(proto_encode(e, &len) == NULL);
  json_decref(e);
  free(big);
  json_decref(m);
}

static void test_names(void) {
  CHECK(!strcmp(proto_type_name(PROTO_HELLO), "hello"));
  CHECK(!strcmp(proto_type_name(PROTO_ERROR), "error"));
  CHECK(!strcmp(proto_type_name(PROTO_STOPPING), "stopping"));
  CHECK(!strcmp(proto_type_name(PROTO_INVALID), "invalid"));
  CHECK(!strcmp(proto_type_name((proto_type)99), "invalid"));
}

int main(void) {
  test_split_and_many();
  test_stop();
  test_limit();
  test_valid();
  test_invalid();
  test_encode();
  test_names();
  CHECK_DONE();
}

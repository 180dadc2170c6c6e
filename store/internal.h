/* Inside store/ only (store__ prefix), in two parts: how the typed queries
 * turn db.c's results into C values for their callbacks (rows.c), and what
 * pgserver.c (the steps of starting and stopping `up`'s PostgreSQL) and
 * pgproc.c (running PostgreSQL's programs as the server's user, finding
 * them, the files they need) share. */
#ifndef SS_STORE_INTERNAL_H
#define SS_STORE_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/db.h"

/* ---- queries (rows.c) --------------------------------------------------- */

/* One queued statement's typed callback (cb, cast back to its type by the
 * spec's deliver), its ud, and key: what the call is about, for a callback
 * that must name it even when no row does (0 when unused). */
typedef struct store__call {
  const struct store__rows_spec *spec;
  void (*cb)(void);
  void *ud;
  int64_t key;
} store__call;

/* How a statement's rows become an array of C structs for a typed
 * callback: the size of one, how row i fills one (strings point into the
 * result: valid during the callback only), and how the array reaches the
 * caller's callback. deliver also gets a failure (status, rows NULL, n 0). */
typedef struct store__rows_spec {
  size_t size;
  void (*decode)(const PGresult *res, int row, void *elem);
  void (*deliver)(const store__call *c, int status, const void *rows, int n, const char *errmsg);
} store__rows_spec;

/* Defines a static spec, name, for a callback of type cb_t(ud, status,
 * const elem_t *rows, int n, errmsg) that takes the decoded array as it is. */
#define STORE__ARRAY_SPEC(name, elem_t, decode, cb_t)                                   \
  static void name##_deliver(const store__call *c, int status, const void *rows, int n, \
                             const char *errmsg) {                                      \
    ((cb_t)c->cb)(c->ud, status, rows, n, errmsg);                                      \
  }                                                                                     \
  static const store__rows_spec name = {sizeof(elem_t), decode, name##_deliver}

/* A decode for an int64_t element: the row's first column. */
void store__decode_id(const PGresult *res, int row, void *elem);

/* Inside a db_cb of a statement that succeeded: res stays valid after the
 * callback returns, for work on another thread (a PGresult is read-only);
 * the callback's owner PQclears it. */
void store__db_keep_result(const PGresult *res);

/* The user data for store__on_rows (one malloc, freed there), or NULL when
 * out of memory (then deliver has had SS_ENOMEM). */
store__call *store__rows_call(const store__rows_spec *spec, void (*cb)(void), void *ud,
                              int64_t key);
/* The db_cb that decodes every row and delivers them. */
void store__on_rows(void *ud, int status, PGresult *res, const char *errmsg);
/* db_query with store__on_rows (key 0). */
void store__query_rows(db *d, const char *sql, int nparams, const char *const *params,
                       const store__rows_spec *spec, void (*cb)(void), void *ud);

/* For a deliver callback whose statement returns exactly one row: status,
 * or SS_EQUERY with *errmsg set to what when the read succeeded but
 * returned n rows instead. */
int store__one_row(int status, int n, const char **errmsg, const char *what);

/* store__query_rows with one parameter, $1 the id. */
void store__query_rows_id(db *d, const char *sql, int64_t id, const store__rows_spec *spec,
                          void (*cb)(void), void *ud);

/* Queues a statement whose first cell is one JSON document and answers cb
 * with it: json NULL (status 0) when there is no row or the cell is NULL. */
void store__query_json(db *d, const char *sql, int nparams, const char *const *params,
                       store_json_cb cb, void *ud);

/* store__query_json with one parameter, $1 the id. */
void store__query_json_id(db *d, const char *sql, int64_t id, store_json_cb cb, void *ud);

/* SQL: the newest fit of each law of sweep $1, {law: params}, NULL when
 * none (the API's fits and the sweep page's). */
#define STORE__LATEST_FITS_SQL                                                            \
  "(SELECT json_object_agg(law, params) FROM (SELECT DISTINCT ON (law) law, params FROM " \
  "fits WHERE sweep_id = $1 ORDER BY law, created_at DESC) f)"

/* SQL: the accounting sums of the attempts a (attempt_accounting's rows,
 * migration 023) of one group: a usage row's columns (store/usage.h), the
 * sweep page's cost and waste. */
#define STORE__USAGE_SUMS                                                                        \
  "count(a.attempt) AS attempts, count(DISTINCT a.run_id) AS runs, "                             \
  "coalesce(sum(a.device_s) FILTER (WHERE a.gpus > 0), 0) AS gpu_s, "                            \
  "coalesce(sum(a.device_s) FILTER (WHERE a.gpus = 0), 0) AS cpu_slot_s, "                       \
  "coalesce(sum(a.device_s), 0) AS device_s, coalesce(sum(a.steps_kept), 0) AS steps_kept, "     \
  "coalesce(sum(a.steps_lost), 0) AS steps_lost, coalesce(sum(a.flops_trained), 0) AS "          \
  "flops_trained, coalesce(sum(a.flops_lost), 0) AS flops_lost, count(a.attempt) FILTER (WHERE " \
  "a.ended_as IN ('failed', 'queued')) AS retried_attempts, coalesce(sum(a.device_s) FILTER "    \
  "(WHERE a.ended_as IN ('failed', 'queued')), 0) AS retried_device_s "

/* The user data for store__on_exec (one malloc, freed there), or NULL
 * when out of memory (then cb, unless NULL, has had SS_ENOMEM). */
store__call *store__exec_call(store_done_cb cb, void *ud);
/* The db_cb that gives cb (unless NULL) the rows the statement changed or
 * returned. */
void store__on_exec(void *ud, int status, PGresult *res, const char *errmsg);
/* db_query with store__on_exec. */
void store__exec(db *d, const char *sql, int nparams, const char *const *params, store_done_cb cb,
                 void *ud);

/* Field (row, col) as an integer or a double ("" and NULL read as 0);
 * store__num_or_nan reads NULL as NAN. */
int64_t store__int(const PGresult *res, int row, int col);
double store__num(const PGresult *res, int row, int col);
double store__num_or_nan(const PGresult *res, int row, int col);
/* Field (row, col), or NULL for SQL NULL. */
const char *store__str_or_null(const PGresult *res, int row, int col);

/* A decimal integer or a %.17g number as text into buf (NAN: NULL is
 * returned, for an SQL NULL parameter). */
const char *store__itoa(char *buf, size_t len, int64_t v);
const char *store__dtoa(char *buf, size_t len, double v);

/* [ids...] as JSON text (malloc; NULL when out of memory). */
char *store__ids_json(const int64_t *ids, int n);

/* ---- the connection and its queue (db_conn.c, db.c) --------------------- */

/* db_conn.c owns the connection (connecting, the socket's poll handle,
 * reconnecting with backoff, db_open, db_close); db.c the queue of
 * requests, sending them and dispatching their results. */

#define STORE__DB_MSG_MAX 512

enum { STORE__DB_DOWN, STORE__DB_CONNECTING, STORE__DB_UP };

/* Transaction steps besides the statements 0..nstmts-1. */
enum { STORE__STEP_BEGIN = -1 };
#define STORE__STEP_COMMIT(q) ((q)->nstmts)
#define STORE__STEP_ROLLBACK(q) ((q)->nstmts + 1)

typedef struct store__db_stmt {
  const char *sql;
  int nparams;
  const char *const *params;
  const int *lengths; /* NULL: every parameter is text */
  const int *formats;
} store__db_stmt;

/* One allocation: the struct, then the statements, their parameter arrays
 * and all the strings (copied, so callers may free theirs at once). */
typedef struct store__db_req {
  struct store__db_req *next;
  db_cb cb;
  void *ud;
  int tx;           /* BEGIN ... COMMIT around the statements */
  int nstmts;       /* 1 when !tx */
  int step;         /* the statement in flight (tx: STORE__STEP_BEGIN .. STORE__STEP_ROLLBACK) */
  PGresult *cur;    /* the result of the statement in flight, so far */
  PGresult *last;   /* tx: the last statement's result, kept for the callback */
  PGresult *failed; /* tx: the error being rolled back */
  store__db_stmt *stmts;
  int setup;          /* the session's settings (db_options): never timed out in the queue */
  int binary;         /* results in PostgreSQL's binary format (db_query_binary) */
  uint64_t queued_ms; /* uv_now when queued */
} store__db_req;

/* A poll handle on one libpq socket; freed in its close callback. */
typedef struct store__db_watcher {
  uv_poll_t poll;
  db *d;
  int fd;
} store__db_watcher;

struct db {
  uv_loop_t *loop;
  char *url;
  PGconn *conn; /* NULL while STORE__DB_DOWN */
  int state;
  int closing;
  int flushing;      /* PQflush left data to send: watch for writable too */
  int outage_logged; /* a failure was reported and no recovery since */
  PostgresPollingStatusType connect_poll;
  store__db_watcher *watch; /* on PQsocket(conn), or NULL */
  uv_timer_t timer;         /* reconnect backoff, or the connect timeout */
  uv_prepare_t prepare;     /* sends what db_query queued, before the loop polls */
  int nhandles;             /* handles open or closing; d is freed at 0 */
  unsigned backoff_ms;
  store__db_req *inflight;    /* the request being executed, or NULL */
  store__db_req *head, *tail; /* waiting requests */
  size_t nwaiting;
  void (*close_cb)(void *ud);
  void *close_ud;
  db_options opts;
};

/* db_conn.c */
/* The first line of a libpq message into dst, runs of blanks made single
 * spaces. */
void store__db_msg_copy(char *dst, size_t n, const char *src);
/* Watches the connection's current socket for events; 0 or a libuv error. */
int store__db_watch(db *d, int events);
/* Closes the poll handle and the connection: state DOWN. */
void store__db_drop_conn(db *d);
/* Arms the reconnect timer and doubles the backoff. */
void store__db_backoff_start(db *d);
/* The connection is unusable: the request in flight fails with status and
 * msg; waiting ones stay queued for the next connection. */
void store__db_conn_reset(db *d, int status, const char *msg);
/* Frees a request and the results it holds. */
void store__db_req_free(store__db_req *q);

/* db.c */
/* Sends the next waiting request if the connection is up and idle. */
void store__db_pump(db *d);
/* PQflush, then watch for writable too while data is left to send. */
void store__db_flush(db *d);
/* The socket is readable: reads results and dispatches them. */
void store__db_process_input(db *d);
/* Just connected: queues the session's settings (db_options) first. */
void store__db_setup(db *d);

/* ---- the private server (pgserver.c, pgproc.c) -------------------------- */

#define STORE__PG_MAX_GROUPS 64

/* One start or stop of the private server: its paths, its binaries and the
 * user its programs run as. Zeroed by the caller; env is freed by it. */
typedef struct store__pgs {
  char pgdir[PATH_MAX]; /* STATE/pg */
  char data[PATH_MAX];  /* STATE/pg/data */
  char log[PATH_MAX];   /* STATE/pg/log */
  char bindir[PATH_MAX];
  int as_user; /* switch to uid/gid in children (we are root) */
  uid_t uid;
  gid_t gid;
  char user[64];
  gid_t groups[STORE__PG_MAX_GROUPS];
  int ngroups;
  char **env; /* environ without locale settings, plus LC_ALL=C */
} store__pgs;

/* snprintf into a PATH_MAX buffer; 0, or SS_ERANGE when it does not fit. */
int store__path_fmt(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int store__exists(const char *path);
/* rm -rf path; 0, also when it is missing */
int store__rmtree(const char *path);

/* Sets p->env: environ without LC_* and LANG*, plus LC_ALL=C. */
int store__pg_env(store__pgs *p);

/* Runs argv (argv[0] an absolute path) in cwd, as the server's user when
 * p->as_user, in a new session with default signals and no inherited
 * descriptors; its stdout and stderr go to out (the first outlen - 1 bytes,
 * NUL-terminated). Returns its exit status (128 + N when killed by signal
 * N), or a negative SS_E* code when it could not be run. */
int store__pg_run(const store__pgs *p, char *const argv[], const char *cwd, char *out,
                  size_t outlen);

/* Sets p->bindir (SCALESWEEP_PG_BINDIR, the major version's directory,
 * pg_config, the newest installed); major: the existing cluster's
 * PG_VERSION, or "". */
int store__pg_find_bindir(store__pgs *p, const char *major, char *err, size_t errlen);

/* The cluster's major version ("15"), or "" when there is no cluster. */
void store__pg_read_major(const store__pgs *p, char *major, size_t n);

/* Sets p->as_user and the user: when root, the existing cluster's owner,
 * else SCALESWEEP_PG_USER, else postgres (root runs nothing itself). */
int store__pg_choose_user(store__pgs *p, char *err, size_t errlen);

/* Reads postmaster.pid: line 4 the port, line 5 the first socket directory. */
int store__pg_read_pidfile(const store__pgs *p, char *port, size_t portlen, char *sock,
                           size_t socklen);

/* A directory owned by the server's user, mode 0700. */
int store__pg_own_dir(const store__pgs *p, const char *path, char *err, size_t errlen);

/* Writes text to dir/name (open flags: O_TRUNC or O_APPEND), mode 0600,
 * owned by the server's user. */
int store__pg_write_file(const store__pgs *p, const char *dir, const char *name, int flags,
                         const char *text, char *err, size_t errlen);

/* The last few lines of the server log, for error messages. */
void store__pg_log_tail(const store__pgs *p, char *out, size_t n);

/* A blocking connection to url, named app for pg_stat_activity (the
 * start-up's: migrations, the users' load), with a 10 s connect timeout;
 * NULL with "out of memory" or "cannot connect to the database: ..." in
 * err and SS_ENOMEM or SS_EIO in *rc. */
PGconn *store__connect_blocking(const char *url, const char *app, int *rc, char *err,
                                size_t errlen);

#endif

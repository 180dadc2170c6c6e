/* The trainers a worker runs (docs/trainers.md): the built-in one, and
 * those its operator declared with --trainer NAME=COMMAND or a file of such
 * lines; the contract a trainer's output is held to. */
#include "worker/trainers.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wordexp.h>

#include "common/err.h"
#include "common/names.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"
#include "worker/proc.h"
#include "worker/run.h"

/* "NAME=COMMAND" (where says where it came from, for messages): its name
 * and its words, as a shell would split them (quotes and $VARIABLES; no
 * command substitution), into w->trainers. */
static int declare(wrk__worker *w, const char *decl, const char *where) {
  const char *eq = strchr(decl, '=');
  size_t nl = eq ? (size_t)(eq - decl) : 0;
  char name[SS_TRAINER_NAME_MAX + 1];
  if (!eq || nl == 0 || nl > SS_TRAINER_NAME_MAX) {
    wrk__log("%s: expected NAME=COMMAND (a trainer's name, then the command that runs it), "
             "found '%.80s'",
             where, decl);
    return SS_EINVAL;
  }
  snprintf(name, sizeof name, "%.*s", (int)nl, decl);
  if (!ss_trainer_name_ok(name) || !strcmp(name, "builtin")) {
    wrk__log("%s: trainer name '%s': expected 1 to %d letters, digits, '_', '-' or '.', the "
             "first a letter or digit, and not \"builtin\" (scalesweep train, always offered)",
             where, name, SS_TRAINER_NAME_MAX);
    return SS_EINVAL;
  }
  for (int i = 0; i < w->ntrainers; i++)
    if (!strcmp(w->trainers[i].name, name)) {
      wrk__log("%s: trainer \"%s\" declared twice", where, name);
      return SS_EINVAL;
    }
  if (w->ntrainers == WRK__MAX_TRAINERS) {
    wrk__log("%s: at most %d trainers beside the built-in one", where, WRK__MAX_TRAINERS);
    return SS_EINVAL;
  }
  wrk__trainer *t = &w->trainers[w->ntrainers];
  int rc = wordexp(eq + 1, &t->argv, WRDE_NOCMD);
  if (rc == 0 && t->argv.we_wordc == 0) {
    wordfree(&t->argv);
    rc = WRDE_SYNTAX;
  }
  if (rc) {
    wrk__log("%s: trainer \"%s\": cannot split its command '%.200s' into words (%s): expected "
             "a program and its arguments, with shell quoting",
             where, name,
             eq + 1,
             rc == WRDE_CMDSUB   ? "command substitution is not allowed"
             : rc == WRDE_BADCHAR ? "one of | & ; < > ( ) { } or a newline: wrap a pipeline "
                                    "or a shell script in a script file"
                                  : "an unmatched quote or an empty command");
    return SS_EINVAL;
  }
  snprintf(t->name, sizeof t->name, "%s", name);
  w->ntrainers++;
  return 0;
}

int wrk__trainers_init(wrk__worker *w, const char *const *decls, int n, const char *file) {
  for (int i = 0; i < n; i++) {
    int rc = declare(w, decls[i], "--trainer");
    if (rc)
      return rc;
  }
  if (!file)
    return 0;
  FILE *f = fopen(file, "r");
  if (!f) {
    wrk__log("--trainers-file %s: %s", file, strerror(errno));
    return SS_ENOENT;
  }
  char line[8192], where[4200];
  int rc = 0;
  for (int ln = 1; !rc && fgets(line, sizeof line, f); ln++) {
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      wrk__log("%s:%d: line longer than %zu bytes", file, ln, sizeof line - 2);
      rc = SS_EINVAL;
      break;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = 0;
    const char *p = line + strspn(line, " \t");
    if (!*p || *p == '#')
      continue;
    snprintf(where, sizeof where, "%s:%d", file, ln);
    rc = declare(w, p, where);
  }
  fclose(f);
  return rc;
}

void wrk__trainers_free(wrk__worker *w) {
  for (int i = 0; i < w->ntrainers; i++)
    wordfree(&w->trainers[i].argv);
  w->ntrainers = 0;
}

json_t *wrk__trainers_json(const wrk__worker *w) {
  json_t *a = json_array();
  json_array_append_new(a, json_string("builtin"));
  for (int i = 0; i < w->ntrainers; i++)
    json_array_append_new(a, json_string(w->trainers[i].name));
  return a;
}

void wrk__trainers_list(const wrk__worker *w, char *buf, size_t len) {
  size_t off = (size_t)snprintf(buf, len, "builtin");
  for (int i = 0; i < w->ntrainers && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, ", %s", w->trainers[i].name);
}

const char *wrk__run_trainer(const wrk__run *r) {
  const char *t =
      json_string_value(json_object_get(json_object_get(r->assign, "config"), "trainer"));
  return t ? t : "builtin";
}

const wrk__trainer *wrk__trainer_find(const wrk__worker *w, const char *name) {
  for (int i = 0; i < w->ntrainers; i++)
    if (!strcmp(w->trainers[i].name, name))
      return &w->trainers[i];
  return NULL;
}

void wrk__run_broke_contract(wrk__run *r, const char *fmt, ...) {
  if (r->broken)
    return;
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  char msg[1024];
  snprintf(msg, sizeof msg,
           "run %" PRId64 " attempt %" PRId64 ": the trainer \"%s\" broke the trainer contract "
           "(docs/trainers.md): %s",
           r->id, r->attempt, wrk__run_trainer(r), what);
  wrk__log("%s; SIGKILL to pid %d, the attempt fails", msg, r->pid);
  r->broken = 1;
  r->out_broken = 1; /* the rest of its output is drained, not read */
  free(r->error);
  r->error = strdup(msg);
  wrk__run_signal(r, SIGKILL);
}

/* 1 for this worker's part without rank 0 of a run of a declared trainer
 * spread over workers: `scalesweep launch` sends only rank 0's stdout to
 * the worker, so that such a part prints no line at all (the built-in
 * trainer's lowest rank here prints the run's lines) */
static int silent_part(const wrk__run *r) {
  char part[4096];
  if (!wrk__trainer_find(r->w, wrk__run_trainer(r)) ||
      wrk__run_dist_ranks(r, part, sizeof part) == 0)
    return 0;
  for (const char *p = part; *p; p += strcspn(p, ","), p += *p == ',')
    if (p[0] == '0' && (p[1] == ',' || p[1] == '\0'))
      return 0;
  return 1;
}

void wrk__runs_check_hang(wrk__worker *w) {
  if (w->hang_ms <= 0)
    return;
  uint64_t now = uv_now(&w->loop);
  for (wrk__run *r = w->runs; r; r = r->next)
    if (wrk__run_has_trainer(r) && r->proc_alive && !r->broken && !silent_part(r) &&
        now - r->last_line_ms > (uint64_t)w->hang_ms)
      wrk__run_broke_contract(r,
                              "it printed no line for %" PRIu64 " s (the worker's "
                              "--hang-timeout is %d s): it hangs",
                              (now - r->last_line_ms) / 1000, w->hang_ms / 1000);
}

/* The trainers a worker runs (trainers.c): the built-in one and those its
 * operator declared; the contract a trainer's output is held to. */
#ifndef SS_WORKER_TRAINERS_H
#define SS_WORKER_TRAINERS_H

#include <stddef.h>

#include <jansson.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__run wrk__run;
typedef struct wrk__trainer wrk__trainer;

/* Reads the operator's declarations (NAME=COMMAND each, from --trainer and
 * then the lines of file, which may be NULL; '#' starts a comment line)
 * into w->trainers; SS_EINVAL / SS_ENOENT, logged with where, for a bad
 * one. */
int wrk__trainers_init(wrk__worker *w, const char *const *decls, int n, const char *file);
void wrk__trainers_free(wrk__worker *w);
/* hello.trainers: "builtin", then the declared ones. */
json_t *wrk__trainers_json(const wrk__worker *w);
/* "builtin, torch" into buf */
void wrk__trainers_list(const wrk__worker *w, char *buf, size_t len);
/* The trainer r's config names ("builtin" when none). */
const char *wrk__run_trainer(const wrk__run *r);
/* The declared trainer of that name, or NULL. */
const wrk__trainer *wrk__trainer_find(const wrk__worker *w, const char *name);
/* r's trainer broke the contract (what, printf-style, says how): logged,
 * kept as the attempt's error, its output no longer read, SIGKILL; the
 * attempt is reported failed, never interrupted. Once. */
void wrk__run_broke_contract(wrk__run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Breaks the contract of every running trainer silent for w->hang_ms. */
void wrk__runs_check_hang(wrk__worker *w);

#endif

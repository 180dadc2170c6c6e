/* A blocking HTTP/1.1 client for the CLI's talk with the scheduler's API
 * (one request per connection). Not for the daemons: they use libuv. */
#ifndef SS_CLI_CLIENT_H
#define SS_CLI_CLIENT_H

#include <stddef.h>

typedef struct cli_target {
  char host[256];
  int port;
  char token[512]; /* API token, "" for none */
} cli_target;

/* Finds the scheduler: --url, else SCALESWEEP_URL, else the state
 * directory's ready file (--state, default ./.scalesweep); the token from
 * --token-file, SCALESWEEP_TOKEN, or STATE/api.token. Returns 0 or 2 with
 * a message on stderr. */
int cli_target_find(cli_target *t, const char *url, const char *state, const char *token_file);

/* Sends one request; body may be NULL. On return *status is the HTTP status
 * (0 when the scheduler could not be reached) and the malloc'd body is in
 * *resp. Returns 0, or 1 when the connection failed (message on stderr). */
int cli_request(const cli_target *t, const char *method, const char *path, const char *body,
                size_t body_len, int *status, char **resp);

/* Prints the error object of a 4xx/5xx answer (j: its parsed body, resp:
 * the raw one) on stderr, control and format characters escaped (j's
 * strings in place); returns the exit code: 2 when the request was the
 * user's mistake (4xx), 1 when the service's (5xx) or a refusal (403). */
struct json_t;
int cli_say_error(int status, struct json_t *j, const char *resp);

/* GETs path quietly: the 200 answer's JSON (integers as reals), or NULL
 * when the scheduler could not be reached or answered otherwise. For the
 * printouts' optional parts, which a failed read leaves out. */
struct json_t *cli_get_json(const cli_target *t, const char *path);

/* Finds the target (cli_target_find) and performs the request. A 4xx/5xx
 * answer's error object is printed on stderr (its message, then each
 * problem's path and message) and NULL returned with *rc 2 (the request was
 * the user's mistake, 4xx) or 1 (the service's, or a refusal: 403); else
 * the parsed JSON (large integers as reals; every string and key with a
 * control or Unicode format character escaped, common/names.h, so that
 * printing it is safe on a terminal) with *rc 0 and, when raw is not NULL, the body's own text in
 * *raw (malloc'd). */
struct json_t *cli_call(const char *url, const char *state, const char *token_file,
                        const char *method, const char *path, const char *body, size_t len, int *rc,
                        char **raw);

/* Prints one fit object of the API (law, n_points, params with 95%
 * intervals, derived values, warnings) as readable lines. */
#include <jansson.h>
#include <stdio.h>
void cli_print_fit(FILE *f, const char *law, json_t *fit);

#endif

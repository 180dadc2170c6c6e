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

/* Prints one fit object of the API (law, n_points, params with 95%
 * intervals, derived values, warnings) as readable lines. */
#include <jansson.h>
#include <stdio.h>
void cli_print_fit(FILE *f, const char *law, json_t *fit);

#endif

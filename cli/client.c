#include "cli/client.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"
#include "common/names.h"
#include "common/token.h"

static int parse_url(const char *url, cli_target *t) {
  const char *p = url;
  if (!strncmp(p, "http://", 7))
    p += 7;
  const char *colon = strrchr(p, ':');
  const char *slash = strchr(p, '/');
  size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
  if (hl == 0 || hl >= sizeof t->host)
    return -1;
  memcpy(t->host, p, hl);
  t->host[hl] = 0;
  t->port = colon ? atoi(colon + 1) : 80;
  return t->port > 0 && t->port < 65536 ? 0 : -1;
}

int cli_target_find(cli_target *t, const char *url, const char *state, const char *token_file) {
  memset(t, 0, sizeof *t);
  const char *dir = state ? state : getenv("SCALESWEEP_STATE");
  if (!dir)
    dir = "./.scalesweep";
  if (!url)
    url = getenv("SCALESWEEP_URL");
  if (url) {
    if (parse_url(url, t) != 0) {
      fprintf(stderr, "scalesweep: scheduler URL '%s': expected http://HOST:PORT\n", url);
      return 2;
    }
  } else {
    char path[4096];
    snprintf(path, sizeof path, "%s/scheduler.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
      fprintf(stderr,
              "scalesweep: no scheduler address: give --url or SCALESWEEP_URL, or run "
              "`scalesweep up` (it writes %s)\n",
              path);
      return 2;
    }
    snprintf(t->host, sizeof t->host, "127.0.0.1");
    t->port = (int)json_integer_value(json_object_get(j, "http_port"));
    json_decref(j);
  }
  const char *tok = getenv("SCALESWEEP_TOKEN");
  char err[512];
  if (token_file) {
    if (token_read(token_file, 1, t->token, sizeof t->token, NULL, err, sizeof err)) {
      fprintf(stderr, "scalesweep: --token-file %s\n", err);
      return 2;
    }
  } else if (tok) {
    snprintf(t->token, sizeof t->token, "%s", tok);
  } else {
    /* up's API token, when there is one: reads need none */
    char path[4096];
    snprintf(path, sizeof path, "%s/api.token", dir);
    token_read(path, 1, t->token, sizeof t->token, NULL, err, sizeof err);
  }
  return 0;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int cli_request(const cli_target *t, const char *method, const char *path, const char *body,
                size_t body_len, int *status, char **resp) {
  *status = 0;
  *resp = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", t->port);
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(t->host, port, &hints, &ai);
  if (gai != 0) {
    fprintf(stderr, "scalesweep: %s: %s\n", t->host, gai_strerror(gai));
    return 1;
  }
  int fd = -1;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    fprintf(stderr, "scalesweep: cannot reach the scheduler at %s:%d: %s\n", t->host, t->port,
            strerror(errno));
    return 1;
  }
  char head[1024];
  int hl = snprintf(head, sizeof head,
                    "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n"
                    "Accept: application/json\r\n%s%s%sContent-Length: %zu\r\n%s\r\n",
                    method, path, t->host, t->port, t->token[0] ? "Authorization: Bearer " : "",
                    t->token[0] ? t->token : "", t->token[0] ? "\r\n" : "", body ? body_len : 0,
                    body ? "Content-Type: application/json\r\n" : "");
  if (send_all(fd, head, (size_t)hl) != 0 || (body && send_all(fd, body, body_len) != 0)) {
    fprintf(stderr, "scalesweep: sending to the scheduler failed: %s\n", strerror(errno));
    close(fd);
    return 1;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while ((r = recv(fd, buf + len, cap - len - 1, 0)) > 0 || (r < 0 && errno == EINTR)) {
    if (r < 0)
      continue;
    len += (size_t)r;
    if (len + 1 >= cap) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
  }
  close(fd);
  buf[len] = 0;
  if (sscanf(buf, "HTTP/1.%*d %d", status) != 1) {
    fprintf(stderr, "scalesweep: the scheduler sent no HTTP answer\n");
    free(buf);
    return 1;
  }
  char *sep = strstr(buf, "\r\n\r\n");
  const char *b = sep ? sep + 4 : "";
  *resp = strdup(b);
  free(buf);
  return 0;
}

static void print_values(FILE *f, json_t *vals, json_t *ci) {
  const char *k;
  json_t *v;
  json_object_foreach(vals, k, v) {
    json_t *iv = json_object_get(ci, k);
    if (!json_is_number(v))
      fprintf(f, "    %-18s n/a\n", k);
    else if (json_array_size(iv) == 2)
      fprintf(f, "    %-18s %-12.5g [%.5g, %.5g]\n", k, json_number_value(v),
              json_number_value(json_array_get(iv, 0)), json_number_value(json_array_get(iv, 1)));
    else
      fprintf(f, "    %-18s %.5g\n", k, json_number_value(v));
  }
}

void cli_print_fit(FILE *f, const char *law, json_t *fit) {
  fprintf(f, "%s: %.0f points, %s\n", law, json_number_value(json_object_get(fit, "n_points")),
          json_is_true(json_object_get(fit, "converged")) ? "converged" : "NOT converged");
  json_t *ci = json_object_get(fit, "ci95");
  print_values(f, json_object_get(fit, "params"), ci);
  json_t *derived = json_object_get(fit, "derived");
  if (json_object_size(derived)) {
    fprintf(f, "  derived:\n");
    print_values(f, derived, ci);
  }
  json_t *ex = json_object_get(fit, "extrapolation");
  if (json_is_object(ex))
    fprintf(f,
            "  extrapolation check: refitted without the largest budget (C = %.3g) on %.0f "
            "points, the law predicts its runs' mean loss %.5g; measured %.5g (mean relative "
            "error %.2f%%)\n",
            json_number_value(json_object_get(ex, "held_out_flops")),
            json_number_value(json_object_get(ex, "fitted_points")),
            json_number_value(json_object_get(ex, "predicted_loss")),
            json_number_value(json_object_get(ex, "measured_loss")),
            100 * json_number_value(json_object_get(ex, "rel_err")));
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(fit, "warnings"), i, w) {
    fprintf(f, "  warning: %s\n", json_string_value(w));
  }
}

/* The size s needs escaped (ss_text_escape), or 0 when it needs no escape:
 * at most 10 bytes ("\U000e0001") a byte, and the NUL. */
static size_t escaped_len(const char *s) {
  size_t len = strlen(s), at;
  long cp;
  return ss_text_hidden(s, len, &at, &cp) ? 10 * len + 1 : 0;
}

/* s escaped, malloc'd; NULL when it needs no escape or there is no memory */
static char *escaped(const char *s) {
  size_t n = escaped_len(s);
  char *out = n ? malloc(n) : NULL;
  return out ? ss_text_escape(s, out, n) : NULL;
}

/* Every string (and key) of an answer with a control or format character
 * escaped, so that no stored text (a sweep's name from before the spec
 * refused U+202E, a worker's name, an error) reorders or rewrites the
 * terminal's line when printed; --json prints the answer's own text. */
static void neutralise(json_t *j) {
  if (json_is_object(j)) {
    const char *k;
    json_t *v;
    int keys = 0;
    json_object_foreach(j, k, v) {
      neutralise(v);
      keys |= escaped_len(k) > 0;
    }
    if (!keys)
      return;
    json_t *copy = json_object(); /* the keys renamed in order, then back into j */
    json_object_foreach(j, k, v) {
      char *ek = escaped(k);
      json_object_set(copy, ek ? ek : k, v);
      free(ek);
    }
    json_object_clear(j);
    json_object_update(j, copy);
    json_decref(copy);
  } else if (json_is_array(j)) {
    size_t i;
    json_t *v;
    json_array_foreach(j, i, v) { neutralise(v); }
  } else if (json_is_string(j)) {
    char *e = escaped(json_string_value(j));
    if (e)
      json_string_set(j, e);
    free(e);
  }
}

/* cli_say_error (client.h) */
int cli_say_error(int status, json_t *j, const char *resp) {
  neutralise(j);
  json_t *e = json_object_get(j, "error");
  const char *msg = json_string_value(json_object_get(e, "message"));
  char *raw = msg || !resp ? NULL : escaped(resp); /* not the API's JSON (a proxy's page) */
  fprintf(stderr, "scalesweep: %d: %s\n", status, msg ? msg : raw ? raw : resp);
  free(raw);
  json_t *probs = json_object_get(e, "problems");
  size_t i;
  json_t *p;
  json_array_foreach(probs, i, p) {
    fprintf(stderr, "  %s: %s\n", json_string_value(json_object_get(p, "path")),
            json_string_value(json_object_get(p, "message")));
  }
  /* the scheduler lists the first problems and counts the rest */
  json_t *total = json_object_get(e, "problems_total");
  if (json_is_number(total) && json_number_value(total) > (double)json_array_size(probs))
    fprintf(stderr, "  ... and %.0f more problem(s) not listed\n",
            json_number_value(total) - (double)json_array_size(probs));
  /* a refusal (no token, or not allowed) is not a mistake in the request */
  return status < 500 && status != 401 && status != 403 ? SS_EXIT_USAGE : SS_EXIT_FAILURE;
}

/* cli_call (client.h) */
json_t *cli_call(const char *url, const char *state, const char *token_file, const char *method,
                 const char *path, const char *body, size_t len, int *rc, char **raw) {
  cli_target t;
  if ((*rc = cli_target_find(&t, url, state, token_file)) != 0)
    return NULL;
  int status;
  char *resp;
  if (cli_request(&t, method, path, body, len, &status, &resp) != 0) {
    *rc = SS_EXIT_FAILURE;
    return NULL;
  }
  json_error_t je;
  /* reals: jsonb writes large numbers as long integers */
  json_t *j = json_loads(resp, JSON_DECODE_INT_AS_REAL, &je);
  if (status >= 400) {
    *rc = cli_say_error(status, j, resp);
    json_decref(j);
    free(resp);
    return NULL;
  }
  neutralise(j);
  if (raw)
    *raw = resp;
  else
    free(resp);
  return j;
}

json_t *cli_get_json(const cli_target *t, const char *path) {
  int status;
  char *resp = NULL;
  if (cli_request(t, "GET", path, NULL, 0, &status, &resp) != 0 || status != 200) {
    free(resp);
    return NULL;
  }
  json_t *j = json_loads(resp, JSON_DECODE_INT_AS_REAL, NULL);
  free(resp);
  return j;
}

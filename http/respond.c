/* Answers: status lines, complete responses, JSON error documents, and
 * the http_respond* calls of http.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

/* What an error answer says when even its JSON cannot be made. */
static const char fallback_error[] = "{\"error\":{\"message\":\"error\",\"path\":null}}";

static const char *status_text(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 202:
    return "Accepted";
  case 204:
    return "No Content";
  case 301:
    return "Moved Permanently";
  case 302:
    return "Found";
  case 303:
    return "See Other";
  case 304:
    return "Not Modified";
  case 307:
    return "Temporary Redirect";
  case 308:
    return "Permanent Redirect";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 406:
    return "Not Acceptable";
  case 408:
    return "Request Timeout";
  case 409:
    return "Conflict";
  case 410:
    return "Gone";
  case 411:
    return "Length Required";
  case 412:
    return "Precondition Failed";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 415:
    return "Unsupported Media Type";
  case 416:
    return "Range Not Satisfiable";
  case 422:
    return "Unprocessable Content";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  case 505:
    return "HTTP Version Not Supported";
  default:
    break;
  }
  if (status < 200)
    return "Informational";
  if (status < 300)
    return "Success";
  if (status < 400)
    return "Redirection";
  if (status < 500)
    return "Client Error";
  return "Server Error";
}

char *http__error_json(int status, const char *msg, const char *path) {
  json_t *o = json_pack("{s:{s:s,s:s?}}", "error", "message", msg ? msg : status_text(status),
                        "path", path);
  if (!o) /* msg or path not valid UTF-8 */
    o = json_pack("{s:{s:s,s:n}}", "error", "message", status_text(status), "path");
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static void count_status(http_server *s, int status) {
  if (status >= 500)
    s->stats.responses_5xx++;
  else if (status >= 400)
    s->stats.responses_4xx++;
}

http_write *http__response_new(int status, const char *ctype, const char *body, size_t len,
                               const char *headers, int is_head, int http10, int close) {
  int no_body = status < 200 || status == 204 || status == 304;
  char cl[64] = "", ct[256] = "";
  if (!no_body)
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", len);
  if (ctype && *ctype && strlen(ctype) < sizeof ct - 20)
    snprintf(ct, sizeof ct, "Content-Type: %s\r\n", ctype);
  const char *conn = close ? "Connection: close\r\n" : http10 ? "Connection: keep-alive\r\n" : "";
  if (!headers)
    headers = "";
  const char *fmt = "HTTP/1.1 %d %s\r\n%s%s%s%s\r\n";
  int hlen = snprintf(NULL, 0, fmt, status, status_text(status), ct, cl, conn, headers);
  if (hlen < 0)
    return NULL;
  size_t blen = is_head || no_body ? 0 : len;
  http_write *w = http__write_new((size_t)hlen + 1 + blen);
  if (!w)
    return NULL;
  snprintf(w->data, (size_t)hlen + 1, fmt, status, status_text(status), ct, cl, conn, headers);
  if (blen)
    memcpy(w->data + hlen, body, blen);
  w->len = (size_t)hlen + blen;
  return w;
}

/* Formats and queues a complete answer. Returns 0 or a negative libuv
 * error (then the connection is closing). */
static int conn_send(http_conn *c, int status, const char *ctype, const char *body, size_t len,
                     const char *headers, int is_head, int http10, int close) {
  http_write *w = http__response_new(status, ctype, body, len, headers, is_head, http10, close);
  if (!w) {
    http__conn_close(c);
    return UV_ENOMEM;
  }
  count_status(c->srv, status);
  return http__conn_write(c, w);
}

void http__conn_fail_h(http_conn *c, int status, const char *msg, const char *headers) {
  if (c->closing)
    return;
  c->srv->stats.requests++;
  if (c->req) {
    http__req_free(c->req);
    c->req = NULL;
  }
  char *json = http__error_json(status, msg, NULL);
  const char *b = json ? json : fallback_error;
  int rc = conn_send(c, status, "application/json", b, strlen(b), headers, 0, 0, 1);
  free(json);
  if (rc == 0)
    http__conn_drain(c);
}

void http__conn_fail(http_conn *c, int status, const char *msg) {
  http__conn_fail_h(c, status, msg, NULL);
}

void http_respond(http_request *r, int status, const char *content_type, const char *body,
                  size_t len, const char *headers) {
  http_conn *c = r->conn;
  if (r->on_answer) {
    http_answer_cb cb = r->on_answer;
    r->on_answer = NULL;
    cb(r, status, body ? body : "", body ? len : 0, r->on_answer_ud);
  }
  if (!c || c->closing || c->req != r || c->state != CONN_BUSY) { /* client gone: dropped */
    if (c && c->req == r)
      c->req = NULL;
    http__req_free(r);
    return;
  }
  if (status < 100 || status > 999)
    status = 500;
  int close = !r->keep_alive || c->srv->stopping;
  c->req = NULL;
  int rc = conn_send(c, status, content_type, body ? body : "", body ? len : 0, headers, r->is_head,
                     r->http10, close);
  http__req_free(r); /* after the copy: body and headers may live in the arena */
  if (rc != 0 || c->closing)
    return;
  if (close) {
    http__conn_drain(c);
    return;
  }
  c->state = CONN_READ;
  c->served++;
  c->since = uv_now(c->srv->loop);
  c->in_message = 0;
  c->timer_extended = 0;
  c->head_done = 0;
  c->head_bytes = 0;
  c->err_status = 0;
  c->err_msg = NULL;
  http__conn_timer(c, c->srv->lim.idle_timeout_ms);
  llhttp_resume(&c->parser);
  http__conn_resume(c);
}

void http_respond_json(http_request *r, int status, const char *json) {
  http_respond(r, status, "application/json", json, json ? strlen(json) : 0, NULL);
}

void http_respond_error(http_request *r, int status, const char *msg, const char *path) {
  char *json = http__error_json(status, msg, path);
  http_respond_json(r, status, json ? json : fallback_error);
  free(json);
}

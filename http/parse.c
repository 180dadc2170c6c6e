/* The llhttp side of a connection: callbacks that collect the head and
 * the body of a request, the checks once the head is complete, and the
 * loop that feeds input to llhttp and hands complete requests over. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/internal.h"

static int head_append(http_conn *c, const char *at, size_t len) {
  http_request *r = c->req;
  if (!r)
    return -1;
  if (r->head_len + len + 1 > c->srv->lim.max_header_bytes) {
    c->err_status = 431;
    c->err_msg = "request header too large";
    return -1;
  }
  if (http__grow(&r->head, &r->head_cap, r->head_len + len + 1, 512, 0) != 0) {
    c->err_status = 503;
    c->err_msg = "out of memory";
    return -1;
  }
  memcpy(r->head + r->head_len, at, len);
  r->head_len += len;
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  http_conn *c = p->data;
  c->in_message = 1;
  c->head_done = 0;
  if (c->served) { /* keep-alive: the request gets the header timeout from its first byte */
    c->since = uv_now(c->srv->loop);
    http__conn_timer(c, c->srv->lim.header_timeout_ms);
  }
  if (!c->req && !(c->req = http__req_new(c))) {
    c->err_status = 503;
    c->err_msg = "out of memory";
    return -1;
  }
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) { return head_append(p->data, at, len); }

static int on_field(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  return c->head_done ? 0 : head_append(c, at, len); /* trailers are ignored */
}

static int on_part_complete(llhttp_t *p) {
  http_conn *c = p->data;
  return c->head_done ? 0 : head_append(c, "", 1);
}

static int on_field_complete(llhttp_t *p) {
  http_conn *c = p->data;
  if (c->head_done)
    return 0;
  c->req->n_fields++;
  return head_append(c, "", 1);
}

static int on_headers_complete(llhttp_t *p) {
  http_conn *c = p->data;
  c->head_done = 1;
  c->pause = PAUSE_HEAD;
  return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  http_request *r = c->req;
  size_t max = c->srv->lim.max_body_bytes;
  if (len > max - r->body_len) {
    c->err_status = 413;
    c->err_msg = "request body too large";
    return -1;
  }
  if (http__grow(&r->body, &r->body_cap, r->body_len + len + 1, 4096, max + 1) != 0) {
    c->err_status = 503;
    c->err_msg = "out of memory";
    return -1;
  }
  memcpy(r->body + r->body_len, at, len);
  r->body_len += len;
  r->body[r->body_len] = '\0';
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  http_conn *c = p->data;
  c->req->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade;
  c->pause = PAUSE_DONE;
  return HPE_PAUSED;
}

/* The head is complete: checks that need no body. Returns 0 to go on. */
static int head_checks(http_conn *c) {
  http_server *s = c->srv;
  http_request *r = c->req;
  llhttp_t *p = &c->parser;
  if (c->head_bytes > s->lim.max_header_bytes) {
    http__conn_fail(c, 431, "request header too large");
    return -1;
  }
  r->method = llhttp_method_name((llhttp_method_t)p->method);
  r->is_head = p->method == HTTP_HEAD;
  r->http10 = p->http_major == 1 && p->http_minor == 0;
  const char *err = r->head ? http__req_index_head(r) : "empty request";
  if (err) {
    http__conn_fail(c, 400, err);
    return -1;
  }
  if (s->hooks.reserved &&
      http__live_conns(s) > s->lim.max_connections - s->lim.reserve_connections &&
      !s->hooks.reserved(r, s->hooks.ud)) {
    s->stats.refused_reserve++;
    http__log_refusal(s, "a request refused: only the reserved connection slots are left");
    http__conn_fail_h(
        c, 503,
        "server busy: the connection slots left are reserved for privileged requests; "
        "retry later",
        "Retry-After: 1\r\n");
    return -1;
  }
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > s->lim.max_body_bytes) {
    http__conn_fail(c, 413, "request body too large");
    return -1;
  }
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0) {
    /* sized up front, but a client that only announces a body pins little */
    size_t cap = p->content_length < 65536 ? (size_t)p->content_length + 1 : 65536;
    if (!(r->body = malloc(cap))) {
      http__conn_fail(c, 503, "out of memory");
      return -1;
    }
    r->body_cap = cap;
  }
  const char *expect = http_header(r, "Expect");
  if (expect && strcasecmp(expect, "100-continue") == 0 && !r->http10) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    http_write *w = http__write_new(sizeof cont - 1);
    if (!w) {
      http__conn_fail(c, 503, "out of memory");
      return -1;
    }
    memcpy(w->data, cont, sizeof cont - 1);
    if (http__conn_write(c, w) != 0)
      return -1;
  }
  return 0;
}

static void dispatch(http_conn *c) {
  http_server *s = c->srv;
  http_request *r = c->req;
  c->state = CONN_BUSY;
  uv_timer_stop(&c->timer);
  r->dispatched = 1;
  s->stats.requests++;
  s->handler(r, s->ud);
}

size_t http__conn_parse(http_conn *c, const char *data, size_t len) {
  size_t off = 0;
  int again = 0; /* after the head pause, a bodiless request completes on an empty call */
  c->processing = 1;
  while (c->state == CONN_READ && !c->closing && (off < len || again)) {
    if (c->tcp.write_queue_size > HTTP_WRITE_HIGH)
      break; /* resumed by on_write */
    again = 0;
    c->pause = PAUSE_NONE;
    int counting = !c->head_done;
    llhttp_errno_t e = llhttp_execute(&c->parser, data + off, len - off);
    size_t used =
        e == HPE_OK ? len - off : (size_t)(llhttp_get_error_pos(&c->parser) - (data + off));
    off += used;
    if (counting && c->in_message) {
      c->head_bytes += used;
      if (c->head_bytes > c->srv->lim.max_header_bytes) {
        http__conn_fail(c, 431, "request header too large");
        break;
      }
    }
    if (e == HPE_OK)
      continue;
    if (e == HPE_PAUSED && c->pause == PAUSE_HEAD) {
      if (head_checks(c) != 0)
        break;
      llhttp_resume(&c->parser);
      again = 1;
    } else if (e == HPE_PAUSED && c->pause == PAUSE_DONE) {
      dispatch(c);
    } else {
      http__conn_fail(c, c->err_status ? c->err_status : 400,
                      c->err_msg ? c->err_msg : llhttp_get_error_reason(&c->parser));
      break;
    }
  }
  c->processing = 0;
  return off;
}

void http__parser_settings(llhttp_settings_t *s) {
  /* what llhttp_settings_init() does, callbacks set: the others are NULL */
  *s = (llhttp_settings_t){
      .on_message_begin = on_message_begin,
      .on_url = on_url,
      .on_url_complete = on_part_complete,
      .on_header_field = on_field,
      .on_header_field_complete = on_field_complete,
      .on_header_value = on_field,
      .on_header_value_complete = on_part_complete,
      .on_headers_complete = on_headers_complete,
      .on_body = on_body,
      .on_message_complete = on_message_complete,
  };
}

/* fit_read_csv: points for the fitting library from a CSV table with a
 * header row (RFC 4180 as far as it matters here: double-quoted fields with
 * "" for a quote, CRLF or LF line ends; blank lines are skipped). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"
#include "sweeps/fit.h"
#include "sweeps/internal.h"

enum { C_PARAMS, C_TOKENS, C_FLOPS, C_LOSS, C_BATCH, C_STEPS, C_LR, C_RUN, NCOLS };
static const char *const colnames[NCOLS] = {"params",     "tokens", "flops", "loss",
                                            "batch_size", "steps",  "lr",    "run"};

typedef struct {
  char *text; /* unescaped, NUL-terminated, inside the reader's buffer */
  int col;    /* 1-based byte column of the field's first character */
} field;

typedef struct {
  const char *path;
  char *buf; /* the whole file; fields are unescaped in place */
  size_t len, pos;
  int line; /* of the next character */
  field *f;
  int nf, cap;
  char *err;
  size_t errlen;
} reader;

static int slurp(reader *r) {
  FILE *fp = fopen(r->path, "rb");
  if (!fp) {
    int e = errno;
    snprintf(r->err, r->errlen, "%s: cannot open: %s", r->path, strerror(e));
    return e == ENOENT ? SS_ENOENT : SS_EIO;
  }
  size_t cap = 1 << 16;
  r->buf = malloc(cap + 1);
  r->len = 0;
  while (r->buf) {
    size_t got = fread(r->buf + r->len, 1, cap - r->len, fp);
    r->len += got;
    if (r->len < cap)
      break;
    char *nb = realloc(r->buf, 2 * cap + 1);
    if (!nb)
      free(r->buf);
    r->buf = nb;
    cap *= 2;
  }
  int bad = ferror(fp);
  fclose(fp);
  if (!r->buf) {
    snprintf(r->err, r->errlen, "%s: out of memory reading the file", r->path);
    return SS_ENOMEM;
  }
  if (bad) {
    snprintf(r->err, r->errlen, "%s: read error", r->path);
    return SS_EIO;
  }
  r->buf[r->len] = 0;
  if (r->len >= 3 && !memcmp(r->buf, "\xef\xbb\xbf", 3))
    r->pos = 3;
  return 0;
}

static int push_field(reader *r, char *text, int col) {
  if (r->nf == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    field *nf = realloc(r->f, (size_t)cap * sizeof *nf);
    if (!nf) {
      snprintf(r->err, r->errlen, "%s: out of memory", r->path);
      return SS_ENOMEM;
    }
    r->f = nf;
    r->cap = cap;
  }
  r->f[r->nf++] = (field){text, col};
  return 0;
}

/* Reads the next non-blank record into r->f[0..nf); nf = 0 at the end of
 * the file. *line is the line the record starts on. */
static int read_record(reader *r, int *line) {
  for (;;) {
    r->nf = 0;
    if (r->pos >= r->len)
      return 0;
    *line = r->line;
    size_t line_start = r->pos;
    int blank = 1;
    for (;;) { /* one field per pass */
      size_t start = r->pos;
      char *w = r->buf + r->pos;
      char *text = w;
      int col = (int)(start - line_start) + 1;
      char c = r->buf[r->pos];
      if (c == '"') {
        blank = 0;
        int qline = r->line, qcol = col;
        r->pos++;
        for (;;) {
          if (r->pos >= r->len) {
            snprintf(r->err, r->errlen, "%s:%d:%d: quoted field not closed", r->path, qline, qcol);
            return SS_EINVAL;
          }
          c = r->buf[r->pos++];
          if (c == '"') {
            if (r->buf[r->pos] != '"')
              break;
            r->pos++;
          } else if (c == '\n') {
            r->line++;
            line_start = r->pos;
          }
          *w++ = c;
        }
        while (r->buf[r->pos] == ' ' || r->buf[r->pos] == '\t')
          r->pos++;
        c = r->buf[r->pos];
        if (c && c != ',' && c != '\n' && c != '\r') {
          snprintf(r->err, r->errlen, "%s:%d:%d: found '%c' after a closing quote, expected ','",
                   r->path, r->line, (int)(r->pos - line_start) + 1, c);
          return SS_EINVAL;
        }
      } else {
        while ((c = r->buf[r->pos]) && c != ',' && c != '\n' && c != '\r') {
          if (c != ' ' && c != '\t')
            blank = 0;
          *w++ = c;
          r->pos++;
        }
      }
      if (!c && r->pos < r->len) {
        snprintf(r->err, r->errlen, "%s:%d:%d: found a NUL byte, expected text", r->path, r->line,
                 (int)(r->pos - line_start) + 1);
        return SS_EINVAL;
      }
      /* c keeps the delimiter, which the terminating NUL may overwrite */
      *w = 0;
      int rc = push_field(r, text, col);
      if (rc)
        return rc;
      if (c == ',') {
        blank = 0;
        r->pos++;
        continue;
      }
      if (c == '\r' && r->buf[++r->pos] == '\n')
        r->pos++;
      else if (c == '\n')
        r->pos++;
      if (c)
        r->line++;
      break;
    }
    if (!blank)
      return 0;
  }
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    s[--n] = 0;
  return s;
}

/* Distinct run names -> group ids 0, 1, ... in order of first appearance;
 * an empty name is a run of its own (-1). */
static int assign_groups(fit_point *pts, const char *const *names, int n) {
  size_t *first = malloc((size_t)n * sizeof *first);
  if (!first || sweeps__first_equal(names, (size_t)n, first)) {
    free(first);
    return SS_ENOMEM;
  }
  int next = 0;
  for (int i = 0; i < n; i++)
    pts[i].group = !*names[i] ? -1 : first[i] == (size_t)i ? next++ : pts[first[i]].group;
  free(first);
  return 0;
}

/* The header record r->f (on line hline): each known column's field
 * index into idx (-1 when absent); a column named twice, or none known, is
 * an error */
static int read_header(reader *r, int hline, int *idx) {
  if (r->nf == 0) {
    snprintf(r->err, r->errlen,
             "%s: empty file, expected a header row naming columns among params, tokens, "
             "flops, loss, batch_size, steps, lr, run",
             r->path);
    return SS_EINVAL;
  }
  int known = 0;
  for (int c = 0; c < NCOLS; c++)
    idx[c] = -1;
  for (int j = 0; j < r->nf; j++) {
    const char *name = trim(r->f[j].text);
    for (int c = 0; c < NCOLS; c++) {
      if (strcasecmp(name, colnames[c]))
        continue;
      if (idx[c] >= 0) {
        snprintf(r->err, r->errlen, "%s:%d:%d: column '%s' appears twice (also column %d)", r->path,
                 hline, r->f[j].col, colnames[c], idx[c] + 1);
        return SS_EINVAL;
      }
      idx[c] = j;
      known++;
    }
  }
  if (!known) {
    snprintf(r->err, r->errlen,
             "%s:%d: the header names none of the columns params, tokens, flops, loss, "
             "batch_size, steps, lr, run",
             r->path, hline);
    return SS_EINVAL;
  }
  return 0;
}

/* The data record r->f (on line `line`) into p: its known columns,
 * positive numbers, and tokens from flops and params when the table has
 * no tokens */
static int read_point(reader *r, int line, const int *idx, fit_point *p) {
  double v[NCOLS - 1];
  for (int c = 0; c < C_RUN; c++) {
    v[c] = NAN;
    if (idx[c] < 0)
      continue;
    const field *f = &r->f[idx[c]];
    char *s = trim(f->text), *end;
    double x = strtod(s, &end);
    if (!*s || *end || !isfinite(x) || !(x > 0)) {
      snprintf(r->err, r->errlen,
               "%s:%d:%d: column '%s': found '%.40s', expected a positive number", r->path, line,
               f->col, colnames[c], s);
      return SS_EINVAL;
    }
    v[c] = x;
  }
  *p = (fit_point){v[C_PARAMS], v[C_TOKENS], v[C_FLOPS], v[C_LOSS],
                   v[C_BATCH],  v[C_STEPS],  v[C_LR],    -1};
  if (idx[C_TOKENS] < 0 && idx[C_PARAMS] >= 0 && idx[C_FLOPS] >= 0) {
    p->tokens = p->flops / (6 * p->params);
    if (!isfinite(p->tokens) || !(p->tokens > 0)) {
      snprintf(r->err, r->errlen,
               "%s:%d: tokens = flops / (6 params) = %g / (6 x %g) = %g, expected a positive "
               "finite number",
               r->path, line, p->flops, p->params, p->tokens);
      return SS_EINVAL;
    }
  }
  return 0;
}

/* The points read so far and their runs' names */
typedef struct rows {
  fit_point *pts;
  const char **names;
  int count, cap;
} rows;

/* Room for one more row; 0 or SS_ENOMEM (said for line `line`) */
static int grow(rows *t, const reader *r, int line) {
  if (t->count < t->cap)
    return 0;
  int cap = t->cap ? 2 * t->cap : 256;
  fit_point *np = realloc(t->pts, (size_t)cap * sizeof *np);
  const char **nk = np ? realloc(t->names, (size_t)cap * sizeof *nk) : NULL;
  if (np)
    t->pts = np;
  if (nk)
    t->names = nk;
  if (!np || !nk) {
    snprintf(r->err, r->errlen, "%s: out of memory at line %d", r->path, line);
    return SS_ENOMEM;
  }
  t->cap = cap;
  return 0;
}

/* Every data record after the header (nhead fields each, on line hline)
 * into t */
static int read_rows(reader *r, int nhead, int hline, const int *idx, rows *t) {
  for (;;) {
    int line = 0, rc = read_record(r, &line);
    if (rc || r->nf == 0)
      return rc;
    if (r->nf != nhead) {
      snprintf(r->err, r->errlen, "%s:%d: found %d fields, expected %d as in the header (line %d)",
               r->path, line, r->nf, nhead, hline);
      return SS_EINVAL;
    }
    if ((rc = grow(t, r, line)) || (rc = read_point(r, line, idx, &t->pts[t->count])))
      return rc;
    t->names[t->count] = idx[C_RUN] >= 0 ? trim(r->f[idx[C_RUN]].text) : "";
    t->count++;
  }
}

int fit_read_csv(const char *path, fit_point **pts, int *n, char *err, size_t errlen) {
  *pts = NULL;
  *n = 0;
  reader r = {.path = path, .line = 1, .err = err, .errlen = errlen};
  rows t = {0};
  int hline = 0;
  int idx[NCOLS]; /* field index of each known column, -1 when absent */
  int rc = slurp(&r);
  if (rc == 0)
    rc = read_record(&r, &hline);
  if (rc == 0)
    rc = read_header(&r, hline, idx);
  if (rc == 0)
    rc = read_rows(&r, r.nf, hline, idx, &t);
  if (rc == 0 && !t.count) {
    snprintf(err, errlen, "%s: no data rows after the header (line %d)", path, hline);
    rc = SS_EINVAL;
  }
  if (rc == 0 && idx[C_RUN] >= 0 && (rc = assign_groups(t.pts, t.names, t.count)))
    snprintf(err, errlen, "%s: out of memory", path);
  if (rc == 0) {
    *pts = t.pts;
    *n = t.count;
    t.pts = NULL;
  }
  free(t.pts);
  free(t.names);
  free(r.f);
  free(r.buf);
  return rc;
}

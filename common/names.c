/* Names that travel between programs (names.h). */
#include "common/names.h"

#include <stdio.h>
#include <string.h>

int ss_trainer_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > SS_TRAINER_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (!alnum && (i == 0 || (ch != '_' && ch != '-' && ch != '.')))
      return 0;
  }
  return 1;
}

/* The code point at s (at most len bytes) into *cp and its length, or 0
 * when the bytes are not UTF-8 (a stray or missing continuation byte, an
 * overlong form, a surrogate, beyond U+10FFFF). */
static size_t utf8_decode(const unsigned char *s, size_t len, long *cp) {
  static const long min[] = {0, 0, 0x80, 0x800, 0x10000};
  size_t n = s[0] < 0x80                   ? 1
             : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
             : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
             : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
                                           : 0;
  if (!n || n > len)
    return 0;
  long c = n == 1 ? s[0] : s[0] & (0x7f >> n);
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    c = c << 6 | (s[i] & 0x3f);
  }
  if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
    return 0;
  *cp = c;
  return n;
}

/* Controls (Cc), the line and paragraph separators, and the format
 * characters (Cf) of Unicode 15, U+2065 with them: unassigned, it is
 * default-ignorable (shown as nothing) like its neighbours. */
static int hidden(long c) {
  static const long ranges[][2] = {
      {0x0000, 0x001f},   {0x007f, 0x009f},   {0x00ad, 0x00ad},   {0x0600, 0x0605},
      {0x061c, 0x061c},   {0x06dd, 0x06dd},   {0x070f, 0x070f},   {0x0890, 0x0891},
      {0x08e2, 0x08e2},   {0x180e, 0x180e},   {0x200b, 0x200f},   {0x2028, 0x202e},
      {0x2060, 0x206f},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd},
      {0x110cd, 0x110cd}, {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
      {0xe0001, 0xe0001}, {0xe0020, 0xe007f}};
  for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
    if (c >= ranges[i][0] && c <= ranges[i][1])
      return 1;
  return 0;
}

int ss_text_hidden(const char *s, size_t len, size_t *at, long *cp) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    long c;
    size_t n = utf8_decode(u + i, len - i, &c);
    if (!n || hidden(c)) {
      *at = i;
      *cp = n ? c : -1;
      return 1;
    }
    i += n;
  }
  return 0;
}

char *ss_text_escape(const char *s, char *out, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t len = strlen(s), o = 0;
  if (!n)
    return out;
  for (size_t i = 0; i < len;) {
    long c;
    size_t k = utf8_decode(u + i, len - i, &c);
    char esc[12];
    const char *piece = s + i;
    size_t plen = k;
    if (!k) {
      snprintf(esc, sizeof esc, "\\x%02x", u[i]);
      piece = esc;
      plen = 4;
      k = 1;
    } else if (hidden(c)) {
      plen = (size_t)snprintf(esc, sizeof esc, c > 0xffff ? "\\U%08lx" : "\\u%04lx", c);
      piece = esc;
    }
    if (o + plen >= n)
      break;
    memcpy(out + o, piece, plen);
    o += plen;
    i += k;
  }
  out[o] = '\0';
  return out;
}

/* common/names.c: the characters no shown name may hold, and their escaped
 * form for a terminal (scalesweep status prints names stored before the
 * spec refused them). */
#include <string.h>

#include "check.h"
#include "common/names.h"

/* ss_text_hidden finds the first hidden code point of s at byte at. */
static void expect_hidden(const char *s, size_t at, long cp) {
  size_t a = 99;
  long c = 0;
  CHECK_INT_EQ(ss_text_hidden(s, strlen(s), &a, &c), 1);
  CHECK_INT_EQ(a, at);
  CHECK_INT_EQ(c, cp);
}

static void expect_escaped(const char *s, const char *want) {
  char out[128];
  ss_text_escape(s, out, sizeof out);
  if (strcmp(out, want))
    fprintf(stderr, "escaped: '%s', expected '%s'\n", out, want);
  CHECK(!strcmp(out, want));
}

static void test_hidden(void) {
  size_t at;
  long cp;
  const char *fine = "r\u00e9sum\u00e9 \u6570\u636e \U0001F600 a\\b <x> \u05d0\u05d1";
  CHECK_INT_EQ(ss_text_hidden(fine, strlen(fine), &at, &cp), 0);
  CHECK_INT_EQ(ss_text_hidden("", 0, &at, &cp), 0);
  expect_hidden("ab\u202e", 2, 0x202e);
  expect_hidden("\x1b[2J", 0, 0x1b);
  expect_hidden("x\xc2\x85", 1, 0x85); /* NEL, a C1 control */
  expect_hidden("x\u00ad", 1, 0xad);
  expect_hidden("x\u0600", 1, 0x600);
  expect_hidden("x\u0605", 1, 0x605);
  expect_hidden("x\u06dd\u070f", 1, 0x6dd);
  expect_hidden("x\u200f", 1, 0x200f);
  expect_hidden("x\u202a", 1, 0x202a);
  expect_hidden("x\u2060", 1, 0x2060);
  expect_hidden("x\u206f", 1, 0x206f);
  expect_hidden("x\ufff9", 1, 0xfff9);
  expect_hidden("x\U000E0020", 1, 0xe0020);
  expect_hidden("x\U000110BD", 1, 0x110bd);
  /* not UTF-8: a stray continuation, an overlong '/', a surrogate, a cut sequence */
  expect_hidden("ok\x80", 2, -1);
  expect_hidden("\xc0\xaf", 0, -1);
  expect_hidden("a\xed\xa0\x80", 1, -1);
  expect_hidden("ab\xe2\x80", 2, -1);
  expect_hidden("\xf4\x90\x80\x80", 0, -1); /* beyond U+10FFFF */
  /* the neighbours of the ranges show as themselves */
  const char *edges = "\u00ac\u00ae\u2010\u2027\u202f\u205f\ufefe\ufffc\U000E0002\U000E0080";
  CHECK_INT_EQ(ss_text_hidden(edges, strlen(edges), &at, &cp), 0);
}

static void test_escape(void) {
  expect_escaped("plain name", "plain name");
  expect_escaped("ab\u202ecd", "ab\\u202ecd");
  expect_escaped("\u2066x\u2069", "\\u2066x\\u2069");
  expect_escaped("t\tn\n\x1b", "t\\u0009n\\u000a\\u001b");
  expect_escaped("tag\U000E0001", "tag\\U000e0001");
  expect_escaped("bad\xff\xc3", "bad\\xff\\xc3");
  expect_escaped("\u00e9\U0001F600", "\u00e9\U0001F600");
  /* cut at a whole character, never in the middle of an escape */
  char out[8];
  ss_text_escape("abcd\u202e", out, sizeof out);
  CHECK(!strcmp(out, "abcd"));
  ss_text_escape("ab\u00e9\u00e9\u00e9", out, sizeof out);
  CHECK(!strcmp(out, "ab\u00e9\u00e9"));
}

int main(void) {
  test_hidden();
  test_escape();
  CHECK_DONE();
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_json.c -- the one JSON string escaper (core/json.c): what every JSON the server
 * writes relies on (logs, audit, admin and explain JSON, problem details, replay
 * reports): quotes and backslashes escaped, control bytes short or \u00XX, U+2028/2029
 * escaped, valid UTF-8 kept, invalid bytes U+FFFD (or \u00XX for raw-key bytes), and a
 * short buffer cut only between whole units.
 */
#include <string.h>

#include "core/json.h"
#include "t.h"

static const char *esc(const char *s, size_t n, unsigned flags) {
    static char out[512];
    size_t used = 0, k = sl_json_escape(out, sizeof(out) - 1, s, n, flags, &used);
    out[k] = '\0';
    T_EQ_U(used, n);
    return out;
}

static void plain_and_specials(void) {
    T_EQ_S(esc("api.key-1", 9, 0), "api.key-1");
    T_EQ_S(esc("a\"b\\c", 5, 0), "a\\\"b\\\\c");
    T_EQ_S(esc("\n\r\t\b\f", 5, 0), "\\n\\r\\t\\b\\f");
    T_EQ_S(esc("\x01\x1f\x7f", 3, 0), "\\u0001\\u001f\\u007f");
    T_EQ_S(esc("x\0y", 3, 0), "x\\u0000y");
    /* bare text (a log line's message): quotes as they are, the rest still escaped */
    T_EQ_S(esc("say \"hi\"\n", 9, SL_JSON_BARE), "say \"hi\"\\n");
}

static void utf8(void) {
    T_EQ_S(esc("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, 0), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    T_EQ_S(esc("\xe2\x80\xa8|\xe2\x80\xa9", 7, 0), "\\u2028|\\u2029");
    /* stray continuation, overlong, surrogate, above U+10FFFF, cut sequence: U+FFFD each */
    T_EQ_S(esc("\x80", 1, 0), "\xef\xbf\xbd");
    T_EQ_S(esc("\xc0\xaf", 2, 0), "\xef\xbf\xbd\xef\xbf\xbd");
    T_EQ_S(esc("\xed\xa0\x80", 3, 0), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    T_EQ_S(esc("\xf4\x90\x80\x80", 4, 0), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    T_EQ_S(esc("ok\xe2\x82", 4, 0), "ok\xef\xbf\xbd\xef\xbf\xbd");
    T_EQ_U(sl_utf8_len("\xf0\x9f\x98\x80", 4), 4);
    T_EQ_U(sl_utf8_len("\xf0\x9f\x98", 3), 0);
}

static void raw_bytes(void) {
    /* keys are bytes: each byte >= 0x80 stays visible and distinct */
    T_EQ_S(esc("k\xc3\xa9\xff", 4, SL_JSON_BYTES), "k\\u00c3\\u00a9\\u00ff");
}

static void cut_between_units(void) {
    char out[8];
    size_t used = 0;
    size_t k = sl_json_escape(out, sizeof(out), "abc\"\x01", 5, 0, &used);
    /* "abc" (3) + \" (2) = 5; \u0001 (6) does not fit in the 3 left: stop before it */
    T_EQ_U(k, 5);
    T_EQ_U(used, 4);
    T_CHECK(memcmp(out, "abc\\\"", 5) == 0);
    k = sl_json_escape(out, 2, "\xe2\x82\xac", 3, 0, &used); /* a 3-byte unit never split */
    T_EQ_U(k, 0);
    T_EQ_U(used, 0);
}

int main(void) {
    T_RUN(plain_and_specials);
    T_RUN(utf8);
    T_RUN(raw_bytes);
    T_RUN(cut_between_units);
    return T_DONE();
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_resp.c -- the RESP parser and encoders: multibulk and inline requests as
 * redis-cli and redis-benchmark send them, Redis's protocol error texts, limits, the
 * RESP2/RESP3 shapes of replies, and a property test over random argument vectors
 * (encode as multibulk, split anywhere, parse back the same arguments).
 */
#include "proto/resp.h"
#include "t.h"

static char scratch[SL_RESP_MAX_INLINE + 16];

static int parse(const char *s, size_t n, sl_resp_cmd *c) {
    return sl_resp_parse(s, n, c, scratch, sizeof(scratch));
}

static int arg_eq(const sl_resp_cmd *c, size_t i, const char *s) {
    return i < c->argc && c->argl[i] == strlen(s) && memcmp(c->argv[i], s, c->argl[i]) == 0;
}

static void test_multibulk_and_pipeline(void) {
    static sl_resp_cmd c;
    const char *s = "*3\r\n$11\r\nCL.THROTTLE\r\n$4\r\nuser\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
    int n = parse(s, strlen(s), &c);
    T_EQ_I(n, 38);
    T_EQ_I(c.argc, 3);
    T_CHECK(arg_eq(&c, 0, "CL.THROTTLE") && arg_eq(&c, 1, "user") && arg_eq(&c, 2, ""));
    int m = parse(s + n, strlen(s) - (size_t)n, &c);
    T_EQ_I(m, (int)strlen(s) - n);
    T_CHECK(arg_eq(&c, 0, "PING"));
    for (size_t k = 0; k < 38; k++) T_EQ_I(parse(s, k, &c), SL_RESP_INCOMPLETE);
}

static void test_inline(void) {
    static sl_resp_cmd c;
    const char *s = "PING\r\n";
    T_EQ_I(parse(s, strlen(s), &c), 6);
    T_CHECK(c.argc == 1 && arg_eq(&c, 0, "PING") && c.inline_form);
    s = "set \"a b\\x41\\n\" 'it''s'\n";
    /* 'it''s' is unbalanced by Redis's rules (quote followed by a non-space) */
    T_EQ_I(parse(s, strlen(s), &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: unbalanced quotes in request");
    s = "set \"a b\\x41\\n\" 'it\\'s'   \n";
    T_EQ_I(parse(s, strlen(s), &c), (int)strlen(s));
    T_EQ_I(c.argc, 3);
    T_CHECK(arg_eq(&c, 1, "a bA\n") && arg_eq(&c, 2, "it's"));
    s = "\r\n";
    T_EQ_I(parse(s, 2, &c), 2);
    T_EQ_I(c.argc, 0); /* empty line: nothing to run, no reply */
    T_EQ_I(parse("PING", 4, &c), SL_RESP_INCOMPLETE);
}

static void test_protocol_errors(void) {
    static sl_resp_cmd c;
    static char big[SL_RESP_MAX_INLINE + 100];
    T_EQ_I(parse("*x\r\n", 4, &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: invalid multibulk length");
    T_EQ_I(parse("*1\r\n+PING\r\n", 11, &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: expected '$', got '+'");
    T_EQ_I(parse("*1\r\n$-5\r\n", 9, &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: invalid bulk length");
    T_EQ_I(parse("*1\r\n$999999999\r\n", 16, &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: invalid bulk length");
    T_EQ_I(parse("*9999\r\n", 7, &c), SL_RESP_ERROR); /* over our argument limit */
    T_EQ_I(parse("\"abc\n", 5, &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: unbalanced quotes in request");
    memset(big, 'a', sizeof(big));
    T_EQ_I(parse(big, sizeof(big), &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: too big inline request");
    big[0] = '*';
    T_EQ_I(parse(big, sizeof(big), &c), SL_RESP_ERROR);
    T_EQ_S(c.err, "Protocol error: too big mbulk count string");
    /* *0 and *-1 are empty requests, consumed without a reply */
    T_EQ_I(parse("*0\r\n", 4, &c), 4);
    T_EQ_I(c.argc, 0);
    T_EQ_I(parse("*-1\r\n", 5, &c), 5);
}

static void test_integers(void) {
    static sl_resp_cmd c;
    const char *s = "*6\r\n$1\r\n5\r\n$2\r\n-7\r\n$2\r\n07\r\n$2\r\n+1\r\n$19\r\n9223372036854775807\r\n$19\r\n9223372036854775808\r\n";
    T_CHECK(parse(s, strlen(s), &c) > 0);
    int64_t v;
    T_CHECK(sl_resp_arg_i64(&c, 0, &v) == 0 && v == 5);
    T_CHECK(sl_resp_arg_i64(&c, 1, &v) == 0 && v == -7);
    T_EQ_I(sl_resp_arg_i64(&c, 2, &v), -1);
    T_EQ_I(sl_resp_arg_i64(&c, 3, &v), -1);
    T_CHECK(sl_resp_arg_i64(&c, 4, &v) == 0 && v == INT64_MAX);
    T_EQ_I(sl_resp_arg_i64(&c, 5, &v), -1);
    T_CHECK(sl_resp_arg_is(&c, 0, "5"));
}

static void test_encoders(void) {
    char out[512];
    sl_wbuf w;
    sl_wbuf_init(&w, out, sizeof(out));
    sl_resp_array(&w, 5);
    sl_resp_int(&w, 0);
    sl_resp_int(&w, 16);
    sl_resp_int(&w, 15);
    sl_resp_int(&w, -1);
    sl_resp_int(&w, 2);
    out[w.len] = '\0';
    T_EQ_S(out, "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"); /* redis-cell's README reply */
    sl_wbuf_init(&w, out, sizeof(out));
    sl_resp_map(&w, 2, 1);
    sl_resp_bulk_str(&w, "save");
    sl_resp_bulk_str(&w, "");
    sl_resp_null(&w, 2);
    sl_resp_bool(&w, 2, 1);
    sl_resp_fixed(&w, 2, 1500, 1000);
    out[w.len] = '\0';
    T_EQ_S(out, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n$-1\r\n:1\r\n$5\r\n1.500\r\n");
    sl_wbuf_init(&w, out, sizeof(out));
    sl_resp_map(&w, 3, 1);
    sl_resp_null(&w, 3);
    sl_resp_bool(&w, 3, 0);
    sl_resp_fixed(&w, 3, -25, 10);
    sl_resp_verbatim(&w, 3, "ab", 2);
    sl_resp_error(&w, "ERR bad\r\nline");
    out[w.len] = '\0';
    T_EQ_S(out, "%1\r\n_\r\n#f\r\n,-2.5\r\n=6\r\ntxt:ab\r\n-ERR bad  line\r\n");
}

/* Property: random argument vectors survive encode -> split -> parse. */
static void test_roundtrip_property(void) {
    uint64_t seed = t_seed();
    static char buf[1 << 16];
    static sl_resp_cmd c;
    for (int round = 0; round < 300; round++) {
        size_t argc = 1 + (size_t)(t_rand(&seed) % 8);
        static char args[8][64];
        size_t lens[8];
        sl_wbuf w;
        sl_wbuf_init(&w, buf, sizeof(buf));
        sl_resp_array(&w, argc);
        for (size_t i = 0; i < argc; i++) {
            lens[i] = (size_t)(t_rand(&seed) % 64);
            for (size_t k = 0; k < lens[i]; k++) args[i][k] = (char)t_rand(&seed);
            sl_resp_bulk(&w, args[i], lens[i]);
        }
        size_t cut = (size_t)(t_rand(&seed) % w.len);
        T_EQ_I(parse(buf, cut, &c), SL_RESP_INCOMPLETE);
        T_EQ_I(parse(buf, w.len, &c), (int)w.len);
        T_EQ_U(c.argc, argc);
        for (size_t i = 0; i < argc && i < c.argc; i++)
            T_CHECK(c.argl[i] == lens[i] && memcmp(c.argv[i], args[i], lens[i]) == 0);
    }
}

int main(void) {
    T_RUN(test_multibulk_and_pipeline);
    T_RUN(test_inline);
    T_RUN(test_protocol_errors);
    T_RUN(test_integers);
    T_RUN(test_encoders);
    T_RUN(test_roundtrip_property);
    return T_DONE();
}

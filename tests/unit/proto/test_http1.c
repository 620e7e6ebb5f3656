/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http1.c -- the HTTP/1.1 request parser and response writer: what a client and a
 * gateway rely on (framing, keep-alive, pipelining, limits with the right status), and a
 * property test: any request split at any byte parses to the same result once complete.
 */
#include "proto/http1.h"
#include "t.h"

static sl_http_limits lim;
static char body[70000];

static int parse(const char *s, sl_http_req *r) {
    return sl_http1_parse(s, strlen(s), &lim, r, body, sizeof(body));
}

static void test_simple_get(void) {
    sl_http_req r;
    const char *s = "GET /v1/auth?x=1 HTTP/1.1\r\nHost: a\r\nX-Api-Key:  k1 \r\n\r\n";
    T_EQ_I(parse(s, &r), (int)strlen(s));
    T_CHECK(r.method_len == 3 && memcmp(r.method, "GET", 3) == 0);
    T_CHECK(r.target_len == 12 && memcmp(r.target, "/v1/auth?x=1", 12) == 0);
    T_EQ_I(r.minor, 1);
    T_EQ_I(r.nheaders, 2);
    T_EQ_I(r.keep_alive, 1);
    const sl_http_header *h = sl_http1_header(&r, "x-api-key");
    T_CHECK(h != NULL && h->value_len == 2 && memcmp(h->value, "k1", 2) == 0);
    T_CHECK(sl_http1_header(&r, "missing") == NULL);
}

static void test_keep_alive_rules(void) {
    sl_http_req r;
    T_CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) > 0);
    T_EQ_I(r.keep_alive, 0);
    T_CHECK(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r) > 0);
    T_EQ_I(r.keep_alive, 1);
    T_CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n", &r) > 0);
    T_EQ_I(r.keep_alive, 0);
}

static void test_incomplete_and_pipelined(void) {
    sl_http_req r;
    const char *one = "POST /v1/check HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    char two[512];
    snprintf(two, sizeof(two), "%sGET /b HTTP/1.1\r\nHost: a\r\n\r\n", one);
    int n = sl_http1_parse(two, strlen(two), &lim, &r, body, sizeof(body));
    T_EQ_I(n, (int)strlen(one));
    T_CHECK(r.body_len == 5 && memcmp(r.body, "hello", 5) == 0);
    int m = sl_http1_parse(two + n, strlen(two) - (size_t)n, &lim, &r, body, sizeof(body));
    T_EQ_I(m, (int)(strlen(two) - (size_t)n));
    T_CHECK(r.target_len == 2);
    /* body not there yet: incomplete, but the head is known */
    T_EQ_I(sl_http1_parse(one, strlen(one) - 2, &lim, &r, body, sizeof(body)), SL_HTTP_INCOMPLETE);
    T_EQ_I(r.head_done, 1);
}

static void test_chunked(void) {
    sl_http_req r;
    const char *s = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
    T_EQ_I(parse(s, &r), (int)strlen(s));
    T_CHECK(r.chunked);
    T_CHECK(r.body_len == 11 && memcmp(r.body, "hello world", 11) == 0);
    /* every prefix is incomplete, never an error */
    for (size_t k = 0; k < strlen(s); k++)
        T_EQ_I(sl_http1_parse(s, k, &lim, &r, body, sizeof(body)), SL_HTTP_INCOMPLETE);
}

static void test_errors_have_the_right_status(void) {
    sl_http_req r;
    T_EQ_I(parse("GET / HTTP/1.1\r\n\r\n", &r), -400);                 /* no Host */
    T_EQ_I(parse("GET / HTTP/2.0\r\nHost: a\r\n\r\n", &r), -505);
    T_EQ_I(parse("BREW / HTTP/1.1\r\nHost: a\r\n\r\n", &r), -501);
    T_EQ_I(parse("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", &r), -400);
    T_EQ_I(parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n", &r), -400);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &r), -400);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", &r), -400);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", &r), -501);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n", &r), -413);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", &r), -400);
    T_EQ_I(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", &r), -400);
    T_EQ_I(parse("GET / HTTP/1.1\r\nHost: a\r\nX: a\001b\r\n\r\n", &r), -400);
}

static void test_limits(void) {
    sl_http_req r;
    static char big[20000];
    /* target too long: 414, even before the line is complete */
    strcpy(big, "GET /");
    memset(big + 5, 'a', 5000);
    big[5005] = '\0';
    T_EQ_I(sl_http1_parse(big, strlen(big), &lim, &r, body, sizeof(body)), -414);
    /* headers too large: 431 */
    strcpy(big, "GET / HTTP/1.1\r\nHost: a\r\nX-Big: ");
    size_t n = strlen(big);
    memset(big + n, 'b', 9000);
    strcpy(big + n + 9000, "\r\n\r\n");
    T_EQ_I(sl_http1_parse(big, strlen(big), &lim, &r, body, sizeof(body)), -431);
    T_EQ_I(sl_http1_parse(big, n + 9000, &lim, &r, body, sizeof(body)), -431);
    /* too many header lines: 431 */
    strcpy(big, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < 70; i++) strcat(big, "A: b\r\n");
    strcat(big, "\r\n");
    T_EQ_I(sl_http1_parse(big, strlen(big), &lim, &r, body, sizeof(body)), -431);
}

/* Property: feeding a valid request split at any point gives "incomplete" for every
 * proper prefix and the same parse for the whole. */
static void test_prefixes_property(void) {
    uint64_t seed = t_seed();
    static const char *const reqs[] = {
        "GET /a HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n",
        "POST /v1/check HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
        "POST /c HTTP/1.1\nHost: h\nTransfer-Encoding: chunked\n\n3\nabc\n0\n\n",
        "GET / HTTP/1.0\r\n\r\n",
    };
    for (int round = 0; round < 200; round++) {
        const char *s = reqs[t_rand(&seed) % 4];
        size_t len = strlen(s);
        sl_http_req r;
        size_t cut = (size_t)(t_rand(&seed) % len);
        T_EQ_I(sl_http1_parse(s, cut, &lim, &r, body, sizeof(body)), SL_HTTP_INCOMPLETE);
        T_EQ_I(sl_http1_parse(s, len, &lim, &r, body, sizeof(body)), (int)len);
    }
}

static void test_writer(void) {
    char out[256];
    sl_wbuf w;
    sl_wbuf_init(&w, out, sizeof(out));
    sl_http1_begin(&w, 1, 429);
    sl_http1_hdr_i64(&w, "Retry-After", 3);
    sl_http1_end(&w, 0, 1, "application/problem+json", "{}", 2, 1);
    T_CHECK(!w.overflow);
    out[w.len] = '\0';
    T_EQ_S(out, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Type: "
                "application/problem+json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    /* a reply that does not fit is flagged, never truncated silently */
    sl_wbuf_init(&w, out, 10);
    sl_http1_begin(&w, 1, 200);
    T_CHECK(w.overflow);
    T_CHECK(w.len <= 10);
}

int main(void) {
    sl_http1_limits_default(&lim);
    T_RUN(test_simple_get);
    T_RUN(test_keep_alive_rules);
    T_RUN(test_incomplete_and_pipelined);
    T_RUN(test_chunked);
    T_RUN(test_errors_have_the_right_status);
    T_RUN(test_limits);
    T_RUN(test_prefixes_property);
    T_RUN(test_writer);
    return T_DONE();
}

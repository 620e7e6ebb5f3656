/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_replay_parse.c -- what `sluice replay` reads from one log line (src/tools/trace_parse.c,
 * trace_formats.c and trace_time.c, included to reach them): the time forms, nginx log_format lines (combined and custom, with
 * $msec/$request_time), nginx and Envoy JSON, CSV with quoting, --map, and the reasons a
 * line is refused. Also the SVG writer's escaping (src/tools/svg.c).
 */
#include "tools/svg.c"
#include "tools/trace_formats.c"
#include "tools/trace_parse.c"
#include "tools/trace_time.c"
#include "t.h"

#define SEC INT64_C(1000000000)
#define MS INT64_C(1000000)

static sl_trace_rec R;
static char LINE[8192];

static const char *parse(sl_trace_layout *l, const char *text) {
    snprintf(LINE, sizeof(LINE), "%s", text);
    return sl_trace_parse_line(l, LINE, strlen(LINE), &R);
}

static bool str_is(sl_str s, const char *want) {
    return s.p != NULL && s.len == strlen(want) && memcmp(s.p, want, s.len) == 0;
}

static const char *header(const char *name) {
    static char buf[256];
    for (size_t i = 0; i < R.n_headers; i++)
        if (R.headers[i].name.len == strlen(name) && memcmp(R.headers[i].name.p, name, R.headers[i].name.len) == 0) {
            snprintf(buf, sizeof(buf), "%.*s", (int)R.headers[i].value.len, R.headers[i].value.p);
            return buf;
        }
    return NULL;
}

static int64_t T(const char *s) {
    int64_t t = -1;
    if (!sl_trace_parse_time(s, strlen(s), &t)) return -1;
    return t;
}

static void test_times(void) {
    const int64_t base = INT64_C(1767225600) * SEC; /* 2026-01-01T00:00:00Z */
    T_EQ_I(T("1767225600"), base);
    T_EQ_I(T("1767225600.250"), base + 250 * MS);
    T_EQ_I(T("1767225600123"), base + 123 * MS);          /* ms */
    T_EQ_I(T("1767225600123456"), base + 123456 * 1000);  /* us */
    T_EQ_I(T("1767225600123456789"), base + 123456789);   /* ns */
    T_EQ_I(T("2026-01-01T00:00:00Z"), base);
    T_EQ_I(T("2026-01-01T01:00:00.5+01:00"), base + 500 * MS);
    T_EQ_I(T("2026-01-01 00:00:00.000123"), base + 123 * 1000);
    T_EQ_I(T("2025-12-31T19:00:00-0500"), base);
    T_EQ_I(T("01/Jan/2026:00:00:00 +0000"), base);
    T_EQ_I(T("31/Dec/2025:16:00:00 -0800"), base);
    T_EQ_I(T("29/Feb/2028:00:00:00 +0000"), INT64_C(1835395200) * SEC);
    /* the last representable instant of int64 nanoseconds, and what lies beyond it: a
     * year 9999 was accepted as 1816 (signed overflow, issue 27) */
    T_EQ_I(T("2262-04-11T23:47:16.854775807Z"), INT64_MAX);
    T_EQ_I(T("2262-04-12T00:47:16+01:00"), INT64_C(9223372036) * SEC);
    const char *bad[] = {"", "-", "yesterday", "2026-13-01T00:00:00Z", "01/Foo/2026:00:00:00 +0000",
                         "1767225600.", "2026-01-01T00:00:00+1", "12:00:00",
                         "9999-12-31T23:59:59Z", "9999-01-01T00:00:00.5-12:00", "2262-04-11T23:47:16.854775808Z",
                         "2262-04-11T23:47:17Z", "2263-01-01 00:00:00", "31/Dec/9999:23:59:59 +0000",
                         "12/Apr/2262:00:00:00 +0000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (T(bad[i]) != -1) T_FAIL("accepted time '%s'", bad[i]);
}

static void test_nginx_combined(void) {
    char err[256];
    sl_trace_layout *l = sl_trace_layout_create(SL_TF_NGINX, NULL, NULL, err, sizeof(err));
    T_CHECK(l != NULL);
    T_CHECK(parse(l, "203.0.113.7 - alice [01/Jan/2026:00:00:05 +0000] \"POST /login?x=1 HTTP/1.1\" "
                     "200 512 \"-\" \"Mozilla/5.0 \\x22quoted\\x22\"") == NULL);
    T_EQ_I(R.t_ns, INT64_C(1767225605) * SEC);
    T_EQ_I(R.duration_ns, -1);
    T_CHECK(str_is(R.method, "POST"));
    T_CHECK(str_is(R.path, "/login?x=1"));
    T_CHECK(str_is(R.client_ip, "203.0.113.7"));
    T_EQ_S(header("user-agent"), "Mozilla/5.0 \"quoted\"");
    T_CHECK(header("referer") == NULL); /* "-" is nginx's "none" */
    /* fields a later log_format appended are tolerated */
    T_CHECK(parse(l, "::1 - - [01/Jan/2026:00:00:05 +0000] \"GET / HTTP/2.0\" 200 1 \"-\" \"c\" extra 0.1") == NULL);
    T_CHECK(str_is(R.client_ip, "::1"));
    /* refused, with a reason */
    T_CHECK(parse(l, "garbage") != NULL);
    T_CHECK(parse(l, "1.2.3.4 - - [01/Jan/2026:00:00:05 +0000] \"GET / HTTP/1.1\" 200") != NULL); /* truncated */
    T_CHECK(parse(l, "1.2.3.4 - - [01/Jan/2026:00:00:05 +0000] \"\\x16\\x03\\x01\" 400 0 \"-\" \"-\"") != NULL);
    T_CHECK(parse(l, "1.2.3.4 - - [99/Jan/2026:00:00:05 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"") != NULL);
    sl_trace_layout_destroy(l);
}

static void test_nginx_custom(void) {
    char err[256];
    const char *fmt = "$remote_addr [$msec] \"$request\" $status $request_time \"$http_x_api_key\" ${host}";
    sl_trace_layout *l = sl_trace_layout_create(SL_TF_NGINX, fmt, NULL, err, sizeof(err));
    T_CHECK(l != NULL);
    T_CHECK(parse(l, "10.0.0.1 [1767225600.750] \"GET /v1/items HTTP/1.1\" 200 0.250 \"k-123\" api.example.com") == NULL);
    /* $msec is written when the request ends: it arrived $request_time earlier */
    T_EQ_I(R.t_ns, INT64_C(1767225600) * SEC + 500 * MS);
    T_EQ_I(R.duration_ns, 250 * MS);
    T_EQ_S(header("x-api-key"), "k-123");
    T_CHECK(str_is(R.host, "api.example.com"));
    sl_trace_layout_destroy(l);
    /* formats that cannot be matched are refused at once */
    T_CHECK(sl_trace_layout_create(SL_TF_NGINX, "$a$b", NULL, err, sizeof(err)) == NULL);
    T_CHECK(strstr(err, "cannot be told apart") != NULL);
    T_CHECK(sl_trace_layout_create(SL_TF_NGINX, "x ${a", NULL, err, sizeof(err)) == NULL);
}

static void test_json_nginx_and_envoy(void) {
    char err[256];
    sl_trace_layout *l = sl_trace_layout_create(SL_TF_JSON, NULL, NULL, err, sizeof(err));
    T_CHECK(parse(l, "{\"time_local\":\"01/Jan/2026:00:00:10 +0000\",\"msec\":\"1767225610.300\","
                     "\"remote_addr\":\"192.0.2.1\",\"request\":\"GET /a\\/b HTTP/1.1\",\"status\":200,"
                     "\"request_time\":\"0.100\",\"http_x_api_key\":\"caf\\u00e9\",\"http_host\":\"h\"}") == NULL);
    /* $msec wins over $time_local (it has milliseconds) */
    T_EQ_I(R.t_ns, INT64_C(1767225610) * SEC + 200 * MS);
    T_CHECK(str_is(R.path, "/a/b"));
    T_EQ_S(header("x-api-key"), "caf\xc3\xa9");
    T_CHECK(str_is(R.host, "h"));
    /* Envoy's default JSON fields: start_time is the arrival, duration in ms */
    T_CHECK(parse(l, "{\"start_time\":\"2026-01-01T00:00:01.250Z\",\"method\":\"PUT\","
                     "\"path\":\"/files/x\",\"authority\":\"files.example\",\"duration\":40,"
                     "\"downstream_remote_address\":\"198.51.100.9:41234\",\"bytes_received\":1024,"
                     "\"x_forwarded_for\":null,\"upstream\":{\"cluster\":\"a\",\"hosts\":[1,{\"b\":\"}\"}]}}") == NULL);
    T_EQ_I(R.t_ns, INT64_C(1767225601) * SEC + 250 * MS);
    T_EQ_I(R.duration_ns, 40 * MS);
    T_CHECK(str_is(R.client_ip, "198.51.100.9"));
    T_CHECK(R.has_body_bytes && R.body_bytes == 1024);
    T_CHECK(header("x-forwarded-for") == NULL);
    T_CHECK(parse(l, "{\"start_time\":\"2026-01-01T00:00:01Z\",\"downstream_remote_address\":\"[2001:db8::1]:443\"}") == NULL);
    T_CHECK(str_is(R.client_ip, "2001:db8::1"));
    /* refused */
    T_CHECK(parse(l, "{\"start_time\":\"2026-01-01T00:00:01Z\",\"path\":\"/a") != NULL);  /* truncated */
    T_CHECK(parse(l, "{\"path\":\"/a\"}") != NULL);                                     /* no time */
    T_CHECK(parse(l, "[1,2]") != NULL);
    T_CHECK(parse(l, "{\"time\":\"2026-01-01T00:00:01Z\" \"path\":\"/\"}") != NULL);
    T_CHECK(parse(l, "{\"time\":\"2026-01-01T00:00:01Z\",\"p\":\"\\q\"}") != NULL);
    sl_trace_layout_destroy(l);
}

static void test_csv(void) {
    char err[256];
    sl_trace_layout *l = sl_trace_layout_create(SL_TF_CSV, NULL, NULL, err, sizeof(err));
    snprintf(LINE, sizeof(LINE), "time,method,path,host,client_ip,header.X-Api-Key,cost");
    T_CHECK(sl_trace_layout_header(l, LINE, strlen(LINE)));
    T_CHECK(parse(l, "1767225600.5,POST,\"/q?a=1,b=2\",h,10.1.1.1,\"say \"\"hi\"\"\",7") == NULL);
    T_EQ_I(R.t_ns, INT64_C(1767225600) * SEC + 500 * MS);
    T_CHECK(str_is(R.path, "/q?a=1,b=2"));
    T_EQ_S(header("x-api-key"), "say \"hi\"");
    T_CHECK(R.has_cost && R.cost == 7);
    T_CHECK(parse(l, "1767225600.5,GET,/,h,10.1.1.1,k") != NULL);          /* a field short */
    T_CHECK(parse(l, "1767225600.5,GET,/,h,10.1.1.1,k,1,extra") != NULL);  /* one too many */
    T_CHECK(parse(l, "1767225600.5,GET,\"/,h,10.1.1.1,k,1") != NULL);       /* open quote */
    sl_trace_layout_destroy(l);
    l = sl_trace_layout_create(SL_TF_CSV, NULL, NULL, err, sizeof(err));
    snprintf(LINE, sizeof(LINE), "method,path"); /* no time column: not a usable header */
    T_CHECK(!sl_trace_layout_header(l, LINE, strlen(LINE)));
    T_CHECK(parse(l, "GET,/") != NULL);
    sl_trace_layout_destroy(l);
}

static void test_map(void) {
    char err[256];
    sl_trace_map m = {0};
    T_EQ_I(sl_trace_map_add(&m, "header.x-api-key=$apikey", err, sizeof(err)), 0);
    T_EQ_I(sl_trace_map_add(&m, "host=api.example.com", err, sizeof(err)), 0);
    T_EQ_I(sl_trace_map_add(&m, "client_ip=$http_x_forwarded_for", err, sizeof(err)), 0);
    T_EQ_I(sl_trace_map_add(&m, "time=${ts_ms}", err, sizeof(err)), 0);
    T_EQ_I(sl_trace_map_add(&m, "duration:ms=$took", err, sizeof(err)), 0);
    T_EQ_I(sl_trace_map_add(&m, "path=", err, sizeof(err)), 0); /* no path at all */
    T_EQ_I(sl_trace_map_add(&m, "colour=$c", err, sizeof(err)), -1);
    T_CHECK(strstr(err, "unknown attribute") != NULL);
    T_EQ_I(sl_trace_map_add(&m, "method:ms=$c", err, sizeof(err)), -1);
    T_EQ_I(sl_trace_map_add(&m, "nothing", err, sizeof(err)), -1);
    sl_trace_layout *l = sl_trace_layout_create(SL_TF_JSON, NULL, &m, err, sizeof(err));
    T_CHECK(parse(l, "{\"ts_ms\":1767225600100,\"apikey\":\"K1\",\"http_x_forwarded_for\":\"203.0.113.5, 10.0.0.1\","
                     "\"remote_addr\":\"10.0.0.1\",\"path\":\"/ignored\",\"took\":\"25\",\"time\":\"2001-01-01T00:00:00Z\"}") == NULL);
    T_EQ_I(R.t_ns, INT64_C(1767225600) * SEC + 100 * MS); /* the mapped field, not "time" */
    T_EQ_S(header("x-api-key"), "K1");
    T_CHECK(str_is(R.host, "api.example.com"));
    T_CHECK(str_is(R.client_ip, "203.0.113.5")); /* the first of the list, not remote_addr */
    T_CHECK(R.path.p == NULL);
    T_EQ_I(R.duration_ns, 25 * MS);
    sl_trace_layout_destroy(l);
}

static void test_svg_escapes(void) {
    sl_buf b = {0};
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    double y[3] = {1, 2, 3};
    p.title = "a <b> & \"c\"";
    p.npanels = 1;
    p.panels[0].title = "policy <x>";
    p.panels[0].nseries = 1;
    p.panels[0].series[0] = (sl_plot_series){"s&s", "#000", y, NULL, 3, SL_PLOT_LINE, false};
    p.dx = 1;
    sl_svg_plot(&b, &p);
    T_CHECK(!b.oom && b.p != NULL);
    T_CHECK(strstr(b.p, "a &lt;b&gt; &amp; &quot;c&quot;") != NULL);
    T_CHECK(strstr(b.p, "policy &lt;x&gt;") != NULL);
    T_CHECK(strstr(b.p, "s&amp;s") != NULL);
    T_CHECK(strstr(b.p, "<b>") == NULL);
    sl_buf_free(&b);
}

int main(void) {
    T_RUN(test_times);
    T_RUN(test_nginx_combined);
    T_RUN(test_nginx_custom);
    T_RUN(test_json_nginx_and_envoy);
    T_RUN(test_csv);
    T_RUN(test_map);
    T_RUN(test_svg_escapes);
    return T_DONE();
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_render.c -- the exact bytes a client sees: RateLimit-Policy / RateLimit (draft-11
 * structured fields), Retry-After, legacy X-RateLimit-*, problem+json (RFC 9457) with
 * the trace id of a valid traceparent, and the JSON verdict. First from real decisions
 * on a manual clock, then from hand-built verdicts for the edge cases.
 */
#include <jansson.h>

#include "config/compiled.h"
#include "engine/internal.h"
#include "t.h"

#define MS SLUICE_NS_PER_MS
#define SEC SLUICE_NS_PER_S

static sl_verdict V;
static char H[4096], B[4096];

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool fx_open(fx *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    static sl_diag_list dl;
    if (sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &f->cfg, &dl) != SLUICE_OK) {
        T_FAIL("load: %s", dl.n ? dl.items[0].msg : "?");
        return false;
    }
    f->clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC); /* 2026-01-01 00:00 UTC */
    int err;
    f->st = sluice_store_create(NULL, &err);
    f->e = sl_engine_create(f->cfg, f->st, &err, NULL, 0);
    T_CHECK(f->e != NULL);
    return f->e != NULL;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
    sluice_clock_destroy(f->clk);
}

static void check(fx *f, const char *key) {
    sl_header h = {S("x-api-key"), S(key)};
    sl_request r = {.method = S("GET"), .path = S("/"), .headers = &h, .n_headers = 1};
    T_EQ_I(sl_engine_check(f->e, &r, sluice_clock_now(f->clk), &V), SLUICE_OK);
}

static void token_bucket_allowed_and_rejected(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: api, objective: fairness, key: [header.x-api-key],\n"
                     "      algorithm: token_bucket, limits: [{rate: 10/s, burst: 20}] }\n"))
        return;
    check(&f, "k");
    T_EQ_I(sl_render_headers(&V, H, sizeof(H), 0), (int)strlen(H));
    T_EQ_S(H, "RateLimit-Policy: \"api\";q=20;w=2\r\n"
              "RateLimit: \"api\";r=19;t=1\r\n");
    for (int i = 0; i < 19; i++) check(&f, "k");
    sl_render_headers(&V, H, sizeof(H), SL_RENDER_LEGACY);
    T_EQ_S(H, "RateLimit-Policy: \"api\";q=20;w=2\r\n"
              "RateLimit: \"api\";r=0;t=2\r\n"
              "X-RateLimit-Limit: 20\r\n"
              "X-RateLimit-Remaining: 0\r\n"
              "X-RateLimit-Reset: 2\r\n");
    check(&f, "k");
    T_EQ_I(V.action, SL_REJECT);
    sl_render_headers(&V, H, sizeof(H), 0);
    T_EQ_S(H, "RateLimit-Policy: \"api\";q=20;w=2\r\n"
              "RateLimit: \"api\";r=0;t=1\r\n"
              "Retry-After: 1\r\n");
    sl_render_headers(&V, H, sizeof(H), SL_RENDER_NO_POLICY | SL_RENDER_LEGACY);
    T_EQ_S(H, "RateLimit: \"api\";r=0;t=1\r\n"
              "Retry-After: 1\r\n"
              "X-RateLimit-Limit: 20\r\n"
              "X-RateLimit-Remaining: 0\r\n"
              "X-RateLimit-Reset: 1\r\n");
    T_CHECK(sl_render_problem(&V, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", B,
                              sizeof(B)) > 0);
    T_EQ_S(B, "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
              "\"title\":\"Quota Exceeded\",\"status\":429,"
              "\"detail\":\"Limit 'api' is exhausted; retry after 1 s.\","
              "\"violated-policies\":[\"api\"],"
              "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"}");
    /* 50 ms later 50 ms remain: rounded up to "1", never 0 */
    sluice_clock_advance(f.clk, 50 * MS);
    check(&f, "k");
    T_EQ_I(V.retry_after_ns, 50 * MS);
    sl_render_headers(&V, H, sizeof(H), SL_RENDER_NO_POLICY);
    T_EQ_S(H, "RateLimit: \"api\";r=0;t=1\r\nRetry-After: 1\r\n");
    /* an allowed response has no problem body */
    sluice_clock_advance(f.clk, SEC);
    check(&f, "k");
    T_EQ_I(sl_render_problem(&V, NULL, B, sizeof(B)), SLUICE_EINVAL);
    fx_close(&f);
}

static void several_windows_and_units(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: a\n"
                     "    objective: fairness\n"
                     "    key: [header.x-api-key]\n"
                     "    algorithm: token_bucket\n"
                     "    limits:\n"
                     "      - { rate: 10/s, burst: 20 }\n"
                     "      - { rate: 1000/min, algorithm: sliding_window }\n"
                     "      - { quota: 50000/day, tz: UTC }\n"
                     "  - name: up\n"
                     "    objective: cost\n"
                     "    key: [header.x-api-key]\n"
                     "    cost: { from: body_bytes, default: 1 }\n"
                     "    algorithm: token_bucket\n" /* gcra refuses 1048576/min (inexact) */
                     "    limits: [ { rate: 1048576/min, burst: 1048576 } ]\n"
                     "  - name: tok\n"
                     "    objective: cost\n"
                     "    key: [header.x-api-key]\n"
                     "    cost: { default: 10, unit: tokens }\n"
                     "    algorithm: gcra\n"
                     "    limits: [ { rate: 1000/h, burst: 1000 } ]\n"))
        return;
    check(&f, "k");
    sl_render_headers(&V, H, sizeof(H), 0);
    const char *pol = "RateLimit-Policy: \"a.0\";q=20;w=2, \"a.1\";q=1000;w=60, "
                      "\"a.2\";q=50000;w=86400, \"up\";q=1048576;qu=\"content-bytes\";w=60, "
                      "\"tok\";q=1000;qu=\"tokens\";w=3600\r\n";
    T_CHECK(strncmp(H, pol, strlen(pol)) == 0);
    if (strncmp(H, pol, strlen(pol)) != 0) fprintf(stderr, "%s", H);
    /* the day quota resets at the next UTC midnight, exactly one day away */
    T_CHECK(strstr(H, "\"a.2\";r=49999;t=86400") != NULL);
    T_CHECK(strstr(H, "\"a.0\";r=19;t=1") != NULL);
    T_CHECK(strstr(H, "\"tok\";r=990;") != NULL);
    fx_close(&f);
}

/* A policy with a rate window and a concurrency window: only the concurrency window is
 * counted in concurrent requests (and has no reset); the rate window keeps its unit and t. */
static void concurrency_beside_a_rate(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: mix\n"
                     "    objective: fairness\n"
                     "    key: [header.x-api-key]\n"
                     "    limits:\n"
                     "      - { rate: 10/s, burst: 10, algorithm: token_bucket }\n"
                     "      - { max: 4 }\n"))
        return;
    check(&f, "k");
    sl_render_headers(&V, H, sizeof(H), 0);
    T_CHECK(strstr(H, "\"mix.0\";q=10;w=1,") != NULL);
    T_CHECK(strstr(H, "\"mix.1\";q=4;qu=\"concurrent-requests\"") != NULL);
    T_CHECK(strstr(H, "\"mix.0\";r=9;t=1") != NULL);
    T_CHECK(strstr(H, "\"mix.1\";r=3") != NULL && strstr(H, "\"mix.1\";r=3;t=") == NULL);
    if (strstr(H, "\"mix.0\";r=9;t=1") == NULL || strstr(H, "\"mix.0\";q=10;w=1,") == NULL)
        fprintf(stderr, "%s", H);
    fx_close(&f);
}

/* ---- hand-built verdicts ---------------------------------------------------------- */

static sl_cpolicy POL = {.name = "p", .headers = true};
static sl__ewin W[3];

static void one_item(const char *name, uint64_t q, int64_t w, bool allowed, uint64_t rem,
                     int64_t reset, int64_t retry) {
    memset(&V, 0, sizeof(V));
    memset(W, 0, sizeof(W));
    W[0].cp = &POL;
    W[0].info.name = name;
    W[0].info.policy = "p";
    W[0].info.quota = q;
    W[0].info.window_s = w;
    V.n = 1;
    V.items[0].info = &W[0].info;
    V.items[0].descriptor = -1;
    V.items[0].cost = 1;
    V.items[0].result = (sluice_result){.allowed = allowed, .limit = q, .remaining = rem,
                                        .reset_after_ns = reset, .retry_after_ns = retry};
    V.deciding = 0;
    V.action = allowed ? SL_ALLOW : SL_REJECT;
    V.status = allowed ? 200 : 429;
    V.retry_after_ns = allowed ? 0 : retry;
}

static void rounding_up(void) {
    static const struct {
        int64_t ns;
        const char *want;
    } c[] = {
        {1, "Retry-After: 1\r\n"},
        {SEC, "Retry-After: 1\r\n"},
        {SEC + 1, "Retry-After: 2\r\n"},
        {59 * SEC + 999 * MS, "Retry-After: 60\r\n"},
        {0, "Retry-After: 1\r\n"}, /* a rejection never says 0 */
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        one_item("x", 5, 60, false, 0, 60 * SEC, c[i].ns);
        sl_render_headers(&V, H, sizeof(H), SL_RENDER_NO_POLICY);
        const char *ra = strstr(H, "Retry-After");
        T_CHECK(ra != NULL);
        if (ra) T_EQ_S(ra, c[i].want);
    }
    T_EQ_I(sl_ceil_s(0, 0), 0);
    T_EQ_I(sl_ceil_s(-5, 1), 1);
    T_EQ_I(sl_ceil_s(3 * SEC, 0), 3);
}

static void never_admissible(void) {
    one_item("x", 5, 60, false, 0, 60 * SEC, SLUICE_NEVER);
    sl_render_headers(&V, H, sizeof(H), 0);
    T_EQ_S(H, "RateLimit-Policy: \"x\";q=5;w=60\r\nRateLimit: \"x\";r=0;t=60\r\n");
    sl_render_problem(&V, NULL, B, sizeof(B));
    T_CHECK(strstr(B, "\"detail\":\"The request costs more than limit 'x' can ever admit.\"") !=
            NULL);
}

static void names_are_sf_strings(void) {
    one_item("we\"ird\\na\x01me", 1, 1, true, 1, 0, 0);
    sl_render_headers(&V, H, sizeof(H), 0);
    T_EQ_S(H, "RateLimit-Policy: \"we\\\"ird\\\\na?me\";q=1;w=1\r\n"
              "RateLimit: \"we\\\"ird\\\\na?me\";r=1;t=0\r\n");
    /* integers are capped at the 15 digits structured fields allow */
    one_item("big", UINT64_MAX, 0, true, UINT64_MAX, 0, 0);
    sl_render_headers(&V, H, sizeof(H), 0);
    T_EQ_S(H, "RateLimit-Policy: \"big\";q=999999999999999\r\n"
              "RateLimit: \"big\";r=999999999999999;t=0\r\n");
}

static void small_buffers(void) {
    one_item("x", 5, 60, false, 0, 60 * SEC, SEC);
    char tiny[16];
    T_EQ_I(sl_render_headers(&V, tiny, sizeof(tiny), 0), SLUICE_ERANGE);
    T_EQ_S(tiny, "");
    T_EQ_I(sl_render_problem(&V, NULL, tiny, sizeof(tiny)), SLUICE_ERANGE);
    T_EQ_I(sl_render_json(&V, false, tiny, sizeof(tiny)), SLUICE_ERANGE);
    int n = sl_render_headers(&V, H, sizeof(H), 0);
    T_CHECK(n > 0);
    /* exactly enough room (n bytes + NUL) works, one byte less does not */
    char *exact = malloc((size_t)n + 1);
    T_EQ_I(sl_render_headers(&V, exact, (size_t)n + 1, 0), n);
    T_EQ_I(sl_render_headers(&V, exact, (size_t)n, 0), SLUICE_ERANGE);
    free(exact);
}

static void traceparent_validation(void) {
    static const struct {
        const char *tp;
        bool ok;
    } c[] = {
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
        {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false}, /* upper case */
        {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false}, /* version ff */
        {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false}, /* zero trace */
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false}, /* zero parent */
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", false}, /* v00 extra */
        {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", true},
        {"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false}, /* short */
        {"", false},
    };
    one_item("x", 5, 60, false, 0, 60 * SEC, SEC);
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        T_CHECK(sl_render_problem(&V, c[i].tp, B, sizeof(B)) > 0);
        bool has = strstr(B, "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"") != NULL;
        if (has != c[i].ok) T_FAIL("traceparent %zu: %s", i, B);
        T_CHECK(c[i].ok || strstr(B, "trace_id") == NULL);
    }
}

static void problem_is_json(void) {
    one_item("x", 5, 60, false, 0, 60 * SEC, 3 * SEC);
    T_CHECK(sl_render_problem(&V, NULL, B, sizeof(B)) > 0);
    json_error_t je;
    json_t *j = json_loads(B, 0, &je);
    T_CHECK(j != NULL);
    if (j == NULL) return;
    T_EQ_S(json_string_value(json_object_get(j, "type")),
           "https://iana.org/assignments/http-problem-types#quota-exceeded");
    T_EQ_S(json_string_value(json_object_get(j, "title")), "Quota Exceeded");
    T_EQ_I(json_integer_value(json_object_get(j, "status")), 429);
    T_EQ_S(json_string_value(json_array_get(json_object_get(j, "violated-policies"), 0)), "x");
    json_decref(j);
    /* 503 when failing closed */
    POL.fail_closed = true;
    V.action = SL_FAIL;
    V.status = 503;
    sl_render_problem(&V, NULL, B, sizeof(B));
    j = json_loads(B, 0, &je);
    T_CHECK(j != NULL);
    if (j == NULL) return;
    T_EQ_S(json_string_value(json_object_get(j, "type")),
           "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
    T_EQ_S(json_string_value(json_object_get(j, "title")), "Temporary Reduced Capacity");
    T_EQ_I(json_integer_value(json_object_get(j, "status")), 503);
    T_EQ_S(json_string_value(json_array_get(json_object_get(j, "violated-policies"), 0)), "p");
    json_decref(j);
    POL.fail_closed = false;
    sl_render_headers(&V, H, sizeof(H), 0);
    T_EQ_S(H, ""); /* no limit state to describe when the store failed */
}

static void json_verdict(void) {
    one_item("na\"me", 5, 60, true, 4, 12 * SEC + 1, 0);
    V.keys[0] = 0xab;
    V.items[0].key_len = 1;
    T_CHECK(sl_render_json(&V, true, B, sizeof(B)) > 0);
    json_error_t je;
    json_t *j = json_loads(B, 0, &je);
    T_CHECK(j != NULL);
    if (j == NULL) return;
    T_CHECK(json_is_true(json_object_get(j, "allowed")));
    T_EQ_S(json_string_value(json_object_get(j, "action")), "allow");
    T_EQ_S(json_string_value(json_object_get(j, "deciding")), "na\"me");
    json_t *l = json_array_get(json_object_get(j, "limits"), 0);
    T_EQ_I(json_integer_value(json_object_get(l, "remaining")), 4);
    T_EQ_I(json_integer_value(json_object_get(l, "reset_after_ms")), 12001);
    T_EQ_S(json_string_value(json_object_get(l, "key")), "ab");
    json_decref(j);
    sl_render_json(&V, false, B, sizeof(B));
    T_CHECK(strstr(B, "\"key\"") == NULL); /* keys are personal data: only on request */
}

int main(void) {
    T_RUN(token_bucket_allowed_and_rejected);
    T_RUN(several_windows_and_units);
    T_RUN(concurrency_beside_a_rate);
    T_RUN(rounding_up);
    T_RUN(never_admissible);
    T_RUN(names_are_sf_strings);
    T_RUN(small_buffers);
    T_RUN(traceparent_validation);
    T_RUN(problem_is_json);
    T_RUN(json_verdict);
    return T_DONE();
}

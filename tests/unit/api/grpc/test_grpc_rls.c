/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_rls.c -- the RLS answer on the wire: the worked response bytes of SPECS §3.4
 * come out of sl_rls_pack exactly (overall_code written even though proto3 would omit
 * nothing else), request validation refuses what envoyproxy/ratelimit refuses, and the
 * per-descriptor status follows the deciding window when a rule has several, and a rule
 * that fails closed answers OVER_LIMIT while the store refuses.
 */
#include "api/grpc/rls.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static void worked_response_bytes(void) {
    static sl_rls_answer a;
    memset(&a, 0, sizeof(a));
    a.overall = SL_RLS_OK;
    a.n = 1;
    a.st[0] = (sl_rls_status){.code = SL_RLS_OK, .has_limit = true, .requests_per_unit = 10,
                              .unit = 2, .name = "", .remaining = 9, .reset_ns = 60 * SEC};
    uint8_t buf[64];
    size_t n = sl_rls_pack(&a, buf, sizeof(buf));
    static const uint8_t want[18] = {0x08, 0x01, 0x12, 0x0e, 0x08, 0x01, 0x12, 0x04, 0x08,
                                     0x0a, 0x10, 0x02, 0x18, 0x09, 0x22, 0x02, 0x08, 0x3c};
    T_EQ_U(n, 18);
    T_CHECK(memcmp(buf, want, 18) == 0);
    /* a reset of 59.2 s is reported as 60 (never early); too small a buffer packs nothing */
    a.st[0].reset_ns = 59 * SEC + 200 * SLUICE_NS_PER_MS;
    T_EQ_U(sl_rls_pack(&a, buf, sizeof(buf)), 18);
    T_CHECK(memcmp(buf, want, 18) == 0);
    T_EQ_U(sl_rls_pack(&a, buf, 17), 0);
    /* OVER_LIMIT with nothing else still writes both codes */
    memset(&a, 0, sizeof(a));
    a.overall = SL_RLS_OVER_LIMIT;
    a.n = 1;
    a.st[0] = (sl_rls_status){.code = SL_RLS_OVER_LIMIT, .name = ""};
    static const uint8_t over[6] = {0x08, 0x02, 0x12, 0x02, 0x08, 0x02};
    T_EQ_U(sl_rls_pack(&a, buf, sizeof(buf)), 6);
    T_CHECK(memcmp(buf, over, 6) == 0);
}

static const char CONFIG[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: ip\n"
    "    rate_limit:\n"
    "      unit: second\n"
    "      requests_per_unit: 10\n"
    "      algorithm: token_bucket\n"
    "      burst: 3\n"
    "      extra_limits:\n"
    "        - { rate: 5/min }\n";

/* Several windows on one descriptor: the status speaks for the one that decides. */
static void deciding_window_reported(void) {
    static sl_diag_list dl;
    sl_config *cfg;
    T_EQ_I(sl_config_load_buffer(CONFIG, sizeof(CONFIG) - 1, "t.yaml", &cfg, &dl), SLUICE_OK);
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = sl_engine_create(cfg, st, &err, NULL, 0);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC);
    sl_rls_sync env = {.engine = e, .lane = st, .now = sluice_clock_now(clk)};
    static sl_rls_req rq;
    static sl_rls_answer a;
    static sl_verdict v;
    sl_entry ent = {{"ip", 2}, {"1.2.3.4", 7}};
    memset(&rq, 0, sizeof(rq));
    rq.d[0].entries = &ent;
    rq.d[0].n = 1;
    rq.r.domain = (sl_str){"edge", 4};
    rq.r.descriptors = rq.d;
    rq.r.n_descriptors = 1;
    char msg[160];
    /* the bucket (3 of 3) has the least share left after one: 2/3 < 4/5 */
    T_EQ_I(sl_rls_decide_sync(&env, &rq, &v, &a, msg, sizeof(msg)), SL_GRPC_OK);
    T_EQ_U(a.st[0].requests_per_unit, 10);
    T_EQ_I(a.st[0].unit, 1);
    T_EQ_U(a.st[0].remaining, 2);
    /* three seconds later the bucket is full again and the minute window (5) speaks */
    for (int i = 0; i < 3; i++) {
        sluice_clock_advance(clk, SEC);
        env.now = sluice_clock_now(clk);
        T_EQ_I(sl_rls_decide_sync(&env, &rq, &v, &a, msg, sizeof(msg)), SL_GRPC_OK);
    }
    T_EQ_I(a.overall, SL_RLS_OK);
    T_EQ_U(a.st[0].requests_per_unit, 5);
    T_EQ_I(a.st[0].unit, 2); /* MINUTE */
    T_EQ_U(a.st[0].remaining, 1);
    sluice_clock_advance(clk, SEC);
    env.now = sluice_clock_now(clk);
    T_EQ_I(sl_rls_decide_sync(&env, &rq, &v, &a, msg, sizeof(msg)), SL_GRPC_OK);
    sluice_clock_advance(clk, SEC);
    env.now = sluice_clock_now(clk);
    T_EQ_I(sl_rls_decide_sync(&env, &rq, &v, &a, msg, sizeof(msg)), SL_GRPC_OK);
    T_EQ_I(a.overall, SL_RLS_OVER_LIMIT);
    T_EQ_I(a.st[0].code, SL_RLS_OVER_LIMIT);
    T_EQ_U(a.st[0].requests_per_unit, 5);
    T_EQ_U(a.st[0].remaining, 0);
    T_CHECK(a.st[0].reset_ns > 0 && a.st[0].reset_ns <= 60 * SEC);
    bool retry = false;
    for (size_t i = 0; i < a.nh; i++) retry |= strcmp(a.h[i].key, "Retry-After") == 0;
    T_CHECK(retry);
    T_CHECK(a.body_len > 0);
    sluice_clock_destroy(clk);
    sl_engine_destroy(e);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
}

static void validation(void) {
    Envoy__Service__Ratelimit__V3__RateLimitRequest m = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *dp[SL_MAX_DESCRIPTORS + 1];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT, *ep = &e;
    for (int i = 0; i <= SL_MAX_DESCRIPTORS; i++) dp[i] = &d;
    static sl_rls_req rq;
    char err[160];
    m.domain = "";
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_INVALID_ARGUMENT);
    m.domain = "x";
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_INVALID_ARGUMENT);
    m.descriptors = dp;
    m.n_descriptors = 1;
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_INVALID_ARGUMENT); /* no entries */
    d.entries = &ep;
    d.n_entries = 1;
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_INVALID_ARGUMENT); /* empty key */
    e.key = "k";
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_OK);
    T_EQ_U(rq.r.n_descriptors, 1);
    T_CHECK(!rq.d[0].has_hits_addend);
    m.n_descriptors = SL_MAX_DESCRIPTORS + 1;
    T_EQ_I(sl_rls_from_proto(&m, &rq, err, sizeof(err)), SL_GRPC_INVALID_ARGUMENT);
    T_CHECK(strstr(err, "at most 16") != NULL);
}

static const char FM_CONFIG[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: a\n"
    "    rate_limit: { unit: second, requests_per_unit: 5, on_store_error: closed }\n"
    "  - key: b\n"
    "    rate_limit: { unit: second, requests_per_unit: 5 }\n";

/* The failure-mode extension of the envoy format: with the store refusing new keys, a
 * rule that fails closed answers OVER_LIMIT (with a 503-type problem), one that fails
 * open (the default) answers OK. */
static void failure_mode_per_rule(void) {
    static sl_diag_list dl;
    sl_config *cfg;
    T_EQ_I(sl_config_load_buffer(FM_CONFIG, sizeof(FM_CONFIG) - 1, "fm.yaml", &cfg, &dl), SLUICE_OK);
    int err;
    sluice_store_options so = {.max_keys = 1, .shards = 1, .on_full = SLUICE_REFUSE_NEW};
    sluice_store *st = sluice_store_create(&so, &err);
    sl_engine *e = sl_engine_create(cfg, st, &err, NULL, 0);
    T_CHECK(e != NULL);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC);
    sl_rls_sync env = {.engine = e, .lane = st, .now = sluice_clock_now(clk)};
    static sl_rls_req rq;
    static sl_rls_answer a;
    static sl_verdict v;
    char msg[160];
    static const char *const keys[3][2] = {{"b", "1"}, {"a", "2"}, {"b", "3"}};
    int overall[3];
    for (int i = 0; i < 3; i++) {
        sl_entry ent = {{keys[i][0], 1}, {keys[i][1], 1}};
        memset(&rq, 0, sizeof(rq));
        rq.d[0].entries = &ent;
        rq.d[0].n = 1;
        rq.r.domain = (sl_str){"d", 1};
        rq.r.descriptors = rq.d;
        rq.r.n_descriptors = 1;
        T_EQ_I(sl_rls_decide_sync(&env, &rq, &v, &a, msg, sizeof(msg)), SL_GRPC_OK);
        overall[i] = a.overall;
        if (i == 1) {
            T_CHECK(v.store_error);
            T_CHECK(a.body_len > 0 && strstr(a.body, "temporary-reduced-capacity") != NULL);
        }
    }
    T_EQ_I(overall[0], SL_RLS_OK);        /* the one key the store holds */
    T_EQ_I(overall[1], SL_RLS_OVER_LIMIT); /* store full: fails closed */
    T_EQ_I(overall[2], SL_RLS_OK);        /* store full: fails open */
    sluice_clock_destroy(clk);
    sl_engine_destroy(e);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
}

int main(void) {
    T_RUN(failure_mode_per_rule);
    T_RUN(worked_response_bytes);
    T_RUN(deciding_window_reported);
    T_RUN(validation);
    return T_DONE();
}

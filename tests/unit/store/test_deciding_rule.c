/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_deciding_rule.c -- the one rule for "which window decides" (store/decision.h,
 * issue 25), used by the stores, the engine, the metrics and gRPC: its edge cases once
 * (a limit of 0, ties, SLUICE_NEVER, shadow windows), the store's deciding item, and the
 * engine's verdict naming the same window.
 */
#include "engine/internal.h"
#include "store/decision.h"
#include "t.h"

static sluice_result ok(uint64_t remaining, uint64_t limit) {
    return (sluice_result){.allowed = 1, .remaining = remaining, .limit = limit};
}

static sluice_result no(int64_t retry_ns) {
    return (sluice_result){.allowed = 0, .remaining = 0, .limit = 10, .retry_after_ns = retry_ns};
}

static bool over(sluice_result a, sluice_result b) {
    return sl_window_decides_over(&a, sl_rank_of(&a), &b, sl_rank_of(&b));
}

static void shares_decide_admissions(void) {
    T_CHECK(over(ok(1, 10), ok(5, 10)));       /* 10 % left is closer than 50 % */
    T_CHECK(!over(ok(5, 10), ok(1, 10)));
    T_CHECK(over(ok(1, 100), ok(1, 10)));      /* 1 % below 10 %: shares, not counts */
    T_CHECK(!over(ok(3, 10), ok(3, 10)));      /* a tie keeps the earlier window */
    T_CHECK(!over(ok(30, 100), ok(3, 10)));    /* equal shares exactly (no division) */
    /* exact far beyond 64 bits */
    T_CHECK(over(ok(UINT64_MAX - 1, UINT64_MAX), ok(UINT64_MAX, UINT64_MAX)));
}

static void limit_zero_is_a_share_of_zero(void) {
    T_CHECK(over(ok(0, 0), ok(5, 10)));        /* admits nothing: exhausted */
    T_CHECK(over(ok(7, 0), ok(5, 10)));        /* whatever it says is left */
    T_CHECK(!over(ok(5, 10), ok(0, 0)));
    T_CHECK(!over(ok(0, 0), ok(0, 0)));        /* both 0: a tie, the earlier decides */
    T_CHECK(!over(ok(0, 0), ok(0, 10)));       /* 0 of 10 is a share of 0 too */
    T_CHECK(!over(ok(0, 10), ok(0, 0)));
}

static void rejections_decide_by_longest_retry(void) {
    T_CHECK(over(no(2), ok(0, 0)));            /* a limiting window beats any admission */
    T_CHECK(!over(ok(0, 0), no(2)));
    T_CHECK(over(no(5), no(2)));
    T_CHECK(!over(no(2), no(5)));
    T_CHECK(!over(no(3), no(3)));              /* tie: the earlier */
    T_CHECK(over(no(SLUICE_NEVER), no(INT64_MAX - 1)));
    T_CHECK(!over(no(5), no(SLUICE_NEVER)));
    T_CHECK(!over(no(SLUICE_NEVER), no(SLUICE_NEVER)));
}

static void enforced_before_shadow(void) {
    sluice_result a = ok(9, 10), b = no(5);
    T_CHECK(sl_window_decides_over(&a, 0, &b, SL_RANK_LIMITS | SL_RANK_SHADOW));
    T_CHECK(!sl_window_decides_over(&b, SL_RANK_LIMITS | SL_RANK_SHADOW, &a, 0));
    T_CHECK(sl_window_decides_over(&b, SL_RANK_LIMITS | SL_RANK_SHADOW, &a, SL_RANK_SHADOW));
}

static void store_names_the_same_item(void) {
    static sluice_decision d;
    sluice_result *r = d.results;
    r[0] = ok(5, 10), r[1] = ok(0, 0), r[2] = ok(1, 10), r[3] = ok(0, 0);
    d.allowed = 1;
    d.n = 4;
    T_EQ_I(sl_decision_deciding(&d), 1);       /* the first share of 0 */
    r[2] = no(4);
    r[3] = no(4);
    d.allowed = 0;
    T_EQ_I(sl_decision_deciding(&d), 2);       /* the first longest retry */
    r[3] = no(SLUICE_NEVER);
    T_EQ_I(sl_decision_deciding(&d), 3);
}

static sl_verdict V;

static void engine_names_the_same_window(void) {
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    const char *yaml = "policies:\n"
                       "  - name: p\n    key: [client_ip]\n    algorithm: fixed_window\n"
                       "    limits: [ { name: a, rate: 4/m }, { name: b, rate: 2/30s } ]\n";
    T_EQ_I(sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &dl), SLUICE_OK);
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = sl_engine_create_ops(cfg, st, NULL, &err, NULL, 0);
    T_CHECK(e != NULL);
    sluice_time now = {.mono_ns = SLUICE_NS_PER_S, .wall_ns = INT64_C(1767225600) * SLUICE_NS_PER_S};
    /* 3/4 left against 1/2 left: b is closer */
    T_EQ_I(sl_engine_check_named(e, "p", "k", 1, true, 1, now, &V), SLUICE_OK);
    T_EQ_S(V.items[V.deciding].info->name, "b");
    /* 2/4 against 0/2: b, the exhausted one */
    T_EQ_I(sl_engine_check_named(e, "p", "k", 1, true, 1, now, &V), SLUICE_OK);
    T_EQ_S(V.items[V.deciding].info->name, "b");
    /* refused by b alone */
    T_EQ_I(sl_engine_check_named(e, "p", "k", 1, true, 1, now, &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_S(V.items[V.deciding].info->name, "b");
    sl_engine_destroy(e);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
}

int main(void) {
    T_RUN(shares_decide_admissions);
    T_RUN(limit_zero_is_a_share_of_zero);
    T_RUN(rejections_decide_by_longest_retry);
    T_RUN(enforced_before_shadow);
    T_RUN(store_names_the_same_item);
    T_RUN(engine_names_the_same_window);
    return T_DONE();
}

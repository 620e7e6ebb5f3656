/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_tb.c -- token bucket: a property test against an exact rational model
 * (tokens as a fraction, no truncation), the window invariant "never more than
 * B + r*T admitted in any window of length T", exact retry-after, peeks, settle
 * (refund up to capacity, charge into debt), carry and fresh_at.
 */
#include "algo.h"
#include "t.h"
#include "t_algo.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

typedef __int128 i128;

static sl_limit mk(uint64_t limit, int64_t period_ns, uint64_t burst) {
    return t_limit((sluice_limit_spec){.algo = SLUICE_TOKEN_BUCKET, .name = "tb", .limit = limit, .period_ns = period_ns, .burst = burst});
}

static sluice_time at(int64_t mono_ns) {
    sluice_time t = {mono_ns, INT64_C(1700000000) * S}; /* wall time is not used */
    return t;
}

static bool admits(const sl_limit *lim, const sl_tb_state *st, int64_t t, uint64_t cost) {
    return t_admits(lim, st, at(t), cost);
}

static void test_basics(void) {
    sl_limit lim = mk(10, 1 * S, 20);
    T_EQ_U(lim.capacity, 20);
    sl_tb_state st;
    sl_result r;
    /* Fresh key: a full bucket. */
    T_CHECK(sl_algo_decide(&lim, NULL, &st, at(1 * S), 5, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.limit, 20);
    T_EQ_U(r.remaining, 15);
    T_EQ_I(r.reset_after_ns, 500 * MS);
    T_EQ_I(r.retry_after_ns, 0);
    T_EQ_I(r.delay_ns, 0);
    /* 15 left: 16 is refused, retry when one more token has dripped in (100 ms). */
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(1 * S), 16, &r));
    T_CHECK(!r.allowed);
    T_EQ_U(r.remaining, 15);
    T_EQ_I(r.retry_after_ns, 100 * MS);
    T_EQ_I(r.reset_after_ns, 500 * MS);
    /* Larger than the capacity: never. */
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(1 * S), 21, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
    /* burst 0 means limit. */
    sl_limit l2 = mk(7, 1 * S, 0);
    T_EQ_U(l2.capacity, 7);
}

/*
 * The exact model: tokens as the rational tokens_u/M + (t - last) * limit / period, capped,
 * scaled by M*period so it is an integer; no truncation anywhere. Started from the state
 * the implementation stored, it must take exactly the same decision (the truncation of
 * the refill cannot change "tokens >= cost" as cost*M is whole), so any difference in
 * the refill or the capacity arithmetic shows.
 */
static bool ref_admits(const sl_limit *lim, const sl_tb_state *st, int64_t t, uint64_t cost) {
    i128 p = lim->period_ns;
    i128 cap = (i128)lim->capacity * SL_MICRO * p;
    i128 v = (i128)st->tokens_u * p;
    if (t > st->last_ns && v < cap) v += (i128)(t - st->last_ns) * lim->limit * SL_MICRO;
    if (v > cap) v = cap;
    return cost <= lim->capacity && v >= (i128)cost * SL_MICRO * p;
}

static void test_property_vs_exact_model(void) {
    uint64_t seed = t_seed();
    int decisions = 0, rejections = 0;
    for (int round = 0; round < 40; round++) {
        uint64_t limit = 1 + t_rand(&seed) % 40;
        int64_t period = (int64_t)(1 + t_rand(&seed) % 3) * S + (int64_t)(t_rand(&seed) % 777);
        uint64_t burst = t_rand(&seed) % 3 == 0 ? 0 : 1 + t_rand(&seed) % 50;
        sl_limit lim = mk(limit, period, burst);
        int64_t gap = period / (int64_t)limit;
        int64_t t = 3 * S + (int64_t)(t_rand(&seed) % S);
        sl_tb_state st = {t, (int64_t)lim.capacity * SL_MICRO}; /* what fresh means */
        bool have = false;
        enum { N = 1500 };
        static int64_t adm_t[N];
        static uint64_t adm_c[N];
        int na = 0;
        for (int i = 0; i < N; i++) {
            t += (int64_t)(t_rand(&seed) % (uint64_t)(2 * gap + 1));
            if (t_rand(&seed) % 60 == 0) t += period;
            uint64_t cost = t_rand(&seed) % 4 == 0 ? t_rand(&seed) % (lim.capacity + 2) : 1;
            sl_result r;
            sl_tb_state next;
            bool want = ref_admits(&lim, &st, t, cost);
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
            decisions++;
            if (r.allowed != want) {
                T_FAIL("round %d step %d: allowed %d, model %d", round, i, r.allowed, want);
                return;
            }
            T_EQ_I(changed, r.allowed && cost > 0);
            if (r.allowed && cost > 0) {
                adm_t[na] = t;
                adm_c[na++] = cost;
            }
            if (!r.allowed) rejections++;
            if (changed) {
                st = next;
                have = true;
            }
            if (!have) continue;
            if (!r.allowed && cost > lim.capacity) {
                T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
            } else if (!r.allowed) {
                /* Exact: refused 1 ns before now + retry, admitted at it. */
                T_CHECK(r.retry_after_ns > 0);
                T_CHECK(!admits(&lim, &st, t + r.retry_after_ns - 1, cost));
                T_CHECK(admits(&lim, &st, t + r.retry_after_ns, cost));
                T_CHECK(ref_admits(&lim, &st, t + r.retry_after_ns, cost));
            } else {
                T_EQ_I(r.retry_after_ns, 0);
                T_CHECK(admits(&lim, &st, t, r.remaining));
                T_CHECK(!admits(&lim, &st, t, r.remaining + 1));
            }
            /* reset_after: the state is fresh (full) from then on. */
            int64_t fa = sl_algo_fresh_at(&lim, &st, at(t));
            T_EQ_I(fa - t > 0 ? fa - t : 0, r.reset_after_ns);
            if (fa > t) T_CHECK(!admits(&lim, &st, fa - 1, lim.capacity));
            T_CHECK(admits(&lim, &st, fa > t ? fa : t, lim.capacity));
        }
        /* Never more than B + r*W admitted in any window of length W (W = 1..3 periods). */
        for (int k = 1; k <= 3; k++) {
            int64_t w = period * k;
            i128 bound = (i128)lim.capacity * period + (i128)lim.limit * w; /* x period */
            int j = 0;
            uint64_t sum = 0;
            for (int i = 0; i < na; i++) {
                sum += adm_c[i];
                while (adm_t[i] - adm_t[j] >= w) sum -= adm_c[j++];
                if ((i128)sum * period > bound) {
                    T_FAIL("round %d: %llu admitted within %lld ns", round,
                           (unsigned long long)sum, (long long)w);
                    break;
                }
            }
        }
    }
    T_CHECK(rejections > decisions / 20); /* the traffic does exercise the limit */
}

static void test_peek(void) {
    sl_limit lim = mk(10, 1 * S, 20);
    sl_tb_state st = {1 * S, 3 * SL_MICRO + 500000}, next;
    sl_result r;
    T_CHECK(!sl_algo_decide(&lim, &st, &next, at(1 * S + 50 * MS), 0, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.remaining, 4);
    T_EQ_I(next.last_ns, st.last_ns);
    T_EQ_I(next.tokens_u, st.tokens_u);
    /* 16.5 tokens missing at 10/s: 1.65 s after last. */
    T_EQ_I(r.reset_after_ns, 1650 * MS - 50 * MS);
}

static void test_settle(void) {
    sl_limit lim = mk(10, 1 * S, 20);
    sl_tb_state a, b;
    sl_result r;
    /* Reserve 10, settle to 3 == spending 3. */
    sl_algo_decide(&lim, NULL, &a, at(1 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, at(1 * S), -7, &r);
    sl_algo_decide(&lim, NULL, &b, at(1 * S), 3, &r);
    T_EQ_I(a.tokens_u, b.tokens_u);
    T_EQ_I(a.last_ns, b.last_ns);
    T_EQ_U(r.remaining, 17);
    /* Refunds stop at the capacity. */
    sl_algo_settle(&lim, &a, &a, at(1 * S), -50, &r);
    T_EQ_I(a.tokens_u, 20 * SL_MICRO);
    T_EQ_U(r.remaining, 20);
    /* A charge goes into debt, repaid by the refill: 30 charged = 10 owed = 1 s. */
    sl_algo_settle(&lim, &a, &a, at(1 * S), 30, &r);
    T_EQ_I(a.tokens_u, -10 * SL_MICRO);
    T_CHECK(!r.allowed);
    T_EQ_U(r.remaining, 0);
    T_EQ_I(r.retry_after_ns, 1 * S);
    T_EQ_I(r.reset_after_ns, 3 * S);
    T_CHECK(!admits(&lim, &a, 1 * S + 1100 * MS - 1, 1));
    T_CHECK(admits(&lim, &a, 1 * S + 1100 * MS, 1));
    /* Settling a fresh key starts from a full bucket. */
    sl_algo_settle(&lim, NULL, &b, at(5 * S), 4, &r);
    T_EQ_I(b.tokens_u, 16 * SL_MICRO);
}

static void test_carry(void) {
    sl_limit old = mk(10, 1 * S, 20);
    sl_tb_state st, next;
    sl_result r;
    sl_algo_decide(&old, NULL, &st, at(1 * S), 8, &r); /* used 8 of 20 */
    sl_limit up = mk(10, 1 * S, 40);
    sl_algo_carry(&old, &st, &up, &next, at(1 * S));
    T_EQ_I(next.tokens_u, 32 * SL_MICRO); /* absolute usage kept */
    sl_tb_state back;
    sl_algo_carry(&up, &next, &old, &back, at(1 * S));
    T_EQ_I(back.tokens_u, 12 * SL_MICRO); /* raise then revert: 8 used of 20 again */
    sl_limit down = mk(10, 1 * S, 5), down10 = mk(10, 1 * S, 10);
    sl_algo_carry(&old, &st, &down, &next, at(1 * S));
    T_EQ_I(next.tokens_u, 0); /* 8 used, clamped to 5: exhausted */
    sl_algo_carry(&old, &st, &down10, &next, at(1 * S));
    T_EQ_I(next.tokens_u, 2 * SL_MICRO); /* 8 used of 10 */
    /* Carried at a later time: the refill under the old limit counts first. */
    sl_algo_carry(&old, &st, &up, &next, at(1 * S + 500 * MS));
    T_EQ_I(next.tokens_u, 37 * SL_MICRO);
    T_EQ_I(next.last_ns, 1 * S + 500 * MS);
}

static void test_fresh_rebase(void) {
    sl_limit lim = mk(10, 1 * S, 20);
    sl_tb_state st;
    sl_result r;
    sl_algo_decide(&lim, NULL, &st, at(2 * S), 20, &r);
    T_EQ_I(sl_algo_fresh_at(&lim, &st, at(2 * S)), 4 * S);
    sl_algo_rebase(&lim, &st, 3 * S);
    T_EQ_I(st.last_ns, 5 * S);
    T_EQ_I(sl_algo_fresh_at(&lim, &st, at(0)), 7 * S);
    T_EQ_I(sl_algo_fresh_at(&lim, NULL, at(9 * S)), 9 * S);
    /* Very long idle: no overflow, a full bucket. */
    T_CHECK(sl_algo_decide(&lim, &st, &st, at(INT64_MAX / 2), 20, &r));
    T_EQ_U(r.remaining, 0);
}

/* Extreme parameters stay within the integer ranges. */
static void test_extremes(void) {
    sl_limit lim = mk(UINT64_C(1000000000000), INT64_MAX, UINT64_C(1000000000000));
    sl_tb_state st;
    sl_result r;
    T_CHECK(sl_algo_decide(&lim, NULL, &st, at(0), UINT64_C(1000000000000), &r));
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(1), 1, &r));
    T_CHECK(r.retry_after_ns > 0);
    T_CHECK(r.reset_after_ns > 0);
    T_CHECK(sl_algo_decide(&lim, &st, &st, at(INT64_MAX), 1, &r));
    sl_limit fast = mk(UINT64_C(1000000000000), 1, 1);
    T_CHECK(sl_algo_decide(&fast, NULL, &st, at(5), 1, &r));
    T_CHECK(sl_algo_decide(&fast, &st, &st, at(6), 1, &r));
    sl_algo_settle(&fast, &st, &st, at(6), INT64_MAX, &r);
    T_CHECK(!r.allowed);
    T_CHECK(r.retry_after_ns > 0);
}

int main(void) {
    T_RUN(test_basics);
    T_RUN(test_property_vs_exact_model);
    T_RUN(test_peek);
    T_RUN(test_settle);
    T_RUN(test_carry);
    T_RUN(test_fresh_rebase);
    T_RUN(test_extremes);
    return T_DONE();
}

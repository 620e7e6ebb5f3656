/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_fixed.c -- fixed window: wall-clock aligned windows, the documented 2x
 * boundary burst, a property test against a brute-force recount of the admissions in
 * each window, exact retry-after, peeks, settle and carry.
 */
#include "algo.h"
#include "t.h"
#include "t_algo.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

/* Wall = mono + OFFSET: the two clocks differ, and not by a multiple of any period. */
#define OFFSET (INT64_C(1700000000) * S + 123456789)

static sl_limit mk(uint64_t limit, int64_t period_ns) {
    return t_limit((sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "fixed", .limit = limit, .period_ns = period_ns});
}

/* A reading at wall time `wall_ns`. */
static sluice_time wall(int64_t wall_ns) {
    sluice_time t = {wall_ns - OFFSET, wall_ns};
    return t;
}

static bool admits(const sl_limit *lim, const sl_fixed_state *st, int64_t w, uint64_t cost) {
    return t_admits(lim, st, wall(w), cost);
}

static void test_basics(void) {
    sl_limit lim = mk(5, 10 * S);
    int64_t base = INT64_C(1700000000) * S; /* a multiple of 10 s */
    sl_fixed_state st;
    sl_result r;
    T_CHECK(sl_algo_decide(&lim, NULL, &st, wall(base + 3 * S), 2, &r));
    T_EQ_I(st.window_start_ns, base);
    T_EQ_U(st.count, 2);
    T_EQ_U(r.limit, 5);
    T_EQ_U(r.remaining, 3);
    T_EQ_I(r.reset_after_ns, 7 * S);
    T_CHECK(sl_algo_decide(&lim, &st, &st, wall(base + 4 * S), 3, &r));
    T_EQ_U(r.remaining, 0);
    T_CHECK(!sl_algo_decide(&lim, &st, &st, wall(base + 4 * S), 1, &r));
    T_EQ_I(r.retry_after_ns, 6 * S);
    T_EQ_I(r.reset_after_ns, 6 * S);
    T_CHECK(!sl_algo_decide(&lim, &st, &st, wall(base + 4 * S), 6, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
    /* The next aligned window starts empty. */
    T_CHECK(sl_algo_decide(&lim, &st, &st, wall(base + 10 * S), 5, &r));
    T_EQ_I(st.window_start_ns, base + 10 * S);
    /* Before 1970 too (floor, not truncation). */
    T_CHECK(sl_algo_decide(&lim, NULL, &st, wall(-3 * S), 1, &r));
    T_EQ_I(st.window_start_ns, -10 * S);
    T_EQ_I(r.reset_after_ns, 3 * S);
}

/* The documented flaw: limit at the end of one window plus limit at the start of the
 * next, 2 * limit within 2 ns. */
static void test_boundary_burst_2x(void) {
    sl_limit lim = mk(100, 60 * S);
    int64_t boundary = INT64_C(1700000040) * S; /* a multiple of 60 s */
    sl_fixed_state st;
    bool have = false;
    int admitted = 0;
    for (int i = 0; i < 150; i++) {
        sl_result r;
        sl_fixed_state next;
        if (sl_algo_decide(&lim, have ? &st : NULL, &next, wall(boundary - 1), 1, &r)) {
            st = next;
            have = true;
        }
        admitted += r.allowed;
    }
    for (int i = 0; i < 150; i++) {
        sl_result r;
        if (sl_algo_decide(&lim, &st, &st, wall(boundary + 1), 1, &r)) admitted++;
    }
    T_EQ_I(admitted, 200);
}

static void test_property_vs_recount(void) {
    uint64_t seed = t_seed();
    enum { N = 3000 };
    static int64_t adm_w[N];
    static uint64_t adm_c[N];
    for (int round = 0; round < 30; round++) {
        uint64_t limit = 1 + t_rand(&seed) % 30;
        int64_t period = (int64_t)(1 + t_rand(&seed) % 4) * S + (int64_t)(t_rand(&seed) % 999);
        sl_limit lim = mk(limit, period);
        int64_t w = INT64_C(1700000000) * S + (int64_t)(t_rand(&seed) % (uint64_t)period);
        int64_t gap = 2 * period / (int64_t)limit;
        sl_fixed_state st;
        bool have = false;
        int na = 0;
        for (int i = 0; i < N; i++) {
            w += (int64_t)(t_rand(&seed) % (uint64_t)(gap + 1));
            uint64_t cost = t_rand(&seed) % 5 == 0 ? t_rand(&seed) % (limit + 2) : 1;
            /* Reference: recount the admissions of the aligned window containing w. */
            int64_t ws = w / period * period;
            uint64_t used = 0;
            for (int j = 0; j < na; j++)
                if (adm_w[j] >= ws) used += adm_c[j];
            bool want = used + cost <= limit;
            sl_result r;
            sl_fixed_state next;
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, wall(w), cost, &r);
            if (r.allowed != want) {
                T_FAIL("round %d step %d: allowed %d, reference %d", round, i, r.allowed, want);
                return;
            }
            T_EQ_I(changed, want && cost > 0);
            if (changed) {
                st = next;
                have = true;
                adm_w[na] = w;
                adm_c[na++] = cost;
            }
            T_EQ_U(r.remaining, limit - (want ? used + cost : used));
            if (!have) continue;
            if (!r.allowed && cost > limit) {
                T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
            } else if (!r.allowed) {
                T_EQ_I(r.retry_after_ns, ws + period - w);
                T_CHECK(!admits(&lim, &st, w + r.retry_after_ns - 1, cost));
                T_CHECK(admits(&lim, &st, w + r.retry_after_ns, cost));
            } else {
                T_EQ_I(r.retry_after_ns, 0);
            }
            /* fresh_at is monotonic: the window's end converted through now. */
            int64_t fa = sl_algo_fresh_at(&lim, &st, wall(w));
            if (st.window_start_ns == ws && st.count > 0)
                T_EQ_I(fa, ws + period - OFFSET);
        }
        /* Any window of length W (not aligned) holds at most 2 * limit. */
        int j = 0;
        uint64_t sum = 0, worst = 0;
        for (int i = 0; i < na; i++) {
            sum += adm_c[i];
            while (adm_w[i] - adm_w[j] >= period) sum -= adm_c[j++];
            if (sum > worst) worst = sum;
        }
        T_CHECK(worst <= 2 * limit);
    }
}

static void test_peek(void) {
    sl_limit lim = mk(5, 10 * S);
    int64_t base = INT64_C(1700000000) * S;
    sl_fixed_state st = {base, 4}, next;
    sl_result r;
    T_CHECK(!sl_algo_decide(&lim, &st, &next, wall(base + 1 * S), 0, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.remaining, 1);
    T_EQ_I(next.window_start_ns, base);
    T_EQ_U(next.count, 4);
    /* A fresh key: nothing used, nothing to reset. */
    T_CHECK(!sl_algo_decide(&lim, NULL, &next, wall(base + 1 * S), 0, &r));
    T_EQ_U(r.remaining, 5);
    T_EQ_I(r.reset_after_ns, 0);
}

static void test_settle(void) {
    sl_limit lim = mk(20, 10 * S);
    int64_t base = INT64_C(1700000000) * S;
    sl_fixed_state a, b;
    sl_result r;
    sl_algo_decide(&lim, NULL, &a, wall(base + 1 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, wall(base + 2 * S), 3 - 10, &r);
    sl_algo_decide(&lim, NULL, &b, wall(base + 1 * S), 3, &r);
    T_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    T_EQ_U(r.remaining, 17);
    /* A charge goes past the limit. */
    sl_algo_settle(&lim, &a, &a, wall(base + 2 * S), 30, &r);
    T_EQ_U(a.count, 33);
    T_EQ_U(r.remaining, 0);
    /* A refund never reaches into a window that has passed. */
    sl_algo_decide(&lim, NULL, &a, wall(base + 9 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, wall(base + 11 * S), -10, &r);
    T_EQ_U(a.count, 0);
    T_EQ_I(a.window_start_ns, base + 10 * S);
    T_EQ_U(r.remaining, 20);
    sl_algo_decide(&lim, &a, &a, wall(base + 12 * S), 20, &r);
    T_CHECK(r.allowed);
}

static void test_carry_rebase(void) {
    sl_limit old = mk(10, 10 * S);
    int64_t base = INT64_C(1700000000) * S;
    sl_fixed_state st, next;
    sl_result r;
    sl_algo_decide(&old, NULL, &st, wall(base + 1 * S), 6, &r);
    sl_limit up = mk(30, 10 * S);
    sl_algo_carry(&old, &st, &up, &next, wall(base + 2 * S));
    T_EQ_U(next.count, 6);
    T_EQ_I(next.window_start_ns, base);
    sl_limit down = mk(5, 10 * S), down8 = mk(8, 10 * S);
    sl_algo_carry(&old, &st, &down, &next, wall(base + 2 * S));
    T_EQ_U(next.count, 5); /* absolute usage, clamped to the new limit: exhausted */
    sl_algo_carry(&old, &st, &down8, &next, wall(base + 2 * S));
    T_EQ_U(next.count, 6);
    /* raise then revert: 6 used of 10 -> 30 -> 10 is 6 used of 10 again */
    sl_fixed_state mid;
    sl_algo_carry(&old, &st, &up, &mid, wall(base + 2 * S));
    sl_algo_carry(&up, &mid, &old, &next, wall(base + 2 * S));
    T_EQ_U(next.count, 6);
    T_EQ_I(next.window_start_ns, base);
    /* Carried after the window passed: nothing used. */
    sl_algo_carry(&old, &st, &down, &next, wall(base + 10 * S));
    T_EQ_U(next.count, 0);
    /* Rebase shifts monotonic times only: the wall window start stays. */
    sl_fixed_state copy = st;
    sl_algo_rebase(&old, &copy, 12345 * S);
    T_CHECK(memcmp(&copy, &st, sizeof(st)) == 0);
}

int main(void) {
    T_RUN(test_basics);
    T_RUN(test_boundary_burst_2x);
    T_RUN(test_property_vs_recount);
    T_RUN(test_peek);
    T_RUN(test_settle);
    T_RUN(test_carry_rebase);
    return T_DONE();
}
